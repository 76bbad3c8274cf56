"""Typed settings: file + environment, validated at start with every problem listed."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainguard.models import Mode
from trainguard.settings import SettingsError, load_settings


def test_defaults_are_observe_mode_and_sqlite(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRAINGUARD_CONFIG", raising=False)
    s = load_settings()
    assert s.cluster.mode == Mode.OBSERVE
    assert s.cluster.acknowledge_scheduler_actions is False
    assert s.audit.url.startswith("sqlite:///")


def test_file_then_environment_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "tg.yaml"
    cfg.write_text("cluster:\n  name: gpu-a\n  mode: action\naudit:\n  url: sqlite:///x.db\n")
    monkeypatch.setenv("TRAINGUARD_AUDIT__URL", "mysql+pymysql://root@127.0.0.1/test")
    s = load_settings(cfg)
    assert s.cluster.name == "gpu-a" and s.cluster.mode == Mode.ACTION
    assert s.audit.url == "mysql+pymysql://root@127.0.0.1/test"
    assert s.cluster.task_queue == "trainguard-cluster-gpu-a"


def test_every_problem_is_reported_with_its_key(tmp_path: Path) -> None:
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("cluster:\n  name: 'bad name;rm'\n  mode: yolo\nwatchdog:\n  enabeld: true\n")
    with pytest.raises(SettingsError) as err:
        load_settings(cfg)
    text = str(err.value)
    assert "cluster.name" in text and "cluster.mode" in text and "watchdog.enabeld" in text
    assert str(cfg) in text


@pytest.mark.parametrize(("content", "needle"), [("cluster: [", "not valid YAML"), ("- 1\n- 2\n", "mapping")])
def test_unreadable_files_are_clear_errors(tmp_path: Path, content: str, needle: str) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(content)
    with pytest.raises(SettingsError, match=needle):
        load_settings(cfg)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="cannot read"):
        load_settings(tmp_path / "nope.yaml")

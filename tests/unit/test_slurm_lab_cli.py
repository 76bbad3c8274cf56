from __future__ import annotations

from pathlib import Path

import pytest

from trainguard.cli import build_parser, main
from trainguard.localstack.slurm import LocalSlurmCluster


def test_every_lab_command_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    for action in ("up", "down", "status", "kill-node", "restart-node"):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["lab", action, "--help"])
        out = capsys.readouterr().out
        assert "--dir" in out and len(out.splitlines()) > 5


def test_status_of_absent_cluster(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lab", "status", "--dir", str(tmp_path / "none")]) == 1
    assert "not running" in capsys.readouterr().out


def test_unknown_node_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lab", "kill-node", "node9", "--dir", str(tmp_path)]) == 1
    assert "unknown node 'node9'" in capsys.readouterr().err


def test_rendered_config_uses_ports_and_paths(tmp_path: Path) -> None:
    lab = LocalSlurmCluster(tmp_path, cluster="t1", nodes=3, ctld_port=30000, node_port_base=31000)
    text = lab.render_config()
    assert "ClusterName=t1" in text and "SlurmctldPort=30000" in text
    assert "NodeName=node[1-3]" in text and "Port=31000-31002" in text
    assert f"StateSaveLocation={tmp_path.resolve()}/state" in text
    for required in (
        "cred_expire=5",
        "sched_interval=2",
        "MinJobAge=600",
        "ProctrackType=proctrack/pgid",
        "TaskPlugin=task/none",
        "ReturnToService=1",
    ):
        assert required in text
    assert "$" not in text  # every placeholder was filled
    with pytest.raises(ValueError):
        LocalSlurmCluster(tmp_path, nodes=0)

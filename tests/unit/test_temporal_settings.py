"""temporal/search-attributes.yaml (what operators register) agrees with what the workflows set."""

from __future__ import annotations

from pathlib import Path

import yaml

from trainguard.localstack.temporal import SEARCH_ATTRIBUTES, LocalTemporal
from trainguard.models import WorkloadStatus
from workflows.search_attributes import ALL_KEYS, status_search_attributes

REPO = Path(__file__).resolve().parents[2]


def test_documented_registered_and_used_attributes_agree() -> None:
    documented = yaml.safe_load((REPO / "temporal" / "search-attributes.yaml").read_text())
    assert documented == SEARCH_ATTRIBUTES
    assert {k.name for k in ALL_KEYS} == set(documented)
    status = WorkloadStatus(workload_key="lab/1/2", cluster="lab", job_id="1", submit_time=2)
    assert {u.key.name for u in status_search_attributes(status)} == set(documented)


def test_dev_server_argv_registers_every_attribute(tmp_path: Path) -> None:
    argv = LocalTemporal(tmp_path, port=7999, ui_port=None).argv()
    for name, kind in SEARCH_ATTRIBUTES.items():
        assert f"{name}={kind}" in argv
    assert "--headless" in argv and "--db-filename" not in argv

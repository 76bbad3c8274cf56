"""Workflow determinism: replay every recorded history of a real run against today's workflow code.

The histories under histories/ were recorded from the end-to-end crash and fault tests (real Slurm,
real Temporal dev server; TRAINGUARD_RECORD_HISTORIES=1). A change to JobRecovery or ClusterWatch that
would break a running workflow on upgrade fails here with a non-determinism error.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from workers.worker import WORKFLOWS

HISTORIES = sorted((Path(__file__).parent / "histories").glob("*.json"))


def test_histories_are_committed() -> None:
    names = {p.stem for p in HISTORIES}
    assert any(n.startswith("action_recovery") for n in names), names
    assert any(n.startswith("observe_advice") for n in names), names
    assert any(n.startswith("watchdog") for n in names), names


@pytest.mark.parametrize("path", HISTORIES, ids=[p.stem for p in HISTORIES])
async def test_replay_recorded_history(path: Path) -> None:
    history = WorkflowHistory.from_json(path.stem, path.read_text())
    replayer = Replayer(workflows=WORKFLOWS, data_converter=pydantic_data_converter)
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, f"{path.name}: {result.replay_failure}"

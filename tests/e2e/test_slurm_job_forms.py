"""Job forms TrainGuard does not follow, on the real stack of both Slurm versions: an opted-in
heterogeneous job is reported once as unsupported and never touched, and discovery keeps working for
the jobs beside it (issue 11 §1)."""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.e2e.stack import Stack
from trainguard.models import EventType

BOTH = pytest.mark.slurm_versions("22.05", "24.11")


def comment(mode: str) -> str:
    return json.dumps({"trainguard": {"environment": "e2e", "mode": mode}})


@BOTH
async def test_opted_in_het_job_is_reported_once_and_discovery_goes_on(stack: Stack) -> None:
    het = stack.submit(
        comment=comment("action"),
        nodes=1,
        env={"TRAINSIM_ITERS": "20"},
        extra=[":", "--nodes=1", f"--comment={comment('action')}"],
    )
    events = await stack.wait_for_event(het.job_id, EventType.MALFORMED_COMMENT)
    report = next(e for e in events if e.event_type == EventType.MALFORMED_COMMENT)
    assert "heterogeneous" in report.message and f"{het.job_id}+0" in report.message
    plain = stack.submit(comment=comment("observe"), env={"TRAINSIM_ITERS": "10"})
    await stack.wait_for_event(plain.job_id, EventType.WORKLOAD_DISCOVERED)
    await asyncio.sleep(3)  # a wrongly following worker would have started a workflow by now
    # Reported once, never watched: no workload of this job was discovered, advised or acted on. (A stale
    # workload of an earlier job with the same id may still write its own `stopped` row.)
    kinds = [e.event_type for e in stack.events(het.job_id)]
    assert kinds.count(EventType.MALFORMED_COMMENT) == 1, kinds
    assert not {EventType.WORKLOAD_DISCOVERED, EventType.ADVICE, EventType.ACTION} & set(kinds), kinds
    component = str(int(het.job_id) + 1)  # the second component's own job id
    assert [e.event_type for e in stack.events(component)] in ([], [EventType.MALFORMED_COMMENT])
    assert het.show().get("Restarts") == "0"

"""The recovery loop end to end: real sbatch jobs on a real 4-node Slurm cluster, a real Temporal dev
server and TrainGuard's worker; assertions read Slurm's own record (`scontrol show job`) and the audit store.
"""

from __future__ import annotations

import asyncio
import json
import re

import pytest

from tests.e2e.stack import Stack
from trainguard.models import EventType

# The recovery paths that depend on how Slurm reports jobs run on both versions (tests/e2e/conftest.py).
BOTH = pytest.mark.slurm_versions("22.05", "24.11")


def comment(mode: str) -> str:
    return json.dumps({"trainguard": {"environment": "e2e", "mode": mode}})


@BOTH
async def test_observe_mode_records_advice_and_never_changes_slurm(stack: Stack) -> None:
    job = stack.submit(
        comment=comment("observe"),
        env={"TRAINSIM_FAULT": "xid", "TRAINSIM_FAULT_NODE": "node2", "TRAINSIM_FAULT_AT": "8"},
    )
    events = await stack.wait_for_event(job.job_id, EventType.ADVICE)
    record = await stack.wait_job_state(job, {"FAILED", "COMPLETED", "CANCELLED"})
    await asyncio.sleep(3)  # give a wrongly acting worker the chance to act
    record = job.show()
    assert record["JobState"] == "FAILED"
    assert record["Restarts"] == "0"
    assert record.get("ExcNodeList") in ("(null)", None)
    assert "Hold" not in record.get("Reason", "")
    events = stack.events(job.job_id)
    advice = [e for e in events if e.event_type == EventType.ADVICE]
    assert advice and advice[0].mode == "observe"
    assert "node2" in advice[0].nodes
    assert not [e for e in events if e.event_type == EventType.ACTION]


@BOTH
async def test_action_mode_excludes_the_bad_node_and_resumes_from_checkpoint(stack: Stack) -> None:
    job = stack.submit(
        comment=comment("action"),
        env={
            "TRAINSIM_FAULT": "xid",
            "TRAINSIM_FAULT_NODE": "node2",
            "TRAINSIM_FAULT_AT": "12",
            # the fault fires in the first attempt only, as a bad GPU would before it is excluded
            "TRAINSIM_FAULT_ONCE": str(stack.workdir / f"fired-{len(stack.jobs)}"),
        },
    )
    await stack.wait_for_event(job.job_id, EventType.COMPLETED, timeout=150)
    record = job.show()
    assert record["JobState"] == "COMPLETED"
    assert record["Restarts"] == "1"
    assert record["ExcNodeList"] == "node2"
    assert "node2" not in record["NodeList"]
    out = job.output.read_text(errors="replace")
    resumed = re.search(r"loading checkpoint .* iteration\s+(\d+)", out)
    assert resumed and int(resumed.group(1)) >= 5, out[-2000:]

    kinds = [e.event_type for e in stack.events(job.job_id)]
    wanted = [
        EventType.DETECTION,
        EventType.ADVICE,
        EventType.ACTION,
        EventType.ALLOCATION_RESTARTED,
        EventType.TRAINING_RESUMED,
        EventType.COMPLETED,
    ]
    positions = [kinds.index(k) for k in wanted]
    assert positions == sorted(positions), kinds
    actions = [e for e in stack.events(job.job_id) if e.event_type == EventType.ACTION]
    steps = [e.action for e in actions if e.data.get("performed")]
    assert steps[:3] == ["requeue_hold", "exclude", "release"], steps
    # the advice that named node2 was stored before the exclusion ran
    advice = [e for e in stack.events(job.job_id) if e.event_type == EventType.ADVICE and "node2" in e.nodes]
    exclude = next(e for e in actions if e.action == "exclude")
    assert advice and advice[0].ts <= exclude.ts


async def test_jobs_without_opt_in_are_never_touched(stack: Stack) -> None:
    job = stack.submit(comment=None, env={"TRAINSIM_FAULT": "exception", "TRAINSIM_FAULT_AT": "3"})
    record = await stack.wait_job_state(job, {"FAILED"})
    await asyncio.sleep(4)
    record = job.show()
    assert record["Restarts"] == "0"
    assert stack.events(job.job_id) == []


@BOTH
async def test_malformed_comment_is_reported_and_ignored(stack: Stack) -> None:
    job = stack.submit(comment='{"trainguard": {"mode": "yolo"}}', env={"TRAINSIM_ITERS": "5"})
    events = await stack.wait_for_event(job.job_id, EventType.MALFORMED_COMMENT)
    report = next(e for e in events if e.event_type == EventType.MALFORMED_COMMENT)
    assert "mode" in report.message
    record = await stack.wait_job_state(job, {"COMPLETED"})
    assert record["Restarts"] == "0"
    assert [e.event_type for e in stack.events(job.job_id)] == [EventType.MALFORMED_COMMENT]


@BOTH
async def test_a_hang_is_detected_from_the_jobs_own_rhythm_and_recovered(stack: Stack) -> None:
    job = stack.submit(
        comment=comment("action"),
        env={
            "TRAINSIM_FAULT": "hang",
            "TRAINSIM_FAULT_AT": "12",
            "TRAINSIM_FAULT_ONCE": str(stack.workdir / f"hang-{len(stack.jobs)}"),
        },
    )
    events = await stack.wait_for_event(job.job_id, EventType.COMPLETED, timeout=150)
    detection = next(e for e in events if e.event_type == EventType.DETECTION)
    assert detection.category == "hang"
    record = job.show()
    assert record["JobState"] == "COMPLETED" and record["Restarts"] == "1"
    # a hang implicates no node: nothing is excluded
    assert record.get("ExcNodeList") in ("(null)", None)

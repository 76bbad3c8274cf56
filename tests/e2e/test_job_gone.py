"""A workload whose job Slurm no longer reports ends, state `gone`, paused or not (issue 15 §3), on the
real stack: Slurm really forgets the job, TrainGuard's workflow really closes.

slurmctld keeps a finished job's record for MinJobAge: 600 s in the shared e2e clusters, where other tests
read a finished job's record seconds after it ends. This module runs a cluster of its own (a crash stack:
its own slurmctld, slurmd, Temporal dev server and worker) with MinJobAge=2; slurmctld then forgets a
finished job 6-11 s after it ends (measured on 22.05 and 24.11: its purge runs on its own background
cycle, not the instant the age is reached). No other test shares that cluster, so none can depend on it.

Each job waits for the test's go-ahead before it trains, so it cannot end (and be forgotten) before the
worker discovered it, or before the pause landed.

- watched: an observe-mode job fails; TrainGuard advises, marks it `failed` and keeps following it (a
  person may requeue it); once Slurm forgets it, the watch reports it gone and the workflow ends `gone`.
- paused: the operator paused the workload; its job completes and Slurm forgets it. Nothing watches a
  paused workload, but it reads Slurm once per watch slice (`watch.slice_s`, 5 s here) and ends `gone`.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from tests.e2e.crash_stack import CrashJob, CrashStack, crash_stack
from trainguard.localstack.slurm import LabError
from trainguard.models import EventType, PauseRequest, WorkloadState, WorkloadStatus

SLICE_S = 5.0
MIN_JOB_AGE = "2"
# Slurm's purge (up to ~10 s after the job ends) + one watch slice + the workflow's last audit flush.
GONE_WITHIN_S = 10.0 + SLICE_S + 15.0


@pytest_asyncio.fixture(scope="module")
async def stack() -> AsyncIterator[CrashStack]:
    async with crash_stack(
        "gone", slurm_settings={"MinJobAge": MIN_JOB_AGE}, watch={"slice_s": SLICE_S}
    ) as s:
        yield s


# The job waits for the test's go-ahead before it trains: with MinJobAge=2 a job that ended before the
# worker (still starting on a loaded machine) discovered it would be forgotten unseen.
WAIT_FOR_GO = """
import os, pathlib, time
go, deadline = pathlib.Path(os.environ["TG_GO_FILE"]), time.time() + 300
while not go.exists() and time.time() < deadline:
    time.sleep(0.2)
"""


def forgotten(stack: CrashStack, job: CrashJob) -> bool:
    try:
        stack.cluster.scontrol_job(job.job_id)
    except LabError as err:
        assert "Invalid job id" in str(err), err
        return True
    return False


@pytest.mark.parametrize("paused", [False, True], ids=["watched", "paused"])
async def test_a_workload_whose_job_slurm_forgot_ends_gone(stack: CrashStack, paused: bool) -> None:
    prelude = stack.root / "wait_for_go.py"
    prelude.write_text(WAIT_FOR_GO)
    go = stack.root / f"go-{uuid.uuid4().hex[:8]}"
    env = {"TG_GO_FILE": str(go)}
    if paused:  # about 10 s of training once let go, then COMPLETED
        job = stack.submit("observe", fault=None, iters=100, prelude=prelude, env=env)
    else:  # FAILED about 2 s after it is let go
        job = stack.submit("observe", fault="exception", fault_at=12, prelude=prelude, env=env)
    await stack.wait_event(job, EventType.WORKLOAD_DISCOVERED, timeout=120)
    handle = stack.handle(job)
    if paused:
        await handle.signal("set_paused", PauseRequest(paused=True, who="e2e", reason="gone test"))
        await stack.wait_event(job, EventType.MONITORING_PAUSED)
    go.touch()
    ended = "COMPLETED" if paused else "FAILED"
    await stack.wait_for(lambda: stack.show(job.job_id)["JobState"] == ended, ended, 120, job.job_id)
    ended_at = time.time()
    await stack.wait_for(lambda: forgotten(stack, job), "slurmctld to forget the job", 60, job.job_id)
    forgotten_at = time.time()
    result = await asyncio.wait_for(handle.result(), GONE_WITHIN_S)
    closed_at = time.time()
    status = result if isinstance(result, WorkloadStatus) else WorkloadStatus.model_validate(result)
    assert status.state == WorkloadState.GONE and status.paused == paused, status
    events = stack.events(job.job_id)
    [stopped] = [e for e in events if e.event_type == EventType.STOPPED]
    expected = "paused monitoring ends" if paused else "monitoring ends"
    assert stopped.message.startswith("Slurm no longer reports this job") and expected in stopped.message
    kinds = {e.event_type for e in events}
    if paused:
        # nothing watched it: no detection, no advice, and its completion was never seen
        assert not kinds & {EventType.DETECTION, EventType.ADVICE, EventType.COMPLETED}, kinds
    else:
        assert EventType.ADVICE in kinds and EventType.COMPLETED not in kinds, kinds
    how = "paused" if paused else "watched"
    print(
        f"{how}: Slurm forgot the job {forgotten_at - ended_at:.1f} s after it ended; "
        f"the workflow closed {closed_at - forgotten_at:.1f} s after that"
    )

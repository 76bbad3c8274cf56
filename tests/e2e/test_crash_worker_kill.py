"""Crash safety 1 and 7: the worker process is SIGKILLed at every step of a recovery and restarted.

Failpoints (trainguard.failpoints) kill the worker right after each step's side effect is done and
before Temporal hears of it: after the advice is stored, after requeue-hold, after the exclusion update,
after release. All four are armed at once, so each recovery is killed at every step in turn (five kills,
counting the containment advice), and five recoveries run concurrently: every point fires >= 5 times.
A supervisor restarts the worker within ~0.25 s plus its start-up, as systemd would.

The one worker process serves all five recoveries, so every recovery's decision is interrupted by the
other recoveries' kills too (up to 25 restarts, each a Python start-up: 3-10 s on a loaded 2-core CI
machine). The decision watchdog (60 s in the other crash stacks) would then fail open in the middle of a
decision here, which is its own tested path (test_fail_open.py), not this one's: this stack gives it 300 s.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import pytest

from tests.e2e.crash_stack import (
    ADVICE_BEFORE_EXCLUSION,
    LIFECYCLE,
    RECOVERY_SEQUENCE,
    check_audit_complete,
    crash_stack,
    in_order,
    is_held,
    performed_steps,
    save_history,
)
from trainguard.models import EventType

FAILPOINTS = ("after_advice", "after_requeue_hold", "after_exclude", "after_release")
RECOVERIES = 5


# Longer than the test's own waits (300 + 120 + 120 s): a slow run fails with the audit trail and its
# stack torn down, rather than being cut off by pytest-timeout inside the event loop.
@pytest.mark.timeout(720)
async def test_worker_killed_at_every_step_recovers_each_failure_exactly_once() -> None:
    async with crash_stack("kill", failpoints=FAILPOINTS, watchdog={"decision_timeout_s": 300}) as stack:
        t0 = time.time()
        # long enough (7 s after the resume) that the requeued attempt outlives a worker restart
        jobs = [stack.submit("action", iters=80) for _ in range(RECOVERIES)]
        observed = stack.submit("observe")  # the same crashes must not make observe mode act
        await asyncio.gather(*(stack.wait_event(j, EventType.COMPLETED, timeout=300) for j in jobs))
        await stack.wait_event(observed, EventType.ADVICE, timeout=120)
        await stack.wait_state(observed, {"FAILED"})
        took = time.time() - t0

        markers = Counter(p.name.rsplit("-", 1)[0] for p in (stack.root / "failpoints").iterdir())
        for point in FAILPOINTS:
            assert markers[point] >= RECOVERIES, markers
        # every marker is one SIGKILL; the supervisor saw each death and started a new worker
        assert len(stack.worker.deaths) == sum(markers.values()), (stack.worker.deaths, markers)

        for job in jobs:
            record = stack.show(job.job_id)
            assert record["JobState"] == "COMPLETED", record
            assert record["Restarts"] == "1", record  # exactly one requeue for the one failure
            events = await check_audit_complete(stack, job)
            trail = [(e.event_type.value, e.action) for e in events]
            assert in_order(events, RECOVERY_SEQUENCE) and in_order(events, ADVICE_BEFORE_EXCLUSION), trail
            advice = [e for e in events if e.event_type == EventType.ADVICE and e.action == "requeue"]
            assert len(advice) == 1 and advice[0].nodes, advice
            assert record["ExcNodeList"] == ",".join(advice[0].nodes), (record, advice[0].nodes)
            assert record["NodeList"] not in advice[0].nodes, record
            # no duplicate actions: one audit row per step, and across every worker process that ran,
            # each step changed Slurm exactly once. (A step killed after acting is audited by its retry,
            # which finds the work done: performed=False, "already ...".)
            steps = Counter(e.action for e in events if e.event_type == EventType.ACTION)
            assert {k: steps[k] for k in ("requeue_hold", "exclude", "release")} == {
                "requeue_hold": 1,
                "exclude": 1,
                "release": 1,
            }, steps
            assert sum(performed_steps(events).values()) <= 3
            key = stack.workload(job).key
            # (a kill aimed at another job can land between a step's effect and its log line, so the
            # log may miss a performed step; it must never show one twice)
            done = Counter(step for step, performed in stack.worker.step_lines(key) if performed)
            assert all(n <= 1 for n in done.values()), stack.worker.step_lines(key)

        # observe mode: Slurm's own record never changed, through every crash
        assert stack.recorder.untouched(observed.job_id), stack.recorder.of(observed.job_id)[-1]
        final = stack.show(observed.job_id)
        assert final["Restarts"] == "0" and final["ExcNodeList"] == "(null)" and not is_held(final)
        assert not [e for e in stack.events(observed.job_id) if e.event_type == EventType.ACTION]

        missed = sum(not in_order(stack.events(j.job_id), LIFECYCLE) for j in jobs)
        await save_history(stack.handle(jobs[0]), "action_recovery_killed_worker")
        await save_history(stack.handle(observed), "observe_advice_killed_worker")
        print(
            f"\n{RECOVERIES} recoveries, {len(stack.worker.deaths)} worker kills, {took:.1f}s; "
            f"lifecycle events missed in {missed}"
        )

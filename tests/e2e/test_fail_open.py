"""Fail-open on the real stack (issue 15 §3): a job TrainGuard requeue-held is released within
`watchdog.decision_timeout_s` (60 s in this stack) plus Slurm's own latency, when

- the requeue-hold step took effect in Slurm but reported a failure (failpoint `fail_after_requeue_hold`);
- the worker died right after the hold (failpoint `after_requeue_hold`) and the operator paused the
  workload meanwhile: the restarted worker stops the remaining steps (no exclusion) and releases the job;
- the worker died right after the hold and the audit store (MariaDB) refuses every connection from then
  on: the restarted worker still finishes the stored advice's steps and releases the job;
- the containment hold of a job Slurm requeued itself after a node failure (a `scontrol hold`, Reason
  JobHeldAdmin like an administrator's) took effect but its step reported failure (failpoint
  `fail_after_requeue_hold@/hold`): released at once as TrainGuard's own, and the recovery goes on;
  while an administrator's hold placed before a failing step is never lifted.

Slurm's own record, sampled twice a second, shows how long the job stayed held.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio
from temporalio.api.enums.v1 import EventType as HistoryEventType
from temporalio.client import WorkflowHandle

from tests.e2e.crash_stack import CrashJob, CrashStack, MariaDBAudit, crash_stack, is_held, save_history
from tests.e2e.stack import REPO
from trainguard import contracts as c
from trainguard.audit.schemas import AuditEventOut
from trainguard.audit.store import AuditStore
from trainguard.models import EventType, PauseRequest

BUDGET_S = 60.0 + 5.0  # decision_timeout_s of this stack, plus Slurm's latency


@pytest_asyncio.fixture(scope="module")
async def stack(mariadb: MariaDBAudit) -> AsyncIterator[CrashStack]:
    # MariaDB, so that the audit store can be made to refuse the worker
    async with crash_stack("fail-open", audit_url=mariadb.url) as s:
        yield s


def held_span(stack: CrashStack, job: CrashJob) -> float:
    """Seconds Slurm's sampled record showed the job held (0 when no sample caught the hold; still held
    counts up to now)."""
    held_at = None
    for sample in stack.recorder.of(job.job_id):
        if is_held(sample.record) and held_at is None:
            held_at = sample.t
        elif held_at is not None and not is_held(sample.record):
            return sample.t - held_at
    return 0.0 if held_at is None else time.time() - held_at


def held_spans(stack: CrashStack, job: CrashJob) -> list[tuple[float, float, str]]:
    """(start, seconds, Reason) of every stretch Slurm's sampled record showed the job held."""
    spans: list[tuple[float, float, str]] = []
    start: tuple[float, str] | None = None
    for sample in stack.recorder.of(job.job_id):
        if is_held(sample.record) and start is None:
            start = (sample.t, sample.record.get("Reason", ""))
        elif start is not None and not is_held(sample.record):
            spans.append((start[0], sample.t - start[0], start[1]))
            start = None
    if start is not None:
        spans.append((start[0], time.time() - start[0], start[1]))
    return spans


async def released_within_budget(stack: CrashStack, job: CrashJob) -> None:
    """Slurm applied the hold (its restart count moved) and TrainGuard's release lifted it (performed),
    within the budget by the audit's clock and by Slurm's sampled record."""

    def release() -> AuditEventOut | None:
        rows = [
            e for e in stack.events(job.job_id) if e.event_type == EventType.ACTION and e.action == "release"
        ]
        return rows[0] if rows else None

    await stack.wait_for(lambda: release() is not None, "the release", BUDGET_S + 60, job.job_id)
    row = release()
    assert row is not None and row.data.get("performed") is True, row  # it was held when released
    advice = next(e for e in stack.events(job.job_id) if e.event_type == EventType.ADVICE)
    assert float(str(row.data["confirmed_at"])) - advice.ts <= BUDGET_S, (advice.ts, row.data)
    assert held_span(stack, job) <= BUDGET_S


async def test_a_requeue_hold_that_fails_after_slurm_applied_it_is_released(stack: CrashStack) -> None:
    await stack.worker.restart_with({}, env={"TRAINGUARD_FAILPOINTS": "fail_after_requeue_hold"})
    job = stack.submit("action", fault_at=12, iters=60)
    await stack.wait_event(job, EventType.ACTION_FAILED, timeout=120)
    await released_within_budget(stack, job)
    record = await stack.wait_state(job, {"RUNNING", "COMPLETED"}, timeout=120)
    # Slurm runs the requeued job as it would have without TrainGuard: no exclusion, not held
    assert record["Restarts"] == "1" and record["ExcNodeList"] == "(null)", record
    events = stack.events(job.job_id)
    assert len([e for e in events if e.event_type == EventType.ACTION and e.action == "release"]) == 1
    assert not [e for e in events if e.event_type == EventType.ACTION and e.action == "exclude"]


async def test_pause_while_the_worker_is_down_after_the_hold_stops_the_steps_and_releases(
    stack: CrashStack,
) -> None:
    await stack.worker.restart_with({}, env={"TRAINGUARD_FAILPOINTS": "after_requeue_hold"})
    deaths = len(stack.worker.deaths)
    job = stack.submit("action", fault_at=12, iters=60)
    # the worker kills itself right after Slurm applied the requeue-hold
    await stack.wait_for(lambda: len(stack.worker.deaths) > deaths, "the worker's death", 120, job.job_id)
    assert is_held(stack.show(job.job_id))
    await stack.handle(job).signal("set_paused", PauseRequest(paused=True, who="oncall", reason="e2e"))
    await released_within_budget(stack, job)
    await asyncio.sleep(2)  # a wrongly continuing sequence would exclude now
    record = stack.show(job.job_id)
    assert record["Restarts"] == "1" and record["ExcNodeList"] == "(null)" and not is_held(record), record
    events = stack.events(job.job_id)
    stopped = [e for e in events if e.event_type == EventType.ACTION and e.action == "recovery_stopped"]
    assert stopped and "monitoring paused mid-recovery" in stopped[0].message, stopped
    assert EventType.MONITORING_PAUSED in {e.event_type for e in events}
    assert not [e for e in events if e.event_type == EventType.ACTION and e.action == "exclude"]


async def test_cli_commands_that_open_a_temporal_client_exit_cleanly(stack: CrashStack) -> None:
    """`trainguard mode` and `trainguard monitoring` used to abort at interpreter exit now and then
    (rc -6: a Temporal client still alive while Python finalizes). Each must return 0, every time."""
    job = stack.submit("observe", fault=None, iters=600)
    await stack.wait_event(job, EventType.WORKLOAD_DISCOVERED, timeout=120)
    key = stack.workload(job).key
    commands = [
        ["mode", "observe", "--workload", key],
        ["monitoring", "pause", "--workload", key],
        ["monitoring", "resume", "--workload", key],
        ["mode", "action", "--cluster", "crash"],
        ["mode", "observe", "--workload", key],
        ["mode", "action", "--cluster", "crash"],
    ]
    for argv in commands:
        done = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "trainguard", "--config", str(stack.worker.config), *argv],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, (argv, done.returncode, done.stdout[-500:], done.stderr[-2000:])
    kinds = [e.event_type for e in stack.events(job.job_id)]
    assert EventType.MONITORING_PAUSED in kinds and EventType.MONITORING_RESUMED in kinds, kinds


async def test_a_hold_left_by_crashing_workflow_code_is_released_by_discovery(
    stack: CrashStack, tmp_path: Path
) -> None:
    """Workflow code that raises right after the requeue-hold (a bug, or code changed under a running
    worker) fails its workflow task again and again: the workflow can never release. Discovery sees the
    job held with TrainGuard's Reason past watchdog.decision_timeout_s and its workflow stuck, releases it
    unchanged and audits that."""
    buggy = tmp_path / "buggy"
    for package in ("trainguard", "workflows", "activities", "workers"):
        shutil.copytree(REPO / package, buggy / package, ignore=shutil.ignore_patterns("__pycache__"))
    source = buggy / "workflows" / "recovery_actions.py"
    anchor = "                self.our_hold = _own_hold(requeued)\n"
    text = source.read_text()
    assert text.count(anchor) == 1
    source.write_text(
        text.replace(anchor, anchor + '                raise RuntimeError("bug injected by the test")\n')
    )
    stack.worker.use_code(buggy)
    await stack.worker.restart_with(
        {"watchdog": {"decision_timeout_s": 15}}, env={"TRAINGUARD_FAILPOINTS": ""}
    )
    try:
        job = stack.submit("action", fault_at=12, iters=60)
        await stack.wait_for(lambda: is_held(stack.show(job.job_id)), "the requeue-hold", 120, job.job_id)

        def audited() -> list[AuditEventOut]:
            page = stack.store.list_events(event_type=EventType.WATCHDOG_FIRED, cluster="crash", limit=100)
            return [e for e in page.items if e.job_id == job.job_id]

        await stack.wait_for(lambda: bool(audited()), "the stuck hold's release", 15 + 60, job.job_id)
        span = held_span(stack, job)
        assert 15 <= span <= 15 + 15, span  # not before the budget; soon after it
        record = stack.show(job.job_id)
        assert record["Restarts"] == "1" and record["ExcNodeList"] == "(null)" and not is_held(record), record
        event = audited()[0]
        assert event.action == "release" and "workflow task failed" in event.message, event
    finally:
        stack.worker.use_code(None)
        await stack.worker.restart_with({"watchdog": {"decision_timeout_s": 60}})


async def test_an_audit_outage_while_the_job_is_held_does_not_keep_it_held(
    stack: CrashStack, mariadb: MariaDBAudit
) -> None:
    """The worker dies right after Slurm applied the requeue-hold (failpoint `after_requeue_hold`), and the
    audit store refuses every connection from then on. The restarted worker must still finish the stored
    advice's steps and release the job while the store is down (the steps' audit rows wait for the store,
    the job does not), and the rows are stored once it is back."""
    reader = AuditStore.from_url(mariadb.root_url)  # the test's own reads go on while the worker is refused
    await stack.worker.restart_with({}, env={"TRAINGUARD_FAILPOINTS": "after_requeue_hold"})
    deaths = len(stack.worker.deaths)
    job = stack.submit("action", fault_at=12, iters=60)
    try:
        await stack.wait_for(lambda: len(stack.worker.deaths) > deaths, "the worker's death", 120, job.job_id)
        await asyncio.to_thread(mariadb.lock)
        locked_at = time.time()
        try:
            assert is_held(stack.show(job.job_id))
            await stack.wait_for(
                lambda: not is_held(stack.show(job.job_id)),
                "the release while the store is down",
                BUDGET_S + 60,
            )
            released_at = time.time()
            record = stack.show(job.job_id)
            stored = {
                (e.action, e.data.get("performed")) for e in reader.list_events(job_id=job.job_id).items
            }
        finally:
            await asyncio.to_thread(mariadb.unlock)
        assert record["Restarts"] == "1", record
        assert ("release", True) not in stored, (
            stored
        )  # the release happened while its row could not be stored
        assert held_span(stack, job) <= BUDGET_S, held_span(stack, job)
        print(f"held {held_span(stack, job):.1f} s; released {released_at - locked_at:.1f} s into the outage")
        await stack.wait_event(job, EventType.COMPLETED, timeout=180)
        events = stack.events(job.job_id)
        steps = [(e.action, e.data.get("performed")) for e in events if e.event_type == EventType.ACTION]
        # the killed worker's requeue-hold was applied but never reported: its retry finds it done
        assert [a for a, _ in steps].count("requeue_hold") == 1 and steps.count(("release", True)) == 1, steps
        assert stack.show(job.job_id)["Restarts"] == "1"
    finally:
        reader.close()
        await stack.worker.restart_with({}, env={"TRAINGUARD_FAILPOINTS": ""})


async def kill_its_node_while_paused(stack: CrashStack, job: CrashJob) -> str:
    """Pause the workload, crash the node under the running job (slurmd, steps, tasks) once it has
    checkpointed, and wait until Slurm itself has requeued the job (NODE_FAIL; the job is requeueable) and
    it is pending again. Paused, TrainGuard cannot act first on the node's silence. Returns the node."""
    handle = stack.handle(job)
    await stack.wait_for(
        lambda: job.output.exists() and "saved checkpoint" in job.output.read_text(errors="replace"),
        "a checkpoint",
        120,
        job.job_id,
    )
    # The workflow must know the running allocation (its first watch returned it): that is how the watch
    # tells, once resumed, that Slurm requeued the attempt it watched, and on which node it ran.
    deadline = time.monotonic() + 60
    while await watches_scheduled(handle) < 2:
        assert time.monotonic() < deadline, "the workflow never saw the job running"
        await asyncio.sleep(0.5)
    await handle.signal("set_paused", PauseRequest(paused=True, who="e2e", reason="fail-open test"))
    await stack.wait_event(job, EventType.MONITORING_PAUSED)
    victim = stack.show(job.job_id)["NodeList"]
    assert stack.cluster.kill_node(victim), victim

    def requeued() -> bool:
        record = stack.show(job.job_id)
        return record.get("Restarts") == "1" and record.get("JobState") == "PENDING"

    await stack.wait_for(requeued, "Slurm's own requeue", 90, job.job_id)
    return victim


async def watches_scheduled(handle: WorkflowHandle[object, object]) -> int:
    history = await handle.fetch_history()
    return sum(
        1
        for e in history.events
        if e.event_type == HistoryEventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == c.WATCH_JOB
    )


async def resume(stack: CrashStack, job: CrashJob) -> None:
    await stack.handle(job).signal(
        "set_paused", PauseRequest(paused=False, who="e2e", reason="fail-open test")
    )


async def test_a_containment_hold_that_fails_after_slurm_applied_it_is_released(stack: CrashStack) -> None:
    """Slurm requeues the job after its node crashed (the workload paused meanwhile, so that Slurm does it
    first); resumed, TrainGuard contains it (a real `scontrol hold`: Reason=JobHeldAdmin) and that step
    reports failure after Slurm applied it. The workflow had read the job pending and not held right before
    the step: the hold is released at once as its own, audited with why. The recovery then goes on (hold,
    exclusion of the dead node, release) and the job completes."""
    await stack.worker.restart_with({}, env={"TRAINGUARD_FAILPOINTS": "fail_after_requeue_hold@/hold"})
    job = stack.submit("action", fault=None, iters=250)
    await stack.wait_event(job, EventType.WORKLOAD_DISCOVERED, timeout=120)
    victim = await kill_its_node_while_paused(stack, job)
    try:
        await resume(stack, job)
        await stack.wait_event(job, EventType.WATCHDOG_FIRED, timeout=120)
        await stack.wait_event(job, EventType.COMPLETED, timeout=240)
    finally:
        stack.cluster.restart_node(victim)
    events = stack.events(job.job_id)
    failed = [e for e in events if e.event_type == EventType.ACTION_FAILED]
    assert len(failed) == 1 and str(failed[0].data["advice_id"]).endswith("/hold"), failed
    releases = [e for e in events if e.event_type == EventType.ACTION and e.action == "release"]
    fail_open, recovery = releases  # the containment's, then the recovery's own
    assert str(fail_open.data["advice_id"]).endswith("/hold") and fail_open.data["performed"] is True
    assert recovery.data["performed"] is True, releases
    [why] = [e for e in events if e.event_type == EventType.WATCHDOG_FIRED]
    assert "taken as TrainGuard's own" in why.message and why.data["reason"] == "JobHeldAdmin", why
    window = float(str(why.data["window_s"]))
    assert 0 < window < 10, why.data  # from the workflow's read to the failed step
    advice = next(e for e in events if e.event_type == EventType.ADVICE)
    assert advice.ts <= failed[0].ts <= fail_open.ts <= why.ts, (advice, failed, fail_open, why)
    # The release step read Slurm's record before lifting it: held, JobHeldAdmin, the same attempt. Slurm's
    # sampled record (twice a second: it may miss a hold this short) never shows a hold past the budget;
    # the job ran the requeue Slurm made, without the dead node
    assert fail_open.message.startswith("released the PENDING job"), fail_open
    spans = held_spans(stack, job)
    assert all(seconds <= BUDGET_S for _, seconds, _ in spans), spans
    record = stack.show(job.job_id)
    assert record["JobState"] == "COMPLETED" and record["Restarts"] == "1", record
    assert victim in record["ExcNodeList"].split(","), record
    print(f"held spans {[(round(s, 1), r) for _, s, r in spans]}; window {window:.3f} s")
    await save_history(stack.handle(job), "containment_failed_hold_released")


async def test_a_failed_hold_step_never_lifts_an_admin_hold_placed_before_it(stack: CrashStack) -> None:
    """Safety clause 4 on the fail-open path: Slurm requeues the job after its node crashed and an
    administrator holds it (`scontrol hold`: JobHeldAdmin, the Reason TrainGuard's own hold of a pending
    job has too) while the workload is paused. Resumed, TrainGuard decides to recover and its hold step
    fails (failpoint). Its read right before the step found the job already held, so the hold is not its
    own: left in place, whatever the step's failure."""
    await stack.worker.restart_with({}, env={"TRAINGUARD_FAILPOINTS": "fail_after_requeue_hold"})
    job = stack.submit("action", fault=None, iters=600)
    await stack.wait_event(job, EventType.WORKLOAD_DISCOVERED, timeout=120)
    victim = await kill_its_node_while_paused(stack, job)
    try:
        stack.cluster.run(["scontrol", "hold", job.job_id])  # the administrator
        assert stack.show(job.job_id)["Reason"] == "JobHeldAdmin"
        await resume(stack, job)
        await stack.wait_event(job, EventType.ACTION_FAILED, timeout=120)
        await asyncio.sleep(5)  # a wrong release would come right after the failed step
        record = stack.show(job.job_id)
        assert record["JobState"] == "PENDING" and record["Reason"] == "JobHeldAdmin", record
        assert record["Restarts"] == "1", record
        events = stack.events(job.job_id)
        releases = [e for e in events if e.event_type == EventType.ACTION and e.action == "release"]
        assert releases and not any(e.data.get("performed") for e in releases), releases
        assert all("held by someone else" in e.message for e in releases), releases
        assert EventType.WATCHDOG_FIRED not in {e.event_type for e in events}
    finally:
        stack.cluster.restart_node(victim)
        stack.cluster.run(["scancel", job.job_id], check=False)
        await stack.worker.restart_with({}, env={"TRAINGUARD_FAILPOINTS": ""})


async def test_a_hold_raced_by_a_requeue_before_its_step_is_released(stack: CrashStack) -> None:
    """The snapshot race: the decision saw the failed attempt not requeued, then the job is requeued before
    the step runs (here from outside with `scontrol requeue` while every node is drained, so that it waits,
    and while failpoint `pause_before_requeue_hold` holds the step back 10 s; Slurm's own requeue after a
    node failure leaves the job the same: pending for resources, not held, Restarts=1). The step finds it
    pending, holds it (`scontrol hold`: JobHeldAdmin) and reports
    failure (`fail_after_requeue_hold`). A requeue-hold's Reason is not there to lift, but the workflow's read
    beside the advice's audit write saw the attempt unheld and not yet requeued: the hold on the next attempt
    is released within the budget as TrainGuard's own, audited with why, and that requeue runs unchanged
    (no exclusion) and is not recovered a second time."""
    points = "pause_before_requeue_hold,fail_after_requeue_hold"
    await stack.worker.restart_with(
        {}, env={"TRAINGUARD_FAILPOINTS": points, "TRAINGUARD_FAILPOINT_PAUSE_S": "10"}
    )
    job = stack.submit("action", fault_at=12, iters=60)
    await stack.wait_event(job, EventType.ADVICE, timeout=120)
    await asyncio.sleep(1.0)  # the read beside the advice's write has answered; the step is held back
    nodes = stack.cluster.run(["sinfo", "-h", "-o", "%N"]).strip()
    stack.cluster.run(["scontrol", "update", f"NodeName={nodes}", "State=DRAIN", "Reason=e2e-race"])
    try:
        stack.cluster.run(["scontrol", "requeue", job.job_id])
        assert stack.show(job.job_id)["JobState"] == "PENDING"
        await stack.wait_event(job, EventType.WATCHDOG_FIRED, timeout=120)
    finally:
        stack.cluster.run(["scontrol", "update", f"NodeName={nodes}", "State=RESUME"])
    record = await stack.wait_state(job, {"RUNNING", "COMPLETED"}, timeout=180)
    assert record["Restarts"] == "1" and record["ExcNodeList"] == "(null)", record
    events = stack.events(job.job_id)
    failed = [e for e in events if e.event_type == EventType.ACTION_FAILED]
    assert len(failed) == 1, failed
    releases = [e for e in events if e.event_type == EventType.ACTION and e.action == "release"]
    assert [e.data["performed"] for e in releases] == [False, True], releases  # requeue-hold's, then ours
    assert "JobHeldAdmin" in releases[0].message, releases[0]
    [why] = [e for e in events if e.event_type == EventType.WATCHDOG_FIRED]
    assert "requeued it itself meanwhile" in why.message and why.data["raced"] is True, why
    assert why.data["restarts"] == 1 and why.data["reason"] == "JobHeldAdmin", why.data
    assert not [e for e in events if e.event_type == EventType.ACTION and e.action == "exclude"]
    spans = held_spans(stack, job)
    # sampled twice a second, so a hold this short may be missed; none lasted past the budget
    assert all(seconds <= BUDGET_S for _, seconds, _ in spans), spans
    assert {reason for _, _, reason in spans} <= {"JobHeldAdmin"}, spans
    await stack.wait_event(job, EventType.COMPLETED, timeout=240)
    advices = [e for e in stack.events(job.job_id) if e.event_type == EventType.ADVICE]
    assert len(advices) == 1, advices  # Slurm's requeue was not taken for a new failure
    print(f"held spans {[(round(s, 1), r) for _, s, r in spans]}; window {why.data['window_s']} s")
    await save_history(stack.handle(job), "raced_hold_released")

"""Crash safety 2-7 on the real stack: Temporal restarted, the audit database unreachable for 60 s,
slurmctld down for 30 s, a job id reused after a cluster reset, hostile job names/comments/log lines.

One stack for the module (Slurm, Temporal dev server with a database file, the worker as a subprocess,
the audit store on MariaDB so it can be made to refuse the worker). Every fault runs an observe-mode job
beside the action-mode one, and Slurm's own record of the observe job must show no change at all.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from tests.e2e.crash_stack import (
    ADVICE_BEFORE_EXCLUSION,
    LIFECYCLE,
    RECOVERY_SEQUENCE,
    CrashJob,
    CrashStack,
    MariaDBAudit,
    check_audit_complete,
    crash_stack,
    ctld_pid,
    in_order,
    is_held,
    parse_record,
    performed_steps,
    save_history,
    start_slurmctld,
    stop_slurmctld,
)
from trainguard.audit.store import AuditStore
from trainguard.models import EventType, WorkloadId, WorkloadState, WorkloadStatus

MEASURED: dict[str, float | str] = {}


@pytest_asyncio.fixture(scope="module")
async def stack(mariadb: MariaDBAudit) -> AsyncIterator[CrashStack]:
    async with crash_stack("faults", audit_url=mariadb.url) as s:
        yield s
    print("\nmeasured:", json.dumps(MEASURED, indent=1))


async def assert_recovered_once(stack: CrashStack, job: CrashJob) -> dict[str, str]:
    await stack.wait_event(job, EventType.COMPLETED, timeout=180)
    record = stack.show(job.job_id)
    assert record["JobState"] == "COMPLETED" and record["Restarts"] == "1", record
    events = await check_audit_complete(stack, job)
    trail = [(e.event_type.value, e.action) for e in events]
    assert in_order(events, RECOVERY_SEQUENCE) and in_order(events, ADVICE_BEFORE_EXCLUSION), trail
    assert in_order(events, LIFECYCLE), trail
    steps = Counter(e.action for e in events if e.event_type == EventType.ACTION)
    assert [steps[k] for k in ("requeue_hold", "exclude", "release")] == [1, 1, 1], steps
    assert sum(performed_steps(events).values()) <= 3
    key = stack.workload(job).key
    done = Counter(step for step, performed in stack.worker.step_lines(key) if performed)
    assert done == {"requeue_hold": 1, "exclude": 1, "release": 1}, stack.worker.step_lines(key)
    advice = next(e for e in events if e.event_type == EventType.ADVICE and e.action == "requeue")
    assert record["ExcNodeList"] == ",".join(advice.nodes), (record, advice.nodes)
    return record


async def assert_observe_untouched(stack: CrashStack, job: CrashJob) -> None:
    await stack.wait_event(job, EventType.ADVICE, timeout=180)
    await stack.wait_state(job, {"FAILED"})
    await asyncio.sleep(2)  # give a wrongly acting worker the chance to act
    assert stack.recorder.untouched(job.job_id), stack.recorder.of(job.job_id)[-1].record
    final = stack.show(job.job_id)
    assert final["Restarts"] == "0" and final["ExcNodeList"] == "(null)" and not is_held(final), final
    assert not [e for e in stack.events(job.job_id) if e.event_type == EventType.ACTION]


async def wait_output(job: CrashJob, needle: str, timeout: float = 60.0) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if job.output.exists() and needle in job.output.read_text(errors="replace"):
            return time.time()
        await asyncio.sleep(0.1)
    raise AssertionError(f"job {job.job_id} never printed {needle!r}")


# --- 5: job id reuse (first: it resets the cluster the other tests then use) ---------------------


async def test_job_id_reused_after_cluster_reset_is_a_new_workload(stack: CrashStack) -> None:
    old = stack.submit("action", fault=None, iters=10)
    await stack.wait_event(old, EventType.COMPLETED, timeout=120)
    old_workload = stack.workload(old)
    old_events = [(e.event_id, e.event_type, e.ts) for e in stack.events(old.job_id)]

    await asyncio.to_thread(stack.cluster.stop)
    await asyncio.to_thread(_wipe, stack.cluster.state_dir)
    await asyncio.to_thread(stack.cluster.start)
    new = stack.submit("action", fault=None, iters=10)
    assert new.job_id == old.job_id, (old.job_id, new.job_id)  # Slurm reused the id

    def new_workload_completed() -> bool:
        return any(
            e.event_type == EventType.COMPLETED and e.workload_key != old_workload.key
            for e in stack.events(new.job_id)
        )

    await stack.wait_for(new_workload_completed, "the reused id's new workload to complete", 120, new.job_id)
    keys = {e.workload_key for e in stack.events(new.job_id)}
    assert len(keys) == 2 and old_workload.key in keys, keys
    new_key = next(k for k in keys if k != old_workload.key)
    new_events = stack.workload_events(new_key)
    first = new_events[0]
    assert first.event_type == EventType.WORKLOAD_DISCOVERED
    new_workload = WorkloadId(cluster=first.cluster, job_id=first.job_id, submit_time=first.submit_time)
    assert new_workload.submit_time > old_workload.submit_time
    assert new_workload.workflow_id != old_workload.workflow_id
    for workload in (old_workload, new_workload):  # two workflows, each ran to its own end
        status = await stack.client.get_workflow_handle(workload.workflow_id).query(
            "status", result_type=WorkloadStatus
        )
        assert status.state == WorkloadState.COMPLETED and status.workload_key == workload.key
    # the old workload's trail is intact: same rows, nothing appended by the new job
    assert [(e.event_id, e.event_type, e.ts) for e in stack.workload_events(old_workload.key)] == old_events


def _wipe(directory: Path) -> None:
    import shutil

    shutil.rmtree(directory)
    directory.mkdir()


# --- 3: audit database unreachable for 60 s -------------------------------------------------------


async def test_audit_store_down_60s_loses_nothing_and_acts_only_after_advice_is_stored(
    stack: CrashStack, mariadb: MariaDBAudit
) -> None:
    reader = AuditStore.from_url(mariadb.root_url)
    job = stack.submit("action", fault_at=40, iters=100)
    observed = stack.submit("observe", fault_at=40, iters=100)
    await stack.wait_event(job, EventType.WORKLOAD_DISCOVERED)
    await stack.wait_event(observed, EventType.WORKLOAD_DISCOVERED)
    await wait_output(job, "iteration       30/")

    key = stack.workload(job).key
    violations: list[str] = []
    advice_seen: dict[str, float] = {}
    stop = asyncio.Event()

    async def check_order() -> None:
        # Slurm first, then the store: a change in Slurm whose advice the store does not hold yet is
        # proof that an action ran before its advice was stored.
        while not stop.is_set():
            record = await asyncio.to_thread(lambda: parse_record(stack.cluster.scontrol_job(job.job_id)))
            rows = await asyncio.to_thread(lambda: reader.list_advice(workload_key=key, limit=50))
            now = time.time()
            actions = {r.action for r in rows}
            for a in actions:
                advice_seen.setdefault(str(a), now)
            held_or_requeued = is_held(record) or record.get("Restarts") != "0"
            if held_or_requeued and not actions:
                violations.append(
                    f"{now:.1f}: Slurm changed before any advice stored: {record.get('Reason')}"
                )
            if record.get("ExcNodeList", "(null)") != "(null)" and "requeue" not in actions:
                violations.append(f"{now:.1f}: exclusion before the requeue advice was stored")
            await asyncio.sleep(0.25)

    checker = asyncio.create_task(check_order())
    down_at = time.time()
    await asyncio.to_thread(mariadb.lock)
    try:
        await stack.wait_state(job, {"FAILED"}, timeout=40)
        await asyncio.sleep(max(0.0, down_at + 60 - time.time()))
        # while the store refused the worker, Slurm was never touched
        during = [s for s in stack.recorder.of(job.job_id) if s.t < time.time()]
        assert during and not any(is_held(s.record) or s.record["Restarts"] != "0" for s in during)
    finally:
        await asyncio.to_thread(mariadb.unlock)
    up_at = time.time()
    await assert_recovered_once(stack, job)
    await assert_observe_untouched(stack, observed)
    stop.set()
    await checker
    reader.close()
    assert not violations, violations
    events = stack.events(job.job_id)
    detection = next(e for e in events if e.event_type == EventType.DETECTION)
    assert down_at <= detection.ts <= up_at  # the failure was seen while the store was down ...
    hold_stored = min(advice_seen.values())  # the first advice (containment hold or the decision)
    assert hold_stored >= up_at  # ... and its advice landed only once the store came back
    first_change = stack.recorder.first_change(job.job_id)
    assert first_change is not None and first_change >= hold_stored - 0.5
    MEASURED["audit_down_s"] = round(up_at - down_at, 1)
    MEASURED["audit_up_to_advice_s"] = round(hold_stored - up_at, 1)
    MEASURED["audit_up_to_slurm_change_s"] = round(first_change - up_at, 1)
    completed = next(e for e in stack.events(job.job_id) if e.event_type == EventType.COMPLETED)
    MEASURED["audit_detect_to_completed_s"] = round(completed.ts - detection.ts, 1)


# --- 2: Temporal dev server restarted mid-recovery -------------------------------------------------


async def test_temporal_restart_mid_recovery_resumes(stack: CrashStack) -> None:
    job = stack.submit("action")
    observed = stack.submit("observe")
    await stack.wait_event(job, EventType.WORKLOAD_DISCOVERED)
    # the failure has happened and its recovery is under way (detection, advice, actions) when it stops
    await wait_output(job, "NVRM: Xid")
    t0 = time.time()
    await asyncio.to_thread(stack.temporal.stop)
    await asyncio.sleep(3)
    await asyncio.to_thread(stack.temporal.start)
    restarted = time.time()
    record = await assert_recovered_once(stack, job)
    await assert_observe_untouched(stack, observed)
    completed = next(e for e in stack.events(job.job_id) if e.event_type == EventType.COMPLETED)
    MEASURED["temporal_down_s"] = round(restarted - t0, 1)
    MEASURED["temporal_restart_to_completed_s"] = round(completed.ts - restarted, 1)
    assert record["NodeList"] not in record["ExcNodeList"].split(",")
    await save_history(stack.handle(job), "action_recovery_temporal_restart")


# --- 4: slurmctld down for 30 s ------------------------------------------------------------------


async def test_slurmctld_down_30s_actions_retry_and_complete(stack: CrashStack) -> None:
    job = stack.submit("action", fault_at=25, iters=40)
    observed = stack.submit("observe", fault_at=25, iters=40)
    await stack.wait_event(job, EventType.WORKLOAD_DISCOVERED)
    await stack.wait_event(observed, EventType.WORKLOAD_DISCOVERED)
    await wait_output(job, "NVRM: Xid")
    down_at = time.time()
    assert await asyncio.to_thread(stop_slurmctld, stack.cluster)
    await asyncio.sleep(30)
    assert ctld_pid(stack.cluster) is None
    await asyncio.to_thread(start_slurmctld, stack.cluster)
    up_at = time.time()
    await assert_recovered_once(stack, job)
    await assert_observe_untouched(stack, observed)
    events = stack.events(job.job_id)
    detection = next(e for e in events if e.event_type == EventType.DETECTION)
    completed = next(e for e in events if e.event_type == EventType.COMPLETED)
    MEASURED["slurmctld_down_s"] = round(up_at - down_at, 1)
    MEASURED["slurmctld_up_to_completed_s"] = round(completed.ts - up_at, 1)
    MEASURED["slurmctld_detection_evidence"] = "; ".join(detection.evidence)[:200]
    await save_history(stack.handle(job), "action_recovery_slurmctld_down")
    await save_history(stack.handle(observed), "observe_advice_slurmctld_down")


# --- 6: hostile job name, comment and log lines ---------------------------------------------------

HOSTILE_NAME = "x'\"$(touch PWNED_NAME)`touch PWNED_TICK`;|&<>*?{a,b}\\"


async def test_hostile_name_comment_and_log_lines_never_reach_a_shell(stack: CrashStack) -> None:
    pwned_dir = stack.root / "pwned"
    pwned_dir.mkdir(exist_ok=True)
    marker = pwned_dir / "PWNED_LOG"
    # (no newline here: the default environment_pattern ".*" does not match one, so such a job is
    # silently not watched; see docs/fault-matrix.md)
    environment = f"crash; $(touch {pwned_dir}/PWNED_ENV) `touch {pwned_dir}/PWNED_ENV2` \"' |&"
    comment = json.dumps({"trainguard": {"environment": environment, "mode": "action"}})
    lines = pwned_dir / "hostile_lines.py"
    lines.write_text(
        "import os, sys\n"
        "if os.environ.get('SLURM_RESTART_COUNT', '0') != '0':\n"
        "    sys.exit(0)\n"
        "out = sys.stdout.buffer\n"
        f"out.write(b'$(touch {marker}) `touch {marker}` ; rm -rf / ; \\'\"\\n')\n"
        "out.write(b'\\xff\\xfe\\xc3\\x28 invalid utf-8 NCCL WARN \\xed\\xa0\\x80\\n')\n"
        "out.write(b'A' * 2_000_000 + b' $(reboot) NCCL\\n')\n"
        "out.write(b'node\\x00name\\r\\x1b[31m terminal escape\\n')\n"
        "out.flush()\n"
    )
    job = stack.submit(
        "action",
        name=HOSTILE_NAME,
        comment_text=comment,
        prelude=lines,
    )
    deaths = len(stack.worker.deaths)
    await assert_recovered_once(stack, job)
    assert len(stack.worker.deaths) == deaths  # the worker never crashed
    assert stack.worker.alive()
    leftovers = [p for p in pwned_dir.iterdir() if p.name.startswith("PWNED")]
    leftovers += [p for p in Path.cwd().glob("PWNED*")] + list(job.workdir.glob("PWNED*"))
    assert not leftovers, leftovers
    discovered = next(e for e in stack.events(job.job_id) if e.event_type == EventType.WORKLOAD_DISCOVERED)
    assert discovered.data.get("environment") == environment[:200]
    status = await stack.handle(job).query("status", result_type=WorkloadStatus)
    assert status.name == HOSTILE_NAME  # carried as data, byte for byte


# --- watchdog: attribution hangs, the held job is released unchanged ---------------------------------


async def test_watchdog_releases_the_held_job_when_attribution_hangs(stack: CrashStack) -> None:
    async def never_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(3600)

    server = await asyncio.start_server(never_answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        await stack.worker.restart_with(
            {
                "attribution": {
                    "external_url": f"http://127.0.0.1:{port}/attribute",
                    "external_timeout_s": 60,
                },
                "watchdog": {"decision_timeout_s": 4},
            }
        )
        job = stack.submit("action")
        await stack.wait_event(job, EventType.WATCHDOG_FIRED, timeout=120)
    finally:
        server.close()
    await asyncio.sleep(3)
    record = stack.show(job.job_id)
    events = await check_audit_complete(stack, job)
    fired = next(e for e in events if e.event_type == EventType.WATCHDOG_FIRED)
    assert fired.actor == "watchdog", fired
    MEASURED["watchdog_message"] = fired.message
    # fail-open: no decision means no exclusion and no requeue on the policy's behalf ...
    assert record["ExcNodeList"] == "(null)" and not is_held(record), record
    assert not [e for e in events if e.event_type == EventType.ADVICE and e.action == "requeue"]
    actions = [e for e in events if e.event_type == EventType.ACTION]
    held = [s.t for s in stack.recorder.of(job.job_id) if is_held(s.record)]
    if held:  # ... and a job TrainGuard held while deciding was released by the watchdog, promptly
        assert [(e.action, e.actor) for e in actions] == [("requeue_hold", "policy"), ("release", "watchdog")]
        assert max(held) - min(held) < 4 + 15, (min(held), max(held))
        MEASURED["watchdog_held_s"] = round(max(held) - min(held), 1)
    else:
        assert actions == [] and record["Restarts"] == "0", (actions, record)
    MEASURED["watchdog_outcome"] = "released a held job" if held else "no action (job was not held)"
    await save_history(stack.handle(job), "watchdog_release")


@pytest.fixture(autouse=True)
def _measure_wall(request: pytest.FixtureRequest) -> object:
    t0 = time.time()
    yield
    MEASURED[f"wall:{request.node.name}"] = round(time.time() - t0, 1)

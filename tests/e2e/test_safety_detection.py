"""Safety contract clauses 2, 5, 6 and 7 (docs/safety.md) on the real stack: a real 4-node Slurm cluster,
the Temporal dev server and TrainGuard's worker, in action mode. Every assertion about what TrainGuard did
to a job reads Slurm's own record (`scontrol show job`) or the audit store.

Lines are appended to a running job's own output file, the way a launcher or a log collector would put
them there.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.e2e.stack import Stack, SubmittedJob
from trainguard.api.app import create_app
from trainguard.models import EventType
from trainguard.settings import APISettings
from trainguard.slurm.hostlist import expand_hostlist

TOKEN = "e2e-safety-token"
# Long enough to outlast the watcher's grace for a running job (activities/watch.py RUNNING_GRACE_S).
# 50 s of training: the lines are appended once it logs progress, and the advice comes within seconds of them
# (the job runs on, untouched, to COMPLETED); 90 s made each of these tests ~100 s on both Slurm versions.
LONG_RUN = {"TRAINSIM_ITERS": "500", "TRAINSIM_STEP_S": "0.1", "TRAINSIM_CKPT_EVERY": "50"}


def comment(mode: str) -> str:
    return json.dumps({"trainguard": {"environment": "e2e", "mode": mode}})


async def running_with_progress(stack: Stack, job: SubmittedJob, timeout: float = 90.0) -> dict[str, str]:
    """Slurm says RUNNING, the job has logged progress, and TrainGuard has discovered it."""
    record = await stack.wait_job_state(job, {"RUNNING"}, timeout=timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = job.output.read_text(errors="replace") if job.output.exists() else ""
        if "iteration" in text and stack.events(job.job_id):
            return record
        await asyncio.sleep(0.5)
    raise AssertionError(f"job {job.job_id} never logged progress")


def append(job: SubmittedJob, *lines: str) -> None:
    with job.output.open("a", encoding="utf-8") as fh:
        fh.write("".join(line + "\n" for line in lines))


async def record_and_watch_advice(stack: Stack, job: SubmittedJob) -> list[str]:
    """Wait for the advice that records the lines and keeps watching; return every advice's message."""
    events = await stack.wait_until(
        lambda: any(e.event_type == EventType.ADVICE for e in stack.events(job.job_id)),
        "the record-and-watch advice",
        150.0,
        job.job_id,
    )
    return [e.message for e in events if e.event_type == EventType.ADVICE]


def assert_untouched(stack: Stack, job: SubmittedJob, record: dict[str, str]) -> None:
    assert record["JobState"] == "COMPLETED", record
    assert record["Restarts"] == "0"
    assert record.get("ExcNodeList") in ("(null)", None, "")
    events = stack.events(job.job_id)
    actions = [e for e in events if e.event_type == EventType.ACTION and e.data.get("performed")]
    assert actions == [], [(e.action, e.message) for e in actions]


@pytest.mark.slurm_versions("22.05", "24.11")
async def test_benign_lines_in_a_healthy_running_job_never_requeue_it(stack: Stack) -> None:
    """Clause 2: retried, caught and warned-about exceptions, even a printed traceback, in a job that
    keeps training are recorded and watched; Slurm shows no requeue (Restarts=0)."""
    job = stack.submit(comment=comment("action"), env=LONG_RUN)
    await running_with_progress(stack, job)
    append(
        job,
        "[rank1]: ConnectionError: connection reset by peer, retrying (1/5)",
        "1: WARNING:root:caught RuntimeError: transient storage hiccup, continuing",
        "[default0]:Traceback (most recent call last):",
        '[default0]:  File "train.py", line 12, in fetch',
        "[default0]:TimeoutError: metadata server did not answer",
        "[default0]:INFO fetch succeeded on the second try",
    )
    messages = await record_and_watch_advice(stack, job)
    assert messages and all("Record and watch" in m for m in messages), messages
    record = await stack.wait_job_state(job, {"COMPLETED", "FAILED", "CANCELLED"}, timeout=150)
    assert_untouched(stack, job, record)


@pytest.mark.slurm_versions("22.05", "24.11")
async def test_a_kernel_xid_naming_a_host_outside_the_job_leaves_it_untouched(stack: Stack) -> None:
    """Clause 2 (and 3's evidence half): a fatal Xid line of a node the job does not run on changes
    nothing, whatever the collected-log layout."""
    job = stack.submit(comment=comment("action"), env=LONG_RUN)
    record = await running_with_progress(stack, job)
    own = expand_hostlist(record["NodeList"])
    foreign = next(n for n in ("node1", "node2", "node3", "node4") if n not in own)
    append(
        job,
        f"Nov 30 12:00:00 {foreign} kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, fallen off the bus",
        f"{foreign}: [Mon Nov 30 12:00:00 2026] NVRM: Xid (PCI:0000:3b:00): 48, pid=2, DBE",
        f"2026-11-30T12:00:00+0000 {foreign}.cluster.local kernel: NVRM: Xid (PCI:0000:3b:00): 79, x",
    )
    messages = await record_and_watch_advice(stack, job)
    assert all("Record and watch" in m for m in messages), messages
    record = await stack.wait_job_state(job, {"COMPLETED", "FAILED", "CANCELLED"}, timeout=150)
    assert_untouched(stack, job, record)
    assert foreign not in record.get("ExcNodeList", "")


@pytest.mark.slurm_versions("22.05", "24.11")
async def test_a_dmesg_t_xid_after_the_host_excludes_that_node(stack: Stack) -> None:
    """Clause 6: `node2: [Mon Nov 30 12:00:00 2026] NVRM: Xid ...` names node2 (the dmesg -T stamp after
    the host), so a fatal Xid on one of the job's nodes excludes that node and the job restarts elsewhere."""
    job = stack.submit(comment=comment("action"), env={**LONG_RUN, "TRAINSIM_ITERS": "300"})
    record = await running_with_progress(stack, job)
    bad = expand_hostlist(record["NodeList"])[1]
    append(
        job,
        f"{bad}: [Mon Nov 30 12:00:00 2026] NVRM: Xid (PCI:0000:3b:00): 79, pid=7, fallen off the bus",
    )
    await stack.wait_for_event(job.job_id, EventType.ALLOCATION_RESTARTED, timeout=120)
    record = job.show()
    assert record["ExcNodeList"] == bad
    assert bad not in expand_hostlist(record["NodeList"])
    assert int(record["Restarts"]) == 1
    stack.cluster._run(["scancel", job.job_id], check=False)


def _pids_of(job: SubmittedJob) -> list[int]:
    """The job's python ranks, found by the job's unique checkpoint directory in their environment."""
    marker = f"TRAINSIM_CKPT_DIR={job.workdir / 'ckpt'}".encode()
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if b"trainsim.py" in cmdline and b"python" in cmdline and marker in environ.split(b"\0"):
            found.append(int(entry.name))
    return sorted(found)


@pytest.mark.slurm_versions("22.05", "24.11")
async def test_an_outside_kill_9_is_a_signal_kill_not_an_oom(stack: Stack) -> None:
    """Clause 5: `kill -9` of one rank from outside: Slurm reports the kill, no OOM line exists, so the
    detection and the advice say signal kill with unknown cause, never a host OOM."""
    job = stack.submit(comment=comment("observe"), env={**LONG_RUN, "TRAINSIM_ITERS": "400"})
    await running_with_progress(stack, job)
    pids = _pids_of(job)
    assert pids, "no rank of the job found"
    os.kill(pids[-1], signal.SIGKILL)
    events = await stack.wait_for_event(job.job_id, EventType.ADVICE, timeout=120)
    detection = next(e for e in events if e.event_type == EventType.DETECTION)
    advice = next(e for e in events if e.event_type == EventType.ADVICE)
    assert detection.category == "signal_kill", (detection.category, detection.message)
    assert advice.category == "signal_kill" and advice.attribution == "unknown", advice
    assert "oom" not in advice.message.lower() and "killed_oom_host" not in detection.message
    assert "killed_oom_host" not in {e.category for e in events}


async def test_one_operator_mode_change_through_the_api_writes_one_audit_row(stack: Stack) -> None:
    """Clause 7: the real API against the real workflow (Temporal update): one `mode_changed` row, and a
    string where a boolean belongs is refused."""
    job = stack.submit(comment=comment("observe"), env={**LONG_RUN, "TRAINSIM_ITERS": "300"})
    await running_with_progress(stack, job)
    status = next(w for w in stack.store.list_workloads(limit=1000) if w.job_id == job.job_id)
    settings = stack.settings.model_copy(update={"api": APISettings(token=TOKEN)})
    client = TestClient(create_app(settings, store=stack.store))
    path = f"/api/v1/workloads/{status.cluster}/{status.job_id}/{status.submit_time}"
    auth = {"Authorization": f"Bearer {TOKEN}"}
    # The worker runs on this test's event loop: the blocking test client must not stall it.
    refused = await asyncio.to_thread(client.put, path + "/paused", json={"paused": "yes"}, headers=auth)
    assert refused.status_code == 422
    resp = await asyncio.to_thread(client.put, path + "/mode", json={"mode": "action"}, headers=auth)
    assert resp.status_code == 200, resp.text
    await asyncio.sleep(4)  # the workflow's row is flushed by its run loop
    rows = [e for e in stack.events(job.job_id) if e.event_type == EventType.MODE_CHANGED]
    assert len(rows) == 1, [(e.actor, e.message) for e in rows]
    assert rows[0].actor == "operator" and rows[0].data.get("who") == "api-token"
    stack.cluster._run(["scancel", job.job_id], check=False)

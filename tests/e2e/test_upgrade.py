"""An upgrade under running workflows, on the real stack (docs/upgrading.md).

The worker first runs the previous release's code: the source tree of PREVIOUS_RELEASE, taken from this
repository's history with `git archive` into a temporary directory (nothing to clean up in the repository
if the run is killed, unlike `git worktree add`). Two workloads are discovered and watched by it. Then the
worker is restarted from this checkout, as an operator's upgrade would, while both watches are in flight.
A fault injected after the upgrade must be recovered exactly once by the new code (Slurm: Restarts=1 and
one exclusion; the audit: one advice, one of each step), the other workload completes untouched, and the
upgraded histories replay under today's code.

A clone without that commit (a shallow CI clone) FAILS here, with the command that fixes it: an upgrade
test that silently does not run would let a release break every running workflow.
"""

from __future__ import annotations

import asyncio
import io
import json
import subprocess
import tarfile
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType as HistoryEventType
from temporalio.client import WorkflowHandle
from temporalio.worker import Replayer

from tests.e2e.crash_stack import (
    ADVICE_BEFORE_EXCLUSION,
    LIFECYCLE,
    RECOVERY_SEQUENCE,
    CrashJob,
    CrashStack,
    check_audit_complete,
    crash_stack,
    in_order,
    save_history,
)
from tests.e2e.stack import REPO
from trainguard.models import EventType
from workers.worker import WORKFLOWS

# The release running in production before this one: the last commit of the previous stop. Move it
# forward at each release (docs/upgrading.md, "Releasing").
PREVIOUS_RELEASE = "d656767b1224eab7204bd9c499b90af51c9082f3"
CODE = ("trainguard", "workflows", "activities", "workers")


def _git(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, timeout=120, check=False)


@pytest.fixture(scope="module")
def previous_release() -> Iterator[Path]:
    if _git("cat-file", "-e", f"{PREVIOUS_RELEASE}^{{commit}}").returncode != 0:
        shallow = _git("rev-parse", "--is-shallow-repository").stdout.decode().strip() == "true"
        pytest.fail(
            f"the previous release {PREVIOUS_RELEASE[:12]} is not in this clone"
            + (" (a shallow clone: run `git fetch --unshallow`)" if shallow else "")
            + "; the upgrade test needs its code",
            pytrace=False,
        )
    archive = _git("archive", "--format=tar", PREVIOUS_RELEASE, *CODE)
    assert archive.returncode == 0, archive.stderr.decode()
    with tempfile.TemporaryDirectory(prefix="tg-previous-release-") as tmp:
        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
            tar.extractall(tmp, filter="data")
        yield Path(tmp)


def _build_ids(history_json: str) -> list[str]:
    """The worker build id (a hash of the code it loaded) of every completed workflow task, in order."""
    ids = []
    for event in json.loads(history_json)["events"]:
        done = event.get("workflowTaskCompletedEventAttributes")
        if done is not None:
            ids.append(done.get("workerVersion", {}).get("buildId", ""))
    return ids


CLOSED = {
    HistoryEventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED: "activity_task_completed_event_attributes",
    HistoryEventType.EVENT_TYPE_ACTIVITY_TASK_FAILED: "activity_task_failed_event_attributes",
    HistoryEventType.EVENT_TYPE_ACTIVITY_TASK_CANCELED: "activity_task_canceled_event_attributes",
    HistoryEventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT: "activity_task_timed_out_event_attributes",
}


async def _mid_watch(handle: WorkflowHandle[object, object]) -> bool:
    """A watch activity is in flight (scheduled, not closed): the workload is mid-watch."""
    history = await handle.fetch_history()
    watches: set[int] = set()
    for event in history.events:
        if event.event_type == HistoryEventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            if event.activity_task_scheduled_event_attributes.activity_type.name == "watch_job":
                watches.add(event.event_id)
        elif event.event_type in CLOSED:
            watches.discard(getattr(event, CLOSED[event.event_type]).scheduled_event_id)
    return bool(watches)


async def _until(check: Callable[[], Awaitable[bool]], what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        await asyncio.sleep(0.5)


async def test_workflows_started_under_the_previous_release_continue_after_the_upgrade(
    previous_release: Path,
) -> None:
    async with crash_stack("upgrade", worker_code=previous_release) as stack:
        trigger = stack.root / "trigger"
        trigger.unlink(missing_ok=True)
        once = stack.root / "fault.fired"
        once.unlink(missing_ok=True)
        # the fault fires when the test writes the trigger, after the upgrade; in the first attempt only
        job = stack.submit(
            "action",
            fault=None,
            iters=400,
            env={"TRAINSIM_TRIGGER": str(trigger), "TRAINSIM_FAULT_ONCE": str(once)},
        )
        calm = stack.submit("observe", fault=None, iters=300)
        for j in (job, calm):
            await stack.wait_event(j, EventType.WORKLOAD_DISCOVERED, timeout=120)
        handles = [stack.handle(job), stack.handle(calm)]

        async def both_mid_watch() -> bool:
            return all([await _mid_watch(h) for h in handles])

        await _until(both_mid_watch, "both watches in flight under the previous release", 60)
        old_pid = stack.worker.proc.pid()
        assert old_pid is not None
        environ = Path(f"/proc/{old_pid}/environ").read_bytes().split(b"\0")
        assert f"PYTHONPATH={previous_release}".encode() in environ  # only the old tree on its path
        assert b"-P" in Path(f"/proc/{old_pid}/cmdline").read_bytes().split(b"\0")
        before = [_build_ids((await h.fetch_history()).to_json()) for h in handles]

        # the upgrade: stop the old worker, start this checkout's
        stack.worker.use_code(None)
        await stack.worker.restart_with({})
        assert stack.worker.proc.pid() != old_pid
        trigger.write_text("xid\n")

        await _recovered_once(stack, job)
        await stack.wait_event(calm, EventType.COMPLETED, timeout=120)
        assert not [e for e in stack.events(calm.job_id) if e.event_type == EventType.ACTION]
        assert stack.show(calm.job_id)["Restarts"] == "0"
        assert stack.worker.deaths == [], stack.worker.deaths  # no crash loop after the upgrade

        for handle, old_ids, name in zip(handles, before, ("action", "observe"), strict=True):
            history = await handle.fetch_history()
            ids = _build_ids(history.to_json())
            old = {i for i in old_ids if i}
            new = set(ids) - old
            # the same workflow ran its tasks on the previous release's code, then on this one
            assert len(old) == 1 and new, (old_ids, ids)
            replay = await Replayer(
                workflows=WORKFLOWS, data_converter=stack.client.data_converter
            ).replay_workflow(history, raise_on_replay_failure=False)
            assert replay.replay_failure is None, replay.replay_failure
            await save_history(handle, f"upgrade_{PREVIOUS_RELEASE[:7]}_{name}")


async def _recovered_once(stack: CrashStack, job: CrashJob) -> None:
    await stack.wait_event(job, EventType.COMPLETED, timeout=240)
    record = stack.show(job.job_id)
    assert record["JobState"] == "COMPLETED" and record["Restarts"] == "1", record
    events = await check_audit_complete(stack, job)
    trail = [(e.event_type.value, e.action) for e in events]
    assert in_order(events, RECOVERY_SEQUENCE) and in_order(events, ADVICE_BEFORE_EXCLUSION), trail
    assert in_order(events, LIFECYCLE), trail
    advice = [e for e in events if e.event_type == EventType.ADVICE and e.action == "requeue"]
    assert len(advice) == 1, trail  # one recovery
    steps = Counter(e.action for e in events if e.event_type == EventType.ACTION)
    assert [steps[k] for k in ("requeue_hold", "exclude", "release")] == [1, 1, 1], steps
    done = Counter(step for step, performed in stack.worker.step_lines(stack.workload(job).key) if performed)
    assert done == {"requeue_hold": 1, "exclude": 1, "release": 1}, done
    assert record["ExcNodeList"] == ",".join(advice[0].nodes) and len(advice[0].nodes) == 1, record

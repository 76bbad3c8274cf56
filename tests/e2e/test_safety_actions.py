"""The safety contract's scheduler/action clauses (docs/safety.md: 1, 3, 4, 8) on the real stack.

Real sbatch jobs on the real 4-node Slurm cluster, the Temporal dev server and TrainGuard's worker, in
action mode with acknowledged scheduler actions. Every test ends by reading what Slurm itself reports
(`scontrol show job`: JobState, Restarts, ExcNodeList, Reason, hold state); the audit store says what
TrainGuard thought and did.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.e2e.stack import PORT_OFFSET, REPO, Stack, SubmittedJob
from trainguard.audit.store import AuditStore
from trainguard.localstack.slurm import LocalSlurmCluster
from trainguard.models import AuditEventIn, EventType, PauseRequest, WorkloadId
from trainguard.quickstart import Layout, down, up
from trainguard.slurm.client import SlurmClient
from trainguard.slurm.hostlist import expand_hostlist
from trainguard.slurm.runner import CommandError, LocalRunner

# Every clause holds on each Slurm version the suite covers (tests/e2e/conftest.py); clause 8 restarts
# the quick-start stack, which runs the host's Slurm.
BOTH = pytest.mark.slurm_versions("22.05", "24.11")
LONG = {"TRAINSIM_ITERS": "400", "TRAINSIM_STEP_S": "0.1"}  # ~40 s of training: outlives every test step


def comment(mode: str = "action") -> str:
    return json.dumps({"trainguard": {"environment": "e2e", "mode": mode}})


def slurm(cluster: LocalSlurmCluster, *argv: str) -> str:
    proc = subprocess.run(
        list(argv), env={**os.environ, **cluster.env}, capture_output=True, text=True, timeout=30, check=False
    )
    assert proc.returncode == 0, (argv, proc.stderr)
    return proc.stdout


def of_type(events: list[AuditEventIn], kind: EventType) -> list[AuditEventIn]:
    return [e for e in events if e.event_type == kind]


def held(record: dict[str, str]) -> bool:
    return record.get("Priority") == "0" or "Held" in record.get("Reason", "")


async def wait_record(job: SubmittedJob, check: object, what: str, timeout: float = 60.0) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    record: dict[str, str] = {}
    while time.monotonic() < deadline:
        record = job.show()
        if check(record):  # type: ignore[operator]
            return record
        await asyncio.sleep(0.3)
    raise AssertionError(f"job {job.job_id}: {what} not seen in {timeout:.0f}s; last record {record}")


async def wait_output(job: SubmittedJob, text: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if job.output.exists() and text in job.output.read_text(errors="replace"):
            return
        await asyncio.sleep(0.3)
    raise AssertionError(f"job {job.job_id}: {text!r} not in its output after {timeout:.0f}s")


async def assert_stays(job: SubmittedJob, seconds: float, **expected: str) -> dict[str, str]:
    """Slurm's record keeps these values for `seconds` (a wrongly acting worker gets the time to act)."""
    deadline = time.monotonic() + seconds
    record: dict[str, str] = {}
    while time.monotonic() < deadline:
        record = job.show()
        assert {k: record.get(k) for k in expected} == expected, record
        await asyncio.sleep(0.5)
    return record


# ---- clause 1: a cancelled job stays cancelled -----------------------------------------------------------


async def _assert_cancel_ends_watching(stack: Stack, job: SubmittedJob, restarts: str = "0") -> None:
    events = await stack.wait_for_event(job.job_id, EventType.STOPPED, timeout=90)
    await assert_stays(job, 5, JobState="CANCELLED", Restarts=restarts)
    [stopped] = of_type(events, EventType.STOPPED)
    assert "cancelled" in stopped.message and "JobState=CANCELLED" in stopped.message, stopped.message
    assert stopped.data.get("cancelled") is True
    events = stack.events(job.job_id)
    assert not of_type(events, EventType.ADVICE) and not of_type(events, EventType.ACTION), [
        (e.event_type.value, e.message) for e in events
    ]


@BOTH
async def test_clause1_cancel_while_running_is_never_requeued(stack: Stack) -> None:
    """Clause 1: scancel of a running job; its `*** JOB N ON node1 CANCELLED AT ... ***` line is not a
    failure (it used to be read as preemption and the job was requeued)."""
    job = stack.submit(comment=comment(), env=LONG)
    await stack.wait_for_event(job.job_id, EventType.WORKLOAD_DISCOVERED)
    await wait_output(job, "iteration        5/")
    slurm(stack.cluster, "scancel", job.job_id)
    await _assert_cancel_ends_watching(stack, job)
    out = job.output.read_text(errors="replace")
    # slurmstepd's `*** JOB|STEP N ON node1 CANCELLED AT ... ***` (which used to read as preemption)
    assert re.search(rf"\*\*\* (JOB|STEP) {job.job_id}(\.\d+)? ON \S+ CANCELLED AT", out), out[-1500:]


@BOTH
async def test_clause1_cancel_while_pending_ends_watching(stack: Stack) -> None:
    """Clause 1: scancel of a pending job (not yet eligible: --begin in ten minutes)."""
    job = stack.submit(comment=comment(), env=LONG, extra=["--begin=now+600"])
    await stack.wait_for_event(job.job_id, EventType.WORKLOAD_DISCOVERED)
    assert job.show()["JobState"] == "PENDING"
    slurm(stack.cluster, "scancel", job.job_id)
    await _assert_cancel_ends_watching(stack, job)


@BOTH
async def test_clause1_cancel_of_a_user_held_job_ends_watching(stack: Stack) -> None:
    """Clause 1: scancel of a job submitted held (`sbatch -H`)."""
    job = stack.submit(comment=comment(), env=LONG, extra=["-H"])
    await stack.wait_for_event(job.job_id, EventType.WORKLOAD_DISCOVERED)
    assert held(job.show())
    slurm(stack.cluster, "scancel", job.job_id)
    await _assert_cancel_ends_watching(stack, job)


@BOTH
async def test_clause1_cancel_of_a_job_trainguard_requeue_held_is_never_undone(
    slurm_cluster: LocalSlurmCluster, tmp_path: Path
) -> None:
    """Clause 1 (and 4): the user cancels a job while TrainGuard holds it mid-recovery; TrainGuard's next
    steps (exclude, release, a retried requeue-hold) must not revive it.

    The steps are SlurmClient's, exactly as the recovery activities call them, on the real cluster: the
    window between TrainGuard's hold and its release is milliseconds in a real recovery, too short to
    place a user's scancel in reliably. The workflow's side (a CANCELLED observation ends the workload)
    is tests/workflows/test_job_recovery.py::test_a_cancel_during_recovery_ends_the_workload.
    """
    workdir = tmp_path / "job"
    workdir.mkdir()
    job_id = slurm_cluster.sbatch(
        [
            f"--chdir={workdir}",
            "-N2",
            f"--output={workdir}/out-%j.txt",
            str(REPO / "examples" / "trainsim.sbatch"),
        ],
        env={
            "TRAINSIM_PY": str(REPO / "examples" / "trainsim.py"),
            "TRAINSIM_CKPT_DIR": str(workdir),
            **LONG,
        },
    )
    job = SubmittedJob(job_id=job_id, workdir=workdir, cluster=slurm_cluster)
    await wait_record(job, lambda r: r["JobState"] == "RUNNING", "RUNNING")
    client = SlurmClient(LocalRunner(slurm_cluster.env), "e2e")
    assert (await client.requeue_hold(job_id, expected_restarts=0)).performed
    ours = await client.job(job_id)
    assert ours is not None and ours.held and ours.reason == "job_requeued_in_held_state"
    # (a scancel while the requeued attempt is still COMPLETING is dropped by Slurm 22.05 itself)
    await wait_record(job, lambda r: r["JobState"] == "PENDING", "PENDING after the requeue")
    slurm(slurm_cluster, "scancel", job_id)
    await wait_record(job, lambda r: r["JobState"] == "CANCELLED", "CANCELLED")

    with pytest.raises(CommandError) as refused:
        await client.set_excluded(job_id, ["node2"])
    assert not refused.value.retryable and "CANCELLED" in refused.value.stderr
    released = await client.release(job_id, ours.reason)
    assert not released.performed and "CANCELLED" in released.detail
    again = await client.requeue_hold(job_id, expected_restarts=0)  # a retried step of the same advice
    assert not again.performed
    with pytest.raises(CommandError, match="refusing to requeue a CANCELLED job"):
        await client.requeue_hold(job_id, expected_restarts=1)
    await assert_stays(job, 3, JobState="CANCELLED", Restarts="1", ExcNodeList="(null)")


# ---- clause 3: only the job's own nodes -------------------------------------------------------------------

FOREIGN_XID = (
    "Nov 30 12:00:00 node3 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python3, "
    "GPU has fallen off the bus."
)


@BOTH
async def test_clause3_kernel_line_about_a_foreign_host_never_excludes_it(stack: Stack) -> None:
    """Clause 3: a job on node1,node4 whose log holds `node3 kernel: NVRM: Xid 79` (a shared syslog line)
    never gets ExcNodeList=node3, and is not restarted for another host's GPU."""
    script = stack.workdir / "foreign-xid.sbatch"
    script.write_text(
        "#!/bin/bash\n#SBATCH --requeue\n#SBATCH --open-mode=append\n"
        f"echo '{FOREIGN_XID}'\n"
        'srun --kill-on-bad-exit=1 --ntasks-per-node=1 python3 "$TRAINSIM_PY"\n'
    )
    workdir = stack.workdir / f"foreign-{int(time.time() * 1000)}"
    workdir.mkdir()
    job_id = stack.cluster.sbatch(
        [
            f"--chdir={workdir}",
            "-N2",
            "-w",
            "node1,node4",
            f"--output={workdir}/trainsim-%j.out",
            f"--comment={comment()}",
            str(script),
        ],
        env={
            "TRAINSIM_PY": str(REPO / "examples" / "trainsim.py"),
            "TRAINSIM_ITERS": "40",
            "TRAINSIM_STEP_S": "0.1",
            "TRAINSIM_CKPT_EVERY": "5",
            "TRAINSIM_CKPT_DIR": str(workdir / "ckpt"),
            "TRAINSIM_NCCL_DELAY_S": "1",
        },
    )
    job = SubmittedJob(job_id=job_id, workdir=workdir, cluster=stack.cluster)
    events = await stack.wait_for_event(job_id, EventType.COMPLETED, timeout=150)
    record = job.show()
    assert record["JobState"] == "COMPLETED" and record["NodeList"] == "node[1,4]", record
    assert record["ExcNodeList"] == "(null)", record
    assert record["Restarts"] == "0", record
    for event in of_type(events, EventType.ACTION) + of_type(events, EventType.ADVICE):
        assert "node3" not in event.nodes, event
    # Whether detection reads the line as this job's failure is clause 2's business; if the verdict does
    # name node3, the policy says why it is ignored.
    for advice in of_type(events, EventType.ADVICE):
        assert advice.action == "none", advice
        if "node3" in str(advice.data.get("implicated")):
            assert "outside" in advice.message, advice


# ---- clause 4: the user's settings are the user's ----------------------------------------------------------

SETTINGS = (
    "JobName",
    "TimeLimit",
    "Dependency",
    "Partition",
    "NumNodes",
    "NumTasks",
    "Requeue",
    "Nice",
    "ReqNodeList",
    "Features",
    "MinMemoryNode",
    "OverSubscribe",
    "Contiguous",
    "Account",
    "QOS",
    "WorkDir",
    "StdOut",
    "MailType",
    "Deadline",
)


@BOTH
async def test_clause4_user_exclusion_is_kept_and_job_settings_unchanged(stack: Stack) -> None:
    """Clause 4: user `-x node1` + a GPU fault on node2: ExcNodeList holds node1 AND node2, the job never
    runs on node1 again; time limit, dependency, nice and every other setting are as the user set them."""
    first = stack.submit(comment=None, env={"TRAINSIM_ITERS": "2"}, nodes=1)
    job = stack.submit(
        comment=comment(),
        env={
            "TRAINSIM_ITERS": "40",
            "TRAINSIM_FAULT": "xid",
            "TRAINSIM_FAULT_NODE": "node2",
            "TRAINSIM_FAULT_AT": "12",
            "TRAINSIM_FAULT_ONCE": str(stack.workdir / f"fired-x-{len(stack.jobs)}"),
        },
        extra=["-x", "node1", "--time=10", f"--dependency=afterany:{first.job_id}", "--nice=7"],
    )
    pending = job.show()
    assert pending["ExcNodeList"] == "node1" and pending["Dependency"].startswith("afterany:"), pending
    before = await wait_record(job, lambda r: r["JobState"] == "RUNNING", "first attempt RUNNING")
    assert "node2" in expand_hostlist(before["NodeList"]), before  # the fault has a node to hit
    await stack.wait_for_event(job.job_id, EventType.COMPLETED, timeout=150)
    after = job.show()
    assert after["JobState"] == "COMPLETED" and after["Restarts"] == "1", after
    assert set(expand_hostlist(after["ExcNodeList"])) == {"node1", "node2"}, after
    assert not {"node1", "node2"} & set(expand_hostlist(after["NodeList"])), after
    assert {k: after.get(k) for k in SETTINGS} == {k: before.get(k) for k in SETTINGS}
    assert after["TimeLimit"] == "00:10:00" and after["Nice"] == "7", after
    exclude = [
        e for e in stack.events(job.job_id) if e.event_type == EventType.ACTION and e.action == "exclude"
    ]
    assert exclude and "kept the job's own node1" in exclude[0].message, exclude


@BOTH
@pytest.mark.parametrize(("hold", "reason"), [("uhold", "JobHeldUser"), ("hold", "JobHeldAdmin")])
async def test_clause4_user_and_admin_holds_are_never_released(stack: Stack, hold: str, reason: str) -> None:
    """Clause 4: a node fails under a running job, Slurm requeues it, and the user (`scontrol uhold`) or an
    administrator (`scontrol hold`) holds it before TrainGuard handles the failure. TrainGuard records
    and handles the failure but never lifts a hold it did not place.

    The operator pause (a TrainGuard feature) keeps TrainGuard from handling the failure until the hold
    is in place, so the order of events is fixed instead of a race.
    """
    job = stack.submit(comment=comment(), env=LONG)
    [discovered] = of_type(
        await stack.wait_for_event(job.job_id, EventType.WORKLOAD_DISCOVERED), EventType.WORKLOAD_DISCOVERED
    )
    running = await wait_record(job, lambda r: r["JobState"] == "RUNNING", "RUNNING")
    cluster = stack.settings.cluster.name
    workload = WorkloadId(cluster=cluster, job_id=job.job_id, submit_time=discovered.submit_time)
    workflow_id = workload.workflow_id
    handle = stack.client.get_workflow_handle(workflow_id)
    await handle.signal("set_paused", PauseRequest(paused=True, who="e2e", reason="hold test"))
    await stack.wait_for_event(job.job_id, EventType.MONITORING_PAUSED)
    victim = expand_hostlist(running["NodeList"])[-1]  # not the batch host
    # Only the node's slurmd dies (its tasks keep running, as on a node that lost its network): Slurm
    # declares NODE_FAIL and requeues the job. Killing the tasks too lets srun fail the job first.
    slurmd = stack.cluster._slurmd_pid(victim)
    assert slurmd is not None
    os.kill(slurmd, signal.SIGKILL)
    try:
        await wait_record(job, lambda r: r["Restarts"] == "1", "Slurm's own requeue after NODE_FAIL", 60)
        slurm(stack.cluster, "scontrol", hold, job.job_id)
        record = await wait_record(job, lambda r: r["Reason"] == reason, reason, 10)
        assert record["JobState"] in ("PENDING", "COMPLETING"), record
        await handle.signal("set_paused", PauseRequest(paused=False, who="e2e", reason="hold test"))
        events = await stack.wait_for_event(job.job_id, EventType.ADVICE, timeout=90)
        await asyncio.sleep(3)  # let the recovery's steps (if any) run
        await assert_stays(job, 4, JobState="PENDING", Reason=reason, Restarts="1")
        events = stack.events(job.job_id)
        released = [e for e in of_type(events, EventType.ACTION) if e.action == "release"]
        assert all(not e.data.get("performed") for e in released), released
        assert all("held by someone else" in e.message for e in released), released
    finally:
        stack.cluster.kill_node(victim)  # the orphaned tasks of the first attempt
        stack.cluster.restart_node(victim)
        slurm(stack.cluster, "scancel", job.job_id)


# ---- clause 8: restarting a component never waits on users' jobs ------------------------------------------


async def test_clause8_local_up_restarts_a_crashed_worker_while_jobs_run() -> None:
    """Clause 8: the worker of the local stack is SIGKILLed while a job runs; `trainguard local up` (the
    function behind it) brings it back promptly without waiting for the job, and the job is watched
    again: a GPU fault after the restart is recovered."""
    layout = Layout(
        (REPO / "var" / "e2e" / f"local-up-{PORT_OFFSET}").resolve(), port_offset=PORT_OFFSET + 500
    )
    await asyncio.to_thread(down, layout)
    shutil.rmtree(layout.root, ignore_errors=True)
    try:
        await asyncio.to_thread(up, layout)
        cluster = layout.slurm()
        workdir = layout.root / "jobs"
        workdir.mkdir(parents=True)
        trigger = workdir / "trigger"
        job_id = cluster.sbatch(
            [
                f"--chdir={workdir}",
                "-N2",
                f"--output={workdir}/out-%j.txt",
                f"--comment={comment()}",
                str(REPO / "examples" / "trainsim.sbatch"),
            ],
            env={
                "TRAINSIM_PY": str(REPO / "examples" / "trainsim.py"),
                "TRAINSIM_ITERS": "300",
                "TRAINSIM_STEP_S": "0.1",
                "TRAINSIM_CKPT_EVERY": "10",
                "TRAINSIM_CKPT_DIR": str(workdir / "ckpt"),
                "TRAINSIM_NCCL_DELAY_S": "1",
                "TRAINSIM_TRIGGER": str(trigger),
                "TRAINSIM_FAULT_ONCE": str(workdir / "fired"),
            },
        )
        job = SubmittedJob(job_id=job_id, workdir=workdir, cluster=cluster)
        store = AuditStore.from_url(f"sqlite:///{layout.audit_db}")
        try:

            def seen(kind: EventType) -> bool:
                return any(e.event_type == kind for e in store.list_events(job_id=job_id, limit=500).items)

            async def wait_for(kind: EventType, timeout: float) -> None:
                deadline = time.monotonic() + timeout
                while not seen(kind):
                    assert time.monotonic() < deadline, f"{kind.value} not seen for job {job_id}"
                    await asyncio.sleep(0.5)

            await wait_for(EventType.WORKLOAD_DISCOVERED, 90)
            await wait_record(job, lambda r: r["JobState"] == "RUNNING", "RUNNING")
            old_pid = layout.worker().pid()
            layout.worker().kill()
            assert layout.worker().pid() is None
            t0 = time.monotonic()
            await asyncio.wait_for(asyncio.to_thread(up, layout), timeout=60)
            took = time.monotonic() - t0
            for _ in range(100):  # the new process shows as the worker once it has exec'd
                if layout.worker().pid() is not None:
                    break
                await asyncio.sleep(0.1)
            new_pid = layout.worker().pid()
            assert new_pid is not None and new_pid != old_pid
            assert job.show()["JobState"] == "RUNNING"  # up() returned while the job was still running
            assert took < 20, f"local up took {took:.1f}s with a job running"
            print(f"\nlocal up with a job running: worker back in {took:.1f}s")
            trigger.write_text("xid node=node2\n")
            await wait_for(EventType.COMPLETED, 180)
        finally:
            store.close()
        record = job.show()
        assert record["JobState"] == "COMPLETED" and record["Restarts"] == "1", record
        assert record["ExcNodeList"] == "node2", record
    finally:
        await asyncio.to_thread(down, layout)

"""The recovery loop on real PyTorch distributed training (examples/ddp_train.py: gloo on the CPU,
2 nodes x 2 ranks) with faults injected from outside the job, as they happen in life.

Nothing prints lines for TrainGuard here: the output is PyTorch's, gloo's, torchrun's and srun's own.
Needs torch (`pip install -e '.[torch]'`, done by scripts/test.sh); without it these tests fail.
The default selection keeps CI short; `pytest -m pytorch_full tests/e2e/test_pytorch_recovery.py`
runs the rest.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.e2e.real_logs import require_torch
from tests.e2e.stack import NODE_LOGS, PORT_OFFSET, PROMETHEUS_PORT, REPO, Stack, SubmittedJob
from trainguard.gpumetrics.sim_exporter import GpuFleet, SimExporter
from trainguard.localstack.prometheus import LocalPrometheus
from trainguard.localstack.tmpfs import fill, mount_tmpfs, unmount
from trainguard.models import AuditEventIn, EventType
from trainguard.slurm.hostlist import expand_hostlist

SBATCH = REPO / "examples" / "ddp_train.sbatch"
SCRIPT = REPO / "examples" / "ddp_train.py"
STEP_S = 0.2


def comment(mode: str, **extra: str) -> str:
    return json.dumps({"trainguard": {"environment": "e2e", "mode": mode, **extra}})


@dataclass
class DdpJob:
    job: SubmittedJob
    pid_dir: Path

    @property
    def output(self) -> Path:
        return self.job.workdir / f"ddp-{self.job.job_id}.out"

    def text(self) -> str:
        try:
            return self.output.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def rank(self, rank: int) -> tuple[int, str]:
        """(pid, node) of one rank of the current attempt, from the job's own pid file."""
        pid, node, _ = (self.pid_dir / f"rank{rank}.pid").read_text().split()
        return int(pid), node

    async def wait_step(self, step: int, timeout: float = 90.0) -> float:
        """Until the log shows training at `step` or later; returns when it was seen."""
        deadline = time.monotonic() + timeout
        rx = re.compile(r"^(?:\[rank\d+\]: )?step (\d+)/", re.M)
        while time.monotonic() < deadline:
            steps = [int(s) for s in rx.findall(self.text())]
            if steps and max(steps) >= step:
                return time.time()
            await asyncio.sleep(0.2)
        raise AssertionError(f"job {self.job.job_id} never reached step {step}:\n{self.text()[-3000:]}")


def submit_ddp(
    stack: Stack,
    *,
    mode: str,
    launcher: str = "srun",
    steps: int = 30,
    env: dict[str, str] | None = None,
    ckpt_fs_bytes: int | None = None,
) -> DdpJob:
    """`ckpt_fs_bytes`: the checkpoint directory is a tmpfs of that size (unmount it with
    `unmount_ckpt_fs`), named in the opt-in comment so the watch reads it."""
    require_torch()
    workdir = stack.workdir / f"ddp-{len(stack.jobs)}-{int(time.time() * 1000)}"
    workdir.mkdir(parents=True)
    extra: dict[str, str] = {}
    if ckpt_fs_bytes is not None:
        mount_tmpfs(workdir / "ckpt", ckpt_fs_bytes)
        extra["checkpoint_dir"] = str(workdir / "ckpt")
    pid_dir = workdir / "pids"
    defaults = {
        "DDP_PYTHON": sys.executable,
        "DDP_SCRIPT": str(SCRIPT),
        "DDP_LAUNCHER": launcher,
        "DDP_MASTER_ADDR": "127.0.0.1",
        # below the ephemeral range (gloo's own sockets live there: a free port now can be taken by the
        # requeued attempt's time, EADDRINUSE); the offset keeps concurrent checkouts apart
        "DDP_MASTER_PORT": str(10000 + (PORT_OFFSET + 10 * len(stack.jobs)) % 20000),
        "DDP_STEPS": str(steps),
        "DDP_STEP_S": str(STEP_S),
        "DDP_CKPT_EVERY": "5",
        "DDP_CKPT_DIR": str(workdir / "ckpt"),
        "DDP_PID_DIR": str(pid_dir),
        "DDP_TIMEOUT_S": "60",
        "GLOO_SOCKET_IFNAME": "lo",
        "OMP_NUM_THREADS": "1",
    }
    argv = [
        f"--chdir={workdir}",
        "--job-name=ddp",
        "--nodes=2",
        "--ntasks-per-node=2",
        f"--output={workdir}/ddp-%j.out",
        f"--comment={comment(mode, **extra)}",
        str(SBATCH),
    ]
    job_id = stack.cluster.sbatch(argv, env={**os.environ, **defaults, **(env or {})})
    job = SubmittedJob(job_id=job_id, workdir=workdir, cluster=stack.cluster)
    stack.jobs.append(job)
    return DdpJob(job=job, pid_dir=pid_dir)


def unmount_ckpt_fs(ddp: DdpJob) -> None:
    unmount(ddp.job.workdir / "ckpt")


def verdict_advice(events: list[AuditEventIn]) -> AuditEventIn:
    """The advice that carries the verdict: a containment hold of a job Slurm requeued itself comes first and
    names no evidence (it is recorded before attribution runs)."""
    found = [e for e in events if e.event_type == EventType.ADVICE and e.evidence]
    assert found, [(e.event_type.value, e.message) for e in events]
    return found[0]


async def wait_verdict(stack: Stack, ddp: DdpJob, timeout: float = 120.0) -> AuditEventIn:
    """The advice that carries the verdict (`verdict_advice`), once it is recorded."""

    def recorded() -> bool:
        return any(e.event_type == EventType.ADVICE and e.evidence for e in stack.events(ddp.job.job_id))

    return verdict_advice(await stack.wait_until(recorded, "the advice", timeout, ddp.job.job_id))


def first(events: list[AuditEventIn], kind: EventType) -> AuditEventIn:
    found = [e for e in events if e.event_type == kind]
    assert found, [(e.event_type.value, e.message) for e in events]
    return found[0]


async def test_sigkill_of_one_rank_names_its_node_requeues_and_resumes(stack: Stack) -> None:
    """srun, 4 ranks on 2 nodes: an outside SIGKILL of rank 2 (on the job's second node). The survivors'
    gloo cascade comes first in the log; the verdict must come from srun's `nodeN: task 2: Killed`, be a
    signal kill (not an OOM, not hardware: nothing is excluded), and the job must resume from its newest
    checkpoint."""
    ddp = submit_ddp(stack, mode="action")
    await ddp.wait_step(12)
    pid, node = ddp.rank(2)
    # SLURM_PROCID 2 runs on the second node of the allocation (2 tasks per node); which nodes the job
    # got depends on what else holds nodes, so the expected one comes from Slurm's own NodeList.
    allocated = expand_hostlist(ddp.job.show()["NodeList"])
    assert len(allocated) == 2 and node == allocated[1], (node, allocated)
    os.kill(pid, signal.SIGKILL)
    events = await stack.wait_for_event(ddp.job.job_id, EventType.COMPLETED, timeout=150)
    advice = verdict_advice(events)
    assert advice.category != "killed_oom_host", advice.message
    assert advice.category != "python_exception", advice.message  # not the loudest (gloo cascade)
    assert any("task 2: Killed" in line for line in advice.evidence), advice.evidence
    record = ddp.job.show()
    assert record["JobState"] == "COMPLETED" and record["Restarts"] == "1"
    assert record.get("ExcNodeList") in ("(null)", None)
    resumed = re.search(r"^resumed from step (\d+)", ddp.text(), re.M)
    assert resumed and int(resumed.group(1)) >= 10, ddp.text()[-2000:]


async def test_sigstop_of_one_rank_is_a_hang_caught_from_the_jobs_rhythm(stack: Stack) -> None:
    """A stopped rank stops every rank (synchronous training); the hang is detected within
    hang_factor x the job's step interval + the floor (+ polling), then the job is requeued and
    completes. A hang implicates no node."""
    ddp = submit_ddp(stack, mode="action")
    await ddp.wait_step(12)
    pid, _ = ddp.rank(1)
    os.kill(pid, signal.SIGSTOP)
    stopped_at = time.time()
    events = await stack.wait_for_event(ddp.job.job_id, EventType.DETECTION, timeout=60)
    detection = first(events, EventType.DETECTION)
    assert detection.category == "hang", detection.message
    watch = stack.settings.watch
    budget = max(watch.hang_factor * STEP_S * 3, watch.hang_floor_s) + 2 * watch.poll_interval_s + 3.0
    assert detection.ts - stopped_at <= budget, (detection.ts - stopped_at, budget)
    events = await stack.wait_for_event(ddp.job.job_id, EventType.COMPLETED, timeout=150)
    record = ddp.job.show()
    assert record["JobState"] == "COMPLETED" and record["Restarts"] == "1"
    assert record.get("ExcNodeList") in ("(null)", None)


async def test_a_node_dying_mid_step_waits_for_slurm_then_excludes_it(stack: Stack) -> None:
    """slurmd and every step process of the job's second node killed mid-step: the survivors' gloo
    "Connection reset by peer" cascade alone must not decide; TrainGuard waits (bounded) for Slurm to call
    that node dead, then excludes it and the job completes elsewhere from its checkpoint. Which nodes the
    job got depends on what else holds nodes: the victim comes from Slurm's own NodeList."""
    ddp = submit_ddp(stack, mode="action", steps=40)
    await ddp.wait_step(12)
    allocated = expand_hostlist(ddp.job.show()["NodeList"])
    assert len(allocated) == 2, allocated
    victim = allocated[1]
    killed_at = time.time()
    stack.cluster.kill_node(victim)
    try:
        events = await stack.wait_for_event(ddp.job.job_id, EventType.ADVICE, timeout=90)
        advice = verdict_advice(events)
        assert advice.category == "slurm_node_failure", advice.message
        assert victim in advice.nodes
        assert advice.ts - killed_at >= stack.settings.cluster.snapshot_interval_s  # it did wait
        events = await stack.wait_for_event(ddp.job.job_id, EventType.COMPLETED, timeout=180)
        record = ddp.job.show()
        assert record["JobState"] == "COMPLETED"
        assert victim not in expand_hostlist(record["NodeList"])
        resumed = re.search(r"^resumed from step (\d+)", ddp.text(), re.M)
        assert resumed and int(resumed.group(1)) >= 10, ddp.text()[-2000:]
    finally:
        revive(stack, victim)


async def test_the_same_exception_after_requeue_stops_retrying(stack: Stack) -> None:
    """A ValueError in rank 1 only, at the same step on every attempt: the first failure is requeued,
    the same one after resuming from the same checkpoint stops (futile retry). The first real error wins
    over the gloo cascades of the other ranks."""
    ddp = submit_ddp(stack, mode="action", env={"DDP_FAULT": "exception", "DDP_FAULT_AT": "12"})
    events = await stack.wait_for_event(ddp.job.job_id, EventType.STOPPED, timeout=180)
    advice = [e for e in events if e.event_type == EventType.ADVICE]
    assert len(advice) >= 2, [(e.event_type.value, e.message) for e in events]
    assert all(a.category == "python_exception" for a in advice), [a.message for a in advice]
    assert any("ValueError" in line for line in advice[0].evidence), advice[0].evidence
    assert "same failure" in advice[-1].message or "no new checkpoint" in advice[-1].message
    record = ddp.job.show()
    assert record["Restarts"] == "1"
    assert record.get("ExcNodeList") in ("(null)", None)


def revive(stack: Stack, node: str) -> None:
    """A node killed by a test comes back (slurmd restarted, Slurm told to use it again)."""
    stack.cluster.restart_node(node)
    stack.cluster._run(["scontrol", "update", f"NodeName={node}", "State=RESUME"], check=False)


@contextlib.asynccontextmanager
async def dcgm_prometheus(stack: Stack) -> AsyncIterator[tuple[SimExporter, LocalPrometheus]]:
    """The DCGM metrics as in production: a real Prometheus scraping a (simulated) dcgm-exporter."""
    exporter = SimExporter(GpuFleet(["node1", "node2", "node3", "node4"], gpus_per_node=1)).start()
    prom = LocalPrometheus(
        stack.workdir / "prometheus",
        port=PROMETHEUS_PORT,
        scrape_targets=[exporter.target],
        scrape_interval_s=1,
    )
    try:
        prom.start()
        yield exporter, prom
    finally:
        prom.stop()
        exporter.stop()


async def _prometheus_shows_xid(url: str, node: str, timeout: float = 30.0) -> None:
    query = urllib.parse.urlencode({"query": f'DCGM_FI_DEV_XID_ERRORS{{Hostname="{node}"}} > 0'})
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with urllib.request.urlopen(f"{url}/api/v1/query?{query}", timeout=2) as resp:
            if json.load(resp)["data"]["result"]:
                return
        await asyncio.sleep(0.2)
    raise AssertionError(f"Prometheus never showed the Xid of {node}")


async def inject_gpu_fault(exporter: SimExporter, prom: LocalPrometheus, bad: str) -> None:
    """An Xid 79 where it really appears: the DCGM metrics (seen by Prometheus) and the node's kernel log."""
    exporter.fleet.inject(bad, 0, "xid", 79)
    await _prometheus_shows_xid(prom.url, bad)
    kern = NODE_LOGS / bad / "kern.log"
    kern.parent.mkdir(parents=True, exist_ok=True)
    with kern.open("ab") as fh:
        fh.write(
            f"Nov 30 21:40:01 {bad} kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python3, "
            "GPU has fallen off the bus.\n".encode()
        )


@pytest.mark.pytorch_full
async def test_a_gpu_fault_in_the_kernel_log_and_dcgm_excludes_that_node(stack: Stack) -> None:
    """A GPU fault delivered where it really appears: node2's kernel log and the DCGM metrics (a real
    Prometheus scraping the simulated dcgm-exporter), not the job's stdout. The watch follows the kernel
    logs of the job's nodes and reads the metrics once the failure starts; both are attributed to that
    node and this job, the node is excluded and the job resumes elsewhere from its checkpoint."""
    async with dcgm_prometheus(stack) as (exporter, prom):
        ddp = submit_ddp(stack, mode="action", steps=40)
        await ddp.wait_step(12)
        _, bad = ddp.rank(2)  # the job's second node
        await inject_gpu_fault(exporter, prom, bad)
        events = await stack.wait_for_event(ddp.job.job_id, EventType.COMPLETED, timeout=150)
        detection = first(events, EventType.DETECTION)
        assert any("NVRM: Xid" in line for line in detection.evidence), detection.evidence
        assert any("DCGM_FI_DEV_XID_ERRORS" in line for line in detection.evidence), detection.evidence
        advice = verdict_advice(events)
        assert advice.category == "gpu_hardware" and advice.nodes == (bad,), advice.message
        record = ddp.job.show()
        assert record["JobState"] == "COMPLETED" and record["ExcNodeList"] == bad
        assert bad not in expand_hostlist(record["NodeList"])
        assert "Xid" not in ddp.text()  # the job's own output never carried it
        assert re.search(r"^resumed from step (\d+)", ddp.text(), re.M)


@pytest.mark.pytorch_full
async def test_torchrun_sigkill_in_observe_mode_advises_and_never_touches_slurm(stack: Stack) -> None:
    """torchrun per node with a c10d rendezvous; observe mode. torchrun's own "Root Cause ... host:
    localhost" must not become a node, and nothing may change in Slurm."""
    ddp = submit_ddp(stack, mode="observe", launcher="torchrun")
    await ddp.wait_step(12)
    pid, node = ddp.rank(2)
    os.kill(pid, signal.SIGKILL)
    await stack.wait_for_event(ddp.job.job_id, EventType.ADVICE, timeout=60)
    record = await stack.wait_job_state(ddp.job, {"FAILED", "COMPLETED", "CANCELLED"})
    await asyncio.sleep(3)
    record = ddp.job.show()
    assert record["Restarts"] == "0" and record.get("ExcNodeList") in ("(null)", None)
    advice = first(stack.events(ddp.job.job_id), EventType.ADVICE)
    assert advice.mode == "observe"
    assert "localhost" not in advice.nodes
    assert advice.category not in ("killed_oom_host", "python_exception"), advice.message
    assert not [e for e in stack.events(ddp.job.job_id) if e.event_type == EventType.ACTION]
    assert "Root Cause" in ddp.text() and node in ("node1", "node2")


OBSERVE_FAULTS = ("exception", "sigstop", "kill_node", "enospc", "xid_kernel")
TERMINAL = frozenset({"COMPLETED", "FAILED", "CANCELLED", "NODE_FAIL", "TIMEOUT"})


@dataclass(frozen=True)
class Observed:
    """What observe mode must show for one fault: the advice's category and nodes, and where Slurm alone
    leaves the job (`states`, `restarts`). `stopped_pid`: a rank that must still be stopped (the hang);
    `slurm_says`: a line slurmctld's own log must show (who made a change that Slurm's record shows)."""

    category: str
    nodes: tuple[str, ...]
    states: frozenset[str] = TERMINAL
    restarts: str = "0"
    stopped_pid: int | None = None
    slurm_says: str = ""


def submit_observed(fault: str, stack: Stack, exits: contextlib.AsyncExitStack) -> DdpJob:
    env = {"DDP_FAULT": "exception", "DDP_FAULT_AT": "12"} if fault == "exception" else None
    ddp = submit_ddp(
        stack, mode="observe", steps=40, env=env, ckpt_fs_bytes=1 << 20 if fault == "enospc" else None
    )
    if fault == "enospc":
        exits.callback(unmount_ckpt_fs, ddp)  # last: after the job is gone
    exits.callback(stack.cluster._run, ["scancel", ddp.job.job_id], check=False)
    return ddp


async def inject_observed(
    fault: str, stack: Stack, ddp: DdpJob, exits: contextlib.AsyncExitStack
) -> Observed:
    """The same faults from outside as the action-mode tests above, at step 12."""
    if fault == "exception":  # the job's own, at step 12: an application error names no node
        await ddp.wait_step(5)
        return Observed("python_exception", (), states=frozenset({"FAILED"}))
    if fault == "xid_kernel":
        exporter, prom = await exits.enter_async_context(dcgm_prometheus(stack))
    await ddp.wait_step(12)
    second = expand_hostlist(ddp.job.show()["NodeList"])[1]
    if fault == "sigstop":
        pid, _ = ddp.rank(1)
        os.kill(pid, signal.SIGSTOP)
        exits.callback(_signal_quietly, pid, signal.SIGCONT)  # before the scancel: never left stopped
        return Observed("hang", (), states=frozenset({"RUNNING"}), stopped_pid=pid)
    if fault == "kill_node":
        stack.cluster.kill_node(second)
        exits.callback(revive, stack, second)
        # The batch job asked for --requeue: Slurm itself requeues it on the node's failure (Restarts 1;
        # its log says so), and the next attempt runs on the nodes left and resumes from its checkpoint.
        # Nobody excluded the dead node (it is DOWN until revived), and nobody held the requeued job,
        # which action mode does until the exclusion is set.
        return Observed(
            "slurm_node_failure",
            (second,),
            states=frozenset({"COMPLETED"}),
            restarts="1",
            slurm_says=f"requeue job JobId={ddp.job.job_id} due to failure of node {second}",
        )
    if fault == "enospc":
        filler = fill(ddp.job.workdir / "ckpt")
        exits.callback(filler.unlink, missing_ok=True)
        return Observed("storage_io", (), states=frozenset({"FAILED"}))
    await inject_gpu_fault(exporter, prom, second)
    return Observed("gpu_hardware", (second,), states=frozenset({"COMPLETED"}))


def _signal_quietly(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


async def sample_records(ddp: DdpJob, into: list[dict[str, str]]) -> None:
    """Slurm's record of the job every 0.5 s, so a hold that came and went is seen too."""
    while True:
        into.append(await asyncio.to_thread(ddp.job.show))
        await asyncio.sleep(0.5)


def held(record: dict[str, str]) -> bool:
    return record.get("Priority") == "0" or "Held" in record.get("Reason", "")


@pytest.mark.pytorch_full
@pytest.mark.parametrize("fault", OBSERVE_FAULTS)
async def test_observe_mode_advises_and_slurm_sees_no_change(stack: Stack, fault: str) -> None:
    """Observe mode on a real DDP job (srun, 2 nodes x 2 ranks) for each fault from outside: the advice is
    recorded with mode "observe" and the same category and nodes as in action mode, no ACTION event is
    written, and Slurm's record shows nothing TrainGuard did: never held, no ExcNodeList, Restarts as
    Slurm itself leaves them, the job ending (or still running, for the hang) as it would without us."""
    async with contextlib.AsyncExitStack() as exits:
        ddp = submit_observed(fault, stack, exits)
        records: list[dict[str, str]] = []
        sampler = asyncio.create_task(sample_records(ddp, records))
        exits.callback(sampler.cancel)
        expected = await inject_observed(fault, stack, ddp, exits)
        advice = await wait_verdict(stack, ddp)
        assert advice.mode == "observe", advice
        assert advice.category == expected.category, advice.message
        assert advice.nodes == expected.nodes, (advice.nodes, expected.nodes, advice.message)
        await stack.wait_job_state(ddp.job, set(expected.states), timeout=180)
        await asyncio.sleep(3)  # time for a late action to show
        record = ddp.job.show()
        assert not sampler.done(), sampler  # it sampled throughout: "never held" was watched
        sampler.cancel()
        assert record["JobState"] in expected.states, record
        assert record["Restarts"] == expected.restarts, record
        assert record.get("ExcNodeList") in ("(null)", None), record
        assert not [r for r in [*records, record] if held(r)], [r for r in records if held(r)][:1]
        actions = [e for e in stack.events(ddp.job.job_id) if e.event_type == EventType.ACTION]
        assert not actions, [(e.action, e.message) for e in actions]
        if expected.slurm_says:
            ctld_log = (stack.cluster.log_dir / "slurmctld.log").read_text(errors="replace")
            assert expected.slurm_says in ctld_log, expected.slurm_says
        if expected.stopped_pid is not None:  # the hang: left as it was, the rank still stopped
            stat = Path(f"/proc/{expected.stopped_pid}/stat").read_text()
            assert stat.rsplit(")", 1)[1].split()[0] == "T", stat


async def stop_bursts(pid: int, stopped_s: float, running_s: float, until: asyncio.Event) -> None:
    """Slow one process from outside (a noisy neighbour, a throttled CPU): SIGSTOP it for `stopped_s`,
    let it run for `running_s`, until `until` is set or the process is gone. Never leaves it stopped."""
    try:
        while not until.is_set():
            os.kill(pid, signal.SIGSTOP)
            await asyncio.sleep(stopped_s)
            os.kill(pid, signal.SIGCONT)
            await asyncio.sleep(running_s)
    except ProcessLookupError:
        return
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


@pytest.mark.pytorch_full
async def test_a_rank_slowed_from_outside_is_a_straggler_named_by_its_node(stack: Stack) -> None:
    """Each rank prints its own share of the step ([rankN]: ... s/it). Rank 3 (the job's second node, 2
    ranks per node) is slowed from outside with SIGSTOP/SIGCONT bursts, so every synchronous step waits
    for it: the job runs ~3x slower. The straggler names rank 3's node, the cost model sees the job's real
    (slowest-rank) step time, not the fast ranks' median, and the decision is to requeue away from that
    node; the job completes elsewhere from its checkpoint."""
    ddp = submit_ddp(stack, mode="action", steps=90, env={"DDP_RANK_TIMES": "1"})
    await ddp.wait_step(12)
    pid, slow_node = ddp.rank(3)
    assert slow_node == expand_hostlist(ddp.job.show()["NodeList"])[1]
    done = asyncio.Event()
    bursts = asyncio.create_task(stop_bursts(pid, 0.4, 0.2, done))

    def straggler_advice() -> bool:
        events = stack.events(ddp.job.job_id)
        return any(e.event_type == EventType.ADVICE and e.category == "straggler" for e in events)

    try:
        events = await stack.wait_until(straggler_advice, "straggler advice", 120, ddp.job.job_id)
    finally:
        done.set()
        await bursts
    advice = next(e for e in events if e.event_type == EventType.ADVICE and e.category == "straggler")
    assert advice.action == "requeue" and advice.nodes == (slow_node,), advice.message
    assert any("[rank3]" in line or "rank 3" in line for line in advice.evidence), advice.evidence
    slowdown = re.search(r"slowdown (\d+)%", advice.message)
    assert slowdown and int(slowdown.group(1)) >= 40, advice.message  # ~67 %: not the fast ranks' ~0 %
    await stack.wait_for_event(ddp.job.job_id, EventType.COMPLETED, timeout=240)
    record = ddp.job.show()
    assert record["JobState"] == "COMPLETED" and record["ExcNodeList"] == slow_node
    assert slow_node not in expand_hostlist(record["NodeList"])
    assert re.search(r"^resumed from step (\d+)", ddp.text(), re.M)


@pytest.mark.pytorch_full
async def test_the_batch_hosts_death_is_slurms_node_failure_and_excludes_it(stack: Stack) -> None:
    """The node that runs the batch script (and srun) dies mid-step: no launcher line and no error reaches
    the log (srun died with it), the log just stops. Slurm calls the node dead and ends the job with
    NODE_FAIL; that verdict decides (not the stall), the dead node is excluded and the job resumes
    elsewhere from its checkpoint."""
    ddp = submit_ddp(stack, mode="action", steps=40)
    await ddp.wait_step(12)
    record = ddp.job.show()
    victim = record["BatchHost"]
    assert victim in expand_hostlist(record["NodeList"]), record
    stack.cluster.kill_node(victim)
    try:
        advice = await wait_verdict(stack, ddp)
        assert advice.category == "slurm_node_failure", advice.message
        assert victim in advice.nodes, (victim, advice.nodes)
        await stack.wait_for_event(ddp.job.job_id, EventType.COMPLETED, timeout=180)
        record = ddp.job.show()
        assert record["JobState"] == "COMPLETED"
        assert victim not in expand_hostlist(record["NodeList"])
        assert victim in expand_hostlist(record["ExcNodeList"])
        assert re.search(r"^resumed from step (\d+)", ddp.text(), re.M), ddp.text()[-2000:]
    finally:
        revive(stack, victim)


@pytest.mark.pytorch_full
async def test_a_full_checkpoint_filesystem_is_a_storage_fault_not_the_nodes(stack: Stack) -> None:
    """The checkpoint directory is a small filesystem that another writer fills up mid-run: rank 0's next
    torch.save fails with ENOSPC, which PyTorch reports only as `unexpected pos N vs M`. The watch reads
    the checkpoint filesystem's free space: a storage fault of the infrastructure, no node excluded, and
    the advice says so. Once space is freed, the requeued job resumes from its last good checkpoint."""
    ddp = submit_ddp(stack, mode="action", ckpt_fs_bytes=1 << 20)
    try:
        await ddp.wait_step(12)
        filler = fill(ddp.job.workdir / "ckpt")
        advice = await wait_verdict(stack, ddp)
        filler.unlink()  # an operator frees space
        assert (advice.category, advice.attribution) == ("storage_io", "infrastructure"), advice.message
        assert advice.nodes == (), advice.nodes
        assert "filesystem" in advice.message and "not the nodes' hardware" in advice.message, advice.message
        assert any("checkpoint directory's filesystem is full" in line for line in advice.evidence), (
            advice.evidence
        )
        assert "No space left" not in ddp.text()  # torch.save never said it
        await stack.wait_for_event(ddp.job.job_id, EventType.COMPLETED, timeout=180)
        record = ddp.job.show()
        assert record["JobState"] == "COMPLETED" and record["Restarts"] == "1"
        assert record.get("ExcNodeList") in ("(null)", None)
        resumed = re.search(r"^resumed from step (\d+)", ddp.text(), re.M)
        assert resumed and int(resumed.group(1)) >= 10, ddp.text()[-2000:]
    finally:
        unmount_ckpt_fs(ddp)

"""The recovery loop on real PyTorch distributed training (examples/ddp_train.py: gloo on the CPU,
2 nodes x 2 ranks) with faults injected from outside the job, as they happen in life.

Nothing prints lines for TrainGuard here: the output is PyTorch's, gloo's, torchrun's and srun's own.
Needs torch (`pip install -e '.[torch]'`, done by scripts/test.sh); without it these tests fail.
The default selection keeps CI short; `pytest -m pytorch_full tests/e2e/test_pytorch_recovery.py`
runs the rest.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.e2e.stack import NODE_LOGS, PORT_OFFSET, REPO, Stack, SubmittedJob
from trainguard.models import AuditEventIn, EventType
from trainguard.slurm.hostlist import expand_hostlist

SBATCH = REPO / "examples" / "ddp_train.sbatch"
SCRIPT = REPO / "examples" / "ddp_train.py"
STEP_S = 0.2


def _torch_importable() -> None:
    try:
        import torch  # noqa: F401
    except ImportError as err:  # a missing component fails the test, never skips it
        raise AssertionError(
            "torch is not installed: pip install -e '.[torch]' (scripts/bootstrap.sh with "
            "TRAINGUARD_EXTRAS=dev,torch, as scripts/test.sh does)"
        ) from err


def comment(mode: str) -> str:
    return json.dumps({"trainguard": {"environment": "e2e", "mode": mode}})


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
        rx = re.compile(r"^step (\d+)/", re.M)
        while time.monotonic() < deadline:
            steps = [int(s) for s in rx.findall(self.text())]
            if steps and max(steps) >= step:
                return time.time()
            await asyncio.sleep(0.2)
        raise AssertionError(f"job {self.job.job_id} never reached step {step}:\n{self.text()[-3000:]}")


def submit_ddp(
    stack: Stack, *, mode: str, launcher: str = "srun", steps: int = 30, env: dict[str, str] | None = None
) -> DdpJob:
    _torch_importable()
    workdir = stack.workdir / f"ddp-{len(stack.jobs)}-{int(time.time() * 1000)}"
    workdir.mkdir(parents=True)
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
        f"--comment={comment(mode)}",
        str(SBATCH),
    ]
    job_id = stack.cluster.sbatch(argv, env={**os.environ, **defaults, **(env or {})})
    job = SubmittedJob(job_id=job_id, workdir=workdir, cluster=stack.cluster)
    stack.jobs.append(job)
    return DdpJob(job=job, pid_dir=pid_dir)


def verdict_advice(events: list[AuditEventIn]) -> AuditEventIn:
    """The advice that carries the verdict: a containment hold of a job Slurm requeued itself comes first and
    names no evidence (it is recorded before attribution runs)."""
    found = [e for e in events if e.event_type == EventType.ADVICE and e.evidence]
    assert found, [(e.event_type.value, e.message) for e in events]
    return found[0]


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
        stack.cluster.restart_node(victim)
        stack.cluster._run(["scontrol", "update", f"NodeName={victim}", "State=RESUME"], check=False)


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


@pytest.mark.pytorch_full
async def test_an_xid_in_a_nodes_kernel_log_excludes_that_node(stack: Stack) -> None:
    """A GPU fault delivered where it really appears: node2's kernel log, not the job's stdout. The
    watch follows the kernel logs of the job's nodes; the Xid is attributed to node2 and this job,
    node2 is excluded and the job resumes elsewhere from its checkpoint."""
    ddp = submit_ddp(stack, mode="action", steps=40)
    await ddp.wait_step(12)
    _, bad = ddp.rank(2)  # the job's second node
    kern = NODE_LOGS / bad / "kern.log"
    kern.parent.mkdir(parents=True, exist_ok=True)
    with kern.open("ab") as fh:
        fh.write(
            f"Nov 30 21:40:01 {bad} kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python3, "
            "GPU has fallen off the bus.\n".encode()
        )
    events = await stack.wait_for_event(ddp.job.job_id, EventType.COMPLETED, timeout=150)
    advice = verdict_advice(events)
    assert advice.category == "gpu_hardware" and advice.nodes == (bad,), advice.message
    record = ddp.job.show()
    assert record["JobState"] == "COMPLETED" and record["ExcNodeList"] == bad
    assert bad not in record["NodeList"]
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


@pytest.mark.pytorch_full
async def test_a_slow_rank_is_a_straggler_named_by_its_node(stack: Stack) -> None:
    """Each rank prints its own share of the step ([rankN]: ... s/it); rank 3 (node2 with 2 ranks per
    node) becomes 3x slower. The straggler advice names node2; whatever the cost model decides, no
    other node is excluded."""
    ddp = submit_ddp(
        stack,
        mode="action",
        steps=70,
        env={"DDP_RANK_TIMES": "1", "DDP_SLOW_RANK": "3", "DDP_SLOW_FROM": "15", "DDP_SLOW_FACTOR": "3"},
    )

    def straggler_advice() -> bool:
        events = stack.events(ddp.job.job_id)
        return any(e.event_type == EventType.ADVICE and e.category == "straggler" for e in events)

    events = await stack.wait_until(straggler_advice, "straggler advice", 120, ddp.job.job_id)
    advice = next(e for e in events if e.event_type == EventType.ADVICE and e.category == "straggler")
    # a record-and-watch advice names the node in its reason; a requeue-away one also in `nodes`
    assert "straggler on node2" in advice.message or advice.nodes == ("node2",), advice.message
    assert any("[rank3]" in line or "rank 3" in line for line in advice.evidence), advice.evidence
    record = ddp.job.show()
    assert record.get("ExcNodeList") in ("(null)", None, "node2")

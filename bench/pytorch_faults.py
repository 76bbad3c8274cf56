"""Real-PyTorch rows for bench.latency: examples/ddp_train.py (gloo, 2 nodes x 2 ranks) with faults from
outside the job, timed the same way as the simulator's rows.

Fault time, per kind: the os.kill of one rank (pt_sigkill, pt_sigstop), the first traceback line of the
ValueError (pt_exception, first attempt only), the kill of a node's slurmd and steps (pt_node_failure),
the write of an Xid line into the node's kernel log (pt_xid_kernel).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sys
import time
from pathlib import Path

from bench.latency import PT_KINDS, Bench, Result, Tail  # every DDP job takes 2 of the 4 nodes (2 units)
from trainguard.audit.store import AuditStore
from trainguard.localstack.slurm import LocalSlurmCluster

REPO = Path(__file__).resolve().parents[1]
DDP_SBATCH = REPO / "examples" / "ddp_train.sbatch"
DDP_SCRIPT = REPO / "examples" / "ddp_train.py"
PT_PLAN = PT_KINDS * 3
DDP_PROGRESS = re.compile(r"^step (\d+)/")
DDP_ATTEMPT = re.compile(r"^ddp: job \d+ attempt (\d+) on (\S+)")
TRACEBACK = re.compile(r"Traceback \(most recent call last\)")
FAULT_STEP = 12
PORT_OFFSET = int(os.environ.get("TG_TEST_PORT_OFFSET", "0"))


class PyTorchBench(Bench):
    """Bench for the real DDP job: 2 nodes x 2 ranks each (both CPUs of a local node per rank pair)."""

    attempt_rx = DDP_ATTEMPT

    def __init__(
        self,
        cluster: LocalSlurmCluster,
        store: AuditStore,
        workdir: Path,
        *,
        step_s: float,
        nccl_delay_s: float,
        node_logs: Path,
    ) -> None:
        super().__init__(cluster, store, workdir, step_s=step_s, nccl_delay_s=nccl_delay_s)
        self.node_logs = node_logs
        self.pid_dirs: dict[str, Path] = {}

    def submit(self, kind: str) -> tuple[str, int]:
        self.seq += 1
        jobdir = self.workdir / f"{self.seq:02d}-{kind}"
        jobdir.mkdir(parents=True)
        env = {
            **os.environ,
            "DDP_PYTHON": sys.executable,
            "DDP_SCRIPT": str(DDP_SCRIPT),
            "DDP_MASTER_ADDR": "127.0.0.1",
            "DDP_MASTER_PORT": str(10000 + (self.seq * 10 + PORT_OFFSET) % 20000),  # below ephemeral ports
            "DDP_STEPS": str(FAULT_STEP + 20),
            "DDP_STEP_S": str(self.step_s),
            "DDP_CKPT_EVERY": "5",
            "DDP_CKPT_DIR": str(jobdir / "ckpt"),
            "DDP_PID_DIR": str(jobdir / "pids"),
            "DDP_TIMEOUT_S": "60",
            "GLOO_SOCKET_IFNAME": "lo",
            "OMP_NUM_THREADS": "1",
        }
        if kind == "pt_exception":
            env |= {
                "DDP_FAULT": "exception",
                "DDP_FAULT_AT": str(FAULT_STEP),
                "DDP_FAULT_ONCE": str(jobdir / "fired"),
            }
        comment = json.dumps({"trainguard": {"environment": "bench", "mode": "action"}})
        argv = [
            f"--chdir={jobdir}",
            f"--job-name=bench-{kind}",
            "--nodes=2",
            "--ntasks-per-node=2",
            f"--output={jobdir}/ddp-%j.out",
            f"--comment={comment}",
            str(DDP_SBATCH),
        ]
        job_id = self.cluster.sbatch(argv, env=env)
        self.tails[job_id] = Tail(jobdir / f"ddp-{job_id}.out", progress_rx=DDP_PROGRESS)
        self.pid_dirs[job_id] = jobdir / "pids"
        return job_id, FAULT_STEP

    async def _at_step(self, tail: Tail, step: int) -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if any(i >= step for _, i in tail.progress()):
                return
            await asyncio.sleep(0.05)
        raise TimeoutError(f"the job never reached step {step}")

    def _rank(self, job_id: str, rank: int) -> tuple[int, str]:
        pid, node, _ = (self.pid_dirs[job_id] / f"rank{rank}.pid").read_text().split()
        return int(pid), node

    async def _inject(self, r: Result, tail: Tail) -> str | None:
        if r.kind == "pt_node_failure":
            return await self._kill_second_node(r, tail)
        if r.kind == "pt_exception":
            return None
        await self._at_step(tail, FAULT_STEP)
        pid, node = self._rank(r.job_id, 2)
        if r.kind == "pt_xid_kernel":
            kern = self.node_logs / node / "kern.log"
            kern.parent.mkdir(parents=True, exist_ok=True)
            line = f"Nov 30 12:00:00 {node} kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid={pid}, name=python3, "
            r.fault_at = time.time()
            with kern.open("a") as fh:
                fh.write(line + "GPU has fallen off the bus.\n")
            r.note = f"Xid in {node}'s kernel log"
            return None
        r.fault_at = time.time()
        os.kill(pid, signal.SIGKILL if r.kind == "pt_sigkill" else signal.SIGSTOP)
        r.note = f"{'SIGKILL' if r.kind == 'pt_sigkill' else 'SIGSTOP'} rank 2 on {node}"
        return None

    def _fault_time(self, kind: str, tail: Tail, fault_at: int) -> float | None:
        if kind == "pt_exception":
            found = tail.first(TRACEBACK)
            return found[0] if found else None
        return None

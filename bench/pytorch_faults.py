"""Real-PyTorch rows for bench.latency: examples/ddp_train.py (gloo, 2 nodes x 2 ranks) with faults from
outside the job, timed the same way as the simulator's rows.

Fault time, per kind: the os.kill of one rank (pt_sigkill, pt_sigstop), the first traceback line of the
ValueError (pt_exception, first attempt only), the kill of a node's slurmd and steps (pt_node_failure),
the write of an Xid line into the node's kernel log (pt_xid_kernel), the moment another writer has filled
the checkpoint directory's filesystem (pt_enospc: a 1 MiB tmpfs named in the opt-in comment as
`checkpoint_dir`; the space is freed right after detection so the requeued attempt can resume, and the
filesystem is unmounted at the end).

pt_exception also times the failing rank's process exit (its pid polled every 50 ms from the traceback
on): detection can then be read from the crash as a process death as well as from the traceback. That is
a measurement only: a traceback alone is not evidence enough to touch a running job.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import re
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

from bench.latency import PT_KINDS, Bench, Result, Tail  # every DDP job takes 2 of the 4 nodes (2 units)
from trainguard.audit.store import AuditStore
from trainguard.localstack.slurm import LocalSlurmCluster, is_alive
from trainguard.localstack.tmpfs import fill, mount_tmpfs, unmount

REPO = Path(__file__).resolve().parents[1]
DDP_SBATCH = REPO / "examples" / "ddp_train.sbatch"
DDP_SCRIPT = REPO / "examples" / "ddp_train.py"
PT_PLAN = PT_KINDS * 3
DDP_PROGRESS = re.compile(r"^step (\d+)/")
DDP_ATTEMPT = re.compile(r"^ddp: job \d+ attempt (\d+) on (\S+)")
TRACEBACK = re.compile(r"Traceback \(most recent call last\)")
FAULT_STEP = 12
FAULT_RANK = 1  # the rank that raises (examples/ddp_train.py's DDP_FAULT_RANK default)
CKPT_FS_BYTES = 1 << 20  # a few of the tiny model's checkpoints, then full
EXIT_POLL_S = 0.05
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
        self.ckpt_fs: dict[str, Path] = {}  # pt_enospc: the tmpfs mounted for the job
        self.exit_watches: dict[str, asyncio.Task[None]] = {}

    def submit(self, kind: str) -> tuple[str, int]:
        seq = self.next_seq()
        jobdir = self.workdir / f"{seq:02d}-{kind}"
        jobdir.mkdir(parents=True)
        env = {
            **os.environ,
            "DDP_PYTHON": sys.executable,
            "DDP_SCRIPT": str(DDP_SCRIPT),
            "DDP_MASTER_ADDR": "127.0.0.1",
            "DDP_MASTER_PORT": str(10000 + (seq * 10 + PORT_OFFSET) % 20000),  # below ephemeral ports
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
        optin: dict[str, str] = {"environment": "bench", "mode": "action"}
        if kind == "pt_enospc":
            mount_tmpfs(jobdir / "ckpt", CKPT_FS_BYTES)
            optin["checkpoint_dir"] = str(jobdir / "ckpt")
        comment = json.dumps({"trainguard": optin})
        argv = [
            f"--chdir={jobdir}",
            f"--job-name=bench-{kind}",
            "--nodes=2",
            "--ntasks-per-node=2",
            f"--output={jobdir}/ddp-%j.out",
            f"--comment={comment}",
            str(DDP_SBATCH),
        ]
        try:
            job_id = self.cluster.sbatch(argv, env=env)
        except Exception:
            if kind == "pt_enospc":
                unmount(jobdir / "ckpt")
            raise
        if kind == "pt_enospc":
            self.ckpt_fs[job_id] = jobdir / "ckpt"
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

    async def _inject(self, r: Result, tail: Tail) -> Callable[[], object] | None:
        if r.kind == "pt_node_failure":
            victim = await self._kill_second_node(r, tail)
            return functools.partial(self.cluster.restart_node, victim)
        if r.kind == "pt_exception":
            self.exit_watches[r.job_id] = asyncio.create_task(self._watch_rank_exit(r, tail))
            return None
        await self._at_step(tail, FAULT_STEP)
        if r.kind == "pt_enospc":
            filler = await asyncio.to_thread(fill, self.ckpt_fs[r.job_id])
            r.fault_at = time.time()  # full from here on: the next checkpoint write fails
            r.note = "checkpoint filesystem filled from outside"
            return functools.partial(filler.unlink, missing_ok=True)  # an operator frees the space
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

    async def _watch_rank_exit(self, r: Result, tail: Tail) -> None:
        """From the traceback on, poll the failing rank's pid until its process is gone (or a zombie)."""
        deadline = time.monotonic() + 180
        while tail.first(TRACEBACK) is None:
            if time.monotonic() > deadline:
                return
            await asyncio.sleep(EXIT_POLL_S)
        pid, _ = self._rank(r.job_id, FAULT_RANK)  # written at the attempt's start, before the traceback
        while time.monotonic() < deadline:
            if not is_alive(pid):  # a zombie (exited, not yet reaped by slurmstepd) counts as gone
                r.rank_exit_at = time.time()
                return
            await asyncio.sleep(EXIT_POLL_S)

    async def _finish(self, r: Result) -> None:
        watch = self.exit_watches.pop(r.job_id, None)
        if watch is not None:
            watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watch
        ckpt = self.ckpt_fs.pop(r.job_id, None)
        if ckpt is not None:
            await asyncio.to_thread(unmount, ckpt)

    def _fault_time(self, kind: str, tail: Tail, fault_at: int) -> float | None:
        if kind == "pt_exception":
            found = tail.first(TRACEBACK)
            return found[0] if found else None
        return None

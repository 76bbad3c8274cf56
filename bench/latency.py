"""Recovery latency on a real local Slurm cluster: detection, scheduler action, time back to training.

Starts its own 4-node Slurm cluster (under /tmp/tg-bench/, ports 19817/19901-19904 plus --port-offset), a
Temporal dev server on a free port and TrainGuard's worker in this process (action mode, acknowledged),
then submits examples/trainsim.sbatch jobs, each with one injected fault, as many at a time as the 4 nodes
allow.
The benchmark tails every job's output file itself (every 50 ms) to time-stamp the fault line, the
restart and the first progress line after it; TrainGuard's side comes from the audit store.

    .venv/bin/python -m bench.latency            # 20 faults, about 8-12 min
    .venv/bin/python -m bench.latency --quick    # 6 faults (no hang), about 2-3 min

Fault time, per kind: the first line of the fault in the job's log (nccl_timeout: the failing node's
`NET/IB ... port error`; xid: the `NVRM: Xid` line; exception: the traceback), the moment the slurmd
was killed (node_failure), the moment the next progress line was due (hang), and the last
normal-speed progress line (slow).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import re
import shutil
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bench.common import Dist, fmt, free_port, table
from trainguard.audit.store import AuditStore
from trainguard.localstack.slurm import LocalSlurmCluster
from trainguard.localstack.temporal import LocalTemporal
from trainguard.models import AuditEventIn, EventType, Mode
from trainguard.settings import (
    AuditSettings,
    ClusterSettings,
    LogSettings,
    Settings,
    TemporalSettings,
    WatchSettings,
)
from trainguard.slurm.hostlist import expand_hostlist
from workers.worker import Runtime, build_workers, connect, ensure_cluster_watch

REPO = Path(__file__).resolve().parents[1]
SBATCH = REPO / "examples" / "trainsim.sbatch"
TRAINSIM = REPO / "examples" / "trainsim.py"
BASE = Path("/tmp/tg-bench/latency")
NODES = 4
CTLD_PORT, NODE_PORT_BASE = 19817, 19901  # inside the fixed test-port band (tests/unit/test_e2e_ports.py)
LOG_CRASHES = ("nccl_timeout", "xid", "exception")
KINDS = (*LOG_CRASHES, "node_failure", "hang", "slow")
# Real PyTorch (bench/pytorch_faults.py, --pytorch): log-visible crashes of a real job, and the rest.
PT_LOG_CRASHES = ("pt_sigkill", "pt_exception")
PT_KINDS = (*PT_LOG_CRASHES, "pt_sigstop", "pt_node_failure", "pt_xid_kernel", "pt_enospc")
ALL_KINDS = (*KINDS, *PT_KINDS)

# One fault per job; the plan is ordered so that the long hangs start first and overlap the rest.
FULL_PLAN = (
    "hang",
    "hang",
    *(("nccl_timeout", "xid", "exception", "node_failure", "slow") * 3),
    "nccl_timeout",
    "xid",
    "exception",
)
QUICK_PLAN = ("nccl_timeout", "xid", "exception", "node_failure", "slow", "xid")

FAULT_LINE = {
    "nccl_timeout": re.compile(r"NCCL WARN NET/IB .*port error"),
    "xid": re.compile(r"NVRM: Xid"),
    "exception": re.compile(r"Traceback \(most recent call last\)"),
}
PROGRESS = re.compile(r"^\s*iteration\s+(\d+)/")
LAUNCHER_VERDICT = re.compile(r"^srun: error: \S+: tasks? [0-9,-]+: (Killed|Exited with exit code [1-9])")
ATTEMPT = re.compile(r"^trainsim: job \d+ attempt (\d+) on (\S+)")


@dataclass
class Tail:
    """Lines of one job's output file, each stamped with the time the benchmark first saw it."""

    path: Path
    offset: int = 0
    partial: bytes = b""
    lines: list[tuple[float, str]] = field(default_factory=list)
    progress_rx: re.Pattern[str] = PROGRESS

    def poll(self, now: float) -> None:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except OSError:
            return
        if not data:
            return
        self.offset += len(data)
        data = self.partial + data
        *complete, self.partial = data.split(b"\n")
        self.lines.extend((now, raw.decode("utf-8", "replace")) for raw in complete)

    def first(self, rx: re.Pattern[str], after: float = 0.0) -> tuple[float, re.Match[str]] | None:
        for ts, line in self.lines:
            if ts >= after and (m := rx.search(line)):
                return ts, m
        return None

    def progress(self) -> list[tuple[float, int]]:
        return [(ts, int(m.group(1))) for ts, line in self.lines if (m := self.progress_rx.search(line))]


@dataclass
class Result:
    kind: str
    job_id: str
    fault_at: float | None = None
    detected_at: float | None = None
    category: str = ""
    action_latency_s: float | None = None
    first_action_s: float | None = None  # detection -> first scheduler step confirmed (the hold)
    productive_at: float | None = None
    floor_s: float | None = None  # release confirmed by Slurm -> the new attempt's batch script runs
    tg_time_to_productive_s: float | None = None  # TrainGuard's own figure (from its first signal)
    # Where detection time goes: fault -> the launcher's verdict line (srun's `task N: Killed/Exited`) seen
    # in the log, and fault -> TrainGuard's first signal (the watch's first fatal finding).
    launcher_line_s: float | None = None
    first_signal_s: float | None = None
    # pt_exception: when the failing rank's process was gone (polled every 50 ms from its traceback on), so
    # detection can be read from the crash as a process death as well as from the traceback.
    rank_exit_at: float | None = None
    outcome: str = ""
    note: str = ""

    @property
    def detection_s(self) -> float | None:
        if self.fault_at is None or self.detected_at is None:
            return None
        return self.detected_at - self.fault_at

    @property
    def rank_exit_s(self) -> float | None:
        """Fault (the traceback) -> the failing rank's process gone."""
        if self.fault_at is None or self.rank_exit_at is None:
            return None
        return self.rank_exit_at - self.fault_at

    @property
    def detection_after_exit_s(self) -> float | None:
        """The failing rank's process gone -> detection recorded."""
        if self.rank_exit_at is None or self.detected_at is None:
            return None
        return self.detected_at - self.rank_exit_at

    @property
    def productive_s(self) -> float | None:
        if self.fault_at is None or self.productive_at is None:
            return None
        return self.productive_at - self.fault_at


class Bench:
    def __init__(
        self,
        cluster: LocalSlurmCluster,
        store: AuditStore,
        workdir: Path,
        *,
        step_s: float,
        nccl_delay_s: float,
    ) -> None:
        self.cluster = cluster
        self.store = store
        self.workdir = workdir
        self.step_s = step_s
        self.nccl_delay_s = nccl_delay_s
        self.free = NODES
        self.capacity = asyncio.Condition()
        self.tails: dict[str, Tail] = {}
        self.seq = 0
        self._seq_lock = threading.Lock()  # submit() runs in threads, several at once

    async def tail_forever(self) -> None:
        while True:
            now = time.time()
            for tail in list(self.tails.values()):
                tail.poll(now)
            await asyncio.sleep(0.05)

    async def _reserve(self, units: int) -> None:
        async with self.capacity:
            await self.capacity.wait_for(lambda: self.free >= units)
            self.free -= units

    async def _give_back(self, units: int) -> None:
        async with self.capacity:
            self.free += units
            self.capacity.notify_all()

    def events(self, job_id: str) -> list[AuditEventIn]:
        return list(self.store.list_events(job_id=job_id, limit=1000).items)

    async def wait_event(self, job_id: str, pred: object, timeout: float) -> AuditEventIn | None:
        deadline = time.monotonic() + timeout
        check = pred if callable(pred) else (lambda e: e.event_type == pred)
        while time.monotonic() < deadline:
            for event in self.events(job_id):
                if check(event):
                    return event
            await asyncio.sleep(0.25)
        return None

    def next_seq(self) -> int:
        """This job's own number: two submits at once must not share a directory or a port."""
        with self._seq_lock:
            self.seq += 1
            return self.seq

    def submit(self, kind: str) -> tuple[str, int]:
        seq = self.next_seq()
        nodes = 1 if kind == "hang" else 2
        jobdir = self.workdir / f"{seq:02d}-{kind}"
        jobdir.mkdir(parents=True)
        fault_at = {"slow": 22, "hang": 14, "node_failure": 0}.get(kind, 12)
        env = {
            "TRAINSIM_PY": str(TRAINSIM),
            "TRAINSIM_ITERS": str(max(fault_at, 12) + 10),
            "TRAINSIM_STEP_S": str(self.step_s),
            "TRAINSIM_CKPT_EVERY": "5",
            "TRAINSIM_CKPT_DIR": str(jobdir / "ckpt"),
            "TRAINSIM_NCCL_DELAY_S": str(self.nccl_delay_s),
        }
        if kind != "node_failure":
            env |= {
                "TRAINSIM_FAULT": kind,
                "TRAINSIM_FAULT_AT": str(fault_at),
                "TRAINSIM_FAULT_RANK": "0" if kind == "hang" else "1",
                "TRAINSIM_FAULT_ONCE": str(jobdir / "fired"),
            }
        comment = json.dumps({"trainguard": {"environment": "bench", "mode": "action"}})
        argv = [
            f"--chdir={jobdir}",
            f"--job-name=bench-{kind}",
            f"--nodes={nodes}",
            f"--output={jobdir}/trainsim-%j.out",
            f"--comment={comment}",
            str(SBATCH),
        ]
        job_id = self.cluster.sbatch(argv, env=env)
        self.tails[job_id] = Tail(jobdir / f"trainsim-{job_id}.out")
        return job_id, fault_at

    async def run_one(self, kind: str) -> Result:
        units = 1 if kind == "hang" else 3 if kind in ("node_failure", "pt_node_failure") else 2
        await self._reserve(units)
        try:
            job_id, fault_at = await asyncio.to_thread(self.submit, kind)
            result = Result(kind=kind, job_id=job_id)
            try:
                await self._follow(result, fault_at)
            except Exception as err:  # one broken fault must not lose the others' figures
                result.note = f"benchmark error: {err!r}"[:300]
            finally:
                with contextlib.suppress(Exception):
                    await asyncio.to_thread(self.cluster._run, ["scancel", job_id], 10.0, False)
                await self._finish(result)
            return result
        finally:
            await self._give_back(units)

    async def _follow(self, r: Result, fault_at: int) -> None:
        tail = self.tails[r.job_id]
        timeout = 420.0 if r.kind == "hang" else 180.0
        undo = await self._inject(r, tail)
        detection = await self.wait_event(r.job_id, EventType.DETECTION, timeout)
        if undo is not None:
            await asyncio.to_thread(undo)
        if r.fault_at is None:
            r.fault_at = self._fault_time(r.kind, tail, fault_at)
        if detection is None:
            r.outcome = "not detected"
            r.note = r.note or self._trail(r.job_id)
            return
        r.detected_at = detection.ts
        r.category = detection.category
        first_signal = detection.data.get("first_signal_at")
        if r.fault_at is not None and isinstance(first_signal, int | float):
            r.first_signal_s = float(first_signal) - r.fault_at
        launcher = tail.first(LAUNCHER_VERDICT)
        if r.fault_at is not None and launcher is not None:
            r.launcher_line_s = launcher[0] - r.fault_at
        # The workload then either recovers (requeue, resume), or the policy decides to watch / stop.
        end = await self.wait_event(
            r.job_id,
            lambda e: (
                e.event_type in (EventType.TRAINING_RESUMED, EventType.STOPPED, EventType.COMPLETED)
                or (e.event_type == EventType.ADVICE and r.kind == "slow")
            ),
            timeout,
        )
        events = self.events(r.job_id)
        actions = [e for e in events if e.event_type == EventType.ACTION]
        requested = next((e for e in actions if e.action == "recovery_requested"), None)
        if requested is not None and isinstance(requested.data.get("action_latency_s"), int | float):
            r.action_latency_s = float(requested.data["action_latency_s"] or 0.0)
        confirmed = [
            e for e in actions if e.data.get("performed") and isinstance(e.data.get("confirmed_at"), float)
        ]
        if confirmed:
            r.first_action_s = float(confirmed[0].data["confirmed_at"] or 0.0) - detection.ts
        release = next((e for e in actions if e.action == "release" and e.data.get("performed")), None)
        resumed = next((e for e in events if e.event_type == EventType.TRAINING_RESUMED), None)
        if resumed is not None and isinstance(resumed.data.get("time_to_productive_s"), int | float):
            r.tg_time_to_productive_s = float(resumed.data["time_to_productive_s"] or 0.0)
        if release is not None and isinstance(release.data.get("confirmed_at"), float):
            released_at = float(release.data["confirmed_at"] or 0.0)
            attempt = tail.first(self.attempt_rx, after=released_at - 1.0)
            restarted = [a for a in ([attempt] if attempt else []) if int(a[1].group(1)) > 0]
            if restarted:
                r.floor_s = max(0.0, restarted[0][0] - released_at)
                r.productive_at = next((ts for ts, _ in tail.progress() if ts > restarted[0][0]), None)
        advice = next(
            (e for e in reversed(events) if e.event_type == EventType.ADVICE and e.action != "hold"), None
        )
        # the advice's category too: it can differ from the detection's top finding (pt_enospc: the
        # RuntimeError torch.save raised is detected, the full filesystem is the verdict)
        verdict = f" ({advice.action} {advice.category})" if advice else ""
        r.outcome = (end.event_type.value if end else "timeout") + verdict
        if resumed is not None and r.productive_at is None:
            r.note = "resumed, but the benchmark did not see the restart line"

    attempt_rx = ATTEMPT

    async def _inject(self, r: Result, tail: Tail) -> Callable[[], object] | None:
        """Faults from outside the job; returns what to undo once the fault is detected (a killed node is
        restarted, a full filesystem freed) so that the requeued attempt can run."""
        if r.kind == "node_failure":
            victim = await self._kill_second_node(r, tail)
            return functools.partial(self.cluster.restart_node, victim)
        return None

    async def _finish(self, r: Result) -> None:
        """After the job is cancelled: whatever the fault left behind."""

    async def _kill_second_node(self, r: Result, tail: Tail) -> str:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            started = tail.first(self.attempt_rx)
            if started and any(i >= 8 for _, i in tail.progress()):
                nodes = expand_hostlist(started[1].group(2))
                victim = nodes[-1]
                r.fault_at = time.time()
                await asyncio.to_thread(self.cluster.kill_node, victim)
                r.note = f"killed slurmd of {victim}"
                return victim
            await asyncio.sleep(0.1)
        raise TimeoutError("the job never reached iteration 8")

    def _fault_time(self, kind: str, tail: Tail, fault_at: int) -> float | None:
        if kind in FAULT_LINE:
            found = tail.first(FAULT_LINE[kind])
            return found[0] if found else None
        progress = tail.progress()
        if kind == "hang":
            last = [ts for ts, it in progress if it == fault_at - 1]
            return last[0] + self.step_s if last else None
        if kind == "slow":
            last = [ts for ts, it in progress if it == fault_at - 1]
            return last[0] if last else None
        return None

    def _trail(self, job_id: str) -> str:
        return "; ".join(f"{e.event_type.value}:{e.message[:60]}" for e in self.events(job_id))[:400]


def summarise(results: Sequence[Result]) -> str:
    def dist(values: list[float | None]) -> Dist:
        return Dist.of([v for v in values if v is not None])

    rows: list[list[str]] = []
    for kind in ALL_KINDS:
        rs = [r for r in results if r.kind == kind]
        if not rs:
            continue
        det = dist([r.detection_s for r in rs])
        act = dist([r.action_latency_s for r in rs])
        ttp = dist([r.productive_s for r in rs])
        floor = dist([r.floor_s for r in rs])
        rows.append(
            [
                kind,
                f"{det.n}/{len(rs)}",
                *(fmt(x) for x in (det.p50, det.p95, det.max)),
                *(fmt(x) for x in (act.p50, act.p95, act.max)),
                *(fmt(x) for x in (ttp.p50, ttp.p95, ttp.max)),
                *(fmt(x) for x in (floor.p50, floor.p95, floor.max)),
            ]
        )
    headers = [
        "fault",
        "detected",
        "det p50",
        "p95",
        "max",
        "act p50",
        "p95",
        "max",
        "prod p50",
        "p95",
        "max",
        "floor p50",
        "p95",
        "max",
    ]
    return table(headers, rows)


def detail(results: Sequence[Result]) -> str:
    rows = [
        [
            r.kind,
            r.job_id,
            fmt(r.detection_s or float("nan")),
            fmt(r.launcher_line_s if r.launcher_line_s is not None else float("nan")),
            fmt(r.rank_exit_s if r.rank_exit_s is not None else float("nan")),
            fmt(r.detection_after_exit_s if r.detection_after_exit_s is not None else float("nan")),
            fmt(r.first_signal_s if r.first_signal_s is not None else float("nan")),
            r.category,
            fmt(r.first_action_s if r.first_action_s is not None else float("nan")),
            fmt(r.action_latency_s if r.action_latency_s is not None else float("nan")),
            fmt(r.floor_s if r.floor_s is not None else float("nan")),
            fmt(r.productive_s if r.productive_s is not None else float("nan")),
            fmt(r.tg_time_to_productive_s if r.tg_time_to_productive_s is not None else float("nan")),
            r.outcome,
            r.note[:70],
        ]
        for r in results
    ]
    return table(
        [
            "fault",
            "job",
            "detect s",
            "srun s",
            "exit s",
            "exit>det s",
            "1st sig s",
            "category",
            "1st act s",
            "act s",
            "floor s",
            "prod s",
            "tg prod s",
            "outcome",
            "note",
        ],
        rows,
    )


def verdicts(results: Sequence[Result], step_s: float) -> list[str]:
    crash = [r.detection_s for r in results if r.kind in LOG_CRASHES and r.detection_s is not None]
    act = [r.action_latency_s for r in results if r.action_latency_s is not None]
    hang = [r.detection_s for r in results if r.kind in ("hang", "pt_sigstop") and r.detection_s is not None]
    out = []
    d = Dist.of(crash)
    if crash:
        out.append(
            f"log-visible crashes: detection p50 {fmt(d.p50)} s (target <= 2), "
            f"p95 {fmt(d.p95)} s (target <= 5)"
        )
    real = [r.detection_s for r in results if r.kind in PT_LOG_CRASHES and r.detection_s is not None]
    if real:
        d = Dist.of(real)
        out.append(
            f"real PyTorch log-visible crashes: detection p50 {fmt(d.p50)} s (target <= 2), "
            f"p95 {fmt(d.p95)} s (target <= 5)"
        )
    exc = [r for r in results if r.kind == "pt_exception" and r.rank_exit_s is not None]
    if exc:
        tb = Dist.of([r.detection_s for r in exc if r.detection_s is not None])
        ex = Dist.of([r.detection_after_exit_s for r in exc if r.detection_after_exit_s is not None])
        gone = Dist.of([r.rank_exit_s for r in exc if r.rank_exit_s is not None])
        out.append(
            f"real PyTorch exception, measured from the failing rank's process exit: detection p50 "
            f"{fmt(ex.p50)} s, p95 {fmt(ex.p95)} s, max {fmt(ex.max)} s (from its traceback: p50 "
            f"{fmt(tb.p50)}, p95 {fmt(tb.p95)}, max {fmt(tb.max)}; traceback -> exit p50 {fmt(gone.p50)}, "
            f"max {fmt(gone.max)})"
        )
    full = [r.detection_s for r in results if r.kind == "pt_enospc" and r.detection_s is not None]
    if full:
        d = Dist.of(full)
        out.append(
            f"checkpoint filesystem full: detection p50 {fmt(d.p50)} s, p95 {fmt(d.p95)} s, max "
            f"{fmt(d.max)} s from the moment it was full (includes the job's wait for its next checkpoint)"
        )
    a = Dist.of(act)
    out.append(f"action (detection -> release confirmed by Slurm): p50 {fmt(a.p50)} s (target <= 2)")
    if hang:
        out.append(
            f"hang: detection max {fmt(max(hang))} s; the job's progress interval is {step_s:g} s, so the "
            f"2x-interval target is {2 * step_s:g} s plus the detector's floor (hang_floor_s)"
        )
    return out


async def run(args: argparse.Namespace) -> list[Result]:
    base = Path(args.base_dir)
    offset = args.port_offset  # several checkouts or test workers at once, as the e2e tests
    cluster = LocalSlurmCluster(
        base / "slurm",
        cluster="bench",
        nodes=NODES,
        ctld_port=CTLD_PORT + offset,
        node_port_base=NODE_PORT_BASE + offset,
    )
    temporal = LocalTemporal(base / "temporal", port=free_port(), ui_port=None, db_file=None)
    workdir = base / "jobs"
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    audit_url = f"sqlite:///{base / ('audit-' + uuid.uuid4().hex[:8] + '.db')}"
    await asyncio.to_thread(cluster.stop)  # leftovers of an interrupted run
    runtime: Runtime | None = None
    store: AuditStore | None = None
    try:
        await asyncio.to_thread(cluster.start)
        await asyncio.to_thread(temporal.start)
        settings = Settings(
            temporal=TemporalSettings(
                address=temporal.address, control_task_queue="trainguard-control-bench"
            ),
            cluster=ClusterSettings(
                name="bench",
                mode=Mode.ACTION,
                acknowledge_scheduler_actions=True,
                slurm_env=cluster.env,
                snapshot_interval_s=args.snapshot_interval,
            ),
            audit=AuditSettings(url=audit_url),
            watch=WatchSettings(poll_interval_s=args.poll_interval, hang_floor_s=args.hang_floor),
            logs=LogSettings(node_log_path=str(base / "nodelogs" / "{node}" / "kern.log")),
        )
        client = await connect(settings)
        runtime = build_workers(client, settings)
        runtime.start()
        await ensure_cluster_watch(client, settings)
        store = AuditStore.from_url(audit_url)
        bench: Bench
        plan: tuple[str, ...]
        if args.pytorch:
            from bench.pytorch_faults import PT_PLAN, PyTorchBench

            shutil.rmtree(base / "nodelogs", ignore_errors=True)
            bench = PyTorchBench(
                cluster, store, workdir, step_s=args.step_s, nccl_delay_s=0.0, node_logs=base / "nodelogs"
            )
            plan = PT_KINDS if args.quick else PT_PLAN
        else:
            bench = Bench(cluster, store, workdir, step_s=args.step_s, nccl_delay_s=args.nccl_delay)
            plan = QUICK_PLAN if args.quick else FULL_PLAN
        tailer = asyncio.create_task(bench.tail_forever())
        if args.faults:
            plan = tuple(args.faults)
        started = time.monotonic()
        results = list(await asyncio.gather(*(bench.run_one(k) for k in plan)))
        tailer.cancel()
        print(
            f"{len(results)} faults in {time.monotonic() - started:.0f} s "
            f"(poll_interval_s={args.poll_interval}, snapshot_interval_s={args.snapshot_interval}, "
            f"settle_s=1.0, step {args.step_s} s, hang_floor_s={args.hang_floor})\n"
        )
        return results
    finally:
        for job in await asyncio.to_thread(cluster.active_job_ids):
            with contextlib.suppress(Exception):
                await asyncio.to_thread(cluster._run, ["scancel", job], 10.0, False)
        if runtime is not None:
            await runtime.shutdown()
        if store is not None:
            store.close()
        await asyncio.to_thread(temporal.stop)
        await asyncio.to_thread(cluster.stop)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="TrainGuard recovery latency on a real local Slurm cluster")
    p.add_argument("--quick", action="store_true", help="6 faults, no hang (2-3 min)")
    p.add_argument("--faults", nargs="*", choices=ALL_KINDS, help="explicit fault list (overrides --quick)")
    p.add_argument(
        "--pytorch",
        action="store_true",
        help="real PyTorch DDP jobs (examples/ddp_train.py, needs torch) with faults from outside",
    )
    p.add_argument("--hang-floor", type=float, default=WatchSettings().hang_floor_s)
    p.add_argument("--step-s", type=float, default=0.5, help="the simulated job's seconds per iteration")
    p.add_argument("--nccl-delay", type=float, default=2.0, help="seconds before peers' NCCL watchdog fires")
    p.add_argument("--poll-interval", type=float, default=WatchSettings().poll_interval_s)
    p.add_argument("--snapshot-interval", type=float, default=ClusterSettings().snapshot_interval_s)
    p.add_argument("--base-dir", default=str(BASE))
    p.add_argument(
        "--port-offset",
        type=int,
        default=int(os.environ.get("TG_TEST_PORT_OFFSET", "0")),
        help="added to the bench cluster's Slurm ports (default $TG_TEST_PORT_OFFSET or 0)",
    )
    p.add_argument("--json", help="also write every fault's figures to this file")
    return p.parse_args(argv)


async def _main(args: argparse.Namespace) -> list[Result]:
    task = asyncio.current_task()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        if task is not None:
            loop.add_signal_handler(sig, task.cancel)  # stop Slurm and the dev server on Ctrl-C too
    return await run(args)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    results = asyncio.run(_main(args))
    print(summarise(results))
    print("\nseconds; det = fault -> detection recorded; act = detection -> release confirmed by Slurm;")
    print("prod = fault -> first progress line after the restart; floor = release -> new attempt running\n")
    print(detail(results))
    print()
    for line in verdicts(results, args.step_s):
        print(line)
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                [asdict(r) | {"detection_s": r.detection_s, "productive_s": r.productive_s} for r in results],
                indent=1,
            )
        )
    return 0 if all(r.detection_s is not None for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())

"""Soak: N workloads with faults and job churn for hours, on the Temporal dev server, with TrainGuard's real
workers (control + cluster queue, in this process) over the simulated Slurm of bench/simcluster.py.

Jobs come and go as on a busy cluster: each runs for a random lifetime, then completes (or is cancelled),
stays listed by Slurm for `--linger` seconds (MinJobAge) and disappears; some vanish while running (a
purge, a slurmctld restart that lost them). A new opted-in job replaces each one, so N stay running.
Faults (an Xid, then the job's failure) arrive at `--faults-per-hour` per workload and are recovered
(requeue-hold, exclusion, release). Every `--sample-every` seconds the benchmark prints one row: this
process's RSS (workers + simulator; the simulator's own log buffers are shown apart and trimmed), the
running workflows, their history lengths and sizes, continue-as-new so far, faults injected/detected, and
**workflows still running for a job Slurm forgot more than `--grace` seconds ago** (must stay 0). At the
end: RSS growth per hour (least squares over the rows after the first), and the same checks; the exit
status is 1 if any workflow outlived its job.

    .venv/bin/python -m bench.soak                                  # 500 workloads, 2 h
    .venv/bin/python -m bench.soak --workloads 100 --duration 600 --sample-every 60 --lifetime 120 300

Not in CI (hours); a unit test covers its pure logic.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.workflowservice.v1 import DescribeWorkflowExecutionRequest
from temporalio.client import Client

from bench.common import Dist, cancel_on_signals, current_rss_mib, fmt, free_port, table
from bench.scale import CLUSTER, MeteredTemporal, detection_latencies, server_requests, stop_bench
from bench.simcluster import SimFiles, SimJob, SimSlurm, SimWorkloads, opt_in_comment
from trainguard.audit.store import AuditStore
from trainguard.models import Mode
from trainguard.settings import AuditSettings, ClusterSettings, Settings, TemporalSettings, WatchSettings
from workers.worker import Runtime, build_workers, connect, ensure_cluster_watch

BASE = Path("/tmp/tg-bench/soak")
PREFIX = f"trainguard-job-{CLUSTER}-"
KEEP_LOG_BYTES = 64 * 1024  # per job, in the simulator's memory


def job_of(workflow_id: str, prefix: str = PREFIX) -> str | None:
    """The Slurm job id in a JobRecovery workflow id (`trainguard-job-<cluster>-<job id>-<submit time>`)."""
    if not workflow_id.startswith(prefix):
        return None
    job, _, submit = workflow_id[len(prefix) :].rpartition("-")
    return job if job and submit.isdigit() else None


def orphans(running: Iterable[str], gone: dict[str, float], now: float, grace_s: float) -> list[str]:
    """Running workflows whose job left Slurm more than grace_s ago: a workflow left behind."""
    left = []
    for wid in running:
        job = job_of(wid)
        if job is not None and job in gone and now - gone[job] > grace_s:
            left.append(wid)
    return sorted(left)


def growth_per_hour(samples: Sequence[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, value) samples, per hour; NaN with fewer than two samples."""
    if len(samples) < 2:
        return float("nan")
    n = len(samples)
    mx = sum(t for t, _ in samples) / n
    my = sum(v for _, v in samples) / n
    var = sum((t - mx) ** 2 for t, _ in samples)
    if var == 0:
        return float("nan")
    return sum((t - mx) * (v - my) for t, v in samples) / var * 3600.0


@dataclass
class Churn:
    """Jobs end after their lifetime, linger while Slurm lists them, then leave; new jobs replace them."""

    sim: SimSlurm
    rng: random.Random
    lifetime: tuple[float, float]
    linger_s: float
    vanish_share: float = 0.1  # removed while running, never listed as finished
    cancel_share: float = 0.1
    interval: tuple[float, float] = (5.0, 30.0)
    next_id: int = 200000
    ends: dict[str, float] = field(default_factory=dict)  # job id -> when it ends
    finished: dict[str, float] = field(default_factory=dict)  # job id -> when it finished (still listed)
    gone: dict[str, float] = field(default_factory=dict)  # job id -> when Slurm forgot it
    counts: Counter[str] = field(default_factory=Counter)

    def submit(self, now: float) -> SimJob:
        job_id = str(self.next_id)
        self.next_id += 1
        names = [n.name for n in self.sim.nodes]
        job = self.sim.add_job(
            job_id,
            comment=opt_in_comment("action"),
            interval_s=self.rng.uniform(*self.interval),
            nodes=tuple(self.rng.sample(names, 2)),
        )
        self.ends[job_id] = now + self.rng.uniform(*self.lifetime)
        self.counts["submitted"] += 1
        return job

    def _forget(self, job_id: str, now: float) -> None:
        job = self.sim.jobs.pop(job_id, None)
        if job is not None:
            self.sim.files.remove(job.snap.stdout_path)
        if self.sim.renderer is not None:
            self.sim.renderer.forget(job_id)  # the simulator's own caches must not grow with churn
        self.gone[job_id] = now

    def tick(self, now: float) -> None:
        for job_id, end in list(self.ends.items()):
            if now < end:
                continue
            job = self.sim.jobs.get(job_id)
            if job is None:
                del self.ends[job_id]
                continue
            if job.snap.state != "RUNNING" or job.faulted_at is not None:
                self.ends[job_id] = now + 30.0  # mid-recovery: end it later, as a healthy run
                continue
            del self.ends[job_id]
            roll = self.rng.random()
            if roll < self.vanish_share:
                self._forget(job_id, now)
                self.counts["vanished"] += 1
            else:
                state = "CANCELLED" if roll < self.vanish_share + self.cancel_share else "COMPLETED"
                self.sim._set(job, state=state)
                self.finished[job_id] = now
                self.counts[state.lower()] += 1
            self.submit(now)
        for job_id, at in list(self.finished.items()):
            if now - at >= self.linger_s:
                del self.finished[job_id]
                self._forget(job_id, now)
        for job in self.sim.jobs.values():
            self.sim.files.trim(job.snap.stdout_path, KEEP_LOG_BYTES)

    async def run(self, every_s: float = 1.0) -> None:
        while True:
            self.tick(self.sim.clock())
            await asyncio.sleep(every_s)


@dataclass
class Row:
    elapsed_s: float
    rss_mib: float
    server_rss_mib: float
    sim_mib: float
    running: int
    history_len: Dist
    history_kib: Dist
    cluster_watch_len: int
    continued: int
    faults: int
    detected: int
    ended: int
    orphans: int

    def cells(self) -> list[str]:
        return [
            f"{self.elapsed_s / 60:.0f}",
            f"{self.rss_mib:.0f}",
            f"{self.sim_mib:.1f}",
            f"{self.server_rss_mib:.0f}",
            str(self.running),
            f"{fmt(self.history_len.p50, 0)} / {fmt(self.history_len.max, 0)}",
            f"{fmt(self.history_kib.p50)} / {fmt(self.history_kib.max)}",
            str(self.cluster_watch_len),
            str(self.continued),
            f"{self.faults} / {self.detected}",
            str(self.ended),
            str(self.orphans),
        ]


HEADER = [
    "min",
    "RSS MiB",
    "sim MiB",
    "server MiB",
    "running",
    "hist events p50/max",
    "hist KiB p50/max",
    "ClusterWatch events",
    "CAN",
    "faults / detected",
    "jobs gone",
    "left running",
]


async def histories(client: Client, ids: Sequence[str]) -> tuple[list[int], list[float]]:
    """History length and size (KiB) of each workflow, as DescribeWorkflowExecution reports them (reads)."""
    lengths: list[int] = []
    sizes: list[float] = []
    gate = asyncio.Semaphore(16)

    async def one(wid: str) -> None:
        async with gate:
            try:
                desc = await client.workflow_service.describe_workflow_execution(
                    DescribeWorkflowExecutionRequest(
                        namespace=client.namespace, execution=WorkflowExecution(workflow_id=wid)
                    )
                )
            except Exception:  # ended between the listing and the describe
                return
            info = desc.workflow_execution_info
            lengths.append(info.history_length)
            sizes.append(info.history_size_bytes / 1024.0)

    await asyncio.gather(*(one(w) for w in ids))
    return lengths, sizes


async def running_ids(client: Client) -> list[str]:
    query = (
        f"WorkflowType = 'JobRecovery' AND ExecutionStatus = 'Running' AND WorkflowId STARTS_WITH '{PREFIX}'"
    )
    return [wf.id async for wf in client.list_workflows(query)]


async def sample(
    client: Client,
    churn: Churn,
    workloads: SimWorkloads,
    store: AuditStore,
    started: float,
    grace_s: float,
    server_pid: int | None,
) -> Row:
    ids = await running_ids(client)
    lengths, sizes = await histories(client, ids)
    cw, _ = await histories(client, [f"trainguard-cluster-{CLUSTER}"])
    continued = (await client.count_workflows("ExecutionStatus = 'ContinuedAsNew'")).count
    faults = {f.job_id: f.at for f in workloads.faults}
    found, _ = await asyncio.to_thread(detection_latencies, store, faults)
    now = time.time()
    return Row(
        elapsed_s=now - started,
        rss_mib=current_rss_mib(os.getpid()) or 0.0,
        server_rss_mib=current_rss_mib(server_pid) or 0.0 if server_pid else 0.0,
        sim_mib=churn.sim.files.held_bytes / 2**20,
        running=len(ids),
        history_len=Dist.of([float(v) for v in lengths]),
        history_kib=Dist.of(sizes),
        cluster_watch_len=cw[0] if cw else 0,
        continued=continued,
        faults=len(faults),
        detected=len(found),
        ended=len(churn.gone),
        orphans=len(orphans(ids, churn.gone, now, grace_s)),
    )


def soak_settings(args: argparse.Namespace, address: str, audit_url: str) -> Settings:
    return Settings(
        temporal=TemporalSettings(address=address, control_task_queue="trainguard-control-soak"),
        cluster=ClusterSettings(name=CLUSTER, mode=Mode.ACTION, acknowledge_scheduler_actions=True),
        audit=AuditSettings(url=audit_url),
        watch=WatchSettings(max_watches=max(5000, 2 * args.workloads)),
    )


@dataclass
class Summary:
    rows: list[Row]
    churn: Counter[str]
    orphans: list[str]
    latencies: list[float]
    undetected: int
    heartbeats_per_workload_hour: float

    def render(self) -> str:
        rows = self.rows
        steady = [(r.elapsed_s, r.rss_mib) for r in rows[1:]]  # the first row still holds start-up
        d = Dist.of(self.latencies)
        last = rows[-1] if rows else None
        lines = [
            [
                "server RSS growth per hour",
                f"{fmt(growth_per_hour([(r.elapsed_s, r.server_rss_mib) for r in rows[1:]]))} MiB/h",
            ],
            ["RSS first / last row", f"{rows[0].rss_mib:.0f} / {rows[-1].rss_mib:.0f} MiB" if rows else "-"],
            ["RSS growth per hour (least squares, rows 2..)", f"{fmt(growth_per_hour(steady))} MiB/h"],
            [
                "  of which the simulator's log buffers",
                f"{fmt(growth_per_hour([(r.elapsed_s, r.sim_mib) for r in rows[1:]]))} MiB/h",
            ],
            [
                "history events p50 / max (last row)",
                f"{fmt(last.history_len.p50, 0)} / {fmt(last.history_len.max, 0)}" if last else "-",
            ],
            [
                "history size p50 / max (last row)",
                f"{fmt(last.history_kib.p50)} / {fmt(last.history_kib.max)} KiB" if last else "-",
            ],
            ["ClusterWatch history events (last row)", str(last.cluster_watch_len) if last else "-"],
            [
                "jobs submitted / completed / cancelled / vanished",
                "{submitted} / {completed} / {cancelled} / {vanished}".format_map(
                    {k: self.churn.get(k, 0) for k in ("submitted", "completed", "cancelled", "vanished")}
                ),
            ],
            ["faults injected / undetected", f"{len(self.latencies) + self.undetected} / {self.undetected}"],
            ["detection p50 / p95 / max", f"{fmt(d.p50)} / {fmt(d.p95)} / {fmt(d.max)} s"],
            ["heartbeats / workload-hour", fmt(self.heartbeats_per_workload_hour)],
            ["workflows left running for a gone job", str(len(self.orphans))],
        ]
        return table(HEADER, [r.cells() for r in rows]) + "\n\n" + table(["soak", "value"], lines)


async def run(args: argparse.Namespace) -> Summary:
    base = Path(args.base_dir)
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    server = MeteredTemporal(base / "temporal", port=free_port(), metrics_port=free_port(), db_file=None)
    runtime: Runtime | None = None
    tasks: list[asyncio.Task[None]] = []
    store: AuditStore | None = None
    rng = random.Random(args.seed)
    try:
        await asyncio.to_thread(server.start)
        audit_url = f"sqlite:///{base / ('audit-' + uuid.uuid4().hex[:8] + '.db')}"
        settings = soak_settings(args, server.address, audit_url)
        sim = SimSlurm(CLUSTER, SimFiles(), restart_delay_s=6.0)
        churn = Churn(sim, rng, lifetime=tuple(args.lifetime), linger_s=args.linger)
        now = time.time()
        for _ in range(args.workloads):
            churn.submit(now)
        workloads = SimWorkloads(sim, faults_per_hour=args.faults_per_hour)
        tasks += [asyncio.create_task(workloads.run()), asyncio.create_task(churn.run())]
        client = await connect(settings)
        runtime = build_workers(client, settings, slurm=sim)
        runtime.start()
        await ensure_cluster_watch(client, settings)
        store = AuditStore.from_url(audit_url)
        started = time.time()
        workloads.faulting = True
        rows: list[Row] = []
        before = await server_requests(server.metrics_port)
        deadline = started + args.duration
        while True:
            await asyncio.sleep(max(0.0, min(args.sample_every, deadline - time.time())))
            row = await sample(client, churn, workloads, store, started, args.grace, server.pid())
            rows.append(row)
            print("  ".join(f"{h}={v}" for h, v in zip(HEADER, row.cells(), strict=True)), flush=True)
            if time.time() >= deadline:
                break
        after = await server_requests(server.metrics_port)
        workloads.faulting = False
        # The last jobs to leave get their grace before the final check.
        await asyncio.sleep(args.grace)
        ids = await running_ids(client)
        left = orphans(ids, churn.gone, time.time(), args.grace)
        faults = {f.job_id: f.at for f in workloads.faults}
        latencies, undetected = await asyncio.to_thread(detection_latencies, store, faults)
        hours = (time.time() - started - args.grace) / 3600.0
        beats = after["RecordActivityTaskHeartbeat"] - before["RecordActivityTaskHeartbeat"]
        return Summary(
            rows=rows,
            churn=churn.counts,
            orphans=left,
            latencies=latencies,
            undetected=undetected,
            heartbeats_per_workload_hour=beats / args.workloads / hours if hours > 0 else float("nan"),
        )
    finally:
        await stop_bench(runtime, tasks, store, server)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="TrainGuard soak: N workloads with faults and job churn for hours"
    )
    p.add_argument("--workloads", type=int, default=500)
    p.add_argument("--duration", type=float, default=7200.0, help="seconds (default 2 h)")
    p.add_argument("--faults-per-hour", type=float, default=0.5, help="per workload")
    p.add_argument(
        "--lifetime",
        type=float,
        nargs=2,
        default=(1200.0, 3600.0),
        metavar=("MIN", "MAX"),
        help="seconds a job runs before it completes, is cancelled or vanishes",
    )
    p.add_argument(
        "--linger", type=float, default=300.0, help="seconds Slurm lists a finished job (MinJobAge)"
    )
    p.add_argument("--grace", type=float, default=120.0, help="seconds a workflow may outlive its job")
    p.add_argument("--sample-every", type=float, default=600.0)
    p.add_argument("--base-dir", default=str(BASE))
    p.add_argument("--seed", type=int, default=1)
    return p.parse_args(argv)


async def _main(args: argparse.Namespace) -> Summary:
    cancel_on_signals()
    return await run(args)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    summary = asyncio.run(_main(args))
    print(summary.render())
    for wid in summary.orphans[:20]:
        print(f"left running for a gone job: {wid}")
    return 1 if summary.orphans else 0


if __name__ == "__main__":
    sys.exit(main())

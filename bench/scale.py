"""Scale: N workloads monitored at once by TrainGuard's workers against the Temporal dev server.

Real Temporal (dev server, in memory or on a SQLite file) and TrainGuard's real workers (workflows,
activities, audit store), with a simulated Slurm (bench/simcluster.py: the SlurmClient interface, job
output files in memory read by the real FileLogSource). The worker discovers the N opted-in jobs itself
(ClusterWatch), then the benchmark injects faults at `--faults-per-hour` per workload for `--duration`
seconds and reports detection latency, the worker's CPU and peak memory, and Temporal's cost per healthy
workload-hour: history events (from sampled histories) and billable actions (activities, timers,
signals, search-attribute upserts from histories; heartbeats from the dev server's metrics).

The cluster queue runs in two processes (`--cluster-workers 2`, the default): this one and a replica over
the same simulated jobs. After the healthy window comes a fault window with both processes alive
(`--shared-faults` seconds; each faults the jobs it watches, bench/shared_faults.py), then the replica is
SIGKILLed and the benchmark times how soon the watches it held run again on the survivor (worker presence,
workers/presence.py), then the `--duration` fault window on the survivor alone. Snapshots
are rendered as Slurm 22.05's `squeue --json` and read by the real parser (bench/simcluster.py).

    .venv/bin/python -m bench.scale                          # 2000 workloads, in-memory, ~8 min
    .venv/bin/python -m bench.scale --db-file                # the same on a SQLite file
    .venv/bin/python -m bench.scale --workloads 200 --duration 60
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType as HistoryEvent
from temporalio.api.enums.v1 import PendingActivityState
from temporalio.api.workflowservice.v1 import DescribeWorkflowExecutionRequest
from temporalio.client import Client
from temporalio.service import RPCError

from bench.common import (
    Dist,
    cancel_on_signals,
    cpu_seconds,
    fmt,
    free_port,
    peak_rss_mib,
    proc_cpu_seconds,
    proc_rss_mib,
    table,
)
from bench.shared_faults import SharedFaultFiles, follow_window, watched_here
from bench.simcluster import SimFiles, SimSlurm, SimWorkloads, opt_in_comment
from trainguard.audit.store import AuditStore
from trainguard.contracts import WATCH_JOB, RecoveryConfig
from trainguard.localstack.temporal import LocalTemporal
from trainguard.models import EventType, Mode, workflow_id_for
from trainguard.settings import AuditSettings, ClusterSettings, Settings, TemporalSettings, WatchSettings
from workers.presence import TakeoverStats
from workers.worker import Runtime, build_workers, connect, ensure_cluster_watch

BASE = Path("/tmp/tg-bench/scale")
# Frontend requests of worker presence (workers/presence.py): reads and polls, not billed actions.
PRESENCE_OPS = ("DescribeTaskQueue", "PollActivityTaskQueue")
CLUSTER = "sim"
# What Temporal Cloud bills as an action, as far as a workflow history shows it. Heartbeats are billed
# too but leave no history event; they come from the server's request counter.
BILLED = {
    HistoryEvent.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED: "start",
    HistoryEvent.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED: "activity",
    HistoryEvent.EVENT_TYPE_TIMER_STARTED: "timer",
    HistoryEvent.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED: "signal",
    HistoryEvent.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED: "signal",
    HistoryEvent.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES: "upsert",
    HistoryEvent.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED: "child",
    HistoryEvent.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED: "update",
}


class MeteredTemporal(LocalTemporal):
    """The dev server with its Prometheus endpoint on, to count heartbeat requests."""

    def __init__(
        self, base_dir: Path, *, port: int, metrics_port: int, db_file: Path | None, history_cache: int = 0
    ) -> None:
        # The dev server runs one history shard, whose mutable-state cache holds 512 workflows by default;
        # a production server has hundreds of shards, each with its own 512. Sized here so that cache
        # misses are not what a large run measures (at 10,000 most of the dev server's state reads were
        # not misses but its single SQLite connection's queue: bench/README.md).
        dynamic = {"history.cacheMaxSize": str(history_cache)} if history_cache else None
        super().__init__(base_dir, port=port, ui_port=None, db_file=db_file, dynamic_config=dynamic)
        self.metrics_port = metrics_port

    def argv(self) -> list[str]:
        return [*super().argv(), "--metrics-port", str(self.metrics_port)]


async def server_requests(port: int) -> Counter[str]:
    """Frontend requests by operation, from the dev server's /metrics."""
    async with httpx.AsyncClient(timeout=10) as http:
        text = (await http.get(f"http://127.0.0.1:{port}/metrics")).text
    counts: Counter[str] = Counter()
    for line in text.splitlines():
        # Each request is counted once per service that handles it (frontend, then history/matching):
        # the billed request is the frontend's.
        if not line.startswith("service_requests{") or 'service_name="frontend"' not in line:
            continue
        labels, _, value = line.rpartition(" ")
        op = labels.partition('operation="')[2].partition('"')[0]
        with contextlib.suppress(ValueError):
            counts[op] += int(float(value))
    return counts


@dataclass
class Snapshot:
    at: float
    cpu_s: float
    server_cpu_s: float
    requests: Counter[str] = field(default_factory=Counter)


def cpu_now(server_pid: int | None) -> tuple[float, float]:
    """CPU seconds so far of this process and of the dev server (0 when its pid is unknown)."""
    return cpu_seconds(), (proc_cpu_seconds(server_pid) or 0.0) if server_pid else 0.0


async def take(server: MeteredTemporal) -> Snapshot:
    return Snapshot(time.time(), *cpu_now(server.pid()), await server_requests(server.metrics_port))


async def wait_started(client: Client, n: int, timeout: float) -> float:
    """Seconds until N JobRecovery workflows run (counted by the server's visibility store)."""
    started = time.monotonic()
    deadline = started + timeout
    query = "WorkflowType = 'JobRecovery' AND ExecutionStatus = 'Running'"
    while time.monotonic() < deadline:
        count = (await client.count_workflows(query)).count
        if count >= n:
            return time.monotonic() - started
        await asyncio.sleep(2.0)
    raise TimeoutError(f"only {count} of {n} workflows started within {timeout:.0f} s")


async def wait_watched(
    runtime: Runtime, replica_file: Path | None, n: int, timeout: float, since: float
) -> tuple[float, int]:
    """Seconds (from `since`) until N watches run across the two cluster workers, and how many ran then.

    A workflow that runs is not yet a watched workload: its first workflow task, audit flush and first
    watch come after. The survivor's own set and the count the replica writes every 2 s are summed."""
    cluster = runtime.cluster
    assert cluster is not None
    deadline = time.monotonic() + timeout
    last_print = 0.0
    watched = 0
    while True:
        theirs = 0
        if replica_file is not None:
            with contextlib.suppress(OSError, ValueError):
                theirs = int(replica_file.read_text() or 0)
        watched = len(cluster.watched) + theirs
        now = time.monotonic()
        if watched >= n or now >= deadline:
            return now - since, watched
        if now - last_print >= 30:
            print(f"  {watched} of {n} watches running after {now - since:.0f} s", flush=True)
            last_print = now
        await asyncio.sleep(1.0)


async def report_watched(runtime: Runtime, path: Path) -> None:
    """The replica's side of wait_watched: how many watches run in this process, every 2 s."""
    cluster = runtime.cluster
    assert cluster is not None
    while True:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(str(len(cluster.watched)))
        tmp.replace(path)
        await asyncio.sleep(2.0)


async def history_costs(
    client: Client, workflow_ids: Sequence[str], since: float, until: float
) -> Counter[str]:
    """History events (by type name) and billed actions ("action:<kind>") inside [since, until)."""
    totals: Counter[str] = Counter()
    for wid in workflow_ids:
        history = await client.get_workflow_handle(wid).fetch_history()
        for event in history.events:
            ts = event.event_time.ToSeconds() + event.event_time.nanos / 1e9
            if not since <= ts < until:
                continue
            totals["events"] += 1
            totals[HistoryEvent.Name(event.event_type)] += 1
            if event.event_type in BILLED:
                totals["action:" + BILLED[event.event_type]] += 1
            if event.event_type == HistoryEvent.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
                totals["continue_as_new"] += 1
    return totals


def detection_latencies(store: AuditStore, faults: dict[str, float]) -> tuple[list[float], int]:
    """Fault line written -> DETECTION recorded, for each injected fault; and how many went undetected."""
    first: dict[str, float] = {}
    cursor: str | None = None
    while True:
        page = store.list_events(event_type=EventType.DETECTION, cluster=CLUSTER, cursor=cursor, limit=500)
        for e in page.items:
            first.setdefault(e.job_id, e.ts)
        cursor = page.next_cursor
        if cursor is None:
            break
    found = [first[j] - at for j, at in faults.items() if j in first]
    return found, len(faults) - len(found)


@dataclass
class Report:
    workloads: int
    db: str
    start_s: float
    watched_s: float
    watched: int
    window_s: float
    fault_window_s: float
    fault_worker_cores: float
    faults: int
    undetected: int
    detection: Dist
    worker_cores: float
    worker_peak_mib: float
    server_cores: float
    server_peak_mib: float
    per_hour: dict[str, float]
    heartbeats_per_hour: float
    history_limit: int
    cluster_workers: int = 1
    shared: SharedWindow | None = None
    loss: Loss | None = None
    presence_requests_per_hour: float = 0.0
    load: float = 0.0
    snapshot_mib: float = 0.0

    def render(self) -> str:
        ph = self.per_hour
        actions = sum(v for k, v in ph.items() if k.startswith("action:")) + self.heartbeats_per_hour
        events = ph.get("events", 0.0)
        can_every_h = self.history_limit / events if events else float("inf")
        rows = [
            ["workloads", str(self.workloads)],
            ["dev server store", self.db],
            [
                "start-up: all workflows running after",
                f"{self.start_s:.0f} s ({self.workloads / self.start_s:.0f}/s)",
            ],
            [
                "start-up: every workload's watch running after",
                f"{self.watched_s:.0f} s"
                if self.watched >= self.workloads
                else f"not reached: {self.watched} of {self.workloads} after {self.watched_s:.0f} s",
            ],
            [
                "healthy window (no faults) / fault window",
                f"{self.window_s:.0f} s / {self.fault_window_s:.0f} s",
            ],
            ["faults injected / undetected", f"{self.faults} / {self.undetected}"],
            [
                "detection p50 / p95 / max",
                f"{fmt(self.detection.p50)} / {fmt(self.detection.p95)} / {fmt(self.detection.max)} s",
            ],
            [
                "worker CPU, cores (incl. simulated Slurm): healthy / faults",
                f"{self.worker_cores:.2f} / {self.fault_worker_cores:.2f}",
            ],
            ["worker peak RSS", f"{self.worker_peak_mib:.0f} MiB"],
            [
                "dev server CPU (cores) / peak RSS",
                f"{self.server_cores:.2f} / {self.server_peak_mib:.0f} MiB",
            ],
            ["history events / healthy workload-hour", fmt(events)],
            ["actions / healthy workload-hour", fmt(actions)],
            ["  of which heartbeats", fmt(self.heartbeats_per_hour)],
            *[
                [f"  of which {k.removeprefix('action:')}", fmt(v)]
                for k, v in sorted(ph.items())
                if k.startswith("action:")
            ],
            [
                "continue-as-new (history limit / events per hour)",
                f"every {can_every_h:.0f} h (limit {self.history_limit})",
            ],
            ["cluster worker processes", str(self.cluster_workers)],
            ["squeue --json per snapshot (22.05 format, parsed)", f"{self.snapshot_mib:.1f} MiB"],
            [
                "survivor process RSS / workload (control + cluster worker, sim)",
                f"{self.worker_peak_mib / self.workloads:.2f} MiB",
            ],
            [
                "polls + task-queue reads / hour, all workers (not billed)",
                fmt(self.presence_requests_per_hour),
            ],
            ["load average (1 min) at the end of the healthy window", f"{self.load:.1f}"],
        ]
        if self.shared is not None:
            rows += self.shared.rows()
        if self.loss is not None:
            rows += self.loss.rows()
        return table(["scale", "value"], rows)


@dataclass
class SharedWindow:
    """Faults while both worker processes live: detection with the watches spread over two workers."""

    window_s: float
    faults: int
    undetected: int
    detection: Dist
    worker_cores: float  # this process's (one of the two)

    def rows(self) -> list[list[str]]:
        d = self.detection
        return [
            [
                "two workers: fault window / faults injected / undetected",
                f"{self.window_s:.0f} s / {self.faults} / {self.undetected}",
            ],
            ["  detection p50 / p95 / max", f"{fmt(d.p50)} / {fmt(d.p95)} / {fmt(d.max)} s"],
            ["  one worker process's CPU (cores)", f"{self.worker_cores:.2f}"],
        ]


def scale_settings(args: argparse.Namespace, address: str, audit_url: str) -> Settings:
    return Settings(
        temporal=TemporalSettings(
            address=address,
            control_task_queue="trainguard-control-sim",
            max_cached_workflows=max(10_000, args.workloads + 1000),
        ),
        cluster=ClusterSettings(
            name=CLUSTER,
            mode=Mode.ACTION,
            acknowledge_scheduler_actions=True,
            snapshot_interval_s=args.snapshot_interval,
        ),
        audit=AuditSettings(url=audit_url),
        watch=WatchSettings(
            poll_interval_s=args.poll_interval,
            slice_s=args.slice,
            heartbeat_timeout_s=args.heartbeat_timeout,
            presence_timeout_s=args.presence_timeout,
            max_watches=max(5000, args.workloads + 100),
        ),
    )


def make_sim(args: argparse.Namespace, submit_time: int) -> tuple[SimSlurm, SimWorkloads]:
    """The simulated cluster; a replica built with the same seed and submit time has the same jobs."""
    rng = random.Random(args.seed)
    sim = SimSlurm(CLUSTER, SimFiles(), restart_delay_s=6.0)
    comment = opt_in_comment("action")
    names = [n.name for n in sim.nodes]
    for i in range(args.workloads):
        sim.add_job(
            str(100000 + i),
            comment=comment,
            interval_s=rng.uniform(*args.interval),
            nodes=tuple(rng.sample(names, 2)),
            submit_time=submit_time,
        )
    return sim, SimWorkloads(sim, faults_per_hour=args.faults_per_hour)


def start_replica(
    args: argparse.Namespace, base: Path, address: str, submit_time: int, audit_url: str
) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "bench.scale", "--replica", "--address", address]
    argv += ["--replica-queues", args.replica_queues, "--audit-url", audit_url]
    argv += ["--watched-file", str(base / "replica-watched")]
    argv += ["--submit-time", str(submit_time), "--workloads", str(args.workloads), "--seed", str(args.seed)]
    argv += ["--interval", *(str(v) for v in args.interval), "--poll-interval", str(args.poll_interval)]
    argv += ["--slice", str(args.slice), "--heartbeat-timeout", str(args.heartbeat_timeout)]
    argv += ["--presence-timeout", str(args.presence_timeout)]
    argv += ["--faults-per-hour", str(args.faults_per_hour), "--shared-faults-dir", str(base)]
    argv += ["--snapshot-interval", str(args.snapshot_interval)]
    log = open(base / "replica.log", "wb")  # noqa: SIM115 (the child keeps it open)
    return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


async def run_replica(args: argparse.Namespace) -> None:
    """The second worker process, over its own replica of the simulated cluster: a cluster worker, and
    (`--replica-queues control,cluster`, the default) a control worker sharing the workflows' tasks,
    writing to the same audit store."""
    queues = tuple(q for q in args.replica_queues.split(",") if q)
    settings = scale_settings(args, args.address, args.audit_url or "sqlite://")
    sim, workloads = make_sim(args, args.submit_time)
    client = await connect(settings)
    runtime = build_workers(client, settings, queues=queues, slurm=sim)
    tasks = [asyncio.create_task(workloads.run())]  # faults only while the survivor opens the window
    if args.shared_faults_dir and runtime.cluster is not None:
        files = SharedFaultFiles.under(Path(args.shared_faults_dir))
        workloads.may_fault = watched_here(CLUSTER, runtime.cluster.watched)
        workloads.on_fault = files.append
        tasks.append(asyncio.create_task(follow_window(files, workloads)))
    if args.watched_file:
        tasks.append(asyncio.create_task(report_watched(runtime, Path(args.watched_file))))
    try:
        await asyncio.gather(*runtime.start())
    finally:
        for task in tasks:
            task.cancel()
        await runtime.shutdown()


async def wait_for_peer(runtime: Runtime, timeout: float) -> None:
    presence = runtime.presence
    assert presence is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if len(await presence.peers()) >= 2:
            return
        await asyncio.sleep(0.5)
    raise TimeoutError("the replica cluster worker never polled its presence queue")


@dataclass
class Loss:
    """The replica worker SIGKILLed: how soon its watches ran again on the survivor."""

    held: int  # watch/discovery activities the survivor took over
    sampled: int  # workloads whose watch was not running in the survivor at the kill
    resumed: list[float]
    detected_s: float  # kill -> the survivor decided the replica was gone
    replica_rss_mib: float
    takeover: TakeoverStats | None = None
    # CPU of the survivor process and of the dev server from the kill until the first takeover ended:
    # tells a takeover bound by this host's 2 cores from one bound by the server's writes
    survivor_cores: float = float("nan")
    server_cores: float = float("nan")
    slowest: list[str] = field(default_factory=list)  # what the server says of the slowest resumptions

    def render(self) -> str:
        return "; ".join(f"{k}: {v}" for k, v in self.rows())

    def rows(self) -> list[list[str]]:
        d = Dist.of(self.resumed)
        per = self.replica_rss_mib / self.held if self.held else float("nan")
        return [
            ["worker loss: workloads not watched by the survivor at the kill", str(self.sampled)],
            ["  activities taken over (started on the lost worker)", str(self.held)],
            ["  gone noticed after (kill -> takeover starts)", f"{self.detected_s:.1f} s"],
            *(
                [
                    [
                        "  takeover: listed / described / taken",
                        f"{t.listed} / {t.described} / {t.taken} ({t.errors} errors)",
                    ],
                    ["  takeover: listing / total", f"{t.listed_s:.1f} / {t.total_s:.1f} s"],
                ]
                if (t := self.takeover) is not None
                else []
            ),
            [
                f"  taken-over watches running on the survivor p50 / p95 / max ({len(self.resumed)} timed)",
                f"{fmt(d.p50)} / {fmt(d.p95)} / {fmt(d.max)} s",
            ],
            ["  lost worker's RSS / per watched workload", f"{self.replica_rss_mib:.0f} MiB / {per:.2f} MiB"],
            [
                "  CPU from the kill to the takeover's end, cores: survivor / dev server",
                f"{self.survivor_cores:.2f} / {self.server_cores:.2f}",
            ],
        ]


class StartLog(dict[str, float]):
    """ClusterActivities.watched that also keeps each workflow's first watch start after it was put in
    place: a taken-over watch that finds a fault at once ends within a second, so sampling `watched`
    alone can miss its start and time the next attempt's, minutes later, as the resumption."""

    def __init__(self, current: dict[str, float]) -> None:
        super().__init__(current)
        self.first: dict[str, float] = {}

    def __setitem__(self, key: str, value: float) -> None:
        self.first.setdefault(key, value)
        super().__setitem__(key, value)


async def lose_worker(
    runtime: Runtime, replica: subprocess.Popen[bytes], sim: SimSlurm, server_pid: int | None
) -> Loss:
    """SIGKILL the replica; time until each watch taken over from it runs again on the survivor.

    The survivor records when each watch starts in it (ClusterActivities.watched) and which activities it
    took over (Presence.takeovers), so every resumption is timed exactly, without describing workflows
    from the process under test."""
    replica_id = f"{replica.pid}@{socket.gethostname()}"
    cluster, presence = runtime.cluster, runtime.presence
    assert cluster is not None and presence is not None
    ids = [workflow_id_for(CLUSTER, j.snap.job_id, j.snap.submit_time) for j in sim.jobs.values()]
    not_here = len([w for w in ids if w not in cluster.watched])  # the replica's, or not started anywhere
    rss = proc_rss_mib(replica.pid) or 0.0
    starts = StartLog(cluster.watched)
    cluster.watched = starts
    killed = time.time()
    cpu0, server0 = cpu_now(server_pid)
    os.killpg(replica.pid, signal.SIGKILL)
    replica.wait()
    deadline = time.monotonic() + 600
    started: dict[str, float] = {}  # workflow id -> first watch start here after the kill
    taken: set[str] = set()
    cpu_span: tuple[float, float] | None = None
    while time.monotonic() < deadline:
        for wid, at in list(starts.first.items()):
            if at > killed:
                started.setdefault(wid, at - killed)
        done = [s for s in presence.stats if replica_id in s.workers]
        if done and cpu_span is None:
            span = max(time.time() - killed, 1e-9)
            cpu1, server1 = cpu_now(server_pid)
            cpu_span = ((cpu1 - cpu0) / span, (server1 - server0) / span if server_pid else float("nan"))
        if done:
            # watches only: the discovery activity taken over with them is not in `watched`
            taken = {
                h.workflow_id
                for h in presence.takeovers
                if h.worker == replica_id and h.activity_type == WATCH_JOB
            }
            if taken <= started.keys():
                break
        await asyncio.sleep(0.2)
    survivor_cores, server_cores = cpu_span or (float("nan"), float("nan"))
    late = sorted(((started.get(w, float("inf")), w) for w in taken), reverse=True)[:3]
    slowest = [await explain_late(runtime, w, at, killed) for at, w in late if at > SLOW_RESUME_S]
    noticed = presence.noticed.get(replica_id)
    stats = [s for s in presence.stats if replica_id in s.workers]
    return Loss(
        held=len(taken),
        sampled=not_here,
        resumed=sorted(started[w] for w in taken if w in started),
        detected_s=(noticed - killed) if noticed else float("nan"),
        replica_rss_mib=rss,
        takeover=stats[0] if stats else None,
        survivor_cores=survivor_cores,
        server_cores=server_cores,
        slowest=slowest,
    )


SLOW_RESUME_S = 120.0


async def explain_late(runtime: Runtime, workflow_id: str, resumed_s: float, killed: float) -> str:
    """What the server says of a watch that ran again late: its pending activities' attempt, state,
    last worker and last start (seconds after the kill), so a late resumption can be told apart."""
    assert runtime.presence is not None
    client = runtime.presence.client
    try:
        desc = await client.workflow_service.describe_workflow_execution(
            DescribeWorkflowExecutionRequest(
                namespace=client.namespace, execution=WorkflowExecution(workflow_id=workflow_id)
            )
        )
    except RPCError as err:
        return f"{workflow_id} resumed after {resumed_s:.1f} s; describe failed: {err}"
    parts = [
        f"{p.activity_type.name} attempt {p.attempt} state {PendingActivityState.Name(p.state)} "
        f"last worker {p.last_worker_identity or '-'} last started "
        f"{p.last_started_time.ToSeconds() - killed:+.1f} s, last heartbeat "
        f"{p.last_heartbeat_time.ToSeconds() - killed:+.1f} s, failure "
        f"{p.last_failure.message[:120]!r}"
        for p in desc.pending_activities
    ]
    return f"{workflow_id} resumed after {resumed_s:.1f} s; pending: " + ("; ".join(parts) or "none")


async def run(args: argparse.Namespace) -> Report:
    base = Path(args.base_dir)
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    db_file = base / "temporal.db" if args.db_file else None
    history_cache = args.history_cache if args.history_cache is not None else max(512, 2 * args.workloads)
    server = MeteredTemporal(
        base / "temporal",
        port=free_port(),
        metrics_port=free_port(),
        db_file=db_file,
        history_cache=history_cache,
    )
    runtime: Runtime | None = None
    replica: subprocess.Popen[bytes] | None = None
    loss: Loss | None = None
    tasks: list[asyncio.Task[None]] = []
    store: AuditStore | None = None
    try:
        await asyncio.to_thread(server.start)
        audit_url = f"sqlite:///{base / ('audit-' + uuid.uuid4().hex[:8] + '.db')}"
        settings = scale_settings(args, server.address, audit_url)
        submit_time = int(time.time()) - 60
        sim, workloads = make_sim(args, submit_time)
        tasks.append(asyncio.create_task(workloads.run()))
        client = await connect(settings)
        runtime = build_workers(client, settings, slurm=sim)
        runtime.start()
        if args.cluster_workers > 1:
            # The second worker process runs over a replica of the simulated cluster (same jobs; no
            # faults while it lives), so it can be SIGKILLed like a lost machine.
            replica = start_replica(args, base, server.address, submit_time, audit_url)
            await wait_for_peer(runtime, timeout=120)  # so the watches spread over both workers
        await ensure_cluster_watch(client, settings)
        began = time.monotonic()
        start_s = await wait_started(client, args.workloads, timeout=args.start_timeout)
        print(f"{args.workloads} workflows running after {start_s:.0f} s", flush=True)
        replica_file = base / "replica-watched" if replica is not None else None
        watched_s, watched = await wait_watched(
            runtime, replica_file, args.workloads, timeout=max(0.0, args.start_timeout - start_s), since=began
        )
        print(f"{watched} of {args.workloads} watches running after {watched_s:.0f} s", flush=True)
        await asyncio.sleep(args.warmup)
        # Healthy window first (no faults): what monitoring alone costs; then the fault window.
        before = await take(server)
        await asyncio.sleep(args.healthy)
        after = await take(server)
        shared_faults: dict[str, float] = {}
        mid = after
        if replica is not None and args.shared_faults > 0:
            shared_faults = await fault_both_workers(args, base, runtime, workloads)
            mid = await take(server)
        if replica is not None:
            loss = await lose_worker(runtime, replica, sim, server.pid())
            print(loss.render(), flush=True)
            for line in loss.slowest:
                print(f"late resumption: {line}", flush=True)
        workloads.faulting = True
        await asyncio.sleep(args.duration)
        workloads.faulting = False
        await asyncio.sleep(args.drain)  # let the last faults' detections land
        end = await take(server)
        store = AuditStore.from_url(audit_url)
        faults = {f.job_id: f.at for f in workloads.faults}
        latencies, undetected = await asyncio.to_thread(detection_latencies, store, faults)
        shared = None
        if mid is not after:
            found, missed = await asyncio.to_thread(detection_latencies, store, shared_faults)
            shared = SharedWindow(
                window_s=mid.at - after.at,
                faults=len(shared_faults),
                undetected=missed,
                detection=Dist.of(found),
                worker_cores=(mid.cpu_s - after.cpu_s) / (mid.at - after.at),
            )
        faulted = faults.keys() | shared_faults.keys()
        healthy = [j.snap for j in sim.jobs.values() if j.snap.job_id not in faulted]
        sample = random.sample(healthy, min(args.sample, len(healthy)))
        ids = [workflow_id_for(CLUSTER, s.job_id, s.submit_time) for s in sample]
        costs = await history_costs(client, ids, before.at, after.at)
        window = after.at - before.at
        fault_window = end.at - mid.at
        hours = window / 3600.0
        heartbeats = (
            after.requests["RecordActivityTaskHeartbeat"] - before.requests["RecordActivityTaskHeartbeat"]
        )
        pid = server.pid()
        return Report(
            workloads=args.workloads,
            db="SQLite file" if db_file else "in memory",
            start_s=start_s,
            watched_s=watched_s,
            watched=watched,
            window_s=window,
            fault_window_s=fault_window,
            faults=len(faults),
            undetected=undetected,
            detection=Dist.of(latencies),
            worker_cores=(after.cpu_s - before.cpu_s) / window,
            worker_peak_mib=peak_rss_mib(),
            server_cores=(after.server_cpu_s - before.server_cpu_s) / window,
            fault_worker_cores=(end.cpu_s - mid.cpu_s) / fault_window,
            server_peak_mib=(proc_rss_mib(pid) or 0.0) if pid else 0.0,
            per_hour={k: v / len(ids) / hours for k, v in costs.items()} if ids else {},
            heartbeats_per_hour=heartbeats / args.workloads / hours,
            history_limit=RecoveryConfig(cluster_queue="-").history_limit,
            cluster_workers=args.cluster_workers,
            shared=shared,
            loss=loss,
            presence_requests_per_hour=sum(after.requests[op] - before.requests[op] for op in PRESENCE_OPS)
            / hours,
            load=os.getloadavg()[0],
            snapshot_mib=sim.snapshot_bytes / 2**20,
        )
    finally:
        if replica is not None and replica.poll() is None:
            replica.kill()
            replica.wait()
        await stop_bench(runtime, tasks, store, server)


async def fault_both_workers(
    args: argparse.Namespace, base: Path, runtime: Runtime, workloads: SimWorkloads
) -> dict[str, float]:
    """The fault window while both worker processes live, then its drain: each process faults the jobs it
    watches (bench/shared_faults.py). Its faults (job id -> when written), the replica's included; later
    windows leave those jobs alone, since the survivor's replica of them may differ from the lost one's."""
    files = SharedFaultFiles.under(base)
    assert runtime.cluster is not None
    workloads.may_fault = watched_here(CLUSTER, runtime.cluster.watched)
    files.open_window()
    workloads.faulting = True
    await asyncio.sleep(args.shared_faults)
    workloads.faulting = False
    files.close_window()
    await asyncio.sleep(args.drain)
    faults = {f.job_id: f.at for f in [*workloads.faults, *files.replica_faults()]}
    workloads.may_fault = lambda j: j.snap.job_id not in faults
    workloads.faults.clear()
    return faults


async def stop_bench(
    runtime: Runtime | None, tasks: list[asyncio.Task[None]], store: AuditStore | None, server: LocalTemporal
) -> None:
    """Workers first (their shutdown hands activities back), then the load the benchmark drives, the audit
    store and the dev server: what a benchmark started, whatever failed part-way."""
    if runtime is not None:
        await runtime.shutdown()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    if store is not None:
        store.close()
    await asyncio.to_thread(server.stop)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    watch = WatchSettings()
    p = argparse.ArgumentParser(description="TrainGuard at scale: N workloads on the Temporal dev server")
    p.add_argument("--workloads", type=int, default=2000)
    p.add_argument("--healthy", type=float, default=300.0, help="seconds of the healthy (fault-free) window")
    p.add_argument("--duration", type=float, default=180.0, help="seconds of the window with faults")
    p.add_argument("--warmup", type=float, default=20.0)
    p.add_argument("--drain", type=float, default=20.0)
    p.add_argument("--db-file", action="store_true", help="dev server on a SQLite file instead of in memory")
    p.add_argument(
        "--history-cache",
        type=int,
        help="the dev server's history.cacheMaxSize (default: twice the workloads; 0 keeps Temporal's 512)",
    )
    p.add_argument("--faults-per-hour", type=float, default=0.5, help="per workload, in the fault window")
    p.add_argument(
        "--interval",
        type=float,
        nargs=2,
        default=(5.0, 30.0),
        metavar=("MIN", "MAX"),
        help="seconds between a job's progress lines (uniform per job)",
    )
    p.add_argument("--poll-interval", type=float, default=watch.poll_interval_s)
    p.add_argument("--slice", type=float, default=watch.slice_s)
    p.add_argument("--heartbeat-timeout", type=float, default=watch.heartbeat_timeout_s)
    p.add_argument("--snapshot-interval", type=float, default=ClusterSettings().snapshot_interval_s)
    p.add_argument("--sample", type=int, default=50, help="healthy workflows whose histories are counted")
    p.add_argument("--start-timeout", type=float, default=600.0)
    p.add_argument("--base-dir", default=str(BASE))
    p.add_argument(
        "--cluster-workers",
        type=int,
        choices=(1, 2),
        default=2,
        help="2: a second cluster worker process, SIGKILLed after the healthy window (worker loss)",
    )
    p.add_argument(
        "--shared-faults",
        type=float,
        default=180.0,
        help="seconds of a fault window while both worker processes live, before the loss (0: none)",
    )
    p.add_argument("--presence-timeout", type=float, default=watch.presence_timeout_s)
    p.add_argument("--seed", type=int, default=1)
    # internal: run as the replica worker process of a benchmark (see start_replica)
    p.add_argument("--replica", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--address", help=argparse.SUPPRESS)
    p.add_argument("--audit-url", help=argparse.SUPPRESS)
    p.add_argument("--watched-file", help=argparse.SUPPRESS)
    p.add_argument("--shared-faults-dir", help=argparse.SUPPRESS)
    p.add_argument(
        "--replica-queues",
        default="control,cluster",
        help="what the second worker process runs (default control,cluster: both share the workflows)",
    )
    p.add_argument("--submit-time", type=int, help=argparse.SUPPRESS)
    return p.parse_args(argv)


async def _main(args: argparse.Namespace) -> Report:
    cancel_on_signals()
    return await run(args)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.replica:
        asyncio.run(run_replica(args))
        return 0
    report = asyncio.run(_main(args))
    print(report.render())
    print(
        "\nper healthy workload-hour: counted in the histories of sampled never-faulted workloads over the"
        "\nhealthy window; heartbeats from the dev server's request counter over all workloads."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

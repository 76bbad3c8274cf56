"""A real stack for the crash-safety and fault tests, with every part killable on its own.

Slurm (4 slurmd, ports 23817/24001+), the Temporal dev server with a database file (so it can be
restarted mid-recovery), and TrainGuard's worker as a *subprocess* (`trainguard worker --config`) that a
test can SIGKILL, or that a failpoint kills, and that a supervisor restarts promptly. A recorder samples
Slurm's own record of every job so a test can prove what Slurm did (and never did) between two instants.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from temporalio.api.enums.v1 import EventType as HistoryEventType
from temporalio.client import Client, WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter

from tests.e2e.stack import PORT_OFFSET, REPO, SBATCH, SUITE_LIMITS, free_port
from trainguard import contracts as c
from trainguard.audit.schemas import AuditEventOut
from trainguard.audit.store import AuditStore
from trainguard.localstack.process import BackgroundProcess
from trainguard.localstack.slurm import LocalSlurmCluster, pid_if_running, terminate
from trainguard.localstack.temporal import LocalTemporal
from trainguard.models import EventType, WorkloadId
from trainguard.settings import Settings, TemporalSettings
from workers.worker import connect

CRASH_DIR = Path(os.environ.get("TRAINGUARD_CRASH_DIR", f"/tmp/tg-crash-{PORT_OFFSET}"))
CTLD_PORT = 19617 + PORT_OFFSET
NODE_PORT_BASE = 19701 + PORT_OFFSET
ENVIRONMENT = "crash"
HISTORIES = REPO / "tests" / "workflows" / "histories"
EXTRA_WORKERS = ("worker2", "worker3")
STEP_LINE = re.compile(r"\b(requeue_hold|exclude|release|cancel) (\S+): performed=(True|False)")


def comment(mode: str, environment: str = ENVIRONMENT) -> str:
    return json.dumps({"trainguard": {"environment": environment, "mode": mode}})


def parse_record(line: str) -> dict[str, str]:
    """One `scontrol show job -o` line as key=value pairs (first occurrence wins)."""
    fields: dict[str, str] = {}
    for token in line.split():
        key, sep, value = token.partition("=")
        if sep and key not in fields:
            fields[key] = value
    return fields


def is_held(record: dict[str, str]) -> bool:
    return "Held" in record.get("Reason", "") or record.get("Priority") == "0"


# --- the worker subprocess --------------------------------------------------------------------


class WorkerProcess:
    """`trainguard --config FILE worker` in its own session; restarted by `supervise` after a crash."""

    def __init__(self, root: Path, config: Path, *, name: str = "worker", args: Iterable[str] = ()) -> None:
        self.root = root
        self.config = config
        self.env: dict[str, str] = {}
        self.proc = BackgroundProcess(
            name,
            root,
            [sys.executable, "-m", "trainguard", "--config", str(config), "worker", *args],
            marker="trainguard",
        )
        self.starts: list[float] = []
        self.deaths: list[float] = []
        self._supervisor: asyncio.Task[None] | None = None
        self.code: Path | None = None  # another source tree (an earlier release); None: this checkout

    def use_code(self, tree: Path | None) -> None:
        """Run the worker from `tree` from its next start on: only that tree on the path (-P leaves the
        working directory out, PYTHONPATH puts the tree before any installed copy of TrainGuard)."""
        self.code = tree
        python = [sys.executable, "-P"] if tree is not None else [sys.executable]
        self.proc.argv = [*python, "-m", "trainguard", "--config", str(self.config), "worker"]

    @property
    def log_file(self) -> Path:
        return self.proc.log_file

    def alive(self) -> bool:
        return self.proc.pid() is not None

    def start(
        self,
        failpoints: Iterable[str] = (),
        failpoint_dir: Path | None = None,
        *,
        supervise: bool = True,
        env: dict[str, str] | None = None,
    ) -> None:
        env = {"PYTHONUNBUFFERED": "1", **(env or {})}
        points = ",".join(failpoints)
        if points:
            env["TRAINGUARD_FAILPOINTS"] = points
            env["TRAINGUARD_FAILPOINT_DIR"] = str(failpoint_dir or self.root / "failpoints")
        self.env = env
        self.proc.env = env
        self._spawn()
        if supervise:
            self._supervisor = asyncio.get_running_loop().create_task(self._supervise())

    @property
    def pid(self) -> int | None:
        return self.proc.pid()

    def _spawn(self) -> None:
        if self.code is not None:
            self.proc.env = {**self.proc.env, "PYTHONPATH": str(self.code)}
        else:
            self.proc.env.pop("PYTHONPATH", None)
        self.proc.start()
        self.starts.append(time.time())

    async def _supervise(self) -> None:
        # A crashed worker is back within ~0.25 s plus its own start-up, as under systemd Restart=always.
        while True:
            await asyncio.sleep(0.25)
            if not self.alive():
                self.deaths.append(time.time())
                self._spawn()

    async def stop(self) -> None:
        if self._supervisor is not None:
            self._supervisor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._supervisor
            self._supervisor = None
        await asyncio.to_thread(self.proc.stop)

    async def restart_with(
        self, overrides: dict[str, dict[str, object]], env: dict[str, str] | None = None
    ) -> None:
        """Stop the worker, merge `overrides` into its settings file (and `env` into its environment, e.g.
        TRAINGUARD_CLUSTER__MODE=observe as the runbook's env file would), start it again."""
        await self.stop()
        doc = yaml.safe_load(self.config.read_text())
        for section, values in overrides.items():
            doc.setdefault(section, {}).update(values)
        self.config.write_text(yaml.safe_dump(doc, sort_keys=False))
        self.env = {**self.env, **(env or {})}
        self.proc.env = self.env
        self._spawn()
        self._supervisor = asyncio.get_running_loop().create_task(self._supervise())

    async def kill(self) -> None:
        """SIGKILL now; the supervisor (if running) starts a new one."""
        await asyncio.to_thread(self.proc.kill)

    def step_lines(self, workload_key: str) -> list[tuple[str, bool]]:
        """(step, performed) for every scheduler step the worker processes logged for this workload."""
        text = self.log_file.read_text(errors="replace") if self.log_file.exists() else ""
        return [
            (m.group(1), m.group(3) == "True") for m in STEP_LINE.finditer(text) if m.group(2) == workload_key
        ]


# --- Slurm's own record, sampled ---------------------------------------------------------------


@dataclass
class Sample:
    t: float
    record: dict[str, str]


@dataclass
class SlurmRecorder:
    """Samples `scontrol show job -o` (all jobs, one command) twice a second."""

    cluster: LocalSlurmCluster
    interval_s: float = 0.5
    samples: dict[str, list[Sample]] = field(default_factory=dict)
    _task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def sample_once(self) -> None:
        proc = subprocess.run(
            ["scontrol", "show", "job", "-o"],
            env={**os.environ, **self.cluster.env},
            capture_output=True,
            text=True,
            errors="replace",
            timeout=10,
            check=False,
        )
        now = time.time()
        for line in proc.stdout.splitlines():
            record = parse_record(line)
            job_id = record.get("JobId")
            if job_id:
                self.samples.setdefault(job_id, []).append(Sample(now, record))

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(self.sample_once)
            await asyncio.sleep(self.interval_s)

    def of(self, job_id: str) -> list[Sample]:
        return self.samples.get(job_id, [])

    def first_change(self, job_id: str) -> float | None:
        """When Slurm first showed TrainGuard's hand on the job: held, requeued or an exclusion."""
        for s in self.of(job_id):
            r = s.record
            if is_held(r) or r.get("Restarts", "0") != "0" or r.get("ExcNodeList", "(null)") != "(null)":
                return s.t
        return None

    def untouched(self, job_id: str) -> bool:
        return self.first_change(job_id) is None


# --- jobs -----------------------------------------------------------------------------------------


@dataclass
class CrashJob:
    job_id: str
    workdir: Path
    mode: str
    submitted_at: float

    @property
    def output(self) -> Path:
        return self.workdir / f"trainsim-{self.job_id}.out"


# --- the stack ------------------------------------------------------------------------------------


@dataclass
class CrashStack:
    root: Path
    cluster: LocalSlurmCluster
    temporal: LocalTemporal
    worker: WorkerProcess
    client: Client
    store: AuditStore
    recorder: SlurmRecorder
    audit_url: str
    jobs: list[CrashJob] = field(default_factory=list)
    extra_workers: list[WorkerProcess] = field(default_factory=list)

    def add_worker(
        self, *, supervise: bool = False, args: Iterable[str] = (), env: dict[str, str] | None = None
    ) -> WorkerProcess:
        """Another worker process on the same settings (both queues), as a second machine would run;
        `args` go to `trainguard worker`, `env` overrides settings (TRAINGUARD_SECTION__KEY)."""
        name = EXTRA_WORKERS[len(self.extra_workers)]
        extra = WorkerProcess(self.root, self.worker.config, name=name, args=args)
        extra.start(supervise=supervise, env=env)
        self.extra_workers.append(extra)
        return extra

    # -- jobs --
    def submit(
        self,
        mode: str,
        *,
        fault: str | None = "xid",
        fault_at: int = 12,
        iters: int = 60,
        name: str = "trainsim",
        comment_text: str | None = None,
        env: dict[str, str] | None = None,
        prelude: Path | None = None,
    ) -> CrashJob:
        workdir = self.root / "jobs" / f"job-{len(self.jobs)}-{uuid.uuid4().hex[:6]}"
        workdir.mkdir(parents=True)
        argv = [
            f"--chdir={workdir}",
            f"--job-name={name}",
            "--nodes=1",
            f"--output={workdir}/trainsim-%j.out",
            f"--comment={comment_text if comment_text is not None else comment(mode)}",
            "--requeue",
            "--open-mode=append",
            str(self._wrap(workdir, prelude) if prelude else SBATCH),
        ]
        job_env = {
            "TRAINSIM_PY": str(REPO / "examples" / "trainsim.py"),
            "TRAINSIM_ITERS": str(iters),
            "TRAINSIM_STEP_S": "0.1",
            "TRAINSIM_CKPT_EVERY": "5",
            "TRAINSIM_CKPT_DIR": str(workdir / "ckpt"),
            "TRAINSIM_NCCL_DELAY_S": "1",
        }
        if fault:
            # the fault fires in the first attempt only, as a bad GPU would before it is excluded
            job_env |= {
                "TRAINSIM_FAULT": fault,
                "TRAINSIM_FAULT_AT": str(fault_at),
                "TRAINSIM_FAULT_ONCE": str(workdir / "fault.fired"),
            }
        job_id = self.cluster.sbatch(argv, env={**job_env, **(env or {})})
        job = CrashJob(job_id=job_id, workdir=workdir, mode=mode, submitted_at=time.time())
        self.jobs.append(job)
        return job

    @staticmethod
    def _wrap(workdir: Path, prelude: Path) -> Path:
        """A batch script that runs `prelude` (e.g. prints hostile log lines), then the simulator."""
        script = workdir / "wrapped.sbatch"
        script.write_text(
            f"#!/bin/bash\npython3 {shlex.quote(str(prelude))}\nexec bash {shlex.quote(str(SBATCH))}\n"
        )
        return script

    def show(self, job_id: str) -> dict[str, str]:
        return parse_record(self.cluster.scontrol_job(job_id))

    # -- audit --
    def events(self, job_id: str) -> list[AuditEventOut]:
        return list(self.store.list_events(job_id=job_id, limit=1000).items)

    def workload_events(self, workload_key: str) -> list[AuditEventOut]:
        return list(self.store.list_events(workload_key=workload_key, limit=1000).items)

    async def wait_for(
        self, check: Callable[[], bool], what: str, timeout: float, job_id: str | None = None
    ) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if await asyncio.to_thread(check):
                return
            await asyncio.sleep(0.5)
        trail = ""
        if job_id is not None:
            trail = json.dumps([(e.event_type.value, e.action, e.message[:80]) for e in self.events(job_id)])
        raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; audit: {trail}")

    async def wait_event(self, job: CrashJob, event: EventType, timeout: float = 120.0) -> None:
        await self.wait_for(
            lambda: event in {e.event_type for e in self.events(job.job_id)},
            f"{event.value} of job {job.job_id}",
            timeout,
            job.job_id,
        )

    async def wait_state(self, job: CrashJob, states: set[str], timeout: float = 120.0) -> dict[str, str]:
        await self.wait_for(
            lambda: self.show(job.job_id).get("JobState") in states,
            f"job {job.job_id} in {states}",
            timeout,
            job.job_id,
        )
        return self.show(job.job_id)

    def workload(self, job: CrashJob) -> WorkloadId:
        discovered = [e for e in self.events(job.job_id) if e.event_type == EventType.WORKLOAD_DISCOVERED]
        if not discovered:
            raise AssertionError(f"job {job.job_id} was never discovered")
        first = discovered[0]
        return WorkloadId(cluster=first.cluster, job_id=first.job_id, submit_time=first.submit_time)

    def handle(self, job: CrashJob) -> WorkflowHandle[object, object]:
        return self.client.get_workflow_handle(self.workload(job).workflow_id)


async def emitted_audit_ids(handle: WorkflowHandle[object, object]) -> list[str]:
    """Every audit event id the workflow asked to store, read back from its own Temporal history.

    RecordEvents inputs carry event ids; RecordAdvice stores `advice:<id>`. A retried activity is one
    scheduled event, so a duplicate here would be the workflow itself emitting an event twice.
    """
    converter = pydantic_data_converter.payload_converter
    ids: list[str] = []
    history = await handle.fetch_history()
    for event in history.events:
        if event.event_type != HistoryEventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            continue
        attrs = event.activity_task_scheduled_event_attributes
        payloads = list(attrs.input.payloads)
        if attrs.activity_type.name == c.RECORD_EVENTS:
            (inp,) = converter.from_payloads(payloads, [c.RecordEventsInput])
            ids += [e.event_id for e in inp.events]
        elif attrs.activity_type.name == c.RECORD_ADVICE:
            (adv,) = converter.from_payloads(payloads, [c.RecordAdviceInput])
            ids.append(f"advice:{adv.advice.advice_id}")
    return ids


async def save_history(handle: WorkflowHandle[object, object], name: str) -> Path | None:
    """Record a real run's history for the replay tests, when TRAINGUARD_RECORD_HISTORIES=1."""
    if os.environ.get("TRAINGUARD_RECORD_HISTORIES") != "1":
        return None
    HISTORIES.mkdir(parents=True, exist_ok=True)
    history = await handle.fetch_history()
    path = HISTORIES / f"{name}.json"
    path.write_text(history.to_json())
    return path


# --- lifecycle ------------------------------------------------------------------------------------


def make_cluster(root: Path, settings: dict[str, str] | None = None) -> LocalSlurmCluster:
    return LocalSlurmCluster(
        root / "slurm",
        cluster="crash",
        nodes=4,
        ctld_port=CTLD_PORT,
        node_port_base=NODE_PORT_BASE,
        settings=settings,
    )


def write_config(
    root: Path,
    *,
    temporal_address: str,
    cluster: LocalSlurmCluster,
    audit_url: str,
    watch: dict[str, object] | None = None,
    watchdog: dict[str, object] | None = None,
    limits: bool = True,
) -> Path:
    """`limits=False` leaves the `limits` section out: a release before it (the upgrade test's) refuses
    settings keys it does not know, and one fault is neither a storm nor over a budget anyway."""
    doc: dict[str, object] = {
        "state_dir": str(root),
        "temporal": {"address": temporal_address, "control_task_queue": "trainguard-control-crash"},
        "cluster": {
            "name": "crash",
            "mode": "action",
            "acknowledge_scheduler_actions": True,
            "slurm_env": cluster.env,
            "snapshot_interval_s": 0.5,
        },
        "audit": {"url": audit_url},
        # A killed worker's watch and discovery activities are retried after 5 s without a heartbeat.
        "watch": {"poll_interval_s": 0.5, "slice_s": 120, "heartbeat_timeout_s": 5, **(watch or {})},
        "watchdog": {"decision_timeout_s": 60, **(watchdog or {})},
    }
    if limits:
        doc["limits"] = SUITE_LIMITS.model_dump(mode="json")
    path = root / "worker.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def ctld_pid(cluster: LocalSlurmCluster) -> int | None:
    return pid_if_running(cluster.run_dir / "slurmctld.pid", "slurmctld")


def stop_slurmctld(cluster: LocalSlurmCluster) -> bool:
    return terminate(cluster.run_dir / "slurmctld.pid", "slurmctld")


def start_slurmctld(cluster: LocalSlurmCluster) -> None:
    subprocess.run(
        ["slurmctld", "-i"], env={**os.environ, **cluster.env}, check=True, timeout=30, capture_output=True
    )
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        probe = subprocess.run(
            ["scontrol", "ping"],
            env={**os.environ, **cluster.env},
            capture_output=True,
            text=True,
            check=False,
        )
        if "UP" in probe.stdout:
            return
        time.sleep(0.2)
    raise RuntimeError("slurmctld did not answer after a restart")


@contextlib.asynccontextmanager
async def crash_stack(
    name: str,
    *,
    audit_url: str | None = None,
    failpoints: Iterable[str] = (),
    worker_code: Path | None = None,
    watch: dict[str, object] | None = None,
    watchdog: dict[str, object] | None = None,
    supervise: bool = True,
    slurm_settings: dict[str, str] | None = None,
) -> AsyncIterator[CrashStack]:
    """Start Slurm + Temporal (db file) + the worker subprocess under CRASH_DIR/name; stop all after.
    `watch` and `watchdog` override those settings; `supervise=False` leaves a killed worker dead (a
    lost machine); `slurm_settings` replaces slurm.conf lines of this stack's cluster (e.g.
    {"MinJobAge": "2"})."""
    root = CRASH_DIR / name
    await asyncio.to_thread(stop_leftovers)
    cluster = make_cluster(root, slurm_settings)
    temporal_dir = root / "temporal"
    for sub in ("jobs", "failpoints", "slurm/state", "temporal"):
        await asyncio.to_thread(_rmtree, root / sub)
    for name in ("worker", *EXTRA_WORKERS):  # logs are appended to: one run's lines only
        (root / f"{name}.log").unlink(missing_ok=True)
    root.mkdir(parents=True, exist_ok=True)
    await asyncio.to_thread(cluster.start)
    temporal = LocalTemporal(
        temporal_dir, port=free_port(), ui_port=None, db_file=temporal_dir / "temporal.db"
    )
    await asyncio.to_thread(temporal.start)
    url = audit_url or f"sqlite:///{root / ('audit-' + uuid.uuid4().hex[:8] + '.db')}"
    config = write_config(
        root,
        temporal_address=temporal.address,
        cluster=cluster,
        audit_url=url,
        watch=watch,
        watchdog=watchdog,
        limits=worker_code is None,
    )
    worker = WorkerProcess(root, config)
    worker.use_code(worker_code)
    store = AuditStore.from_url(url)
    recorder = SlurmRecorder(cluster)
    extras: list[WorkerProcess] = []
    client: Client | None = None
    try:
        worker.start(failpoints, root / "failpoints", supervise=supervise)
        recorder.start()
        client = await connect(Settings(temporal=TemporalSettings(address=temporal.address)))
        yield CrashStack(
            root=root,
            cluster=cluster,
            temporal=temporal,
            worker=worker,
            client=client,
            store=store,
            recorder=recorder,
            audit_url=url,
            extra_workers=extras,
        )
    finally:
        await recorder.stop()
        with contextlib.suppress(Exception):
            jobs = cluster.active_job_ids()
            if jobs:
                subprocess.run(["scancel", *jobs], env={**os.environ, **cluster.env}, check=False, timeout=10)
        await worker.stop()
        for extra in extras:
            await extra.stop()
        await asyncio.to_thread(cluster.stop)
        await asyncio.to_thread(temporal.stop)
        store.close()


def stop_leftovers() -> None:
    """Stop what any crash stack of an interrupted or timed-out test left running. Every stack uses
    the same Slurm ports, so another stack's surviving slurmctld would keep this one's from binding
    (a pytest timeout raised inside the event loop can skip the stack's own teardown)."""
    if not CRASH_DIR.is_dir():
        return
    for root in sorted(p for p in CRASH_DIR.iterdir() if p.is_dir()):
        if (root / "slurm").is_dir():
            make_cluster(root).stop()
        temporal_dir = root / "temporal"
        for leftover in temporal_dir.glob("temporal-*.pid"):
            LocalTemporal(temporal_dir, port=int(leftover.stem.split("-")[1])).stop()
        for leftover_name in ("worker", *EXTRA_WORKERS):
            WorkerProcess(root, root / "worker.yaml", name=leftover_name).proc.stop()


def _rmtree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


# --- what a correct recovery leaves behind -------------------------------------------------------

# Whether a containment hold (its own advice) precedes the decision depends on the job's state; either
# way an advice is stored before requeue-hold, and the requeue advice before the exclusion.
RECOVERY_SEQUENCE = (
    (EventType.WORKLOAD_DISCOVERED, ""),
    (EventType.DETECTION, ""),
    (EventType.ADVICE, ""),
    (EventType.ACTION, "requeue_hold"),
    (EventType.ACTION, "exclude"),
    (EventType.ACTION, "release"),
    (EventType.COMPLETED, ""),
)
# Observed, not read from Slurm: a worker that is down for the whole requeued attempt misses them.
LIFECYCLE = (
    (EventType.ACTION, "release"),
    (EventType.ALLOCATION_RESTARTED, ""),
    (EventType.TRAINING_RESUMED, ""),
    (EventType.COMPLETED, ""),
)
ADVICE_BEFORE_EXCLUSION = ((EventType.ADVICE, "requeue"), (EventType.ACTION, "exclude"))


def in_order(events: list[AuditEventOut], wanted: tuple[tuple[EventType, str], ...]) -> bool:
    """`wanted` (event type, action or "") appears as a subsequence of `events`."""
    it = iter((e.event_type, e.action) for e in events)
    return all(any(t == kind and (not action or a == action) for t, a in it) for kind, action in wanted)


async def check_audit_complete(stack: CrashStack, job: CrashJob) -> list[AuditEventOut]:
    """Nothing lost, nothing doubled: the store holds exactly the events the workflow emitted."""
    events = stack.events(job.job_id)
    ids = [e.event_id for e in events]
    if len(ids) != len(set(ids)):
        raise AssertionError(f"job {job.job_id}: duplicated audit rows {sorted(ids)}")
    emitted = await emitted_audit_ids(stack.handle(job))
    if len(emitted) != len(set(emitted)):
        raise AssertionError(f"job {job.job_id}: the workflow emitted an event id twice: {emitted}")
    if set(emitted) != set(ids):
        raise AssertionError(
            f"job {job.job_id}: audit differs from history; lost={sorted(set(emitted) - set(ids))} "
            f"unexpected={sorted(set(ids) - set(emitted))}"
        )
    return events


def performed_steps(events: list[AuditEventOut]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for e in events:
        if e.event_type == EventType.ACTION and e.data.get("performed") is True:
            counts[e.action] = counts.get(e.action, 0) + 1
    return counts


# --- an audit database that can be made unreachable ---------------------------------------------


@dataclass
class MariaDBAudit:
    """A private database and user on the local MariaDB; `lock()` makes it refuse the worker.

    ACCOUNT LOCK refuses every new connection of that user ("Access denied ... account is locked") and
    KILL ends the ones it holds, which is what the worker sees when the database is down or its
    credentials are revoked. The test reads the store as root, so it can watch rows land.
    """

    host: str = "127.0.0.1"
    port: int = 3306
    name: str = field(default_factory=lambda: f"tgcrash_{uuid.uuid4().hex[:8]}")
    password: str = field(default_factory=lambda: uuid.uuid4().hex)

    @property
    def url(self) -> str:
        return f"mysql+pymysql://{self.name}:{self.password}@{self.host}:{self.port}/{self.name}"

    @property
    def root_url(self) -> str:
        return f"mysql+pymysql://root@{self.host}:{self.port}/{self.name}"

    def _root(self, *statements: str) -> list[tuple[object, ...]]:
        import pymysql

        conn = pymysql.connect(host=self.host, port=self.port, user="root", autocommit=True)
        rows: list[tuple[object, ...]] = []
        try:
            with conn.cursor() as cur:
                for statement in statements:
                    cur.execute(statement)
                    rows = list(cur.fetchall())
        finally:
            conn.close()
        return rows

    def create(self) -> None:
        self._root(
            f"CREATE DATABASE `{self.name}` CHARACTER SET utf8mb4",
            f"CREATE USER '{self.name}'@'%' IDENTIFIED BY '{self.password}'",
            f"CREATE USER '{self.name}'@'localhost' IDENTIFIED BY '{self.password}'",
            f"GRANT ALL ON `{self.name}`.* TO '{self.name}'@'%'",
            f"GRANT ALL ON `{self.name}`.* TO '{self.name}'@'localhost'",
        )

    def lock(self) -> int:
        """Refuse new connections and kill the open ones; returns how many were killed."""
        self._root(
            f"ALTER USER '{self.name}'@'%' ACCOUNT LOCK", f"ALTER USER '{self.name}'@'localhost' ACCOUNT LOCK"
        )
        ids = self._root(f"SELECT id FROM information_schema.processlist WHERE user = '{self.name}'")
        for (conn_id,) in ids:
            with contextlib.suppress(Exception):
                self._root(f"KILL CONNECTION {int(str(conn_id))}")
        return len(ids)

    def unlock(self) -> None:
        self._root(
            f"ALTER USER '{self.name}'@'%' ACCOUNT UNLOCK",
            f"ALTER USER '{self.name}'@'localhost' ACCOUNT UNLOCK",
        )

    def drop(self) -> None:
        with contextlib.suppress(Exception):
            self._root(
                f"DROP DATABASE IF EXISTS `{self.name}`",
                f"DROP USER IF EXISTS '{self.name}'@'%'",
                f"DROP USER IF EXISTS '{self.name}'@'localhost'",
            )

"""TrainGuard workers: the control-plane queue (workflows, attribution, audit) and the cluster queue
(Slurm commands, job output files). The quick start runs both in one process; production runs the
cluster worker beside Slurm (in-cluster) or anywhere with SSH access to the login node.
"""

from __future__ import annotations

import asyncio
import getpass
import logging
import signal
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta

from sqlalchemy.exc import SQLAlchemyError
from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.worker import PollerBehaviorAutoscaling, Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from activities.cluster import CAPACITY_REPORT_EVERY_S, ClusterActivities, report_to_cluster
from activities.control import ControlActivities
from activities.fleet import FleetActivities
from activities.limits import LimitsActivities
from activities.snapshot_cache import SnapshotCache
from activities.watch import CheckpointLocator, JobWatcher, SourceFactory
from trainguard import contracts as c
from trainguard import telemetry
from trainguard.api.temporal_control import cluster_workflow_id, connect_client
from trainguard.audit.store import AuditStore
from trainguard.detection.progress import ProgressConfig
from trainguard.gpumetrics.prometheus import gpu_findings
from trainguard.logsources.base import LogSource
from trainguard.logsources.factory import make_log_source
from trainguard.logsources.files import FileLogSource
from trainguard.logsources.http import make_http_client
from trainguard.logsources.nodelogs import make_node_log_source, node_log_enabled
from trainguard.models import EventType, Finding, JobSnapshot, Mode
from trainguard.policy import PolicyConfig
from trainguard.policy.limits import ClusterLimits
from trainguard.settings import Settings, WatchSettings
from trainguard.slurm.access import SlurmAccess
from trainguard.slurm.client import SlurmClient
from trainguard.slurm.factory import make_slurm_access
from trainguard.slurm.restd import SlurmRestClient
from trainguard.slurm.runner import Runner, make_runner
from workers.presence import Presence
from workflows.cluster_watch import ClusterWatchWorkflow
from workflows.job_recovery import JobRecoveryWorkflow

log = logging.getLogger(__name__)

WORKFLOWS = [JobRecoveryWorkflow, ClusterWatchWorkflow]
CACHE_CHECK_EVERY_S = 300.0
# The sandbox re-imports every module a workflow uses that is not passed through, for every workflow
# run it starts: ~20 ms of import for JobRecovery's modules alone (measured with -X importtime, more
# inside the sandbox), paid by each of 10,000 workloads before its watch can start. The `workflows`
# package keeps no module-level state (only constants, classes and functions), so one import is shared.
# The price: the sandbox no longer stops a non-deterministic call in that package at run time (checked:
# datetime.now() then runs), so tests/unit/test_workflow_code_is_pure.py checks its code statically.
WORKFLOW_RUNNER = SandboxedWorkflowRunner(
    restrictions=SandboxRestrictions.default.with_passthrough_modules("workflows")
)
STEP_SLOTS = 64  # cluster activity slots beyond watch.max_watches: discovery and scheduler actions


async def connect(settings: Settings) -> Client:
    return await connect_client(settings.temporal)


def recovery_config(settings: Settings, *, search_attributes: bool = True) -> c.RecoveryConfig:
    return c.RecoveryConfig(
        cluster_queue=settings.cluster.task_queue,
        control_queue=settings.temporal.control_task_queue,
        acknowledged=settings.cluster.acknowledge_scheduler_actions,
        watch_slice_s=settings.watch.slice_s,
        poll_interval_s=settings.watch.poll_interval_s,
        heartbeat_timeout_s=settings.watch.heartbeat_timeout_s,
        step_heartbeat_timeout_s=min(10.0, settings.watch.heartbeat_timeout_s),
        watchdog_enabled=settings.watchdog.enabled,
        decision_timeout_s=settings.watchdog.decision_timeout_s,
        watchdog_release=watchdog_may_release(settings),
        watchdog_environment_pattern=settings.watchdog.environment_pattern,
        policy=PolicyConfig(**settings.policy.model_dump()),
        limits=ClusterLimits(**settings.limits.model_dump()),
        search_attributes=search_attributes,
    )


def watchdog_may_release(settings: Settings) -> bool:
    """watchdog.mode and watchdog.acknowledge_scheduler_actions: may the watchdog release a job we held?"""
    return settings.watchdog.mode == Mode.ACTION and settings.watchdog.acknowledge_scheduler_actions


def cluster_watch_input(settings: Settings, *, search_attributes: bool = True) -> c.ClusterWatchInput:
    return c.ClusterWatchInput(
        cluster=settings.cluster.name,
        cluster_queue=settings.cluster.task_queue,
        mode=settings.cluster.mode,
        acknowledged=settings.cluster.acknowledge_scheduler_actions,
        recovery=recovery_config(settings, search_attributes=search_attributes),
        environment_pattern=settings.cluster.environment_pattern,
    )


def cluster_config(settings: Settings, *, search_attributes: bool = True) -> c.ClusterConfig:
    """What these settings say about the cluster's running workloads (compared by ClusterWatch)."""
    inp = cluster_watch_input(settings, search_attributes=search_attributes)
    return c.ClusterConfig(
        mode=inp.mode,
        acknowledged=inp.acknowledged,
        environment_pattern=inp.environment_pattern,
        recovery=inp.recovery,
    )


async def apply_settings(
    client: Client, settings: Settings, *, source: str, search_attributes: bool = True
) -> c.SettingsApplied:
    """Send these settings to the cluster's ClusterWatch, which audits what changed and fans it out to the
    running workloads (the runbook's rollback: edit the env file/values, restart workers)."""
    handle = client.get_workflow_handle(cluster_workflow_id(settings.cluster.name))
    update = c.SettingsUpdate(
        config=cluster_config(settings, search_attributes=search_attributes),
        source=source,
        who=f"{getpass.getuser()}@{socket.gethostname()}",
    )
    applied: c.SettingsApplied = await handle.execute_update(
        "apply_settings", update, result_type=c.SettingsApplied
    )
    return applied


async def _apply_settings_at_start(client: Client, settings: Settings) -> None:
    """Retried in the background: the ClusterWatch may be served by this very worker, just started."""
    for attempt in range(30):
        try:
            applied = await apply_settings(client, settings, source="worker restart")
        except Exception as err:  # Temporal down, or the workflow not yet served: retry
            log.warning("settings not yet applied to the cluster's workflow (%s); retrying", err)
            await asyncio.sleep(min(2.0 * (attempt + 1), 30.0))
            continue
        if applied.changed:
            log.warning("settings changed since the last start: %s", applied.summary)
        return
    log.error("could not apply settings to the cluster's workflow; run `trainguard config reload`")


async def enforce_retention(store: AuditStore, settings: Settings) -> None:
    """audit.retention_days: prune now and every audit.prune_interval_s (each prune is audited)."""
    from trainguard.audit.retention import prune

    while True:
        try:
            result = await asyncio.to_thread(
                prune, store, older_than_s=settings.audit.retention_days * 86400, source="control worker"
            )
            if result.total:
                log.info("audit retention: deleted %s", result.deleted)
        except Exception as err:  # the store is down: try again next interval
            log.warning("audit retention failed: %s", err)
        await asyncio.sleep(settings.audit.prune_interval_s)


async def ensure_schema(store: AuditStore, retry_s: float = 5.0) -> None:
    """Create or upgrade the audit schema once the store answers. Until then the audit activities fail and
    Temporal retries them; everything else, releases of held jobs included, goes on without the store."""
    while True:
        try:
            await asyncio.to_thread(store.create_tables)
        except (SQLAlchemyError, OSError) as err:
            cause = str(getattr(err, "orig", err)).splitlines()[0][:200] if str(err) else type(err).__name__
            log.warning("audit store unreachable (%s); retrying in %.0f s", cause, retry_s)
            await asyncio.sleep(retry_s)
            continue
        log.info("audit store reachable; schema up to date")
        return


def cache_report(who: str, running: int, slots: int, now: float) -> c.ClusterReport | None:
    """The audit report of a control worker whose workflows outnumber its sticky cache (one per hour)."""
    if running <= slots:
        return None
    return c.ClusterReport(
        key=f"workflow-cache/{who}/{int(now // CAPACITY_REPORT_EVERY_S)}",
        event_type=EventType.CAPACITY_LIMIT,
        message=f"{running} running workflows outnumber control worker {who}'s cache of {slots} "
        "(temporal.max_cached_workflows): workflow tasks replay whole histories, detection slows",
        data={
            "worker": who,
            "limit": "max_cached_workflows",
            "max_cached_workflows": slots,
            "running": running,
        },
    )


async def watch_workflow_cache(client: Client, settings: Settings) -> None:
    """Nothing goes silently slow when the workflows outnumber the sticky cache: count them (a visibility
    read, not billed), export both numbers (alert TrainGuardWorkflowCacheFull), log, and audit."""
    query = f"TaskQueue = '{settings.temporal.control_task_queue}' AND ExecutionStatus = 'Running'"
    # The cluster's workloads, compared by alert TrainGuardWatchesNotRunning with the watches its cluster
    # workers run (trainguard_watch_slots_used): workloads whose watch no worker has time to start.
    workloads = (
        "WorkflowType = 'JobRecovery' AND ExecutionStatus = 'Running' AND "
        f"WorkflowId STARTS_WITH 'trainguard-job-{settings.cluster.name}-'"
    )
    slots = settings.temporal.max_cached_workflows
    reported: set[str] = set()
    while True:
        try:
            running = (await client.count_workflows(query)).count
            telemetry.set_workflow_cache(running, slots)
            telemetry.set_workloads_running(
                settings.cluster.name, (await client.count_workflows(workloads)).count
            )
            report = cache_report(client.identity, running, slots, time.time())
            if report is not None:
                log.error("%s", report.message)
                if report.key not in reported:
                    reported.add(report.key)
                    await report_to_cluster(client, settings.cluster.name, report)
        except Exception as err:  # Temporal unreachable: count again next time
            log.warning("could not count running workflows: %s", err)
        await asyncio.sleep(CACHE_CHECK_EVERY_S)


async def ensure_cluster_watch(client: Client, settings: Settings, *, search_attributes: bool = True) -> None:
    """Start the cluster's ClusterWatch workflow unless it already runs (idempotent)."""
    await client.start_workflow(
        ClusterWatchWorkflow.run,
        cluster_watch_input(settings, search_attributes=search_attributes),
        id=cluster_workflow_id(settings.cluster.name),
        task_queue=settings.temporal.control_task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        static_summary=f"ClusterWatch of cluster {settings.cluster.name}: discovers opted-in jobs",
    )


def progress_config(watch: WatchSettings) -> ProgressConfig:
    base = ProgressConfig()
    return ProgressConfig(
        patterns=(*watch.progress_patterns, *base.patterns),
        hang_factor=watch.hang_factor,
        hang_floor_s=watch.hang_floor_s,
        hang_ceiling_s=watch.hang_ceiling_s,
    )


@dataclass
class Runtime:
    """What a running worker process holds, so tests and the quick start can shut it down cleanly."""

    workers: list[Worker] = field(default_factory=list)
    runner: Runner | None = None
    slurm: SlurmAccess | None = None  # built from the settings here (closed at shutdown)
    store: AuditStore | None = None
    schema_pending: bool = False  # the store did not answer at start: ensure_schema runs beside the workers
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    presence: Presence | None = None  # cluster workers: announce ourselves, take over vanished peers
    cluster: ClusterActivities | None = None

    def start(self) -> list[asyncio.Task[None]]:
        """Run every worker as a task of the current event loop (and presence, beside them)."""
        self.tasks = [asyncio.create_task(w.run()) for w in self.workers]
        running = list(self.tasks)
        if self.presence is not None:
            self.tasks.append(asyncio.create_task(self.presence.run()))
        if self.schema_pending and self.store is not None:
            self.tasks.append(asyncio.create_task(ensure_schema(self.store)))
        return running

    async def shutdown(self) -> None:
        await asyncio.gather(*(w.shutdown() for w in self.workers), return_exceptions=True)
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        if self.slurm is not None:
            await self.slurm.close()
        if self.runner is not None:
            await self.runner.close()
        if self.store is not None:
            self.store.close()


def build_workers(
    client: Client,
    settings: Settings,
    *,
    queues: Sequence[str] = ("control", "cluster"),
    search_attributes: bool = True,
    slurm: SlurmClient | None = None,
    sources: SourceFactory | None = None,
) -> Runtime:
    """`slurm` and `sources` replace the Slurm client and the log-source factory built from the settings
    (the scale benchmark passes a simulated cluster); `slurm.runner` then serves the job output files.
    Otherwise cluster.access picks the client (commands or slurmrestd) and cluster.runner reads files."""
    rt = Runtime()
    if "control" in queues:
        rt.store = AuditStore.connect(settings.audit.url)
        try:
            rt.store.create_tables()
        except (SQLAlchemyError, OSError) as err:
            # Not fatal: a worker that cannot start while the store is down cannot release the jobs it holds.
            log.warning("audit store unreachable at start (%s); starting without it", type(err).__name__)
            rt.schema_pending = True
        control = ControlActivities(rt.store, client, settings.attribution)
        fleet = FleetActivities(rt.store)
        limits = LimitsActivities(client)
        rt.workers.append(
            Worker(
                client,
                task_queue=settings.temporal.control_task_queue,
                workflows=WORKFLOWS,
                workflow_runner=WORKFLOW_RUNNER,
                activities=[
                    control.attribute,
                    control.record_events,
                    control.record_advice,
                    control.propagate_cluster_mode,
                    control.propagate_cluster_settings,
                    fleet.fleet_context,
                    limits.grant_actions,
                    limits.workload_ended,
                ],
                max_concurrent_activities=200,
                # Workflow-task pollers stay at the SDK's five: autoscaled ones (measured at 10,000
                # workloads on the dev server) had the server start ~3 workflow tasks for each one completed,
                # and starts and watches came slower (bench/README.md). Activities here are short audit
                # writes and decisions: let their pollers follow the backlog.
                activity_task_poller_behavior=PollerBehaviorAutoscaling(),
                # One long-lived workflow per monitored job: when they outnumber the sticky cache
                # (SDK default 1000), every workflow task replays a whole history in a fresh sandbox.
                max_cached_workflows=settings.temporal.max_cached_workflows,
            )
        )
    if "cluster" in queues:
        access: SlurmAccess
        if slurm is None:
            runner = rt.runner = make_runner(settings.cluster)
            access = rt.slurm = make_slurm_access(settings.cluster, runner)
        else:
            access, runner = slurm, slurm.runner
        cache = SnapshotCache(access.snapshot, max_age_s=settings.cluster.snapshot_interval_s)

        logs = settings.logs
        http = make_http_client(logs) if logs.backend != "files" else None

        def configured(job: JobSnapshot, path: str) -> LogSource:
            if http is None:  # files: the expanded StdOut path from `scontrol show job`
                return FileLogSource(runner, path)
            return make_log_source(logs, runner, job, client=http)

        sources = sources or configured

        def node_source(node: str) -> LogSource:
            return make_node_log_source(logs, runner, node, client=http)

        metrics = settings.metrics

        async def gpu_probe(nodes: Sequence[str]) -> list[Finding]:
            return await gpu_findings(metrics, nodes)

        watcher = JobWatcher(
            access,
            cache,
            sources,
            max_read_bytes=settings.watch.max_read_bytes,
            gpu_probe=gpu_probe if metrics.prometheus_url else None,
            progress_config=progress_config(settings.watch),
            slurm_verdict_wait_s=settings.watch.slurm_verdict_wait_s,
            node_sources=node_source if node_log_enabled(logs) else None,
            checkpoints=CheckpointLocator(
                pattern=settings.watch.checkpoint_dir_pattern,
                roots=tuple(settings.watch.checkpoint_roots),
                interval_s=settings.watch.checkpoint_scan_interval_s,
            ),
        )
        cluster = rt.cluster = ClusterActivities(
            settings.cluster.name,
            access,
            cache,
            watcher,
            client,
            search_attributes=search_attributes,
            max_watches=settings.watch.max_watches,
        )
        telemetry.set_watch_slots(settings.cluster.name, 0, settings.watch.max_watches)
        if settings.watch.presence_timeout_s > 0:
            rt.presence = Presence(
                client,
                cluster=settings.cluster.name,
                cluster_queue=settings.cluster.task_queue,
                identity=client.identity,
                timeout_s=settings.watch.presence_timeout_s,
                local=lambda: cluster.watched,
            )
        rt.workers.append(
            Worker(
                client,
                task_queue=settings.cluster.task_queue,
                activities=[
                    cluster.discover_jobs,
                    cluster.watch_job,
                    cluster.requeue_hold,
                    cluster.set_excluded,
                    cluster.release_job,
                    cluster.cancel_job,
                    cluster.drain_node,
                    cluster.job_state,
                ],
                # Watch activities are long and mostly asleep: one slot per monitored workload, plus room
                # for discovery and action steps (a full worker is reported: ClusterActivities).
                max_concurrent_activities=settings.watch.max_watches + STEP_SLOTS,
                # A takeover hands this worker a lost peer's watches all at once (thousands at scale):
                # let the pollers scale up with the backlog instead of five fetching one task each.
                activity_task_poller_behavior=PollerBehaviorAutoscaling(),
                # Each heartbeat sent is a billed action; let a longer heartbeat timeout mean fewer of
                # them (the SDK sends at most one per 0.8 x timeout, but never less often than this).
                max_heartbeat_throttle_interval=timedelta(
                    seconds=max(60.0, 0.8 * settings.watch.heartbeat_timeout_s)
                ),
            )
        )
    return rt


async def run_worker(settings: Settings, queues: Sequence[str], *, start_cluster_watch: bool = True) -> None:
    client = await connect(settings)
    rt = build_workers(client, settings, queues=queues)
    if isinstance(rt.slurm, SlurmRestClient):
        # Discover slurmrestd's API versions and check the token now: a clear error at start.
        version = await rt.slurm.start()
        log.info("slurmrestd API %s at %s", version.name, rt.slurm.url)
    if start_cluster_watch and "control" in queues:
        await ensure_cluster_watch(client, settings)
    log.info("worker running: queues=%s cluster=%s", ",".join(queues), settings.cluster.name)
    # On SIGTERM hand running activities back to the server at once (cancelled, then retried by another
    # worker) instead of letting them wait out their heartbeat timeout.
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    running = list(rt.start())  # the workers only: background tasks below may finish on their own
    if start_cluster_watch and "control" in queues:
        # Settings changed in the file or environment reach running workloads (audited), not only new ones.
        rt.tasks.append(asyncio.create_task(_apply_settings_at_start(client, settings)))
    if "control" in queues:
        rt.tasks.append(asyncio.create_task(watch_workflow_cache(client, settings)))
    if rt.store is not None and settings.audit.retention_days > 0:
        rt.tasks.append(asyncio.create_task(enforce_retention(rt.store, settings)))
    stopper = asyncio.create_task(stop.wait())
    try:
        done, _ = await asyncio.wait([*running, stopper], return_when=asyncio.FIRST_COMPLETED)
        for task in done - {stopper}:
            task.result()  # a worker that died on its own: surface why
    finally:
        log.info("worker shutting down")
        stopper.cancel()
        await rt.shutdown()
        await _settle_leftover_tasks()


async def _settle_leftover_tasks() -> None:
    """Cancel and await what shutdown left running (a Slurm query whose SSH channel the close just ended):
    its error is expected at shutdown, not an "unhandled exception during asyncio.run() shutdown" traceback.
    Only for the process's own loop: run_worker is the `trainguard worker` process's main coroutine."""
    current = asyncio.current_task()
    leftover = [t for t in asyncio.all_tasks() if t is not current]
    for task in leftover:
        task.cancel()
    for result in await asyncio.gather(*leftover, return_exceptions=True):
        if isinstance(result, Exception):
            log.debug("at shutdown: %s", result)

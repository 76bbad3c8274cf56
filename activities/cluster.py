"""Activities that touch the cluster (task queue trainguard-cluster-<name>): Slurm and job output files.

Each scheduler step checks Slurm's actual state first (inside SlurmAccess) and reports what Slurm shows
afterwards, so a retried or replayed step never acts twice.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections import Counter
from collections.abc import Sequence

from temporalio import activity
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError

from activities.heartbeat import heartbeating
from activities.snapshot_cache import SnapshotCache
from activities.watch import JobWatcher
from trainguard import contracts as c
from trainguard import failpoints, telemetry
from trainguard.api.temporal_control import cluster_workflow_id
from trainguard.identity import workload_of
from trainguard.models import (
    ActionResult,
    ActionStep,
    Actor,
    AuditEventIn,
    EventType,
    JobSnapshot,
    Level,
    workflow_id_for,
)
from trainguard.optin import MalformedComment, parse_opt_in
from trainguard.slurm.access import SlurmAccess
from trainguard.slurm.errors import SlurmParseError
from trainguard.slurm.jobids import parse_job_id
from trainguard.slurm.runner import CommandError
from trainguard.slurm.states import REQUEUE_HELD_REASON
from trainguard.workload_log import activity_log
from workflows import story
from workflows.search_attributes import CLUSTER, JOB_ID, initial_search_attributes

log = logging.getLogger(__name__)
CAPACITY_REPORT_EVERY_S = 3600.0
_background: set[asyncio.Task[None]] = set()  # reports in flight (kept referenced until done)
START_PARALLELISM = 32  # concurrent workflow starts during discovery (the dev server on SQLite is disk-bound)


async def report_to_cluster(temporal: Client, cluster: str, report: c.ClusterReport) -> None:
    """Signal the cluster's ClusterWatch, which audits the report; a failure is logged, never raised."""
    try:
        handle = temporal.get_workflow_handle(cluster_workflow_id(cluster))
        await handle.signal("report_cluster_event", report)
    except Exception as err:  # Temporal unreachable or ClusterWatch not running: the log and metric remain
        log.warning("could not report %s to the cluster's workflow: %s", report.event_type.value, err)


class ClusterActivities:
    def __init__(
        self,
        cluster: str,
        client: SlurmAccess,
        cache: SnapshotCache,
        watcher: JobWatcher,
        temporal: Client,
        *,
        search_attributes: bool = True,
        max_watches: int = 0,
    ) -> None:
        self.max_watches = max_watches  # the worker's activity slots (0: unknown, not reported)
        self.watching = 0
        # Workflow id -> when its watch started here, while it runs (presence skips these on a takeover).
        self.watched: dict[str, float] = {}
        self._capacity_reported_at = float("-inf")
        self.cluster = cluster
        self.client = client
        self.cache = cache
        self.watcher = watcher
        self.temporal = temporal
        self.search_attributes = search_attributes
        self._started: dict[str, str] = {}  # job id -> workflow id, for requeued jobs whose SubmitTime moved
        self._reported: set[str] = set()
        self._held_since: dict[str, float] = {}  # job id -> first seen with TrainGuard's requeue-hold

    # ---- discovery ------------------------------------------------------------------------------------
    @activity.defn(name=c.DISCOVER_JOBS)
    async def discover_jobs(self, inp: c.DiscoverInput) -> c.DiscoverResult:
        deadline = time.time() + inp.slice_s
        env_re = re.compile(inp.environment_pattern, re.DOTALL)
        totals = c.DiscoverResult()
        while True:
            try:
                snap = await self.cache.get()
            except SlurmParseError as err:
                raise format_error(err) from None
            telemetry.mark_discovery(self.cluster, len(snap.jobs), time.time())
            counts = await self._consider_all(snap.jobs, inp, env_re)
            await self._release_stuck_holds(snap.jobs, inp)
            totals = totals.model_copy(update={k: getattr(totals, k) + v for k, v in counts.items()})
            activity.heartbeat(totals.model_dump())
            if time.time() >= deadline:
                return totals
            await asyncio.sleep(max(0.2, inp.recovery.poll_interval_s))

    async def _consider_all(
        self, jobs: Sequence[JobSnapshot], inp: c.DiscoverInput, env_re: re.Pattern[str]
    ) -> Counter[str]:
        """A backlog of thousands of new jobs (a worker's first start) takes minutes to start one by one,
        far longer than the heartbeat timeout: start them with bounded concurrency, heartbeating meanwhile."""
        counts: Counter[str] = Counter()
        gate = asyncio.Semaphore(START_PARALLELISM)

        async def consider(job: JobSnapshot) -> None:
            async with gate:
                outcome = await self._consider(job, inp, env_re)
            if outcome:
                counts[outcome] += 1
                activity.heartbeat(dict(counts))

        # Every pass sees every job; only the undecided ones are worth a task (at 10,000 jobs a task per
        # job per pass cost more CPU than the watches).
        decided, cluster = self._reported, self.cluster
        undecided = [j for j in jobs if workflow_id_for(cluster, j.job_id, j.submit_time) not in decided]
        await asyncio.gather(*(consider(job) for job in undecided))
        return counts

    async def _consider(self, job: JobSnapshot, inp: c.DiscoverInput, env_re: re.Pattern[str]) -> str | None:
        """One job's outcome. A job that cannot be considered is logged and skipped, never fatal to the
        whole discovery pass (which would leave every other new job undiscovered)."""
        try:
            return await self._consider_one(job, inp, env_re)
        except (ValueError, TypeError) as err:
            key = f"{job.job_id}/{job.submit_time}"
            if key not in self._reported:
                self._reported.add(key)
                log.warning("discovery skipped job %s: %s", job.job_id, str(err)[:300])
            return None

    async def _consider_one(
        self, job: JobSnapshot, inp: c.DiscoverInput, env_re: re.Pattern[str]
    ) -> str | None:
        workload = workload_of(self.cluster, job)
        if workload.workflow_id in self._reported:
            return None
        try:
            opt_in = parse_opt_in(job.comment)
        except MalformedComment as err:
            self._reported.add(workload.workflow_id)
            await self._report_malformed(job, str(err))
            return "malformed"
        if opt_in is None:
            return None
        if not env_re.fullmatch(opt_in.environment):
            self._reported.add(workload.workflow_id)
            return None
        unsupported = unsupported_reason(job)
        if unsupported is not None:
            self._reported.add(workload.workflow_id)
            log.warning("job %s opted in but is not supported: %s", job.job_id, unsupported)
            await self._report_malformed(job, unsupported)
            return "unsupported"
        if job.restart_count > 0 and await self._known_requeued(job):
            self._reported.add(workload.workflow_id)
            return "already_known"
        inp_wf = c.JobRecoveryInput(
            workload=workload,
            opt_in=opt_in,
            cluster_mode=inp.mode,
            config=inp.recovery,
            name=job.name[:200],
            initial_restarts=job.restart_count,
        )
        try:
            await self.temporal.start_workflow(
                "JobRecovery",
                inp_wf,
                id=workload.workflow_id,
                task_queue=inp.recovery.control_queue,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
                search_attributes=initial_search_attributes(self.cluster, job.job_id, inp.mode.value)
                if self.search_attributes
                else None,
                # What the Temporal UI shows for this workflow before anyone opens its history.
                static_summary=story.static_summary(workload, job, opt_in),
                static_details=story.static_details(workload, job, opt_in),
            )
            outcome = "started"
            log.info("watching %s (%s)", workload.key, opt_in.mode.value)
        except WorkflowAlreadyStartedError:
            outcome = "already_known"
        self._started[job.job_id] = workload.workflow_id
        self._reported.add(workload.workflow_id)
        return outcome

    async def _release_stuck_holds(self, jobs: Sequence[JobSnapshot], inp: c.DiscoverInput) -> int:
        """Fail-open when the workflow itself cannot: a watched job held for longer than
        watchdog.decision_timeout_s, whose JobRecovery is closed or keeps failing its workflow task (a bug
        in workflow code), is released unchanged here, and the release is audited. Only TrainGuard's own
        requeue-hold is lifted (Slurm's Reason re-read by the release step): a user's or an admin's hold
        stays. A healthy workflow's hold is its own; each held job costs one describe per budget."""
        now = time.time()
        held = {j.job_id for j in jobs if j.held and j.job_id in self._started}
        for job_id in set(self._held_since) - held:
            del self._held_since[job_id]
        released = 0
        for job_id in sorted(held):
            since = self._held_since.setdefault(job_id, now)
            if now - since < inp.recovery.decision_timeout_s:
                continue
            workflow_id = self._started[job_id]
            why = await self._stuck(workflow_id)
            if why is None:
                self._held_since[job_id] = now  # look again after another budget
                continue
            try:
                result = await self.client.release(job_id, REQUEUE_HELD_REASON)
            except CommandError as err:
                log.warning("job %s: releasing a stuck hold failed: %s", job_id, str(err)[:300])
                continue
            log.warning("job %s held %.0f s and %s: %s", job_id, now - since, why, result.detail)
            self._held_since[job_id] = now
            if result.performed:
                released += 1
                await self._audit_stuck_release(job_id, workflow_id, now - since, why, result)
        return released

    async def _stuck(self, workflow_id: str) -> str | None:
        """Why this workflow will not release its hold, or None while it is healthy (or unknown)."""
        try:
            desc = await self.temporal.get_workflow_handle(workflow_id).describe()
        except Exception as err:  # Temporal unreachable: not a reason to act
            log.warning("cannot describe %s: %s", workflow_id, str(err)[:200])
            return None
        if desc.status != WorkflowExecutionStatus.RUNNING:
            return f"its workflow is {desc.status.name.lower() if desc.status else 'unknown'}"
        raw = desc.raw_description
        if raw.HasField("pending_workflow_task") and raw.pending_workflow_task.attempt > 1:
            return f"its workflow task failed {raw.pending_workflow_task.attempt - 1} times"
        return None

    async def _audit_stuck_release(
        self, job_id: str, workflow_id: str, held_s: float, why: str, result: ActionResult
    ) -> None:
        handle = self.temporal.get_workflow_handle(f"trainguard-cluster-{self.cluster}")
        event = AuditEventIn(
            event_id=f"cluster/{self.cluster}/stuck-hold/{job_id}/{int(time.time())}",
            event_type=EventType.WATCHDOG_FIRED,
            cluster=self.cluster,
            job_id=job_id,
            level=Level.ERROR,
            actor=Actor.WATCHDOG,
            ts=time.time(),
            action="release",
            message=f"job {job_id} held by TrainGuard for {held_s:.0f} s and {why}: "
            f"released unchanged ({result.detail})"[:1000],
            data={"workflow_id": workflow_id, "held_s": round(held_s, 1), "performed": result.performed},
        )
        try:
            await handle.signal("record_event", event)
        except Exception as err:  # the release stands; the log line above records it
            log.warning("could not audit the release of job %s: %s", job_id, str(err)[:200])

    async def _known_requeued(self, job: JobSnapshot) -> bool:
        """Slurm rewrites SubmitTime when it requeues a job: is this requeued job a workload we follow?

        The newest workload of this job id submitted no later than this job is the same one; a job id
        reused after a cluster reset starts again at Restarts=0 and is seen as new before that.
        """
        if job.job_id in self._started:
            return True
        if not self.search_attributes:
            return False
        query = (
            f"{CLUSTER.name} = '{self.cluster}' AND {JOB_ID.name} = '{job.job_id}'"
            " AND WorkflowType = 'JobRecovery'"
        )
        async for wf in self.temporal.list_workflows(query, limit=20):
            submit = wf.id.rsplit("-", 1)[-1]
            if submit.isdigit() and int(submit) <= job.submit_time:
                self._started[job.job_id] = wf.id
                return True
        return False

    async def _report_malformed(self, job: JobSnapshot, why: str) -> None:
        log.warning("job %s opted in with a malformed comment: %s", job.job_id, why)
        handle = self.temporal.get_workflow_handle(f"trainguard-cluster-{self.cluster}")
        await handle.signal("report_malformed", c.MalformedReport(job=job, problem=why[:500]))

    # ---- watching ---------------------------------------------------------------------------------------
    @activity.defn(name=c.WATCH_JOB)
    async def watch_job(self, inp: c.WatchInput) -> c.WatchResult:
        telemetry.watch_started(self.cluster)  # one activity slot each: reported against the capacity
        self.watching += 1
        workflow_id = activity.info().workflow_id or ""
        started = self.watched[workflow_id] = time.time()
        if self.max_watches and self.watching >= self.max_watches:
            self._capacity_reached()
        try:
            return await self.watcher.watch(inp, activity.heartbeat)
        except CommandError as err:
            raise _app_error(err) from None
        except SlurmParseError as err:
            raise format_error(err) from None
        finally:
            telemetry.watch_ended(self.cluster)
            self.watching -= 1
            if self.watched.get(workflow_id) == started:  # not a newer attempt's entry
                del self.watched[workflow_id]

    def _capacity_reached(self) -> None:
        """Every slot is taken: the next workload's watch waits on the server unserved. Logged and
        audited (at most hourly per worker); trainguard_watch_slots_used alerts on it too."""
        now = time.time()
        log.error(
            "all %d watch slots of this cluster worker are in use: add a cluster worker or raise "
            "watch.max_watches, or new workloads wait unwatched",
            self.max_watches,
        )
        if now - self._capacity_reported_at < CAPACITY_REPORT_EVERY_S:
            return
        self._capacity_reported_at = now
        who = self.temporal.identity
        report = c.ClusterReport(
            key=f"capacity/{who}/{int(now // CAPACITY_REPORT_EVERY_S)}",
            event_type=EventType.CAPACITY_LIMIT,
            message=f"cluster worker {who} has all {self.max_watches} watch slots in use; new watches wait",
            data={"worker": who, "max_watches": self.max_watches},
        )
        task = asyncio.get_running_loop().create_task(report_to_cluster(self.temporal, self.cluster, report))
        _background.add(task)
        task.add_done_callback(_background.discard)

    # ---- scheduler actions ---------------------------------------------------------------------------------
    @activity.defn(name=c.REQUEUE_HOLD)
    async def requeue_hold(self, inp: c.JobActionInput) -> ActionResult:
        return await self._step(
            ActionStep.REQUEUE_HOLD,
            inp,
            self.client.requeue_hold(inp.workload.job_id, expected_restarts=inp.expected_restarts),
        )

    @activity.defn(name=c.SET_EXCLUDED)
    async def set_excluded(self, inp: c.JobActionInput) -> ActionResult:
        return await self._step(
            ActionStep.EXCLUDE, inp, self.client.set_excluded(inp.workload.job_id, inp.nodes)
        )

    @activity.defn(name=c.RELEASE_JOB)
    async def release_job(self, inp: c.JobActionInput) -> ActionResult:
        return await self._step(
            ActionStep.RELEASE,
            inp,
            self.client.release(inp.workload.job_id, inp.our_hold, inp.held_restarts),
        )

    @activity.defn(name=c.CANCEL_JOB)
    async def cancel_job(self, inp: c.JobActionInput) -> ActionResult:
        return await self._step(ActionStep.CANCEL, inp, self.client.cancel(inp.workload.job_id))

    @activity.defn(name=c.JOB_STATE)
    async def job_state(self, inp: c.JobActionInput) -> c.JobStateResult:
        try:
            return c.JobStateResult(job=await self.client.job(inp.workload.job_id))
        except CommandError as err:
            raise _app_error(err) from None
        except SlurmParseError as err:
            raise format_error(err) from None

    @activity.defn(name=c.DRAIN_NODE)
    async def drain_node(self, inp: c.JobActionInput) -> ActionResult:
        results = [await self.client.drain(node, inp.reason or "trainguard") for node in inp.nodes]
        performed = any(r.performed for r in results)
        return ActionResult(
            step=ActionStep.DRAIN,
            performed=performed,
            detail="; ".join(r.detail for r in results),
            confirmed_at=time.time(),
        )

    async def _step(self, step: ActionStep, inp: c.JobActionInput, action: object) -> ActionResult:
        try:
            async with heartbeating():
                await failpoints.pause(f"pause_before_{step.value}", inp.advice_id)
                result: ActionResult = await action  # type: ignore[misc]
                job = await self.client.job(inp.workload.job_id)
        except CommandError as err:
            raise _app_error(err) from None
        except SlurmParseError as err:  # before ValueError: unreadable output is not invalid input
            raise format_error(err) from None
        except ValueError as err:  # invalid job id / node name: never retry
            raise ApplicationError(str(err)[:500], type="InvalidInput", non_retryable=True) from None
        activity_log(inp.workload.key).info(
            "%s %s: performed=%s %s", step.value, inp.workload.key, result.performed, result.detail
        )
        failpoints.hit(f"after_{step.value}", inp.advice_id)
        if failpoints.fire(f"fail_after_{step.value}", inp.advice_id):
            # The step took effect in Slurm, but the workflow is told it failed for good (fail-open tests).
            raise ApplicationError(f"failpoint: {step.value} failed after it took effect", non_retryable=True)
        own_hold: str | None = None
        if step == ActionStep.REQUEUE_HOLD:
            # A hold found in place is someone else's, unless an earlier try of this very step (killed
            # before it reported) placed it: only then is Temporal's attempt above 1.
            mine = result.performed or activity.info().attempt > 1
            own_hold = job.reason if job is not None and job.held and mine else ""
        return result.model_copy(
            update={
                "confirmed_at": time.time(),
                "job_state": job.state if job else "",
                "held": bool(job and job.held),
                "restart_count": job.restart_count if job else 0,
                "reason": job.reason if job else "",
                "own_hold": own_hold,
            }
        )


def unsupported_reason(job: JobSnapshot) -> str | None:
    """Why TrainGuard cannot follow this opted-in job, or None when it can.

    A heterogeneous job's components share one fate (Slurm requeues, holds and cancels them together
    through the leader): acting on one component as if it were a whole job would be wrong.
    """
    if job.het_job_id is not None:
        offset = "?" if job.het_job_offset is None else str(job.het_job_offset)
        return (
            f"heterogeneous job {job.het_job_id}+{offset} (component {job.job_id}): "
            "TrainGuard does not follow heterogeneous jobs"
        )
    try:
        ident = parse_job_id(job.job_id)
    except ValueError:
        return f"job id {job.job_id[:40]!r} is not a form TrainGuard can act on"
    if not ident.supported:
        return f"job id {job.job_id[:40]!r} ({ident.kind.value}) is not a form TrainGuard can act on"
    return None


def format_error(err: SlurmParseError) -> ApplicationError:
    """Slurm printed something this version of TrainGuard cannot read: retry (it may be transient, or an
    upgrade is coming), and never conclude that the job is gone."""
    return ApplicationError(f"Slurm output not understood: {str(err)[:900]}", type="SlurmFormatError")


def _app_error(err: CommandError) -> ApplicationError:
    kind = "SlurmUnavailable" if err.retryable else "SlurmRefused"
    return ApplicationError(str(err)[:1000], type=kind, non_retryable=not err.retryable)

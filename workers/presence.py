"""Cluster-worker presence, and taking over the watches of a worker that vanished.

A watch is one long activity whose heartbeat timeout (watch.heartbeat_timeout_s, 300 s) bounds how long
a SIGKILLed worker's watches stay blind. Heartbeats are billed Temporal actions, so a short timeout on
every watch would cost ~180 actions per workload-hour. Presence costs none: each cluster worker keeps a
long poll open on its cluster's presence task queue (no task is ever scheduled there) with a short
deadline, so the server's poller list shows it with a last-access time a few seconds old. Every worker
reads that list (DescribeTaskQueue, a read, not billed); a worker whose polls stopped for
watch.presence_timeout_s is gone, and one survivor (the live identity that sorts first, so two do not
fail the same activity twice) fails that worker's started watch and discovery activities by id: their
retry policy starts them again at once on a live worker, from the last heartbeated cursor. A graceful
shutdown still hands its activities back itself (cancelled at shutdown). See docs/worker-loss.md.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from datetime import timedelta

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import PendingActivityState, TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import (
    DescribeTaskQueueRequest,
    DescribeWorkflowExecutionRequest,
    ListWorkflowExecutionsRequest,
    PollActivityTaskQueueRequest,
)
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from activities.cluster import report_to_cluster
from trainguard import contracts as c
from trainguard import telemetry
from trainguard.api.temporal_control import cluster_workflow_id
from trainguard.models import EventType

log = logging.getLogger(__name__)

# Activities a vanished worker's share of which is taken over; action steps keep their short (10 s)
# heartbeat timeout and are retried by Temporal itself.
TAKEN_OVER = frozenset({c.WATCH_JOB, c.DISCOVER_JOBS})
# The server refuses long polls with a deadline under 2 s; it answers an idle one just before its deadline.
MIN_POLL_S = 2.5
DESCRIBE_PARALLELISM = 64


def presence_queue(cluster_queue: str) -> str:
    return f"{cluster_queue}-presence"


@dataclass(frozen=True)
class Timing:
    """Derived from watch.presence_timeout_s: a worker refreshes its presence three times per timeout,
    and peers are checked six times per timeout."""

    timeout_s: float

    @property
    def poll_s(self) -> float:
        return max(MIN_POLL_S, min(10.0, self.timeout_s / 3))

    @property
    def check_s(self) -> float:
        return max(1.0, self.timeout_s / 6)


def vanished(last_seen: dict[str, float], now: float, timeout_s: float) -> set[str]:
    """Identities whose last poll started more than timeout_s ago."""
    return {who for who, at in last_seen.items() if now - at > timeout_s}


def reaper(last_seen: dict[str, float], now: float, timeout_s: float) -> str | None:
    """The one live identity that takes over: the first in sort order (every worker computes the same)."""
    live = sorted(who for who, at in last_seen.items() if now - at <= timeout_s)
    return live[0] if live else None


@dataclass(frozen=True)
class Held:
    workflow_id: str
    run_id: str
    activity_id: str
    activity_type: str
    worker: str


@dataclass(frozen=True)
class Pending:
    """One pending activity as DescribeWorkflowExecution reports it."""

    activity_id: str
    activity_type: str
    state: int
    worker: str  # identity of the worker that last started it
    started_at: float = 0.0  # when that attempt started (epoch seconds)


def held_by(pending: Iterable[Pending], dead: set[str]) -> list[Pending]:
    """The started watch/discovery activities of workers in `dead`."""
    started = PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
    return [p for p in pending if p.activity_type in TAKEN_OVER and p.state == started and p.worker in dead]


def why(p: Pending, dead: set[str]) -> str:
    if p.worker in dead:
        return f"cluster worker {p.worker} vanished; watch taken over"
    return f"watch started for {p.worker} never ran there; started again"


def lost_here(pending: Iterable[Pending], me: str, now: float, min_age_s: float) -> list[Pending]:
    """Watches the server says this worker started at least `min_age_s` ago, of a workflow whose watch
    does not run here (the caller asks only about those): the task never reached the watch (at 10,000
    workloads, during a takeover, in batches: such a watch otherwise waits for its 300 s heartbeat
    timeout). This worker knows exactly what it runs, so only its own are judged; one merely queued in a
    very busy worker costs an extra attempt, never a missed fault."""
    started = PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
    return [
        p
        for p in pending
        if p.activity_type == c.WATCH_JOB
        and p.state == started
        and p.worker == me
        and now - p.started_at >= min_age_s
    ]


@dataclass
class TakeoverStats:
    """What one takeover cost: how many workflows it listed and described, and how long it took."""

    workers: tuple[str, ...]
    listed: int = 0
    described: int = 0
    taken: int = 0
    lost_here: int = 0  # watches started for this worker that never ran here (lost_here), among `taken`
    errors: int = 0
    listed_s: float = 0.0
    total_s: float = 0.0

    def render(self) -> str:
        return (
            f"listed {self.listed} running workflows in {self.listed_s:.1f} s, described {self.described} "
            f"(not watched here), took over {self.taken} activities in {self.total_s:.1f} s"
            + (
                f", {self.lost_here} of them started for this worker but never run here"
                if self.lost_here
                else ""
            )
            + (f", {self.errors} errors" if self.errors else "")
        )


@dataclass
class Presence:
    client: Client
    cluster: str
    cluster_queue: str
    identity: str
    timeout_s: float
    clock: Callable[[], float] = time.time
    # Workflow ids whose watch runs in this process: never another worker's, so not described on a loss
    # (with two workers that halves the describes; the survivor's event loop is busiest then).
    local: Callable[[], Collection[str]] = frozenset
    handled: set[str] = field(default_factory=set)
    takeovers: list[Held] = field(default_factory=list)
    noticed: dict[str, float] = field(default_factory=dict)  # identity -> when we found it gone
    # identity -> when its share is swept once more: an activity the server handed to one of the dead
    # worker's last polls after our describe (or one whose describe failed under load) would otherwise
    # stay blind until its heartbeat timeout (300 s)
    sweep_again: dict[str, float] = field(default_factory=dict)
    stats: list[TakeoverStats] = field(default_factory=list)

    @property
    def queue(self) -> str:
        return presence_queue(self.cluster_queue)

    @property
    def timing(self) -> Timing:
        return Timing(self.timeout_s)

    async def run(self) -> None:
        await asyncio.gather(self.announce(), self.announce(), self.watch_peers())

    async def announce(self) -> None:
        """Keep a short long-poll open on the presence queue: each poll refreshes our last-access time."""
        request = PollActivityTaskQueueRequest(
            namespace=self.client.namespace, task_queue=TaskQueue(name=self.queue), identity=self.identity
        )
        deadline = timedelta(seconds=self.timing.poll_s)
        while True:
            try:
                await self.client.workflow_service.poll_activity_task_queue(request, timeout=deadline)
            except RPCError as err:  # deadline passed (an idle poll), or the server is down: poll again
                if "deadline" not in str(err).lower():
                    log.debug("presence poll: %s", err)
                    await asyncio.sleep(1.0)

    async def peers(self) -> dict[str, float]:
        """Identity -> when its last poll started, as the server's poller list says."""
        resp = await self.client.workflow_service.describe_task_queue(
            DescribeTaskQueueRequest(
                namespace=self.client.namespace,
                task_queue=TaskQueue(name=self.queue),
                task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY,
            )
        )
        return {p.identity: p.last_access_time.ToSeconds() for p in resp.pollers if p.identity}

    async def watch_peers(self) -> None:
        while True:
            await asyncio.sleep(self.timing.check_s)
            try:
                await self.check_once()
            except Exception as err:  # Temporal unreachable: its own recovery re-dispatches anyway
                log.warning("presence check failed: %s", err)

    async def check_once(self) -> list[Held]:
        seen = await self.peers()
        now = self.clock()
        live = len(seen) - len(vanished(seen, now, self.timeout_s))
        telemetry.set_cluster_workers(self.cluster, live)
        gone = vanished(seen, now, self.timeout_s) - self.handled - {self.identity}
        due = {who for who, at in self.sweep_again.items() if at <= now}
        if reaper(seen, now, self.timeout_s) != self.identity:
            return []
        taken: list[Held] = []
        if gone:
            log.warning("cluster worker(s) %s stopped polling: taking over their watches", sorted(gone))
            self.noticed.update(dict.fromkeys(gone, now))
            taken += await self._take(gone, again=False)
            self.handled |= gone
            # counted from the sweep's end: at 10,000 workloads it takes ~30 s, and the watches it
            # took need a moment to start here before the next sweep can skip them
            self.sweep_again.update(dict.fromkeys(gone, self.clock() + self.timeout_s))
        if due:
            # After the first sweep every watch it took runs here, so this one describes only what is
            # still not watched here: a few reads, unless something was missed.
            for who in due:
                del self.sweep_again[who]
            taken += await self._take(due, again=True)
        return taken

    async def _take(self, dead: set[str], *, again: bool) -> list[Held]:
        taken = await self.take_over(dead)
        self.takeovers.extend(taken)
        telemetry.count_takeovers(self.cluster, len(taken))
        for who in sorted(dead):  # a worker that shut down gracefully held nothing: no report
            mine = [h for h in taken if h.worker == who]
            if mine:
                await self.report(who, mine, again=again)
        return taken

    async def report(self, who: str, taken: list[Held], *, again: bool = False) -> None:
        """Audited through ClusterWatch: which worker vanished, and how many watches it had (a second
        sweep that still finds some is a report of its own)."""
        report = c.ClusterReport(
            key=f"worker-lost/{who}" + ("/again" if again else ""),
            event_type=EventType.WORKER_LOST,
            message=f"cluster worker {who} stopped polling; {len(taken)} activities taken over by "
            f"{self.identity}" + (" on a second sweep" if again else ""),
            data={"worker": who, "taken_over": len(taken), "by": self.identity, "second_sweep": again},
        )
        await report_to_cluster(self.client, self.cluster, report)

    async def take_over(self, dead: set[str]) -> list[Held]:
        """Fail every started watch/discovery activity a dead worker holds; Temporal retries it here.

        The candidates are the cluster's running workflows minus those whose watch runs here (`local`):
        with two cluster workers that is exactly the lost worker's share (plus watches between two
        slices), so every describe finds something to take. Each candidate is described once (a read)
        and its activities failed as soon as its description arrives, while the listing continues."""
        started = time.monotonic()
        sem = asyncio.Semaphore(DESCRIBE_PARALLELISM)
        taken: list[Held] = []
        stats = TakeoverStats(workers=tuple(sorted(dead)))

        async def one(workflow_id: str, run_id: str) -> None:
            async with sem:
                # One workflow that cannot be described (gone, a timeout under load) must not stop the
                # others; a watch missed here is still retried by its heartbeat timeout.
                try:
                    desc = await self.client.workflow_service.describe_workflow_execution(
                        DescribeWorkflowExecutionRequest(
                            namespace=self.client.namespace,
                            execution=WorkflowExecution(workflow_id=workflow_id, run_id=run_id),
                        ),
                        timeout=timedelta(seconds=30),
                    )
                except (TimeoutError, RPCError):
                    stats.errors += 1
                    return
                stats.described += 1
                pending = [
                    Pending(
                        p.activity_id,
                        p.activity_type.name,
                        int(p.state),
                        p.last_worker_identity,
                        p.last_started_time.ToSeconds(),
                    )
                    for p in desc.pending_activities
                ]
                lost: list[Pending] = []
                now = self.clock()
                if workflow_id not in self.local():  # asked now: it may have started here since the listing
                    lost = lost_here(pending, self.identity, now, self.timeout_s)
                for p in lost:
                    log.warning(
                        "watch %s of %s was started by this worker %.0f s ago but never ran here: failing it",
                        p.activity_id,
                        workflow_id,
                        now - p.started_at,
                    )
                stats.lost_here += len(lost)
                for p in [*held_by(pending, dead), *lost]:
                    try:
                        await self.client.get_async_activity_handle(
                            workflow_id=workflow_id, run_id=run_id, activity_id=p.activity_id
                        ).fail(ApplicationError(why(p, dead)))
                    except RPCError:  # completed or retried meanwhile: nothing left to take
                        stats.errors += 1
                        continue
                    taken.append(Held(workflow_id, run_id, p.activity_id, p.activity_type, p.worker))

        jobs = []
        mine = set(self.local())
        request = ListWorkflowExecutionsRequest(
            namespace=self.client.namespace, query=self._query(), page_size=1000
        )
        while True:
            page = await self.client.workflow_service.list_workflow_executions(request)
            for wf in page.executions:
                stats.listed += 1
                if wf.execution.workflow_id in mine:
                    continue
                jobs.append(asyncio.create_task(one(wf.execution.workflow_id, wf.execution.run_id)))
            if not page.next_page_token:
                break
            request.next_page_token = page.next_page_token
        stats.listed_s = time.monotonic() - started
        await asyncio.gather(*jobs)
        stats.taken = len(taken)
        stats.total_s = time.monotonic() - started
        self.stats.append(stats)
        for held in taken:
            log.info(
                "took over %s %s of %s from vanished worker %s",
                held.activity_type,
                held.activity_id,
                held.workflow_id,
                held.worker,
            )
        log.warning("takeover of %s: %s", ", ".join(stats.workers), stats.render())
        return taken

    def _query(self) -> str:
        # The job workflows' ids start with the cluster's name (a longer cluster name sharing the prefix
        # only costs a describe: its activities ran on other workers).
        return (
            "ExecutionStatus = 'Running' AND (WorkflowId STARTS_WITH 'trainguard-job-"
            f"{self.cluster}-' OR WorkflowId = '{cluster_workflow_id(self.cluster)}')"
        )

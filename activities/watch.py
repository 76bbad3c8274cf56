"""watch_job: follow one workload until something matters, inside one heartbeating activity.

The loop polls the shared scheduler snapshot and tails the job's log from a byte cursor; the cursor and
progress summary live in heartbeat details, so a retried attempt resumes where the last one stopped.
It returns an Observation (compact findings, never raw log text) as soon as something matters, or after
a bounded slice so the workflow can continue-as-new.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from temporalio import activity

from activities.snapshot_cache import SnapshotCache
from trainguard import contracts as c
from trainguard.attribution.rules import read_as_evidence
from trainguard.checkpoint_dir import allowed_dir, filesystem_space, newest_checkpoint
from trainguard.detection.analyzer import LogAnalyzer
from trainguard.detection.collectives import allocation_layout
from trainguard.detection.progress import ProgressConfig
from trainguard.detection.scheduler import scheduler_findings
from trainguard.detection.severity import (
    SUPERSEDED,
    job_is_running,
    launcher_verdict,
    shows_running_job_failing,
)
from trainguard.identity import matches_workload
from trainguard.logsources.base import LogSource
from trainguard.logsources.nodelogs import NodeLogFollower, NodeSourceFactory
from trainguard.models import (
    Attribution,
    Category,
    Finding,
    FindingSource,
    JobSnapshot,
    LogCursor,
    NodeSnapshot,
    Observation,
    ObservationKind,
    ProgressState,
)
from trainguard.optin import MalformedComment, parse_opt_in
from trainguard.slurm.access import SlurmAccess
from trainguard.slurm.runner import CommandError
from trainguard.slurm.states import (
    CANCELLED,
    COMPLETED,
    COMPLETING,
    NODE_UNUSABLE_WORDS,
    RUNNING,
    TERMINAL_STATES,
)

log = logging.getLogger(__name__)

FINISHED = TERMINAL_STATES
# Signatures that only say a peer went away; alone they wait for Slurm's verdict on the nodes.
PEER_LOSS_PATTERNS = frozenset({"gloo_peer_lost", "nccl_remote_error"})
# A crashing job usually leaves RUNNING within seconds of its first error line; wait this long (the
# default of watch.slurm_verdict_wait_s) for Slurm to say so before reporting evidence that alone may not
# touch a running job (it is then recorded and watched), so a real crash is attributed with its log
# evidence and Slurm's exit together.
RUNNING_GRACE_S = 45.0
CHECKPOINT_FS_FULL = "checkpoint_fs_full"
MAX_CONTEXT = 20
# Findings a watch hands its workflow (they enter its history); of them at most EVIDENCE_KEPT non-fatal
# native-crash evidence findings, which never take the last EVIDENCE_RESERVE places from fatal ones.
MAX_FINDINGS = 50
EVIDENCE_KEPT = 6
EVIDENCE_RESERVE = 10
SourceFactory = Callable[[JobSnapshot, str], LogSource]


@dataclass(frozen=True)
class CheckpointLocator:
    """Where a job's checkpoints are: its opt-in "checkpoint_dir", else the cluster's pattern. Only
    directories under the job's work dir (at least two levels deep) or under `roots` are read."""

    pattern: str = ""
    roots: tuple[str, ...] = ()
    interval_s: float = 60.0

    def directory(self, job: JobSnapshot) -> str | None:
        wanted: str | None = None
        try:
            opt_in = parse_opt_in(job.comment)
        except MalformedComment:
            opt_in = None
        if opt_in is not None and opt_in.checkpoint_dir:
            wanted = opt_in.checkpoint_dir
        elif self.pattern:
            try:
                wanted = self.pattern.format_map(
                    {"job_id": job.array_job_id or job.job_id, "user": job.user, "work_dir": job.work_dir}
                )
            except (KeyError, IndexError, ValueError):
                return None
        if not wanted:
            return None
        roots = list(self.roots)
        if job.work_dir and len([p for p in job.work_dir.split("/") if p]) >= 2:
            roots.append(job.work_dir)
        path = allowed_dir(wanted, tuple(roots))
        return str(path) if path is not None else None


GpuProbe = Callable[[Sequence[str]], Awaitable[list[Finding]]]


@dataclass
class _Progress:
    """Mutable per-attempt state of one watch activity run."""

    cursor: LogCursor
    findings: list[Finding] = field(default_factory=list)
    first_signal_at: float | None = None
    settle_until: float | None = None
    # The stall's probe of the batch host's slurmd: (node, why) when it did not answer.
    probed: bool = False
    silent_batch_host: tuple[str, str] | None = None


class JobWatcher:
    def __init__(
        self,
        client: SlurmAccess,
        cache: SnapshotCache,
        sources: SourceFactory,
        *,
        max_read_bytes: int = 4 * 1024 * 1024,
        clock: Callable[[], float] = time.time,
        gpu_probe: GpuProbe | None = None,
        gpu_interval_s: float = 15.0,
        progress_config: ProgressConfig | None = None,
        slurm_verdict_wait_s: float = RUNNING_GRACE_S,
        checkpoints: CheckpointLocator | None = None,
        node_sources: NodeSourceFactory | None = None,
    ) -> None:
        self.checkpoints = checkpoints
        self.node_sources = node_sources
        self.progress_config = progress_config
        self.slurm_verdict_wait_s = slurm_verdict_wait_s
        self.client = client
        self.cache = cache
        self.sources = sources
        self.max_read_bytes = max_read_bytes
        self.clock = clock
        self.gpu_probe = gpu_probe
        self.gpu_interval_s = gpu_interval_s

    async def find_job(self, inp: c.WatchInput) -> JobSnapshot | None:
        known = inp.last_job.restart_count if inp.last_job else inp.phase.attempt_restarts
        for job in self.cache.jobs(inp.workload.job_id):
            if matches_workload(inp.workload, job, known):
                return job
        # Not in the shared snapshot (just submitted, or aged out): ask Slurm about this one job.
        single = await self.client.job(inp.workload.job_id)
        if single is not None and matches_workload(inp.workload, single, known):
            return single
        if single is None and inp.workload.job_id.isdigit():
            # slurmctld forgot it (MinJobAge): slurmdbd may still know how it ended.
            finished = await self.client.finished_job(inp.workload.job_id)
            if finished is not None and matches_workload(inp.workload, finished, known):
                return finished
        return None

    async def watch(self, inp: c.WatchInput, heartbeat: Callable[..., None]) -> c.WatchResult:
        details = _resume_details()
        cursor = details.cursor if details else inp.cursor
        progress = details.progress if details else inp.progress
        stdout_path = (details.stdout_path if details else "") or inp.stdout_path
        analyzer: LogAnalyzer | None = None
        state = _Progress(cursor=cursor)
        if details and details.findings:
            # Findings read before a crash are past the heartbeated cursor: without these they are lost.
            state.findings = list(details.findings)
            state.first_signal_at = details.first_signal_at
            state.settle_until = self.clock()
        # A retried watch knows the allocation its predecessor saw, even when the workflow has none yet.
        prev = details.job if details and details.job else inp.last_job
        deadline = self.clock() + inp.slice_s
        phase = inp.phase
        last_gpu_probe = 0.0
        last_checkpoint_scan = float("-inf")
        node_logs: dict[str, NodeLogFollower] = {}
        heartbeat_every = _heartbeat_interval()
        last_heartbeat = float("-inf")
        heartbeated_findings = 0

        def result(kind: ObservationKind, job: JobSnapshot | None) -> c.WatchResult:
            prog = analyzer.progress if analyzer is not None else progress
            if kind == ObservationKind.FAILURE and analyzer is not None and job_is_running(job):
                state.findings[:] = _superseded(state.findings, analyzer.last_progress_offset)
            return c.WatchResult(
                observation=Observation(
                    kind=kind,
                    job=job,
                    findings=tuple(state.findings),
                    progress=prog,
                    log_offset=state.cursor.offset,
                    observed_at=self.clock(),
                    first_signal_at=state.first_signal_at,
                    usable_nodes=_usable_nodes(self.cache.nodes) if kind == ObservationKind.FAILURE else (),
                ),
                cursor=state.cursor,
                stdout_path=stdout_path,
            )

        while True:
            await self.cache.get()
            now = self.clock()
            job = await self.find_job(inp)
            if job is None:
                return result(ObservationKind.GONE, prev)
            if not stdout_path:
                full = await self.client.job(job.job_id)
                stdout_path = (full.stdout_path if full else "") or job.stdout_path
            if analyzer is None:
                analyzer = LogAnalyzer(progress, config=self.progress_config, node_of_rank=_rank_to_node(job))
            progress_before = analyzer.progress_lines
            if stdout_path:
                source = self.sources(job, stdout_path)
                chunk = await source.read(state.cursor, self.max_read_bytes)
                state.cursor = chunk.cursor
                if chunk.data:
                    found = analyzer.feed(
                        chunk.data, now=now, base_offset=chunk.cursor.offset - len(chunk.data)
                    )
                    found = [f for f in found if not _slurm_verdict_text(f)]
                    if not phase.failure_handled:
                        self._collect(state, found, now, inp.settle_s)
            if self.node_sources is not None and not phase.failure_handled and job.state == RUNNING:
                found_on_nodes = await self._poll_node_logs(job, node_logs, now)
                self._collect(state, found_on_nodes, now, inp.settle_s)
            if not phase.failure_handled and job.state == RUNNING:
                hang = analyzer.check_hang(now)
                # Only a cause the log names (an initiating error, a lost peer) explains the stall;
                # collective timeouts (gloo's, NCCL's watchdog) are the stall seen from the waiting ranks.
                logged = any(
                    f.fatal
                    and f.source == FindingSource.LOG
                    and (not f.cascade or f.pattern_id in PEER_LOSS_PATTERNS)
                    for f in state.findings
                )
                if hang is not None and logged:
                    # The log already says why training stopped (a rank's error, a lost peer): the stall
                    # is its consequence. It still shows the job failing, but it decides nothing.
                    hang = hang.model_copy(update={"cascade": True})
                # The detector reports the stall on every poll while it lasts: keep one, or the repeats
                # fill the bounded findings and crowd out Slurm's verdict on the nodes (a lost peer's
                # wait then runs out and the stall decides instead of the dead node).
                if hang is not None and not any(f.pattern_id == hang.pattern_id for f in state.findings):
                    self._collect(state, [hang], now, 0.0)
                if hang is not None and not hang.cascade and not state.probed:
                    # A stall with nothing in the log is also what the death of the node running srun
                    # looks like (srun dies with it, so no line is printed). Ask that node's slurmd; if it
                    # does not answer, the decision waits (bounded) for Slurm's verdict on the node.
                    state.probed = True
                    state.silent_batch_host = await self.client.silent_batch_host(job.job_id)
                    if state.silent_batch_host is not None:
                        log.warning(
                            "job %s stalled and the slurmd of its batch host %s does not answer (%s): "
                            "waiting up to %.0f s for Slurm's verdict on the node",
                            job.job_id,
                            *state.silent_batch_host,
                            self.slurm_verdict_wait_s,
                        )
            if not phase.failure_handled:
                sched = scheduler_findings(job, self.cache.nodes, prev)
                if prev is not None and _requeued_by_slurm(job, prev, phase):
                    # The attempt we watched ended and Slurm requeued it itself (NODE_FAIL), perhaps while
                    # no worker watched: the pending job lists no nodes, so ask about the ones it ran on.
                    sched += scheduler_findings(prev, self.cache.nodes, prev)
                self._collect(state, [f for f in sched if f.fatal], now, 0.0)
            # Besides its rhythm, the GPU metrics are read once when a failure starts to settle: they
            # corroborate (or add) hardware evidence on the job's nodes before the decision.
            corroborate = state.first_signal_at is not None and last_gpu_probe < state.first_signal_at
            if (
                self.gpu_probe is not None
                and not phase.failure_handled
                and job.state == RUNNING
                and job.nodes
                and (now - last_gpu_probe >= self.gpu_interval_s or corroborate)
            ):
                last_gpu_probe = now
                gpu = await self.gpu_probe(job.nodes)
                self._collect(state, [f for f in gpu if f.fatal], now, inp.settle_s)

            settling = state.settle_until is not None
            if self.checkpoints is not None and (
                settling or now - last_checkpoint_scan >= self.checkpoints.interval_s
            ):
                last_checkpoint_scan = now
                no_space = await self._scan_checkpoints(job, analyzer, check_space=settling)
                reported = any(f.pattern_id == CHECKPOINT_FS_FULL for f in state.findings)
                if no_space is not None and not reported:
                    self._collect(state, [no_space], now, 0.0)
            new_progress = analyzer.progress_lines > progress_before
            if job.state == CANCELLED:
                # A user's or an administrator's decision, read from Slurm's own state: it ends the
                # workload whatever the log says (its "CANCELLED AT" line is not a failure).
                state.findings.clear()
                return result(ObservationKind.STATE_CHANGE, await self._with_canceller(job))
            if job.state == COMPLETED and job.restart_count >= phase.attempt_restarts:
                # The job succeeded: error lines in its log (an earlier attempt's) do not make it fail.
                state.findings.clear()
                return result(ObservationKind.COMPLETED, job)
            settled = state.settle_until is not None and (now >= state.settle_until or job.state in FINISHED)
            if settled and self._awaiting_slurm(state, job, now, analyzer.last_progress_offset):
                settled = False
            if settled:
                job = await self._current(inp, job)
                fatal = any(f.fatal for f in state.findings)
                kind = ObservationKind.FAILURE if fatal else ObservationKind.STRAGGLER
                if kind == ObservationKind.FAILURE and inp.context and job.state != RUNNING:
                    # The job stopped: what was watched while it ran is part of the story.
                    known = set(state.findings)
                    state.findings[:0] = [f for f in inp.context if f not in known][:MAX_CONTEXT]
                return result(kind, job)
            if state.settle_until is None:
                if phase.awaiting_progress and new_progress and job.state == RUNNING:
                    return result(ObservationKind.PROGRESS, job)
                if prev is not None and _changed(prev, job):
                    return result(ObservationKind.STATE_CHANGE, job)
                # A job with nodes: the workflow knows no allocation of it yet; tell it now, not at the
                # slice's end (requeued by Slurm, pending with no nodes, only these can be excluded).
                if prev is None and (
                    job.nodes or job.restart_count > phase.attempt_restarts or job.state in FINISHED
                ):
                    return result(ObservationKind.STATE_CHANGE, job)
                if now >= deadline:
                    return result(ObservationKind.SLICE_END, job)
            prev = job
            # Heartbeats are billed Temporal actions: send one per interval, but at once when there are
            # findings not yet reported (they must survive a crash of this worker).
            pending = len(state.findings) != heartbeated_findings
            if pending or now - last_heartbeat >= heartbeat_every:
                last_heartbeat, heartbeated_findings = now, len(state.findings)
                heartbeat(
                    c.WatchResult(
                        observation=Observation(
                            kind=ObservationKind.SLICE_END,
                            job=job,
                            progress=analyzer.progress,
                            findings=tuple(state.findings),
                            first_signal_at=state.first_signal_at,
                        ),
                        cursor=state.cursor,
                        stdout_path=stdout_path,
                    )
                )
            await asyncio.sleep(inp.poll_interval_s)

    async def _current(self, inp: c.WatchInput, cached: JobSnapshot) -> JobSnapshot:
        """Slurm's view of the job now, for a report that a decision rests on. The shared snapshot can be
        seconds old (its interval stretches with its cost, e.g. over SSH): long enough for a job to
        start, fail and still read PENDING there, which made a fresh job look requeued by Slurm (held
        for containment) and hid the allocation its evidence names."""
        try:
            fresh = await self.client.job(cached.job_id)
        except (CommandError, ValueError, OSError):
            return cached
        known = inp.last_job.restart_count if inp.last_job else inp.phase.attempt_restarts
        return fresh if fresh is not None and matches_workload(inp.workload, fresh, known) else cached

    async def _with_canceller(self, job: JobSnapshot) -> JobSnapshot:
        if job.cancelled_by:
            return job
        try:
            who = await self.client.cancelled_by(job.job_id)
        except (CommandError, ValueError, OSError):
            who = ""
        return job.model_copy(update={"cancelled_by": who}) if who else job

    async def _poll_node_logs(
        self, job: JobSnapshot, followers: dict[str, NodeLogFollower], now: float
    ) -> list[Finding]:
        """Hardware evidence from the kernel logs of the nodes the job runs on now (a node log is
        followed from when this watch first saw the job on it)."""
        assert self.node_sources is not None
        out: list[Finding] = []
        for node in job.nodes:
            follower = followers.get(node)
            if follower is None:
                try:
                    follower = NodeLogFollower.create(node, self.node_sources(node))
                except ValueError as err:
                    log.warning("no node log for %r: %s", node[:80], err)
                    continue
                followers[node] = follower
            try:
                out.extend(await follower.poll(now, self.max_read_bytes))
            except OSError as err:  # an unreadable node log is no evidence, not a failed watch
                log.info("node log of %s unreadable: %s", node, err)
        return out

    async def _scan_checkpoints(
        self, job: JobSnapshot, analyzer: LogAnalyzer, *, check_space: bool = False
    ) -> Finding | None:
        """Credit the newest complete checkpoint; while a failure settles, also say whether the
        checkpoint filesystem is full (a framework's failed write often does not say why: torch.save
        reports ENOSPC as `unexpected pos N vs M`)."""
        assert self.checkpoints is not None
        directory = self.checkpoints.directory(job)
        if directory is None:
            return None
        try:
            info = await asyncio.to_thread(newest_checkpoint, directory)
        except OSError as err:  # an unreadable directory is no checkpoint, not a failed watch
            log.info("checkpoint dir of job %s unreadable: %s", job.job_id, err)
            info = None
        if info is not None:
            analyzer.credit_checkpoint(info.iteration)
        if not check_space:
            return None
        space = await asyncio.to_thread(filesystem_space, directory)
        if space is None or not space.full:
            return None
        return Finding(
            source=FindingSource.LOG,
            pattern_id=CHECKPOINT_FS_FULL,
            category=Category.STORAGE_IO,
            attribution=Attribution.INFRASTRUCTURE,
            line=space.describe()[:300],
            timestamp=self.clock(),
            detail="filesystem full",
            priority=3,  # measured on the filesystem itself, not read from text
        )

    def _awaiting_slurm(
        self, state: _Progress, job: JobSnapshot, now: float, last_progress_offset: int = -1
    ) -> bool:
        """Whether to hold a decision for Slurm's verdict, bounded by slurm_verdict_wait_s from the first
        signal. Cases: the job is COMPLETING (Slurm's final state is seconds away); the job is still RUNNING
        and no finding shows it failing (srun reports a killed rank a moment before it tears the step down;
        a running job is only touched on evidence that it fails); every fatal finding is a cascade and one
        says a peer was lost (the peer's node may have died, which only Slurm can tell); the job stalled and
        the slurmd of its batch host does not answer (the same). Slurm ending the job, or marking one of its
        nodes down, arrives as a scheduler finding and ends the wait.
        A launcher's verdict that a rank died (srun's `task 2: Killed`) shows the job failing without
        waiting for srun's teardown, unless training went on after it (a script that retries its step,
        or a step that is not the training): then Slurm decides."""
        fatal = [f for f in state.findings if f.fatal]
        if not fatal or any(f.category.value == "straggler" for f in state.findings):
            return False
        started = state.first_signal_at if state.first_signal_at is not None else now
        if now >= started + self.slurm_verdict_wait_s:
            return False
        # A lost peer stops everyone's progress too: the hang it causes does not decide either.
        deciding = [f for f in fatal if not f.cascade and f.source != FindingSource.PROGRESS]
        if not deciding and any(f.pattern_id in PEER_LOSS_PATTERNS for f in fatal):
            return True
        # Nor does a stall whose batch host's slurmd is silent: the node may be dead, which Slurm decides.
        if not deciding and state.silent_batch_host is not None:
            return True
        # Slurm is ending the job and says how in a moment: a user's cancel, a time limit, a node failure or
        # the failure the log shows. 22.05 prints no CANCELLED until the steps are gone, so a cancel's
        # `task N: Terminated` read meanwhile would become advice on a job its user has just cancelled.
        if job.state == COMPLETING:
            return True
        if not job_is_running(job):
            return False
        failing = [f for f in fatal if shows_running_job_failing(f, job)]
        if failing and all(launcher_verdict(f) for f in failing):
            said = max((f.offset for f in failing if f.offset is not None), default=None)
            return said is None or last_progress_offset > said
        return not failing

    @staticmethod
    def _collect(state: _Progress, found: list[Finding], now: float, settle_s: float) -> None:
        relevant = [f for f in found if f.fatal or f.category.value == "straggler"]
        # A native crash's frames and a logged machine check say whose code crashed (attribution.rules.
        # native_crash_site), a launcher's teardown line which kills are its own (teardown_kills_as_cascades);
        # they decide nothing, so they never start the settle window, they are kept only once a failure
        # signal exists, and at most EVIDENCE_KEPT of them, leaving room for fatal findings.
        evidence = [f for f in found if read_as_evidence(f)]
        if relevant and state.first_signal_at is None:
            state.first_signal_at = now
            state.settle_until = now + settle_s
        # bounded: the findings enter workflow history
        room = MAX_FINDINGS - len(state.findings)
        if relevant and room > 0:
            state.findings.extend(relevant[:room])
        if evidence and state.first_signal_at is not None:
            kept = sum(1 for f in state.findings if read_as_evidence(f))
            room = min(EVIDENCE_KEPT - kept, MAX_FINDINGS - EVIDENCE_RESERVE - len(state.findings))
            if room > 0:
                state.findings.extend(evidence[:room])


def _requeued_by_slurm(job: JobSnapshot, prev: JobSnapshot, phase: c.Phase) -> bool:
    return (
        bool(prev.nodes)
        and prev.restart_count == phase.attempt_restarts
        and job.restart_count > phase.attempt_restarts
        and not job.nodes
        and phase.restart_requested_at is None
    )


def _superseded(findings: Sequence[Finding], last_progress_offset: int) -> list[Finding]:
    """Launcher verdicts followed by more training are marked so they do not show the job failing."""
    out: list[Finding] = []
    for f in findings:
        if launcher_verdict(f) and f.offset is not None and last_progress_offset > f.offset:
            f = f.model_copy(update={"detail": SUPERSEDED})
        out.append(f)
    return out


def _slurm_verdict_text(finding: Finding) -> bool:
    """A log line that claims what Slurm did to the job (`*** JOB 7 ON n1 CANCELLED AT ... ***`, "DUE TO
    TIME LIMIT", "DUE TO PREEMPTION"). The job's own text can say anything; cancellation, preemption and
    time limit are read from Slurm's state (CANCELLED, PREEMPTED, TIMEOUT) by scheduler_findings."""
    return finding.source == FindingSource.LOG and finding.category == Category.PREEMPTION_OR_TIMELIMIT


UNUSABLE = NODE_UNUSABLE_WORDS


def _usable_nodes(nodes: dict[str, NodeSnapshot]) -> tuple[str, ...]:
    def usable(node: NodeSnapshot) -> bool:
        words = [node.state.lower(), *(flag.lower() for flag in node.flags)]
        return not any(bad in word for word in words for bad in UNUSABLE)

    return tuple(sorted(name for name, node in nodes.items() if usable(node)))


def _rank_to_node(job: JobSnapshot) -> Callable[[int], str | None]:
    """Slurm's default block distribution of the allocation's tasks (srun, one task per rank): the first
    node runs ranks 0..k-1, the next k.., where k is the tasks on that node (Slurm gives the first nodes
    one more when the count does not divide). With the task count unknown, one task per node.
    torchrun numbers its workers itself, so under torchrun this is a guess; lines that name their node
    (srun's errors, NCCL's host prefixes) come first in the analyzer."""
    return allocation_layout(job.nodes, job.num_tasks)


def _heartbeat_interval() -> float:
    """Three quarters of the activity's heartbeat timeout (a margin for a busy event loop). Heartbeats are
    billed Temporal actions; at 2,000 workloads and a 300 s timeout, heartbeating every poll measured
    28.5 per workload-hour and every 150 s 28.7 (the SDK's throttle adds buffered sends)."""
    try:
        timeout = activity.info().heartbeat_timeout
    except RuntimeError:  # called outside an activity (unit tests)
        return 0.0
    return 0.75 * timeout.total_seconds() if timeout else 0.0


def _changed(prev: JobSnapshot, job: JobSnapshot) -> bool:
    return (prev.state, prev.restart_count, prev.held) != (job.state, job.restart_count, job.held)


@dataclass(frozen=True)
class _Details:
    cursor: LogCursor
    progress: ProgressState
    stdout_path: str
    findings: tuple[Finding, ...] = ()
    first_signal_at: float | None = None
    job: JobSnapshot | None = None  # the last snapshot the crashed attempt saw (its allocation)


def _resume_details() -> _Details | None:
    try:
        info = activity.info()
    except RuntimeError:
        return None
    if not info.heartbeat_details:
        return None
    try:
        raw = c.WatchResult.model_validate(info.heartbeat_details[0])
    except ValueError:  # details from an older worker version: start from the workflow's cursor
        log.warning("ignoring undecodable heartbeat details for %s", info.workflow_id)
        return None
    obs = raw.observation
    return _Details(
        cursor=raw.cursor,
        progress=obs.progress,
        stdout_path=raw.stdout_path,
        findings=obs.findings,
        first_signal_at=obs.first_signal_at,
        job=obs.job,
    )

"""Slurm operations TrainGuard needs, each checking Slurm's actual state first (idempotent).

A controller that restarts mid-recovery calls the same action again; the check-before-act here
turns a repeat into `ActionResult(performed=False)` instead of a second requeue.
Behaviour of Slurm 22.05 that these rules rely on is recorded in deploy/local/README.md.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence

from trainguard.models import ActionResult, ActionStep, ClusterSnapshot, JobSnapshot, NodeSnapshot
from trainguard.slurm import commands, incremental, offload
from trainguard.slurm.errors import AmbiguousOutputError, SlurmReportedError
from trainguard.slurm.formats import detect_format, parse_jobs, parse_nodes, uses_data_parser
from trainguard.slurm.formats.sacct_text import accounting_configured, parse_sacct_job
from trainguard.slurm.parsers import load_document, parse_scontrol_job, parse_scontrol_nodes
from trainguard.slurm.runner import CommandError, CommandResult, Runner
from trainguard.slurm.states import (
    ACTIVE_STATES,
    NEVER_REQUEUE_STATES,
    PENDING,
    REQUEUING_STATES,
    TERMINAL_STATES,
)

log = logging.getLogger(__name__)

# stderr fragments meaning "slurmctld is (temporarily) unreachable", not "Slurm said no".
TRANSIENT_MARKERS = (
    "Unable to contact slurm controller",
    "Socket timed out",
    "Connection refused",
    "Connection timed out",
    "Zero Bytes were transmitted",
    "Slurm backup controller in standby mode",
    "Transport endpoint is not connected",
    "Resource temporarily unavailable",
    "Insane message length",
)
UNKNOWN_JOB_MARKERS = ("Invalid job id specified",)
NOT_PENDING_MARKERS = ("no longer pending execution", "Job is no longer pending")
ALREADY_PENDING_MARKERS = ("Job is pending execution", "is pending execution")
QUERY_TIMEOUT_S = 30.0
DETAIL_CHUNK = 200  # job ids per `squeue -j` detail read (argv stays short)
ACTION_TIMEOUT_S = 20.0


class JobGoneError(CommandError):
    """Slurm no longer knows the job (never existed, or purged after MinJobAge)."""

    def __init__(self, job_id: str) -> None:
        super().__init__(("scontrol", "show", "job", job_id), 1, "Invalid job id specified", retryable=False)
        self.job_id = job_id


def is_transient(stderr: str) -> bool:
    return any(marker in stderr for marker in TRANSIENT_MARKERS)


def raise_for(result: CommandResult) -> CommandResult:
    """Turn a failed Slurm command into CommandError, retryable when slurmctld was unreachable."""
    if result.returncode != 0:
        text = result.stderr or result.stdout
        raise CommandError(result.argv, result.returncode, text, retryable=is_transient(text))
    return result


def _contains(error: CommandError, markers: Sequence[str]) -> bool:
    return any(marker in error.stderr for marker in markers)


def mentions_trainguard(job: JobSnapshot) -> bool:
    """Jobs whose details are re-read on every snapshot: every opted-in job (and a few that only look so)."""
    return "trainguard" in job.comment


def _parse_snapshot(jobs_text: str, nodes_text: str) -> tuple[str, list[JobSnapshot], list[NodeSnapshot]]:
    jobs_doc = load_document(jobs_text, "squeue --json")
    jobs = parse_jobs(jobs_doc)
    return detect_format(jobs_doc), jobs, parse_nodes(load_document(nodes_text, "nodes --json"))


def _format_of(text: str) -> str:
    return detect_format(load_document(text, "squeue --json"))


def _parse_jobs_text(text: str) -> list[JobSnapshot]:
    return parse_jobs(load_document(text, "squeue --json"))


def _parse_states_text(text: str) -> dict[str, str]:
    return incremental.parse_job_states(load_document(text, "squeue --only-job-state"))


def _parse_nodes_text(text: str) -> list[NodeSnapshot]:
    return parse_nodes(load_document(text, "nodes --json"))


class SlurmClient:
    def __init__(
        self,
        runner: Runner,
        cluster: str,
        *,
        incremental: bool = True,
        full_every: int = 30,
        watched: Callable[[JobSnapshot], bool] | None = None,
    ) -> None:
        self.runner = runner
        self.cluster = cluster
        self.json_format: str | None = None
        """The JSON format Slurm prints (e.g. "data_parser/v0.0.42"), learnt from the first document."""
        self.incremental = incremental
        self.full_every = max(1, full_every)
        self.watched = watched or mentions_trainguard
        self._previous: tuple[JobSnapshot, ...] = ()
        self._accounting: bool | None = None
        self._cycle = 0

    # -- queries -------------------------------------------------------------------------------

    async def _query(self, argv: Sequence[str]) -> str:
        result = await self.runner.run(argv, timeout=QUERY_TIMEOUT_S)
        return raise_for(result).stdout

    def _nodes_argv(self) -> list[str]:
        """22.05's `sinfo --json` lists nodes; 23.11+ groups them, so per-node data is scontrol's."""
        if self.json_format is not None and uses_data_parser(self.json_format):
            return commands.scontrol_show_nodes_json()
        return commands.sinfo_json()

    def _incremental(self) -> bool:
        """Cheap state listing + `-j` detail reads: squeue honours -j with --json from 24.05 (v0.0.41)."""
        fmt = self.json_format or ""
        return self.incremental and uses_data_parser(fmt) and int(fmt.rsplit(".", 1)[-1]) >= 41

    async def _jobs_incremental(self) -> list[JobSnapshot]:
        self._cycle += 1
        if not self._previous or self._cycle % self.full_every == 0:
            text = await self._query(commands.squeue_json())
            return await offload.parse(_parse_jobs_text, text)
        try:
            states_text = await self._query(commands.squeue_json_states())
        except CommandError as err:
            if err.retryable:
                raise
            # This squeue refuses --only-job-state: read everything, as before, from now on.
            log.warning("cluster %s: no cheap state listing (%s); reading full snapshots", self.cluster, err)
            self.incremental = False
            text = await self._query(commands.squeue_json())
            return await offload.parse(_parse_jobs_text, text)
        job_states = await offload.parse(_parse_states_text, states_text)
        todo = incremental.plan(job_states, self._previous, self.watched)
        details: list[JobSnapshot] = []
        for start in range(0, len(todo.refresh), DETAIL_CHUNK):
            chunk = todo.refresh[start : start + DETAIL_CHUNK]
            text = await self._query(commands.squeue_json_jobs(chunk))
            details.extend(await offload.parse(_parse_jobs_text, text))
        return incremental.merge(todo.keep, details)

    async def snapshot(self) -> ClusterSnapshot:
        """All jobs and nodes: `squeue --json -t all` plus the node listing this Slurm version has.

        The first call learns the JSON format (and so the Slurm version) from squeue's `meta`, then
        picks the node command; later calls run both at once. On 24.05+ later calls read every job's
        state cheaply and details only where needed (see trainguard.slurm.incremental). Parsing runs
        in a worker thread: at 10,000 jobs it takes most of a second, which must not stall the event
        loop. A document that cannot be understood raises SlurmFormatError: never an empty snapshot.
        """
        taken_at = time.time()
        try:
            if self.json_format is None:
                jobs_text = await self._query(commands.squeue_json())
                self._learn_format(await offload.parse(_format_of, jobs_text))
                nodes_text = await self._query(self._nodes_argv())
                fmt, jobs, nodes = await offload.parse(_parse_snapshot, jobs_text, nodes_text)
                self._learn_format(fmt)
            elif self._incremental():
                jobs, nodes_text = await asyncio.gather(
                    self._jobs_incremental(), self._query(self._nodes_argv())
                )
                nodes = await offload.parse(_parse_nodes_text, nodes_text)
            else:
                jobs_text, nodes_text = await asyncio.gather(
                    self._query(commands.squeue_json()), self._query(self._nodes_argv())
                )
                fmt, jobs, nodes = await offload.parse(_parse_snapshot, jobs_text, nodes_text)
                self._learn_format(fmt)
        except SlurmReportedError as err:
            raise CommandError(commands.squeue_json(), 0, str(err), retryable=True) from None
        self._previous = tuple(jobs)
        return ClusterSnapshot(cluster=self.cluster, taken_at=taken_at, jobs=tuple(jobs), nodes=tuple(nodes))

    def _learn_format(self, fmt: str) -> None:
        if fmt != self.json_format:
            log.info("cluster %s: Slurm prints JSON format %s", self.cluster, fmt)
            self.json_format = fmt

    async def job(self, job_id: str) -> JobSnapshot | None:
        """One job via `scontrol show job -d -o`; None when Slurm does not know it."""
        argv = commands.scontrol_show_job(job_id)
        result = await self.runner.run(argv, timeout=QUERY_TIMEOUT_S)
        if result.returncode != 0 and any(m in result.stderr for m in UNKNOWN_JOB_MARKERS):
            return None
        raise_for(result)
        try:
            return parse_scontrol_job(result.stdout, job_id)
        except AmbiguousOutputError:
            # The job's own name/comment/paths imitate scontrol fields; JSON is unambiguous.
            return await self._job_from_json(job_id)

    async def _job_from_json(self, job_id: str) -> JobSnapshot | None:
        # squeue --json ignores -j in 22.05 (it reads every job): filter here; only used as a fallback.
        argv = commands.squeue_json_job(job_id)
        text = await self._query(argv)
        try:
            jobs = await offload.parse(_parse_jobs_text, text)
        except SlurmReportedError as err:
            raise CommandError(argv, 0, str(err), retryable=True) from None
        for job in jobs:
            if job.job_id == job_id or (
                job.array_job_id and f"{job.array_job_id}_{job.array_task_id}" == job_id
            ):
                return job
        return None

    async def accounting(self) -> bool:
        """Is slurmdbd configured (AccountingStorageType), so sacct knows jobs slurmctld forgot?"""
        if self._accounting is None:
            result = await self.runner.run(commands.scontrol_show_config(), timeout=QUERY_TIMEOUT_S)
            raise_for(result)
            self._accounting = accounting_configured(result.stdout)
        return self._accounting

    async def finished_job(self, job_id: str) -> JobSnapshot | None:
        """A job slurmctld no longer knows (after MinJobAge), from sacct when accounting is configured.

        None when there is no accounting or no record: then the job is really gone from Slurm's view.
        Not used by actions: a job known only to sacct cannot be acted on.
        """
        if not await self.accounting():
            return None
        return parse_sacct_job(await self._query(commands.sacct_job(job_id)), job_id)

    async def _require_job(self, job_id: str) -> JobSnapshot:
        job = await self.job(job_id)
        if job is None:
            raise JobGoneError(job_id)
        return job

    async def node(self, name: str) -> NodeSnapshot | None:
        nodes = parse_scontrol_nodes(await self._query(commands.scontrol_show_nodes()))
        return next((n for n in nodes if n.name == commands.node_name(name)), None)

    async def _act(self, argv: Sequence[str]) -> None:
        raise_for(await self.runner.run(argv, timeout=ACTION_TIMEOUT_S))

    @staticmethod
    def _done(step: ActionStep, performed: bool, detail: str, job: JobSnapshot | None = None) -> ActionResult:
        """`job` is Slurm's record read after the step (or the one that made it unnecessary)."""
        if job is None:
            return ActionResult(step=step, performed=performed, detail=detail, confirmed_at=time.time())
        return ActionResult(
            step=step,
            performed=performed,
            detail=detail,
            confirmed_at=time.time(),
            job_state=job.state,
            held=job.held,
            restart_count=job.restart_count,
        )

    async def _performed(self, step: ActionStep, detail: str, job_id: str) -> ActionResult:
        return self._done(step, True, detail, await self.job(job_id))

    # -- actions -------------------------------------------------------------------------------

    async def requeue_hold(self, job_id: str, *, expected_restarts: int) -> ActionResult:
        """Requeue the attempt `expected_restarts` and keep it held; a no-op if already done.

        A job whose restart count has moved past `expected_restarts` was already requeued (by us,
        or by Slurm itself after a node failure): then it only needs holding, if still pending.
        """
        step = ActionStep.REQUEUE_HOLD
        for _ in range(3):
            job = await self._require_job(job_id)
            if job.restart_count > expected_restarts:
                # COMPLETING here is the requeued attempt still tearing down: it turns PENDING next.
                if (job.state == PENDING or job.state in REQUEUING_STATES) and not job.held:
                    try:
                        await self._act(commands.scontrol_hold(job_id))
                    except CommandError as err:
                        if err.retryable:
                            raise
                        continue  # it started meanwhile: look again
                    detail = f"already requeued (restarts={job.restart_count}); held it"
                    return await self._performed(step, detail, job_id)
                if job.held:
                    return self._done(
                        step,
                        False,
                        f"already requeued and held (restarts={job.restart_count}, {job.state})",
                        job,
                    )
                return self._done(
                    step,
                    False,
                    f"already requeued (restarts={job.restart_count}) and {job.state} again; not touched",
                    job,
                )
            if job.state == PENDING:
                if job.held:
                    return self._done(step, False, "job is pending and already held", job)
                await self._act(commands.scontrol_hold(job_id))
                return await self._performed(step, "job was pending (not running); held it", job_id)
            if job.state in NEVER_REQUEUE_STATES:
                # Slurm would happily revive these (observed on 22.05); a finished or cancelled job
                # is the user's decision, not a failure to recover from.
                raise CommandError(
                    commands.scontrol_requeuehold(job_id),
                    None,
                    f"refusing to requeue a {job.state} job",
                    retryable=False,
                )
            if job.state in ACTIVE_STATES or job.state in TERMINAL_STATES:
                try:
                    await self._act(commands.scontrol_requeuehold(job_id))
                except CommandError as err:
                    if err.retryable or not _contains(err, ALREADY_PENDING_MARKERS):
                        raise
                    continue  # Slurm requeued it itself in between: re-evaluate
                return await self._performed(step, f"requeued and held the {job.state} job", job_id)
            raise CommandError(
                commands.scontrol_requeuehold(job_id),
                None,
                f"cannot requeue a job in state {job.state}",
                retryable=False,
            )
        raise CommandError(
            commands.scontrol_requeuehold(job_id),
            None,
            "job state kept changing during requeue",
            retryable=True,
        )

    async def set_excluded(self, job_id: str, nodes: Sequence[str]) -> ActionResult:
        """Set ExcNodeList to exactly `nodes`. Slurm accepts this only while the job is pending."""
        step = ActionStep.EXCLUDE
        wanted = sorted({commands.node_name(n) for n in nodes})
        job = await self._require_job(job_id)
        if sorted(job.excluded_nodes) == wanted:
            return self._done(
                step, False, f"ExcNodeList already {commands.node_list(wanted) or '(empty)'}", job
            )
        try:
            await self._act(commands.scontrol_set_excluded(job_id, wanted))
        except CommandError as err:
            if _contains(err, NOT_PENDING_MARKERS):
                raise CommandError(
                    err.argv,
                    err.returncode,
                    f"job {job_id} is {job.state}, not pending: Slurm changes ExcNodeList only while a job "
                    f"is pending (requeue-hold it first). Slurm said: {err.stderr}",
                    retryable=False,
                ) from None
            raise
        after = await self._require_job(job_id)
        if sorted(after.excluded_nodes) != wanted:
            raise CommandError(
                commands.scontrol_set_excluded(job_id, wanted),
                0,
                f"Slurm accepted ExcNodeList but reports {after.excluded_nodes}",
                retryable=True,
            )
        return self._done(step, True, f"ExcNodeList={commands.node_list(wanted) or '(empty)'}", after)

    async def release(self, job_id: str) -> ActionResult:
        step = ActionStep.RELEASE
        job = await self.job(job_id)
        if job is None:
            return self._done(step, False, "job is no longer known to Slurm")
        if not job.held:
            return self._done(step, False, f"job is not held ({job.state})", job)
        await self._act(commands.scontrol_release(job_id))
        return await self._performed(step, f"released the {job.state} job", job_id)

    async def cancel(self, job_id: str) -> ActionResult:
        step = ActionStep.CANCEL
        job = await self.job(job_id)
        if job is None:
            return self._done(step, False, "job is no longer known to Slurm")
        if job.state in TERMINAL_STATES:
            return self._done(step, False, f"job already finished ({job.state})", job)
        await self._act(commands.scancel(job_id))
        return await self._performed(step, f"cancelled the {job.state} job", job_id)

    async def drain(self, node: str, reason: str) -> ActionResult:
        step = ActionStep.DRAIN
        argv = commands.scontrol_drain(node, reason)  # validates before anything runs
        current = await self.node(node)
        if current is None:
            raise CommandError(argv, None, f"unknown node {node!r}", retryable=False)
        if "DRAIN" in current.flags:
            return self._done(step, False, f"{node} already {current.state} ({current.reason})")
        await self._act(argv)
        return self._done(step, True, f"{node} set to drain")

    async def resume_node(self, node: str) -> ActionResult:
        step = ActionStep.RESUME
        argv = commands.scontrol_resume(node)
        current = await self.node(node)
        if current is None:
            raise CommandError(argv, None, f"unknown node {node!r}", retryable=False)
        if "DRAIN" not in current.flags and current.state != "down":
            return self._done(step, False, f"{node} is {current.state}; nothing to resume")
        await self._act(argv)
        return self._done(step, True, f"{node} resumed")

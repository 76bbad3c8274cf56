"""Slurm reached by its commands (squeue, sinfo, scontrol, scancel) through a Runner: on this host or on a
login node over SSH. The rules of each step live in `trainguard.slurm.access.SlurmAccess`.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Callable, Sequence

from trainguard.models import ClusterSnapshot, JobSnapshot, NodeSnapshot
from trainguard.slurm import commands, incremental, offload
from trainguard.slurm.access import (
    ALREADY_PENDING_MARKERS,
    NOT_PENDING_MARKERS,
    UNKNOWN_JOB_MARKERS,
    JobGoneError,
    SlurmAccess,
)
from trainguard.slurm.errors import AmbiguousOutputError, SlurmReportedError
from trainguard.slurm.formats import detect_format, parse_jobs, parse_nodes, uses_data_parser
from trainguard.slurm.formats.sacct_text import accounting_configured, parse_sacct_job
from trainguard.slurm.formats.sstat_text import node_not_answering
from trainguard.slurm.parsers import load_document, parse_scontrol_job, parse_scontrol_nodes
from trainguard.slurm.runner import CommandError, CommandResult, Runner
from trainguard.slurm.states import ACTIVE_STATES, NEVER_REQUEUE_STATES

log = logging.getLogger(__name__)

__all__ = [
    "ACTIVE_STATES",
    "ALREADY_PENDING_MARKERS",
    "NEVER_REQUEUE_STATES",
    "NOT_PENDING_MARKERS",
    "UNKNOWN_JOB_MARKERS",
    "JobGoneError",
    "SlurmClient",
    "is_transient",
    "raise_for",
]

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
QUERY_TIMEOUT_S = 30.0
# sstat waits MessageTimeout (10 s by default) for a slurmd that does not answer; past this, no claim.
PROBE_TIMEOUT_S = 25.0
CANCELLED_BY = re.compile(r"CANCELLED by (\S+)")
DETAIL_CHUNK = 200  # job ids per `squeue -j` detail read (argv stays short)
ACTION_TIMEOUT_S = 20.0


def is_transient(stderr: str) -> bool:
    return any(marker in stderr for marker in TRANSIENT_MARKERS)


def raise_for(result: CommandResult) -> CommandResult:
    """Turn a failed Slurm command into CommandError, retryable when slurmctld was unreachable."""
    if result.returncode != 0:
        text = result.stderr or result.stdout
        raise CommandError(result.argv, result.returncode, text, retryable=is_transient(text))
    return result


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


class SlurmClient(SlurmAccess):
    """`runner` also serves the job output files (FileLogSource) in the worker."""

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

    async def node(self, name: str) -> NodeSnapshot | None:
        nodes = parse_scontrol_nodes(await self._query(commands.scontrol_show_nodes()))
        return next((n for n in nodes if n.name == commands.node_name(name)), None)

    async def _act(self, argv: Sequence[str]) -> None:
        raise_for(await self.runner.run(argv, timeout=ACTION_TIMEOUT_S))

    # -- one command per primitive ----------------------------------------------------------

    async def _hold(self, job_id: str) -> None:
        await self._act(commands.scontrol_hold(job_id))

    async def _requeue_hold(self, job_id: str) -> None:
        await self._act(commands.scontrol_requeuehold(job_id))

    async def _release(self, job_id: str) -> None:
        await self._act(commands.scontrol_release(job_id))

    async def cancelled_by(self, job_id: str) -> str:
        """Who cancelled the job, from accounting (`CANCELLED by <uid>`); "" when not known."""
        if not await self.accounting():
            return ""  # without slurmdbd Slurm does not record who cancelled
        result = await self.runner.run(commands.sacct_state(job_id), timeout=QUERY_TIMEOUT_S)
        if result.returncode != 0:
            return ""  # sacct failed (database away): not known
        for line in result.stdout.splitlines():
            match = CANCELLED_BY.match(line.strip())
            if match:
                return match.group(1)
        return ""

    async def silent_batch_host(self, job_id: str) -> tuple[str, str] | None:
        try:
            result = await self.runner.run(commands.sstat_batch(job_id), timeout=PROBE_TIMEOUT_S)
        except (CommandError, TimeoutError) as err:  # no sstat, SSH down: not known, so no claim
            log.debug("sstat probe of job %s failed: %s", job_id, err)
            return None
        return node_not_answering(result.stderr)

    async def _set_excluded(self, job_id: str, nodes: Sequence[str]) -> None:
        await self._act(commands.scontrol_set_excluded(job_id, nodes))

    async def _cancel(self, job_id: str) -> None:
        await self._act(commands.scancel(job_id))

    async def _drain(self, node: str, reason: str) -> None:
        await self._act(commands.scontrol_drain(node, reason))

    async def _resume(self, node: str) -> None:
        await self._act(commands.scontrol_resume(node))

    def _request(self, operation: str, target: str) -> tuple[str, ...]:
        return ("scontrol", operation, target)

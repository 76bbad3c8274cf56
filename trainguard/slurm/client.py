"""Slurm reached by its commands (squeue, sinfo, scontrol, scancel) through a Runner: on this host or on a
login node over SSH. The rules of each step live in `trainguard.slurm.access.SlurmAccess`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence

from trainguard.models import ClusterSnapshot, JobSnapshot, NodeSnapshot
from trainguard.slurm import commands
from trainguard.slurm.access import (
    ALREADY_PENDING_MARKERS,
    NOT_PENDING_MARKERS,
    UNKNOWN_JOB_MARKERS,
    JobGoneError,
    SlurmAccess,
)
from trainguard.slurm.errors import AmbiguousOutputError, SlurmReportedError
from trainguard.slurm.formats import detect_format, parse_jobs, parse_nodes, uses_data_parser
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
ACTION_TIMEOUT_S = 20.0


def is_transient(stderr: str) -> bool:
    return any(marker in stderr for marker in TRANSIENT_MARKERS)


def raise_for(result: CommandResult) -> CommandResult:
    """Turn a failed Slurm command into CommandError, retryable when slurmctld was unreachable."""
    if result.returncode != 0:
        text = result.stderr or result.stdout
        raise CommandError(result.argv, result.returncode, text, retryable=is_transient(text))
    return result


class SlurmClient(SlurmAccess):
    """`runner` also serves the job output files (FileLogSource) in the worker."""

    def __init__(self, runner: Runner, cluster: str) -> None:
        self.runner = runner
        self.cluster = cluster
        self.json_format: str | None = None
        """The JSON format Slurm prints (e.g. "data_parser/v0.0.42"), learnt from the first document."""

    # -- queries -------------------------------------------------------------------------------

    async def _query(self, argv: Sequence[str]) -> str:
        result = await self.runner.run(argv, timeout=QUERY_TIMEOUT_S)
        return raise_for(result).stdout

    def _nodes_argv(self) -> list[str]:
        """22.05's `sinfo --json` lists nodes; 23.11+ groups them, so per-node data is scontrol's."""
        if self.json_format is not None and uses_data_parser(self.json_format):
            return commands.scontrol_show_nodes_json()
        return commands.sinfo_json()

    def _parse_snapshot(
        self, jobs_text: str, nodes_text: str
    ) -> tuple[str, list[JobSnapshot], list[NodeSnapshot]]:
        jobs_doc = load_document(jobs_text, "squeue --json")
        jobs = parse_jobs(jobs_doc)
        return detect_format(jobs_doc), jobs, parse_nodes(load_document(nodes_text, "nodes --json"))

    async def snapshot(self) -> ClusterSnapshot:
        """All jobs and nodes: `squeue --json -t all` plus the node listing this Slurm version has.

        The first call learns the JSON format (and so the Slurm version) from squeue's `meta`, then
        picks the node command; later calls run both at once. Parsing runs in a worker thread: at
        10,000 jobs it takes most of a second, which must not stall the event loop.
        A document that cannot be understood raises SlurmFormatError: never an empty snapshot.
        """
        taken_at = time.time()
        if self.json_format is None:
            jobs_text = await self._query(commands.squeue_json())
            doc = await asyncio.to_thread(load_document, jobs_text, "squeue --json")
            self._learn_format(detect_format(doc))
            nodes_text = await self._query(self._nodes_argv())
        else:
            jobs_text, nodes_text = await asyncio.gather(
                self._query(commands.squeue_json()), self._query(self._nodes_argv())
            )
        try:
            fmt, jobs, nodes = await asyncio.to_thread(self._parse_snapshot, jobs_text, nodes_text)
        except SlurmReportedError as err:
            raise CommandError(commands.squeue_json(), 0, str(err), retryable=True) from None
        self._learn_format(fmt)
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
            jobs = await asyncio.to_thread(lambda: parse_jobs(load_document(text, "squeue --json")))
        except SlurmReportedError as err:
            raise CommandError(argv, 0, str(err), retryable=True) from None
        for job in jobs:
            if job.job_id == job_id or (
                job.array_job_id and f"{job.array_job_id}_{job.array_task_id}" == job_id
            ):
                return job
        return None

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

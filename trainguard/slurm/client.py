"""Slurm reached by its commands (squeue, sinfo, scontrol, scancel) through a Runner: on this host or on a
login node over SSH. The rules of each step live in `trainguard.slurm.access.SlurmAccess`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from trainguard.models import ClusterSnapshot, JobSnapshot, NodeSnapshot
from trainguard.slurm import commands
from trainguard.slurm.access import (
    ACTIVE_STATES,
    ALREADY_PENDING_MARKERS,
    NEVER_REQUEUE_STATES,
    NOT_PENDING_MARKERS,
    UNKNOWN_JOB_MARKERS,
    JobGoneError,
    SlurmAccess,
)
from trainguard.slurm.parsers import (
    AmbiguousOutputError,
    SlurmReportedError,
    parse_scontrol_job,
    parse_scontrol_nodes,
    parse_sinfo_json,
    parse_squeue_json,
)
from trainguard.slurm.runner import CommandError, CommandResult, Runner

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

    # -- queries -------------------------------------------------------------------------------

    async def _query(self, argv: Sequence[str]) -> str:
        result = await self.runner.run(argv, timeout=QUERY_TIMEOUT_S)
        return raise_for(result).stdout

    async def snapshot(self) -> ClusterSnapshot:
        """All jobs and nodes: one `squeue --json -t all` and one `sinfo --json`, run concurrently."""
        taken_at = time.time()
        jobs_text, nodes_text = await asyncio.gather(
            self._query(commands.squeue_json()), self._query(commands.sinfo_json())
        )
        try:
            jobs, nodes = parse_squeue_json(jobs_text), parse_sinfo_json(nodes_text)
        except SlurmReportedError as err:
            raise CommandError(commands.squeue_json(), 0, str(err), retryable=True) from None
        return ClusterSnapshot(cluster=self.cluster, taken_at=taken_at, jobs=tuple(jobs), nodes=tuple(nodes))

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
        # squeue --json ignores -j in 22.05, so this reads every job; only used as a fallback.
        text = await self._query(commands.squeue_json())
        try:
            jobs = parse_squeue_json(text)
        except SlurmReportedError as err:
            raise CommandError(commands.squeue_json(), 0, str(err), retryable=True) from None
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

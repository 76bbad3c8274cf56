"""What TrainGuard asks of Slurm however it is reached (CLI, SSH, slurmrestd), and the rules of each step.

`SlurmAccess` holds the decision logic once: every scheduler step reads Slurm's actual state first and is
idempotent, so a controller that restarts mid-recovery and calls the same step again gets
`ActionResult(performed=False)` instead of a second requeue. Subclasses supply the reads and one
primitive per Slurm request (`_hold`, `_requeue_hold`, ...), each raising `CommandError` whose `stderr`
carries Slurm's own error text (the CLI and slurmrestd print the same `slurm_strerror` strings, which the
rules below match). Behaviour of Slurm these rules rely on is recorded in deploy/local/README.md.
"""

from __future__ import annotations

import asyncio
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence

from trainguard.models import ActionResult, ActionStep, ClusterSnapshot, JobSnapshot, NodeSnapshot
from trainguard.slurm import commands
from trainguard.slurm.runner import CommandError
from trainguard.slurm.states import (
    ACTIVE_STATES,
    COMPLETING,
    NEVER_REQUEUE_STATES,
    PENDING,
    REQUEUING_STATES,
    TERMINAL_STATES,
)

UNKNOWN_JOB_MARKERS = ("Invalid job id specified",)
NOT_PENDING_MARKERS = ("no longer pending execution", "Job is no longer pending")
ALREADY_PENDING_MARKERS = ("Job is pending execution", "is pending execution")
COMPLETING_WAIT_S = 20.0  # KillWait + epilog; the step is retried (with backoff) after this
COMPLETING_POLL_S = 0.5


class JobGoneError(CommandError):
    """Slurm no longer knows the job (never existed, or purged after MinJobAge)."""

    def __init__(self, job_id: str) -> None:
        super().__init__(("scontrol", "show", "job", job_id), 1, "Invalid job id specified", retryable=False)
        self.job_id = job_id


def _contains(error: CommandError, markers: Sequence[str]) -> bool:
    return any(marker in error.stderr for marker in markers)


class SlurmAccess(ABC):
    """The Slurm client interface the activities use; `cluster` names the cluster in snapshots."""

    cluster: str

    # -- reads ---------------------------------------------------------------------------------

    @abstractmethod
    async def snapshot(self) -> ClusterSnapshot:
        """Every job Slurm still holds (finished ones too, until MinJobAge) and every node."""

    @abstractmethod
    async def job(self, job_id: str) -> JobSnapshot | None:
        """One job; None when Slurm does not know it."""

    @abstractmethod
    async def node(self, name: str) -> NodeSnapshot | None:
        """One node; None when Slurm does not know it."""

    # -- one Slurm request each; raise CommandError with Slurm's error text --------------------

    @abstractmethod
    async def _hold(self, job_id: str) -> None: ...

    @abstractmethod
    async def _requeue_hold(self, job_id: str) -> None: ...

    @abstractmethod
    async def _release(self, job_id: str) -> None: ...

    @abstractmethod
    async def _set_excluded(self, job_id: str, nodes: Sequence[str]) -> None:
        """Replace ExcNodeList with `nodes` (validated names; empty clears it)."""

    @abstractmethod
    async def _cancel(self, job_id: str) -> None: ...

    @abstractmethod
    async def _drain(self, node: str, reason: str) -> None: ...

    @abstractmethod
    async def _resume(self, node: str) -> None: ...

    @abstractmethod
    def _request(self, operation: str, target: str) -> tuple[str, ...]:
        """How an operation on `target` is sent (an argv, or method and URL), for error messages."""

    async def finished_job(self, job_id: str) -> JobSnapshot | None:
        """A job slurmctld forgot (after MinJobAge), from accounting; None when this access has none."""
        return None

    async def cancelled_by(self, job_id: str) -> str:
        """Who cancelled the job, when Slurm records it (accounting); "" when not known."""
        return ""

    async def silent_batch_host(self, job_id: str) -> tuple[str, str] | None:
        """(node, why) when the slurmd running the job's batch step does not answer; None when it does or
        this access cannot ask (slurmrestd has no step-stat request)."""
        return None

    async def close(self) -> None:
        """Release connections; the base holds none."""
        return None

    async def _require_job(self, job_id: str) -> JobSnapshot:
        job = await self.job(job_id)
        if job is None:
            raise JobGoneError(job_id)
        return job

    # -- decisions -----------------------------------------------------------------------------

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
            job = await self._settled(job_id, expected_restarts)
            if job.restart_count > expected_restarts:
                # COMPLETING here is the requeued attempt still tearing down: it turns PENDING next.
                if (job.state == PENDING or job.state in REQUEUING_STATES) and not job.held:
                    try:
                        await self._hold(job_id)
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
                await self._hold(job_id)
                return await self._performed(step, "job was pending (not running); held it", job_id)
            if job.state in NEVER_REQUEUE_STATES:
                # Slurm would happily revive these (observed on 22.05); a finished or cancelled job
                # is the user's decision, not a failure to recover from.
                raise CommandError(
                    self._request("requeuehold", job_id),
                    None,
                    f"refusing to requeue a {job.state} job",
                    retryable=False,
                )
            if job.state in ACTIVE_STATES or job.state in TERMINAL_STATES:
                try:
                    await self._requeue_hold(job_id)
                except CommandError as err:
                    if err.retryable or not _contains(err, ALREADY_PENDING_MARKERS):
                        raise
                    continue  # Slurm requeued it itself in between: re-evaluate
                return await self._performed(step, f"requeued and held the {job.state} job", job_id)
            raise CommandError(
                self._request("requeuehold", job_id),
                None,
                f"cannot requeue a job in state {job.state}",
                retryable=False,
            )
        raise CommandError(
            self._request("requeuehold", job_id),
            None,
            "job state kept changing during requeue",
            retryable=True,
        )

    async def _settled(self, job_id: str, expected_restarts: int) -> JobSnapshot:
        """The job once its current attempt is no longer COMPLETING.

        A scancel and a failure both pass through COMPLETING (22.05 prints no CANCELLED until the
        steps are gone): requeueing then could revive a job its user has just cancelled. A COMPLETING
        job with a higher restart count is a requeued attempt tearing down, which needs no wait.
        """
        deadline = time.monotonic() + COMPLETING_WAIT_S
        while True:
            job = await self._require_job(job_id)
            if job.state != COMPLETING or job.restart_count > expected_restarts:
                return job
            if time.monotonic() >= deadline:
                raise CommandError(
                    self._request("requeuehold", job_id),
                    None,
                    f"job {job_id} is still COMPLETING; not requeued until Slurm says how it ended",
                    retryable=True,
                )
            await asyncio.sleep(COMPLETING_POLL_S)

    async def set_excluded(self, job_id: str, nodes: Sequence[str]) -> ActionResult:
        """Add `nodes` to the job's ExcNodeList. Slurm accepts this only while the job is pending.

        Only ever adds: the list is re-read right before the update and the new value is its union with
        `nodes`, so the user's own `-x` (and any exclusion set meanwhile) stays; verified afterwards.
        """
        step = ActionStep.EXCLUDE
        adding = {commands.node_name(n) for n in nodes}
        job = await self._require_job(job_id)
        # COMPLETING: our requeued attempt still tearing down (Slurm takes the update then).
        if job.state != PENDING and job.state not in REQUEUING_STATES:
            raise CommandError(
                self._request("exclude", job_id),
                None,
                f"job {job_id} is {job.state}, not pending: Slurm changes ExcNodeList only while a job is "
                "pending (requeue-hold it first); left as it is",
                retryable=False,
            )
        wanted = sorted(adding | set(job.excluded_nodes))
        if adding <= set(job.excluded_nodes):
            return self._done(
                step, False, f"ExcNodeList already {commands.node_list(wanted) or '(empty)'}", job
            )
        try:
            await self._set_excluded(job_id, wanted)
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
        if not set(wanted) <= set(after.excluded_nodes):
            raise CommandError(
                self._request("exclude", job_id),
                0,
                f"Slurm accepted ExcNodeList but reports {after.excluded_nodes}",
                retryable=True,
            )
        kept = sorted(set(job.excluded_nodes) - adding)
        detail = f"ExcNodeList={commands.node_list(sorted(after.excluded_nodes))}"
        if kept:
            detail += f" (kept the job's own {commands.node_list(kept)})"
        return self._done(step, True, detail, after)

    async def release(
        self, job_id: str, our_hold: str | None = None, restarts: int | None = None
    ) -> ActionResult:
        """Lift TrainGuard's own hold, and only that.

        `our_hold` is Slurm's Reason right after TrainGuard held the job: a job held for any other
        reason (`scontrol uhold` -> JobHeldUser, an admin's hold, `sbatch -H`) is left held. "" means
        TrainGuard placed no hold; None is the behaviour of releases scheduled before this existed.
        `restarts`: only while Slurm's restart count is this one (the attempt TrainGuard held); a job
        requeued since is left held.
        """
        step = ActionStep.RELEASE
        job = await self.job(job_id)
        if job is None:
            return self._done(step, False, "job is no longer known to Slurm")
        if job.state in TERMINAL_STATES:
            return self._done(step, False, f"job is {job.state}; not released", job)
        if not job.held:
            return self._done(step, False, f"job is not held ({job.state})", job)
        if our_hold is not None and (not our_hold or job.reason != our_hold):
            ours = f"ours was {our_hold}" if our_hold else "TrainGuard placed no hold"
            return self._done(
                step,
                False,
                f"job is held by someone else (Reason={job.reason or '?'}; {ours}); left held",
                job,
            )
        if restarts is not None and job.restart_count != restarts:
            return self._done(
                step,
                False,
                f"job was requeued since TrainGuard's hold (restarts={job.restart_count}, the held attempt "
                f"was {restarts}); its hold is not TrainGuard's, left held",
                job,
            )
        await self._release(job_id)
        return await self._performed(step, f"released the {job.state} job", job_id)

    async def cancel(self, job_id: str) -> ActionResult:
        step = ActionStep.CANCEL
        job = await self.job(job_id)
        if job is None:
            return self._done(step, False, "job is no longer known to Slurm")
        if job.state in TERMINAL_STATES:
            return self._done(step, False, f"job already finished ({job.state})", job)
        await self._cancel(job_id)
        return await self._performed(step, f"cancelled the {job.state} job", job_id)

    async def drain(self, node: str, reason: str) -> ActionResult:
        step = ActionStep.DRAIN
        node, reason = commands.node_name(node), commands.reason_text(reason)  # validate before anything
        current = await self.node(node)
        if current is None:
            raise CommandError(self._request("drain", node), None, f"unknown node {node!r}", retryable=False)
        if "DRAIN" in current.flags:
            return self._done(step, False, f"{node} already {current.state} ({current.reason})")
        await self._drain(node, reason)
        return self._done(step, True, f"{node} set to drain")

    async def resume_node(self, node: str) -> ActionResult:
        step = ActionStep.RESUME
        node = commands.node_name(node)
        current = await self.node(node)
        if current is None:
            raise CommandError(self._request("resume", node), None, f"unknown node {node!r}", retryable=False)
        if "DRAIN" not in current.flags and current.state != "down":
            return self._done(step, False, f"{node} is {current.state}; nothing to resume")
        await self._resume(node)
        return self._done(step, True, f"{node} resumed")

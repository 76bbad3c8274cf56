"""Cost model for a straggler: is a restart away from the slow node worth it?

Staying costs the fraction of wall time lost to the slowdown over the look-ahead; restarting costs the
work since the last checkpoint plus a fixed restart cost. Requeue only when staying costs more.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainguard.models import JobSnapshot, ProgressState


@dataclass(frozen=True)
class StragglerEstimate:
    slowdown: float  # fraction of wall time lost: 1 - baseline / recent step time
    lookahead_s: float
    expected_loss_s: float
    since_checkpoint_s: float
    restart_cost_s: float  # since_checkpoint_s + configured restart cost

    @property
    def worth_restart(self) -> bool:
        return self.expected_loss_s > self.restart_cost_s


def slowdown_fraction(progress: ProgressState) -> float | None:
    base, recent = progress.baseline_step_ms, progress.recent_step_ms
    if base is None or recent is None or base <= 0 or recent <= 0:
        return None
    return max(0.0, 1.0 - base / recent)


def newest_checkpoint(*candidates: int | None) -> int | None:
    known = [c for c in candidates if c is not None]
    return max(known) if known else None


def seconds_since_checkpoint(
    progress: ProgressState, job: JobSnapshot | None, checkpoint: int | None, now: float
) -> float | None:
    """Work a restart throws away. Without a usable checkpoint position, everything since this
    allocation started is lost (a lower bound when the job never checkpointed at all)."""
    step_ms = progress.recent_step_ms or progress.baseline_step_ms
    if checkpoint is not None and progress.last_iteration is not None and step_ms:
        steps = max(0, progress.last_iteration - checkpoint)
        at = progress.last_progress_at
        since_line = max(0.0, now - at) if at is not None else 0.0
        return steps * step_ms / 1000.0 + since_line
    if job is not None and job.start_time > 0:
        return max(0.0, now - job.start_time)
    return None


def lookahead_seconds(job: JobSnapshot | None, now: float, horizon_s: float) -> float:
    # A running job's Slurm EndTime is its projected end (start + time limit).
    if job is not None and job.end_time > now:
        return min(job.end_time - now, horizon_s)
    return horizon_s


def estimate(
    progress: ProgressState,
    job: JobSnapshot | None,
    checkpoint: int | None,
    now: float,
    *,
    horizon_s: float,
    fixed_cost_s: float,
) -> StragglerEstimate | str:
    """The estimate, or a sentence saying why none can be made."""
    slowdown = slowdown_fraction(progress)
    if slowdown is None:
        return "the slowdown is not measured (no baseline and recent step time)"
    since = seconds_since_checkpoint(progress, job, checkpoint, now)
    if since is None:
        return "the work lost by a restart cannot be estimated (no checkpoint position, no start time)"
    lookahead = lookahead_seconds(job, now, horizon_s)
    return StragglerEstimate(
        slowdown=slowdown,
        lookahead_s=lookahead,
        expected_loss_s=slowdown * lookahead,
        since_checkpoint_s=since,
        restart_cost_s=since + fixed_cost_s,
    )

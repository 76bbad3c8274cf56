"""Which mode a workload runs in: observe (advise only) or action (advise and act)."""

from __future__ import annotations

from trainguard.models import Mode


def effective_mode(cluster_mode: Mode, job_mode: Mode, operator_override: Mode | None) -> Mode:
    """A job's comment can only make its cluster more conservative; an operator's override wins both
    ways, because the operator is the one accountable for the cluster."""
    if operator_override is not None:
        return operator_override
    if cluster_mode == Mode.ACTION and job_mode == Mode.ACTION:
        return Mode.ACTION
    return Mode.OBSERVE


def should_execute(mode: Mode, acknowledged: bool, action_is_none: bool) -> bool:
    return mode == Mode.ACTION and acknowledged and not action_is_none

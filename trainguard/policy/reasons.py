"""A short, bounded code for why advice says what it says, for metrics and alerts.

The policy writes its reasons as sentences for people (decide.py, arrays.py); alerts need a label with
few values. The codes are read from those sentences' fixed openings, which tests/unit/test_policy_reasons.py
drives through the real policy so a reworded sentence fails a test instead of silencing an alert.
"""

from __future__ import annotations

from trainguard.models import ActionKind, Actor, Advice
from trainguard.policy.limits import STORM_OPENING

# Recovery stopped because retrying cannot help (alert: TrainGuardRecoveryStopped).
FUTILE = ("futile_same_failure", "futile_retry_budget", "futile_no_checkpoint", "futile_time_limit")
STORM = "storm"
ARRAY_SYSTEMIC = "array_systemic"
STOPPED = (*FUTILE, STORM, ARRAY_SYSTEMIC)
# A bound kept the job from being recovered; it waits for a person (alert: TrainGuardSafetyLimitReached).
# Cluster-wide limits (trainguard/policy/limits.py): a budget of the last hour, the cap on nodes excluded at
# once, a storm across jobs (no exclusion or drain), or the limits could not be consulted.
CLUSTER_LIMITS = (
    "cluster_requeue_limit",
    "cluster_exclusion_limit",
    "cluster_excluded_cap",
    "cluster_drain_limit",
    "cluster_limits_unavailable",
    "infra_storm",
)
SAFETY_LIMITS = ("exclusion_limit", "capacity", *CLUSTER_LIMITS)

_LIMITS: tuple[tuple[str, str], ...] = (
    ("Advice only: cluster limit requeues_per_hour=", "cluster_requeue_limit"),
    ("Advice only: cluster limit exclusions_per_hour=", "cluster_exclusion_limit"),
    ("Advice only: cluster limit max_excluded_nodes=", "cluster_excluded_cap"),
    ("Not drained: cluster limit drains_per_hour=", "cluster_drain_limit"),
    ("Advice only: cluster limits unavailable", "cluster_limits_unavailable"),
    (STORM_OPENING, "infra_storm"),
)

_STOPS: tuple[tuple[str, str], ...] = (
    ("Stop: restart storm", STORM),
    ("Stop: the same failure", "futile_same_failure"),
    ("Stop: retry budget spent", "futile_retry_budget"),
    ("Stop: no new checkpoint", "futile_no_checkpoint"),
    ("Stop: the job reached its time limit", "futile_time_limit"),
    ("Stop recovering array", ARRAY_SYSTEMIC),
)


def advice_reason(advice: Advice) -> str:
    """One of STOPPED, SAFETY_LIMITS, or a plain code: operator, recover, record, drain, other."""
    if advice.actor == Actor.OPERATOR:
        return "operator"
    for opening, code in (*_LIMITS, *_STOPS):
        if advice.reason.startswith(opening):
            return code
    if advice.action == ActionKind.WAIT:
        return "exclusion_limit" if "max_excluded_nodes=" in advice.reason else "capacity"
    if advice.drain_nodes:
        return "drain"
    if advice.action == ActionKind.REQUEUE:
        return "recover"
    if advice.action == ActionKind.NONE:
        return "record"
    return "other"

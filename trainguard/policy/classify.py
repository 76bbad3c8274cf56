"""Which kind of failure a verdict describes, as far as the policy's rules care."""

from __future__ import annotations

from enum import StrEnum

from trainguard.models import Attribution, Category, JobSnapshot, Verdict
from trainguard.slurm.states import TIMEOUT

HARDWARE_CATEGORIES = frozenset({Category.GPU_HARDWARE, Category.INTERCONNECT})
# slurmstepd: "*** JOB 12 ON n1 CANCELLED AT ... DUE TO TIME LIMIT ***"; pattern ids like slurm_time_limit.
_TIME_LIMIT_MARKERS = ("time limit", "time_limit", "timelimit")


class FailureClass(StrEnum):
    JOB = "job"  # application, system software or unknown: the job's own retry budget pays
    HARDWARE = "hardware"  # implicated nodes go into the ledger; budget untouched
    NODE_FAILURE = "node_failure"  # Slurm lost a node; budget untouched
    PREEMPTION = "preemption"  # the scheduler took the nodes; budget untouched, not a futile attempt
    TIME_LIMIT = "time_limit"  # the allocation's time is over; budget untouched
    INFRASTRUCTURE = "infrastructure"  # other failures attributed to the site; budget untouched
    STRAGGLER = "straggler"


def _mentions_time_limit(verdict: Verdict, job: JobSnapshot | None) -> bool:
    if job is not None and (job.state.upper().startswith(TIMEOUT) or job.reason.lower() == "timelimit"):
        return True
    texts = (verdict.summary, *verdict.evidence, *verdict.pattern_ids)
    return any(marker in t.lower() for t in texts for marker in _TIME_LIMIT_MARKERS)


def classify(verdict: Verdict, job: JobSnapshot | None) -> FailureClass:
    if verdict.category == Category.STRAGGLER:
        return FailureClass.STRAGGLER
    # The scheduler ending the allocation is never charged to the user, whoever is blamed for it.
    if verdict.category == Category.PREEMPTION_OR_TIMELIMIT:
        return FailureClass.TIME_LIMIT if _mentions_time_limit(verdict, job) else FailureClass.PREEMPTION
    # An application verdict never excludes nodes, even if its category looks like a node's fault.
    if verdict.attribution == Attribution.APPLICATION:
        return FailureClass.JOB
    if verdict.category == Category.SLURM_NODE_FAILURE:
        return FailureClass.NODE_FAILURE
    if verdict.attribution == Attribution.HARDWARE or verdict.category in HARDWARE_CATEGORIES:
        return FailureClass.HARDWARE
    if verdict.attribution == Attribution.INFRASTRUCTURE:
        return FailureClass.INFRASTRUCTURE
    return FailureClass.JOB


def failure_key(verdict: Verdict) -> str:
    """Identity of a failure for the "same failure again" rule: category + top (initiating) pattern."""
    top = verdict.pattern_ids[0] if verdict.pattern_ids else ""
    return f"{verdict.category.value}|{top}"

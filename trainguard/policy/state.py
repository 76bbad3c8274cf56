"""What the policy remembers per workload, and what it is told about the present moment."""

from __future__ import annotations

from trainguard.models import (
    ActionKind,
    Attribution,
    Category,
    Frozen,
    JobSnapshot,
    Mode,
    ProgressState,
)

HISTORY_LIMIT = 20
"""Attempt records kept; the rules look back at most this far (bounded workflow payloads)."""
RESTART_TIMES_LIMIT = 64
"""Restart timestamps kept; enough for any sensible storm threshold."""


class AttemptRecord(Frozen):
    """One failure handled (or one straggler requeue) and what the policy decided about it."""

    attempt: int  # restarts requested before this failure (0 = the first allocation)
    at: float
    category: Category
    attribution: Attribution
    pattern_ids: tuple[str, ...] = ()
    nodes: tuple[str, ...] = ()
    checkpoint_iteration: int | None = None  # newest checkpoint known when the failure was handled
    spent_budget: bool = False
    action: ActionKind = ActionKind.NONE
    advice_id: str = ""


class PolicyState(Frozen):
    excluded_nodes: tuple[str, ...] = ()  # the ledger: only ever grows
    attempts: int = 0  # restarts requested so far
    budget_spent: int = 0
    history: tuple[AttemptRecord, ...] = ()  # bounded to HISTORY_LIMIT, oldest first
    restart_times: tuple[float, ...] = ()  # bounded to RESTART_TIMES_LIMIT, oldest first
    sequence: int = 0  # decisions made so far; part of every advice id
    # Futility trackers, kept as counters so they do not depend on how much history is retained.
    best_checkpoint: int | None = None  # newest checkpoint iteration ever seen
    restarts_without_checkpoint: int = 0  # restarts since best_checkpoint last advanced
    streak_key: str = ""  # category|top pattern of the last job-side failure
    streak_count: int = 0  # identical job-side failures in a row
    streak_checkpoint: int | None = None  # checkpoint when the streak's last failure was handled


class DecisionContext(Frozen):
    workload_key: str
    mode: Mode  # effective mode (see effective_mode)
    acknowledged: bool  # acknowledgeSchedulerActions
    now: float
    job: JobSnapshot | None = None
    usable_nodes: tuple[str, ...] = ()  # partition nodes not down/drained; () = not known
    # Nodes of the failed attempt's allocation (and any node Slurm reported failed for it), besides
    # `job.nodes`: only these can ever be excluded. Evidence naming another host is about that host.
    allocation_nodes: tuple[str, ...] = ()
    # Workflows recorded before the allocation guard existed replay their old decisions unchanged.
    legacy_unrestricted: bool = False
    checkpoint_iteration: int | None = None  # newest checkpoint seen in logs / checkpoint directory
    progress: ProgressState = ProgressState()


def allowed_nodes(ctx: DecisionContext) -> frozenset[str] | None:
    """The nodes an exclusion may name: the job's own allocation. None only for legacy replays."""
    if ctx.legacy_unrestricted:
        return None
    return frozenset(ctx.allocation_nodes) | frozenset(ctx.job.nodes if ctx.job is not None else ())


def record_restart(state: PolicyState, now: float) -> PolicyState:
    """Note a restart the policy did not ask for (Slurm's own requeue, an operator's), so storm
    detection sees every restart. `decide` already records the restarts it requests."""
    times = (*state.restart_times, now)[-RESTART_TIMES_LIMIT:]
    return state.model_copy(update={"restart_times": times})


def append_history(history: tuple[AttemptRecord, ...], record: AttemptRecord) -> tuple[AttemptRecord, ...]:
    return (*history, record)[-HISTORY_LIMIT:]

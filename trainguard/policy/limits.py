"""Cluster-wide safety limits: a budget of requeues, exclusions and drains per hour, a cap on nodes excluded
at once, and storm correlation across jobs.

Pure and deterministic: the cluster's ClusterWatch workflow keeps a `LimitsState` and answers every
JobRecovery's `GrantRequest` with `grant()`; JobRecovery turns the answer into its advice with
`limit_advice()`. One workflow owns the state, so 50 jobs failing at once are answered one by one, each
seeing the grants before it (no race). Time arrives as `now`; nothing is read or written here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import Field

from trainguard.models import ActionKind, Advice, Attribution, Category, Frozen, clip

HOUR_S = 3600.0
STORM_OPENING = "Storm: "  # how a storm's advice begins (reason code infra_storm; not node reputation)
MAX_FAILURES = 500  # failure reports kept (within the storm window); bounded workflow state
MAX_GRANTS = 2000  # answers kept (within the hour), for the budget and for idempotent retries
EXCLUDED_FORGET_S = 7 * 86400.0  # a workload that never said it ended stops counting after this
# Verdicts that point at the site rather than at the job's own code: these are what a storm is made of.
_INFRA_CATEGORIES = frozenset(
    {
        Category.GPU_HARDWARE,
        Category.INTERCONNECT,
        Category.NCCL_TIMEOUT,
        Category.NCCL_ERROR,
        Category.STORAGE_IO,
        Category.SLURM_NODE_FAILURE,
    }
)
_INFRA_ATTRIBUTIONS = frozenset({Attribution.HARDWARE, Attribution.INFRASTRUCTURE})


class ClusterLimits(Frozen):
    """`limits.*` settings (`trainguard.settings.LimitsSettings` is this model, stricter)."""

    enabled: bool = True
    """Off: JobRecovery asks nobody and acts within its own per-job policy only (not recommended)."""
    requeues_per_hour: int = Field(default=60, ge=0)
    """Requeues TrainGuard may start on this cluster within any sliding hour."""
    exclusions_per_hour: int = Field(default=20, ge=0)
    """Nodes TrainGuard may newly exclude (summed over jobs) within any sliding hour."""
    drains_per_hour: int = Field(default=4, ge=0)
    """Nodes TrainGuard may drain within any sliding hour."""
    max_excluded_nodes: int = Field(default=32, ge=0)
    """Distinct nodes excluded by TrainGuard across all running workloads at once."""
    storm_jobs: int = Field(default=5, ge=2)
    """Infrastructure-like failures of this many distinct jobs within `storm_window_s` make a storm."""
    storm_nodes: int = Field(default=8, ge=2)
    """... or this many distinct nodes implicated by infrastructure-like failures of at least two jobs."""
    storm_window_s: float = Field(default=600.0, gt=0)
    storm_settle_s: float = Field(default=5.0, ge=0)
    """An exclusion or drain waits this long before it is granted, so the first jobs of a storm are
    judged with the ones that fail seconds later. Keep it well under `watchdog.decision_timeout_s`."""
    storm_settle_alone: bool = False
    """Let an exclusion or drain wait `storm_settle_s` even when no other job failed that way within
    `storm_window_s`. Off (the default): a lone bad node is excluded at once, keeping a recovery within
    seconds of Slurm's own floor, but the first job of a storm may exclude its (one) healthy node before
    the others are seen; every later one settles and is judged with the rest. On: not even that one."""
    storm_action: Literal["requeue", "wait"] = "requeue"
    """During a storm: `requeue` without any exclusion (within the requeue budget), or `wait` for an
    operator. Never an exclusion or a drain."""


class FailureReport(Frozen):
    """One failure of one workload, as the storm detector sees it."""

    workload_key: str
    at: float = 0.0  # stamped by ClusterWatch when it arrives
    category: Category = Category.HEALTHY
    attribution: Attribution = Attribution.NONE
    nodes: tuple[str, ...] = ()  # implicated nodes of the job's own allocation


class GrantRequest(Frozen):
    """What one JobRecovery is about to do; sent before the advice is recorded."""

    request_id: str  # the advice id: a retried request gets the first answer
    workload_key: str
    failure: FailureReport | None = None
    requeue: bool = False
    exclude: tuple[str, ...] = ()  # nodes newly excluded (not already in this workload's ledger)
    drain: tuple[str, ...] = ()


class GrantResult(Frozen):
    requeue: bool = True
    exclude: bool = True  # all of the request's exclusions, or none
    drain: bool = True
    storm: str = ""  # "" or the sentence that explains the storm
    limit: str = ""  # "" or the reason a budget refused something (an advice sentence's opening)
    unavailable: bool = False  # ClusterWatch could not be asked: nothing was granted
    settle_s: float = 0.0  # > 0: not decided yet; ask again (same request id) after this many seconds


class GrantRecord(Frozen):
    request_id: str
    workload_key: str
    at: float
    requeue: bool = False
    exclude: tuple[str, ...] = ()
    drain: tuple[str, ...] = ()
    result: GrantResult = GrantResult()


class ExcludedEntry(Frozen):
    workload_key: str
    nodes: tuple[str, ...]
    at: float  # last grant


class Settling(Frozen):
    request_id: str
    at: float  # first asked


class LimitsState(Frozen):
    """ClusterWatch's memory of the last hour; carried across continue-as-new."""

    grants: tuple[GrantRecord, ...] = ()
    failures: tuple[FailureReport, ...] = ()
    excluded: tuple[ExcludedEntry, ...] = ()
    settling: tuple[Settling, ...] = ()  # requests told to ask again after storm_settle_s


def is_infra(report: FailureReport) -> bool:
    """A failure that shared infrastructure could explain (not the job's own code)."""
    if report.attribution == Attribution.APPLICATION:
        return False
    return report.attribution in _INFRA_ATTRIBUTIONS or report.category in _INFRA_CATEGORIES


def prune(state: LimitsState, now: float, limits: ClusterLimits) -> LimitsState:
    # Entries stamped in the future (a clock that went back) are kept: the safe side for a budget.
    grants = tuple(g for g in state.grants if now - g.at < HOUR_S)[-MAX_GRANTS:]
    failures = tuple(f for f in state.failures if now - f.at <= limits.storm_window_s)[-MAX_FAILURES:]
    excluded = tuple(e for e in state.excluded if now - e.at < EXCLUDED_FORGET_S)
    settling = tuple(p for p in state.settling if now - p.at < HOUR_S)[-MAX_GRANTS:]
    return state.model_copy(
        update={"grants": grants, "failures": failures, "excluded": excluded, "settling": settling}
    )


def answered(state: LimitsState, request_id: str) -> GrantResult | None:
    for g in state.grants:
        if g.request_id == request_id:
            return g.result
    return None


def report_failure(state: LimitsState, report: FailureReport) -> LimitsState:
    """Remember a failure for storm detection; the same failure reported again (a retried or settled
    request) only moves its time forward."""

    def same(f: FailureReport) -> bool:
        return (f.workload_key, f.category, f.attribution, f.nodes) == (
            report.workload_key,
            report.category,
            report.attribution,
            report.nodes,
        )

    kept = tuple(f for f in state.failures if not same(f))
    return state.model_copy(update={"failures": (*kept, report)[-MAX_FAILURES:]})


def storm(state: LimitsState, now: float, limits: ClusterLimits) -> str:
    """ "" or the sentence saying why the recent failures look like shared infrastructure."""
    recent = [f for f in state.failures if now - f.at <= limits.storm_window_s and is_infra(f)]
    jobs = {f.workload_key for f in recent}
    nodes = {n for f in recent for n in f.nodes}
    minutes = f"{limits.storm_window_s / 60:g}"
    if len(jobs) >= limits.storm_jobs:
        return (
            f"{STORM_OPENING}{len(jobs)} jobs failed within {minutes} minutes → shared infrastructure "
            f"suspected (limits.storm_jobs={limits.storm_jobs})"
        )
    if len(jobs) >= 2 and len(nodes) >= limits.storm_nodes:
        return (
            f"{STORM_OPENING}{len(jobs)} jobs failed within {minutes} minutes implicating {len(nodes)} "
            f"nodes → shared infrastructure suspected (limits.storm_nodes={limits.storm_nodes})"
        )
    return ""


def _excluded_now(state: LimitsState, new: Sequence[str]) -> set[str]:
    return {n for e in state.excluded for n in e.nodes} | set(new)


def needs_settle(
    req: GrantRequest, limits: ClusterLimits, state: LimitsState | None = None, now: float = 0.0
) -> bool:
    """Only exclusions and drains wait for a storm to show: they are what a storm must not cause. With
    `storm_settle_alone` off, only when another job's infrastructure-like failure is already in the window."""
    infra = req.failure is not None and is_infra(req.failure)
    if not (limits.enabled and infra and bool(req.exclude or req.drain) and limits.storm_settle_s > 0):
        return False
    if limits.storm_settle_alone or state is None:
        return True
    return any(
        f.workload_key != req.workload_key and is_infra(f) and now - f.at <= limits.storm_window_s
        for f in state.failures
    )


def ask(
    state: LimitsState, req: GrantRequest, now: float, limits: ClusterLimits
) -> tuple[GrantResult, LimitsState]:
    """ClusterWatch's answer to one (possibly repeated) request. An exclusion or drain that must settle is
    first told to ask again after `storm_settle_s` (its failure counts at once); asked again when the time
    is up, it is decided with every failure reported meanwhile. Nothing waits inside ClusterWatch, so a
    burst of requests never piles up open updates there."""
    state = prune(state, now, limits)
    earlier = answered(state, req.request_id)
    if earlier is not None:
        return earlier, state
    if req.failure is not None:
        state = report_failure(state, req.failure.model_copy(update={"at": now}))
    pending = next((p for p in state.settling if p.request_id == req.request_id), None)
    if pending is None and needs_settle(req, limits, state, now):
        entry = Settling(request_id=req.request_id, at=now)
        state = state.model_copy(update={"settling": (*state.settling, entry)[-MAX_GRANTS:]})
        return GrantResult(settle_s=limits.storm_settle_s), state
    if pending is not None:
        remaining = pending.at + limits.storm_settle_s - now
        if remaining > 0:
            return GrantResult(settle_s=remaining), state
        state = state.model_copy(update={"settling": tuple(p for p in state.settling if p is not pending)})
    return grant(state, req, now, limits)


def grant(
    state: LimitsState, req: GrantRequest, now: float, limits: ClusterLimits
) -> tuple[GrantResult, LimitsState]:
    """Answer one request against the budget of the last hour and the storm picture; record what was
    granted. A retried request (same id) gets its first answer and changes nothing."""
    state = prune(state, now, limits)
    earlier = answered(state, req.request_id)
    if earlier is not None:
        return earlier, state
    if req.failure is not None:
        state = report_failure(state, req.failure.model_copy(update={"at": now}))
    infra = req.failure is not None and is_infra(req.failure)
    storm_text = storm(state, now, limits) if infra and limits.enabled else ""
    requeue, exclude, drain = req.requeue, bool(req.exclude), bool(req.drain)
    limit = ""
    if limits.enabled:
        hour = [g for g in state.grants if now - g.at < HOUR_S]
        if storm_text:
            exclude = drain = False
            if limits.storm_action == "wait":
                requeue = False
        requeues = sum(1 for g in hour if g.requeue)
        excluded = sum(len(g.exclude) for g in hour)
        drained = sum(len(g.drain) for g in hour)
        at_once = _excluded_now(state, req.exclude if exclude else ())
        if requeue and requeues >= limits.requeues_per_hour:
            limit = (
                f"Advice only: cluster limit requeues_per_hour={limits.requeues_per_hour} reached "
                f"({requeues} requeues in the last hour)"
            )
            requeue = exclude = False
        elif requeue and exclude and excluded + len(req.exclude) > limits.exclusions_per_hour:
            limit = (
                f"Advice only: cluster limit exclusions_per_hour={limits.exclusions_per_hour} reached "
                f"({excluded} nodes excluded in the last hour, {len(req.exclude)} more asked)"
            )
            requeue = exclude = False
        elif requeue and exclude and len(at_once) > limits.max_excluded_nodes:
            limit = (
                f"Advice only: cluster limit max_excluded_nodes={limits.max_excluded_nodes} reached "
                f"({len(at_once)} nodes would be excluded across the cluster's jobs at once)"
            )
            requeue = exclude = False
        if drain and drained + len(req.drain) > limits.drains_per_hour:
            text = (
                f"Not drained: cluster limit drains_per_hour={limits.drains_per_hour} reached "
                f"({drained} nodes drained in the last hour, {len(req.drain)} more asked)"
            )
            limit = limit or text
            drain = False
    result = GrantResult(
        requeue=requeue or not req.requeue,
        exclude=exclude or not req.exclude,
        drain=drain or not req.drain,
        storm=storm_text,
        limit=limit,
    )
    record = GrantRecord(
        request_id=req.request_id,
        workload_key=req.workload_key,
        at=now,
        requeue=requeue,
        exclude=req.exclude if requeue and exclude else (),
        drain=req.drain if drain else (),
        result=result,
    )
    state = state.model_copy(update={"grants": (*state.grants, record)[-MAX_GRANTS:]})
    if record.exclude:
        state = _add_excluded(state, req.workload_key, record.exclude, now)
    return result, state


def _add_excluded(state: LimitsState, key: str, nodes: Sequence[str], now: float) -> LimitsState:
    mine = next((e for e in state.excluded if e.workload_key == key), None)
    merged = tuple(dict.fromkeys((*(mine.nodes if mine else ()), *nodes)))
    others = tuple(e for e in state.excluded if e.workload_key != key)
    entry = ExcludedEntry(workload_key=key, nodes=merged, at=now)
    return state.model_copy(update={"excluded": (*others, entry)})


def workload_ended(state: LimitsState, workload_key: str) -> LimitsState:
    """A workload that ended no longer holds its exclusions against the cluster-wide cap."""
    kept = tuple(e for e in state.excluded if e.workload_key != workload_key)
    return state.model_copy(update={"excluded": kept})


def limit_advice(advice: Advice, result: GrantResult, ledger_before: Sequence[str]) -> Advice:
    """The advice as the grant allows it. Refused requeue: advice only (nothing runs), the reason first.
    Storm: no exclusion or drain; requeue without new exclusions, or wait (limits.storm_action). Refused
    drain: the rest of the advice stands."""
    reason = advice.reason
    update: dict[str, object] = {}
    if result.unavailable:
        return advice.model_copy(
            update={
                "execute": False,
                "drain_nodes": (),
                "reason": clip(
                    "Advice only: cluster limits unavailable (the cluster's ClusterWatch did not answer); "
                    f"nothing is done without them. {reason}",
                    800,
                ),
            }
        )
    notes: list[str] = []
    if result.storm:
        kept = tuple(n for n in advice.exclude_nodes if n in ledger_before)
        dropped = [n for n in (*advice.exclude_nodes, *advice.drain_nodes) if n not in kept]
        what = "no node excluded or drained"
        if dropped:
            what = f"{', '.join(dict.fromkeys(dropped))} not excluded or drained"
        if advice.action == ActionKind.REQUEUE and not result.requeue and result.limit == "":
            notes.append(f"{result.storm}: {what}; waiting for an operator (limits.storm_action=wait)")
            update.update(action=ActionKind.WAIT, exclude_nodes=kept)
        elif advice.action == ActionKind.REQUEUE:
            notes.append(f"{result.storm}: {what}; requeue without new exclusions")
            update.update(exclude_nodes=kept)
        else:
            notes.append(f"{result.storm}: {what}")
            if advice.exclude_nodes != kept:
                update.update(exclude_nodes=kept)
        update["drain_nodes"] = ()
    if result.limit:
        if advice.action == ActionKind.REQUEUE and not result.requeue:
            notes.insert(0, f"{result.limit}; not requeued, nothing excluded")
            update["execute"] = False
        elif not result.drain:
            notes.insert(0, f"{result.limit}; {', '.join(advice.drain_nodes)} left in service")
            update["drain_nodes"] = ()
        else:
            notes.insert(0, result.limit)
    if not notes:
        return advice
    update["reason"] = clip(". ".join(notes) + f". {reason}", 800)
    return advice.model_copy(update=update)

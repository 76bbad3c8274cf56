"""decide(): one verdict about a workload -> one Advice and the workload's next policy state.

Pure and deterministic (it runs inside the workflow sandbox): time arrives as `ctx.now`, nothing is
read or written. Every advice carries a sentence that explains it, stops above all.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from trainguard.models import ActionKind, Advice, Attribution, Category, Verdict, clip
from trainguard.policy.classify import FailureClass, classify, failure_key
from trainguard.policy.config import PolicyConfig
from trainguard.policy.mode import should_execute
from trainguard.policy.state import (
    RESTART_TIMES_LIMIT,
    AttemptRecord,
    DecisionContext,
    PolicyState,
    allowed_nodes,
    append_history,
)
from trainguard.policy.straggler import estimate, newest_checkpoint

MAX_REASON_CHARS = 600
NAMES_SHOWN = 6


@dataclass
class _Trackers:
    """The futility counters of PolicyState, updated while one decision is worked out."""

    best_checkpoint: int | None
    restarts_without_checkpoint: int
    streak_key: str
    streak_count: int
    streak_checkpoint: int | None

    @classmethod
    def of(cls, state: PolicyState) -> _Trackers:
        return cls(
            state.best_checkpoint,
            state.restarts_without_checkpoint,
            state.streak_key,
            state.streak_count,
            state.streak_checkpoint,
        )

    def see_checkpoint(self, ckpt: int | None) -> None:
        if ckpt is not None and (self.best_checkpoint is None or ckpt > self.best_checkpoint):
            self.best_checkpoint = ckpt
            self.restarts_without_checkpoint = 0

    def see_job_failure(self, key: str, ckpt: int | None, reset_on_checkpoint: bool) -> None:
        newer = ckpt is not None and (self.streak_checkpoint is None or ckpt > self.streak_checkpoint)
        same = key == self.streak_key and not (reset_on_checkpoint and newer)
        self.streak_count = self.streak_count + 1 if same else 1
        self.streak_key = key
        self.streak_checkpoint = ckpt


@dataclass
class _Outcome:
    action: ActionKind
    reason: str
    exclude_nodes: tuple[str, ...] = ()
    ledger: tuple[str, ...] | None = None  # None: unchanged
    spends_budget: bool = False
    restart: bool = False  # a restart is requested: counted for attempts, storm and checkpoint rules
    futile_attempt: bool = True  # counts toward "no new checkpoint over N attempts"
    record: bool = True  # goes into the attempt history


def names(nodes: Sequence[str]) -> str:
    shown = ", ".join(clip(n, 64) for n in nodes[:NAMES_SHOWN])
    more = len(nodes) - NAMES_SHOWN
    return f"{shown} and {more} more" if more > 0 else shown


def _union(ledger: Sequence[str], new: Iterable[str]) -> tuple[str, ...]:
    out = list(ledger)
    for node in new:
        if node and node not in out:
            out.append(node)
    return tuple(out)


def own_nodes(nodes: Sequence[str], ctx: DecisionContext) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(nodes of the job's allocation, nodes outside it), each in the verdict's order, deduplicated."""
    allowed = allowed_nodes(ctx)
    own: list[str] = []
    foreign: list[str] = []
    for node in nodes:
        if not node or node in own or node in foreign:
            continue
        (own if allowed is None or node in allowed else foreign).append(node)
    return tuple(own), tuple(foreign)


def _ckpt_text(ckpt: int | None) -> str:
    return f"iteration {ckpt}" if ckpt is not None else "none seen"


def restarts_in_window(state: PolicyState, now: float, window_s: float) -> int:
    # A restart stamped after `now` (clock skew between workers) counts: the safe side for a storm.
    return sum(1 for t in state.restart_times if now - t <= window_s)


def _capacity_problem(ctx: DecisionContext, exclude: Sequence[str], config: PolicyConfig) -> str | None:
    """Would the exclusion leave too few usable nodes? `usable_nodes == ()` means not known."""
    if not ctx.usable_nodes:
        return None
    need = max(config.min_nodes_left, ctx.job.num_nodes if ctx.job else 0)
    left = sum(1 for n in set(ctx.usable_nodes) if n not in exclude)
    if left >= need:
        return None
    return (
        f"excluding {len(exclude)} node(s) ({names(exclude)}) would leave {left} usable node(s) in the "
        f"partition, fewer than the {need} this job needs"
    )


def _placement(
    state: PolicyState, new_nodes: Sequence[str], ctx: DecisionContext, config: PolicyConfig
) -> tuple[tuple[str, ...], str | None, bool]:
    """(full exclusion set, problem or None, whether the ledger may take the set)."""
    full = _union(state.excluded_nodes, new_nodes)
    # Only growth is refused: a ledger already over a bound lowered at run time still allows requeues.
    if len(full) > config.max_excluded_nodes and len(full) > len(state.excluded_nodes):
        return (
            full,
            f"the exclusion ledger would grow to {len(full)} node(s) ({names(full)}), over "
            f"max_excluded_nodes={config.max_excluded_nodes}; that many bad nodes needs a person",
            False,
        )
    return full, _capacity_problem(ctx, full, config), True


def _fatal(
    state: PolicyState,
    verdict: Verdict,
    ctx: DecisionContext,
    config: PolicyConfig,
    kind: FailureClass,
    ckpt: int | None,
    track: _Trackers,
) -> _Outcome:
    job = ctx.job
    spends = kind == FailureClass.JOB
    what = f"{verdict.category.value} ({kind.value})"
    if spends:
        track.see_job_failure(failure_key(verdict), ckpt, config.same_failure_resets_on_checkpoint)

    def stop(reason: str) -> _Outcome:
        return _Outcome(ActionKind.CANCEL, "Stop: " + reason)

    if job is not None and not job.requeue_allowed:
        return _Outcome(
            ActionKind.NONE,
            f"Record only: {what}, but the job does not allow requeue (submitted with --no-requeue).",
        )
    own, foreign = own_nodes(verdict.nodes, ctx)
    if kind == FailureClass.HARDWARE and foreign and not own:
        # A kernel line about another host (a shared syslog, a neighbour's dmesg) says nothing about
        # this job's hardware: restarting a job for it would only cost the user its progress.
        return _Outcome(
            ActionKind.NONE,
            f"Record only: {what} names only {names(foreign)}, outside this job's allocation; "
            "nothing of this job is implicated, so nothing is excluded or restarted.",
        )
    storm = restarts_in_window(state, ctx.now, config.storm_window_s)
    if storm >= config.storm_restarts:
        return stop(
            f"restart storm — {storm} restarts within the last {config.storm_window_s:g} s "
            f"(storm_restarts={config.storm_restarts}); another restart would not help. Last failure: {what}."
        )
    if kind == FailureClass.TIME_LIMIT and not config.requeue_on_time_limit:
        return stop("the job reached its time limit and requeue_on_time_limit is off.")
    if kind == FailureClass.TIME_LIMIT and ckpt is None:
        return stop(
            "the job reached its time limit without any checkpoint to resume from; a requeue would start "
            "over and hit the same limit."
        )
    streak = track.streak_count
    if spends and streak >= config.same_failure_limit:
        top = clip(verdict.pattern_ids[0], 80) if verdict.pattern_ids else "no pattern"
        return stop(
            f"the same failure ({verdict.category.value}, {top}) happened {streak} times in a row "
            f"(same_failure_limit={config.same_failure_limit}) with no newer checkpoint in between; "
            "retrying will not fix it."
        )
    if spends and state.budget_spent >= config.retry_budget:
        return stop(
            f"retry budget spent — {state.budget_spent} of {config.retry_budget} restarts already used by "
            f"job failures. Last failure: {what}."
        )
    futile = kind != FailureClass.PREEMPTION
    no_ckpt = track.restarts_without_checkpoint
    if futile and no_ckpt >= config.no_checkpoint_attempts:
        return stop(
            f"no new checkpoint over the last {no_ckpt} attempt(s) (no_checkpoint_attempts="
            f"{config.no_checkpoint_attempts}; newest checkpoint: {_ckpt_text(track.best_checkpoint)}"
            f"). Last failure: {what}."
        )
    implicated: tuple[str, ...] = ()
    node_failure_excludes = kind == FailureClass.NODE_FAILURE and config.exclude_on_node_failure
    unsure = verdict.confidence < config.exclude_min_confidence
    if (kind == FailureClass.HARDWARE or node_failure_excludes) and not unsure:
        implicated = tuple(n for n in own if n not in state.excluded_nodes)
    full, problem, ledger_ok = _placement(state, implicated, ctx, config)
    ledger = full if ledger_ok else None
    if problem is not None:
        return _Outcome(
            ActionKind.WAIT,
            f"Wait for an operator: {what}; {problem}. Not requeued into a constraint Slurm cannot meet.",
            exclude_nodes=full,
            ledger=ledger,
        )
    resume = f"resuming from checkpoint iteration {ckpt}" if ckpt is not None else "no checkpoint seen yet"
    parts = [f"Requeue after {what}, {resume}"]
    if implicated:
        parts.append(f"excluding newly implicated {names(implicated)}")
    elif unsure and verdict.nodes and kind in (FailureClass.HARDWARE, FailureClass.NODE_FAILURE):
        parts.append(
            f"{names(verdict.nodes)} not excluded: confidence {verdict.confidence:.2f} is below "
            f"exclude_min_confidence={config.exclude_min_confidence:g}"
        )
    elif kind == FailureClass.HARDWARE:
        parts.append("no node was implicated, so none newly excluded")
    if verdict.category == Category.STORAGE_IO and not implicated:
        parts.append(
            "a storage fault (a full or failing filesystem: infrastructure), not the nodes' hardware, so "
            "no node is excluded; until space is freed or the filesystem is fixed the job fails again at "
            "its next checkpoint"
        )
    if foreign:
        parts.append(f"ignoring {names(foreign)}: not part of the job's allocation")
    if full:
        parts.append(f"exclusion set now {len(full)} node(s)")
    budget = state.budget_spent + (1 if spends else 0)
    if spends:
        parts.append(f"retry budget {budget} of {config.retry_budget} used")
    else:
        parts.append(f"not charged to the retry budget ({budget} of {config.retry_budget} used)")
    return _Outcome(
        ActionKind.REQUEUE,
        "; ".join(parts) + ".",
        exclude_nodes=full,
        ledger=ledger,
        spends_budget=spends,
        restart=True,
        futile_attempt=futile,
    )


def _straggler(
    state: PolicyState, verdict: Verdict, ctx: DecisionContext, config: PolicyConfig, ckpt: int | None
) -> _Outcome:
    """A slow job is still training: the worst outcome here is "record and watch", never a stop."""

    def watch(reason: str) -> _Outcome:
        return _Outcome(ActionKind.NONE, "Record and watch: " + reason, record=False)

    if verdict.attribution == Attribution.APPLICATION:
        return watch("the slowdown is attributed to the application; another node would not help.")
    own, _ = own_nodes(verdict.nodes, ctx)
    slow = tuple(n for n in own if n not in state.excluded_nodes)
    if not slow:
        return watch("straggler reported, but no slow node outside the exclusion set was identified.")
    if ctx.job is not None and not ctx.job.requeue_allowed:
        return watch(f"straggler on {names(slow)}; the job does not allow requeue.")
    est = estimate(
        ctx.progress,
        ctx.job,
        ckpt,
        ctx.now,
        horizon_s=config.straggler_horizon_s,
        fixed_cost_s=config.restart_cost_s,
    )
    if isinstance(est, str):
        return watch(f"straggler on {names(slow)}; {est}.")
    figures = (
        f"slowdown {est.slowdown:.0%} over {est.lookahead_s:.0f} s loses ~{est.expected_loss_s:.0f} s; a "
        f"restart costs ~{est.restart_cost_s:.0f} s ({est.since_checkpoint_s:.0f} s since the checkpoint + "
        f"{config.restart_cost_s:g} s)"
    )
    if not est.worth_restart:
        return watch(f"straggler on {names(slow)}; {figures}, so staying is cheaper.")
    storm = restarts_in_window(state, ctx.now, config.storm_window_s)
    if storm >= config.storm_restarts:
        return watch(f"straggler on {names(slow)}; {figures}, but {storm} restarts in the storm window.")
    full, problem, _ = _placement(state, slow, ctx, config)
    if problem is not None:
        return watch(f"straggler on {names(slow)}; {figures}, but {problem}.")
    return _Outcome(
        ActionKind.REQUEUE,
        f"Requeue away from straggler {names(slow)}: {figures}; exclusion set now {len(full)} node(s); "
        "not charged to the retry budget.",
        exclude_nodes=full,
        ledger=full,
        restart=True,
    )


def decide(
    state: PolicyState, verdict: Verdict, ctx: DecisionContext, config: PolicyConfig
) -> tuple[Advice, PolicyState]:
    sequence = state.sequence + 1
    advice_id = f"{ctx.workload_key}/a{state.attempts}/s{sequence}"
    ckpt = newest_checkpoint(ctx.checkpoint_iteration, ctx.progress.last_checkpoint_iteration)
    track = _Trackers.of(state)
    track.see_checkpoint(ckpt)
    kind = classify(verdict, ctx.job)
    if kind == FailureClass.STRAGGLER:
        out = _straggler(state, verdict, ctx, config, ckpt)
    elif not verdict.fatal:
        out = _Outcome(
            ActionKind.NONE,
            f"Record and watch: {verdict.category.value} is not fatal; the job keeps running.",
            record=False,
        )
    else:
        out = _fatal(state, verdict, ctx, config, kind, ckpt, track)

    advice = Advice(
        advice_id=advice_id,
        action=out.action,
        reason=clip(out.reason, MAX_REASON_CHARS),
        verdict=verdict,
        exclude_nodes=out.exclude_nodes,
        mode=ctx.mode,
        execute=should_execute(ctx.mode, ctx.acknowledged, out.action == ActionKind.NONE),
        attempt=state.attempts,
        generation=sequence,
        spends_budget=out.spends_budget,
    )
    if out.restart and out.futile_attempt:
        track.restarts_without_checkpoint += 1
    history = state.history
    if out.record:
        record = AttemptRecord(
            attempt=state.attempts,
            at=ctx.now,
            category=verdict.category,
            attribution=verdict.attribution,
            pattern_ids=tuple(clip(p, 80) for p in verdict.pattern_ids[:4]),
            nodes=tuple(verdict.nodes[:16]),
            checkpoint_iteration=ckpt,
            spent_budget=out.spends_budget,
            action=out.action,
            advice_id=advice_id,
        )
        history = append_history(state.history, record)
    restarted = out.restart
    # model_copy keeps any field added to PolicyState later that this function does not know about.
    new_state = state.model_copy(
        update={
            "excluded_nodes": out.ledger if out.ledger is not None else state.excluded_nodes,
            "attempts": state.attempts + 1 if restarted else state.attempts,
            "budget_spent": state.budget_spent + 1 if out.spends_budget else state.budget_spent,
            "history": history,
            "restart_times": (
                (*state.restart_times, ctx.now)[-RESTART_TIMES_LIMIT:] if restarted else state.restart_times
            ),
            "sequence": sequence,
            "best_checkpoint": track.best_checkpoint,
            "restarts_without_checkpoint": track.restarts_without_checkpoint,
            "streak_key": track.streak_key,
            "streak_count": track.streak_count,
            "streak_checkpoint": track.streak_checkpoint,
        }
    )
    return advice, new_state

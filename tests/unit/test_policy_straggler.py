"""Straggler policy: requeue away from the slow node only when staying slow costs more than a restart."""

from __future__ import annotations

from typing import Any

import pytest

from trainguard.models import ActionKind, Attribution, Category, JobSnapshot, Mode, ProgressState, Verdict
from trainguard.policy import DecisionContext, PolicyConfig, PolicyState, decide, estimate

T0 = 1_700_000_000.0
SLOW = Verdict(category=Category.STRAGGLER, attribution=Attribution.HARDWARE, fatal=False, nodes=("n05",))


def progress(
    base: float = 100.0, recent: float = 200.0, it: int = 1000, ckpt: int | None = 990
) -> ProgressState:
    return ProgressState(
        baseline_step_ms=base,
        recent_step_ms=recent,
        last_iteration=it,
        last_progress_at=T0,
        last_checkpoint_iteration=ckpt,
    )


def ctx(prog: ProgressState, *, end_time: int = 0, start_time: int = 0, **kw: Any) -> DecisionContext:
    job = JobSnapshot(job_id="7", state="RUNNING", num_nodes=2, end_time=end_time, start_time=start_time)
    base: dict[str, Any] = {
        "workload_key": "lab/7/1",
        "mode": Mode.ACTION,
        "acknowledged": True,
        "now": T0,
        "job": job,
        "usable_nodes": tuple(f"n{i:02d}" for i in range(1, 9)),
        "allocation_nodes": tuple(f"n{i:02d}" for i in range(0, 20)),
        "progress": prog,
    }
    base.update(kw)
    return DecisionContext(**base)


CFG = PolicyConfig(restart_cost_s=120, straggler_horizon_s=3600)


@pytest.mark.parametrize(
    ("prog", "end_in", "action"),
    [
        # 50 % slower for an hour loses 1800 s; 10 steps since the checkpoint (2 s) + 120 s to restart.
        (progress(100, 200, 1000, 990), None, ActionKind.REQUEUE),
        # 5 % slower: 3600 * (1 - 100/105) ~ 171 s > 122 s: still worth it with a fresh checkpoint.
        (progress(100, 105, 1000, 999), None, ActionKind.REQUEUE),
        # 5 % slower but 9000 steps (~945 s) since the checkpoint: staying is cheaper.
        (progress(100, 105, 10_000, 1000), None, ActionKind.NONE),
        # big slowdown but the job ends in 100 s: nothing left to save.
        (progress(100, 200, 1000, 990), 100, ActionKind.NONE),
        # no slowdown measured at all
        (ProgressState(last_iteration=5, last_checkpoint_iteration=5), None, ActionKind.NONE),
        # recent faster than baseline: no loss
        (progress(200, 100), None, ActionKind.NONE),
    ],
)
def test_cost_model(prog: ProgressState, end_in: int | None, action: ActionKind) -> None:
    c = ctx(prog, end_time=int(T0) + end_in if end_in is not None else 0)
    advice, state = decide(PolicyState(), SLOW, c, CFG)
    assert advice.action == action
    assert advice.spends_budget is False
    if action == ActionKind.REQUEUE:
        assert advice.exclude_nodes == ("n05",)
        assert state.excluded_nodes == ("n05",)
        assert state.attempts == 1
        assert "straggler" in advice.reason
    else:
        assert advice.reason.startswith("Record and watch")
        assert advice.execute is False
        assert state.excluded_nodes == ()
        assert state.attempts == 0
        assert state.history == ()


def test_estimate_figures() -> None:
    est = estimate(progress(100, 200, 1000, 900), None, 900, T0 + 10, horizon_s=3600, fixed_cost_s=120)
    assert not isinstance(est, str)
    assert est.slowdown == pytest.approx(0.5)
    assert est.lookahead_s == 3600
    assert est.expected_loss_s == pytest.approx(1800)
    # 100 steps at the current 200 ms + 10 s since the last progress line
    assert est.since_checkpoint_s == pytest.approx(30)
    assert est.restart_cost_s == pytest.approx(150)
    assert est.worth_restart


def test_remaining_time_caps_lookahead() -> None:
    job = JobSnapshot(job_id="7", end_time=int(T0) + 600)
    est = estimate(progress(), job, 990, T0, horizon_s=3600, fixed_cost_s=0)
    assert not isinstance(est, str)
    assert est.lookahead_s == 600


def test_without_checkpoint_position_the_allocation_time_is_lost() -> None:
    prog = progress(ckpt=None)
    est = estimate(
        prog, JobSnapshot(job_id="7", start_time=int(T0) - 5000), None, T0, horizon_s=3600, fixed_cost_s=0
    )
    assert not isinstance(est, str)
    assert est.since_checkpoint_s == 5000
    assert not est.worth_restart  # 1800 s lost by staying < 5000 s lost by restarting
    assert isinstance(estimate(prog, None, None, T0, horizon_s=3600, fixed_cost_s=0), str)


@pytest.mark.parametrize(
    ("state", "cfg", "usable", "needle"),
    [
        (PolicyState(restart_times=(T0 - 1,) * 5), CFG, None, "storm"),
        (
            PolicyState(excluded_nodes=("n01", "n02")),
            PolicyConfig(max_excluded_nodes=2),
            None,
            "max_excluded",
        ),
        (PolicyState(), CFG, ("n05", "n06"), "fewer than"),
    ],
)
def test_guards_turn_a_worthwhile_requeue_into_watch_never_a_stop(
    state: PolicyState, cfg: PolicyConfig, usable: tuple[str, ...] | None, needle: str
) -> None:
    kw: dict[str, Any] = {"usable_nodes": usable} if usable is not None else {}
    advice, new = decide(state, SLOW, ctx(progress(), **kw), cfg)
    assert advice.action == ActionKind.NONE
    assert needle in advice.reason
    assert new.excluded_nodes == state.excluded_nodes


def test_slow_node_already_excluded_or_unknown_is_watched() -> None:
    for v, st in [
        (SLOW, PolicyState(excluded_nodes=("n05",))),
        (SLOW.model_copy(update={"nodes": ()}), PolicyState()),
    ]:
        advice, _ = decide(st, v, ctx(progress()), CFG)
        assert advice.action == ActionKind.NONE
        assert "no slow node" in advice.reason


def test_straggler_never_cancels_even_when_futility_counters_are_high() -> None:
    state = PolicyState(budget_spent=99, restarts_without_checkpoint=99, streak_count=99)
    advice, _ = decide(state, SLOW, ctx(progress()), CFG)
    assert advice.action == ActionKind.REQUEUE


def test_straggler_requeue_in_observe_mode_is_advice_only() -> None:
    advice, _ = decide(PolicyState(), SLOW, ctx(progress(), mode=Mode.OBSERVE), CFG)
    assert advice.action == ActionKind.REQUEUE
    assert advice.execute is False


def test_straggler_attributed_to_the_application_excludes_nothing() -> None:
    v = SLOW.model_copy(update={"attribution": Attribution.APPLICATION})
    advice, state = decide(PolicyState(), v, ctx(progress()), CFG)
    assert advice.action == ActionKind.NONE
    assert "application" in advice.reason
    assert state.excluded_nodes == ()

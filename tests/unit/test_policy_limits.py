"""Cluster-wide safety limits (trainguard/policy/limits.py): the hour's budget, the cap on nodes excluded at
once, storm correlation across jobs, and what each answer does to an advice."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.test_policy_decide import HW, T0, ctx, verdict
from trainguard.models import ActionKind, Advice, Attribution, Category
from trainguard.policy import PolicyConfig, PolicyState, decide
from trainguard.policy.limits import (
    HOUR_S,
    ClusterLimits,
    FailureReport,
    GrantRequest,
    GrantResult,
    LimitsState,
    ask,
    grant,
    is_infra,
    limit_advice,
    needs_settle,
    prune,
    storm,
    workload_ended,
)
from trainguard.policy.reasons import SAFETY_LIMITS, advice_reason

LIMITS = ClusterLimits()


def failure(key: str, node: str = "", category: Category = Category.GPU_HARDWARE) -> FailureReport:
    attribution = Attribution.APPLICATION if category == Category.PYTHON_EXCEPTION else Attribution.HARDWARE
    return FailureReport(
        workload_key=key, category=category, attribution=attribution, nodes=(node,) if node else ()
    )


def req(
    key: str,
    node: str = "",
    *,
    rid: str | None = None,
    requeue: bool = True,
    exclude: bool = True,
    drain: tuple[str, ...] = (),
    category: Category = Category.GPU_HARDWARE,
) -> GrantRequest:
    return GrantRequest(
        request_id=rid or f"{key}/a0/s1",
        workload_key=key,
        failure=failure(key, node, category),
        requeue=requeue,
        exclude=(node,) if exclude and node else (),
        drain=drain,
    )


def feed(
    requests: list[GrantRequest], limits: ClusterLimits = LIMITS, step_s: float = 1.0
) -> list[GrantResult]:
    state = LimitsState()
    out: list[GrantResult] = []
    for i, r in enumerate(requests):
        result, state = grant(state, r, T0 + i * step_s, limits)
        out.append(result)
    return out


# ---- the hour's budget -------------------------------------------------------------------------------


def test_exclusions_beyond_the_hourly_budget_are_refused_with_the_limit_named() -> None:
    limits = ClusterLimits(exclusions_per_hour=1)
    first, second = feed([req("w1", "n1"), req("w2", "n2")], limits, step_s=60)
    assert first == GrantResult(requeue=True, exclude=True, drain=True)
    assert not second.requeue and not second.exclude
    assert second.limit.startswith("Advice only: cluster limit exclusions_per_hour=1 reached")


def test_the_budget_is_a_sliding_hour_a_later_failure_is_acted_on() -> None:
    limits = ClusterLimits(exclusions_per_hour=1)
    state = LimitsState()
    first, state = grant(state, req("w1", "n1"), T0, limits)
    refused, state = grant(state, req("w2", "n2"), T0 + HOUR_S - 1, limits)
    later, state = grant(state, req("w3", "n3"), T0 + HOUR_S + 1, limits)
    assert first.exclude and not refused.exclude and later.exclude and later.requeue


def test_requeues_beyond_the_hourly_budget_are_advice_only() -> None:
    limits = ClusterLimits(requeues_per_hour=2)
    results = feed([req(f"w{i}", requeue=True, exclude=False) for i in range(3)], limits, step_s=120)
    assert [r.requeue for r in results] == [True, True, False]
    assert results[2].limit.startswith("Advice only: cluster limit requeues_per_hour=2 reached (2 requeues")


def test_a_refused_request_spends_nothing() -> None:
    limits = ClusterLimits(requeues_per_hour=1)
    state = LimitsState()
    _, state = grant(state, req("w1", "n1"), T0, limits)
    for i in range(5):
        _, state = grant(state, req(f"x{i}", f"m{i}"), T0 + 10 + i, limits)
    assert sum(1 for g in state.grants if g.requeue) == 1
    assert {n for e in state.excluded for n in e.nodes} == {"n1"}


def test_drains_beyond_the_budget_leave_the_rest_of_the_advice_standing() -> None:
    limits = ClusterLimits(drains_per_hour=1)
    first, second = feed([req("w1", "n1", drain=("n1",)), req("w2", "n2", drain=("n2",))], limits, step_s=600)
    assert first.drain and first.requeue
    assert not second.drain and second.requeue and second.exclude
    assert second.limit.startswith("Not drained: cluster limit drains_per_hour=1 reached")


def test_the_cap_on_nodes_excluded_at_once_counts_every_running_workload() -> None:
    limits = ClusterLimits(max_excluded_nodes=2)
    state = LimitsState()
    a, state = grant(state, req("w1", "n1"), T0, limits)
    b, state = grant(state, req("w2", "n2"), T0 + 700, limits)
    c, state = grant(state, req("w3", "n3"), T0 + 1400, limits)
    assert a.exclude and b.exclude and not c.exclude
    assert c.limit.startswith("Advice only: cluster limit max_excluded_nodes=2 reached (3 nodes")
    # w1 ended: its exclusion no longer counts, so w3's next failure may exclude.
    state = workload_ended(state, "w1")
    d, state = grant(state, req("w3", "n3", rid="w3/a0/s2"), T0 + 2100, limits)
    assert d.exclude


def test_the_same_node_excluded_by_two_jobs_counts_once_toward_the_cap() -> None:
    limits = ClusterLimits(max_excluded_nodes=1)
    first, second = feed([req("w1", "n1"), req("w2", "n1")], limits, step_s=700)
    assert first.exclude and second.exclude


def test_a_retried_request_gets_its_first_answer_and_spends_once() -> None:
    limits = ClusterLimits(exclusions_per_hour=1)
    state = LimitsState()
    first, state = grant(state, req("w1", "n1"), T0, limits)
    again, state = grant(state, req("w1", "n1"), T0 + 5, limits)
    assert first == again and again.exclude
    assert len(state.grants) == 1


def test_limits_off_grant_everything() -> None:
    limits = ClusterLimits(enabled=False, exclusions_per_hour=0, requeues_per_hour=0, drains_per_hour=0)
    (result,) = feed([req("w1", "n1", drain=("n1",))], limits)
    assert (result.requeue, result.exclude, result.drain, result.limit, result.storm) == (
        True,
        True,
        True,
        "",
        "",
    )


def test_zero_budgets_refuse_everything() -> None:
    limits = ClusterLimits(requeues_per_hour=0)
    (result,) = feed([req("w1", "n1")], limits)
    assert not result.requeue and not result.exclude


def test_the_state_is_bounded_and_forgets_the_past() -> None:
    state = LimitsState()
    for i in range(50):
        _, state = grant(
            state, req(f"w{i}", f"n{i}", category=Category.PYTHON_EXCEPTION, exclude=False), T0 + i, LIMITS
        )
    pruned = prune(state, T0 + 2 * HOUR_S, LIMITS)
    assert pruned.grants == () and pruned.failures == ()


# ---- storms across jobs --------------------------------------------------------------------------------


def test_a_storm_of_infrastructure_failures_stops_exclusions_and_drains() -> None:
    limits = ClusterLimits(storm_jobs=3)
    results = feed([req(f"w{i}", f"n{i}", drain=(f"n{i}",)) for i in range(6)], limits)
    assert [r.exclude for r in results] == [True, True, False, False, False, False]
    assert not any(r.drain for r in results[2:])
    assert all(r.requeue for r in results)  # storm_action=requeue: without exclusions
    assert results[5].storm.startswith(
        "Storm: 6 jobs failed within 10 minutes → shared infrastructure suspected"
    )


def test_many_distinct_nodes_from_two_jobs_are_a_storm() -> None:
    limits = ClusterLimits(storm_jobs=10, storm_nodes=4)
    state = LimitsState()
    wide = GrantRequest(
        request_id="w1/a0/s1",
        workload_key="w1",
        failure=FailureReport(
            workload_key="w1",
            category=Category.INTERCONNECT,
            attribution=Attribution.HARDWARE,
            nodes=("a", "b", "c"),
        ),
    )
    one, state = grant(state, wide, T0, limits)
    two, state = grant(state, req("w2", "d"), T0 + 1, limits)
    assert one.storm == "" and "implicating 4 nodes" in two.storm and not two.exclude


def test_one_job_on_many_nodes_is_not_a_storm() -> None:
    limits = ClusterLimits(storm_nodes=2)
    state = LimitsState()
    for i in range(5):
        wide = req("w1", f"n{i}", rid=f"w1/a{i}/s1")
        result, state = grant(state, wide, T0 + i, limits)
        assert result.storm == ""


def test_application_failures_never_make_a_storm() -> None:
    limits = ClusterLimits(storm_jobs=2)
    results = feed(
        [req(f"w{i}", category=Category.PYTHON_EXCEPTION, exclude=False) for i in range(10)], limits
    )
    assert all(r.storm == "" for r in results)


def test_an_application_failure_during_a_storm_is_handled_as_usual() -> None:
    limits = ClusterLimits(storm_jobs=2)
    state = LimitsState()
    for i in range(3):
        _, state = grant(state, req(f"w{i}", f"n{i}"), T0 + i, limits)
    app, state = grant(state, req("app", category=Category.PYTHON_EXCEPTION, exclude=False), T0 + 5, limits)
    assert app.storm == "" and app.requeue


def test_the_storm_ends_with_its_window_and_exclusions_resume() -> None:
    limits = ClusterLimits(storm_jobs=3, storm_window_s=600)
    state = LimitsState()
    for i in range(4):
        _, state = grant(state, req(f"w{i}", f"n{i}"), T0 + i, limits)
    assert storm(state, T0 + 10, limits)
    after, state = grant(state, req("late", "n9"), T0 + 700, limits)
    assert after.storm == "" and after.exclude


def test_storm_action_wait_holds_requeues_for_an_operator() -> None:
    limits = ClusterLimits(storm_jobs=2, storm_action="wait")
    first, second = feed([req("w1", "n1"), req("w2", "n2")], limits)
    assert first.requeue and not second.requeue and second.storm and second.limit == ""


def test_failures_of_observe_mode_jobs_count_toward_a_storm() -> None:
    limits = ClusterLimits(storm_jobs=3)
    state = LimitsState()
    for i in range(2):
        _, state = grant(state, req(f"obs{i}", f"n{i}", requeue=False, exclude=False), T0 + i, limits)
    acting, state = grant(state, req("act", "n5"), T0 + 3, limits)
    assert acting.storm and not acting.exclude


def test_only_exclusions_and_drains_of_infrastructure_failures_wait_to_settle() -> None:
    assert needs_settle(req("w1", "n1"), LIMITS)
    assert needs_settle(req("w1", "n1", exclude=False, drain=("n1",)), LIMITS)
    assert not needs_settle(req("w1", "n1", exclude=False), LIMITS)
    assert not needs_settle(req("w1", category=Category.PYTHON_EXCEPTION), LIMITS)
    assert not needs_settle(req("w1", "n1"), ClusterLimits(storm_settle_s=0))


def test_which_failures_look_like_infrastructure() -> None:
    assert is_infra(failure("w", category=Category.INTERCONNECT))
    assert is_infra(failure("w", category=Category.NCCL_TIMEOUT))
    assert not is_infra(failure("w", category=Category.PYTHON_EXCEPTION))
    blamed_on_app = FailureReport(
        workload_key="w", category=Category.NCCL_ERROR, attribution=Attribution.APPLICATION
    )
    assert not is_infra(blamed_on_app)


@settings(max_examples=60, deadline=None)
@given(
    jobs=st.integers(min_value=1, max_value=40),
    budget=st.integers(min_value=0, max_value=10),
    storm_jobs=st.integers(min_value=2, max_value=50),
)
def test_never_more_exclusions_in_an_hour_than_the_budget(jobs: int, budget: int, storm_jobs: int) -> None:
    limits = ClusterLimits(exclusions_per_hour=budget, storm_jobs=storm_jobs, storm_nodes=1000)
    results = feed([req(f"w{i}", f"n{i}") for i in range(jobs)], limits, step_s=30)
    granted = sum(1 for r in results if r.exclude and r.requeue)
    assert granted <= min(budget, storm_jobs - 1)


# ---- what an answer does to the advice ---------------------------------------------------------------


def hw_advice(drain: tuple[str, ...] = ()) -> Advice:
    advice, _ = decide(PolicyState(), HW, ctx(ckpt=1), PolicyConfig())
    assert advice.action == ActionKind.REQUEUE and advice.exclude_nodes == ("n03",) and advice.execute
    return advice.model_copy(update={"drain_nodes": drain})


def test_a_refused_exclusion_makes_the_advice_advice_only_with_its_reason_code() -> None:
    result = GrantResult(
        requeue=False,
        exclude=False,
        limit="Advice only: cluster limit exclusions_per_hour=1 reached (1 nodes excluded in the last hour)",
    )
    limited = limit_advice(hw_advice(), result, ())
    assert not limited.execute and limited.action == ActionKind.REQUEUE
    assert limited.reason.startswith("Advice only: cluster limit exclusions_per_hour=1 reached")
    assert "not requeued, nothing excluded" in limited.reason
    assert advice_reason(limited) == "cluster_exclusion_limit"


def test_a_storm_requeues_without_new_exclusions_and_says_so() -> None:
    text = "Storm: 6 jobs failed within 10 minutes → shared infrastructure suspected (limits.storm_jobs=5)"
    limited = limit_advice(hw_advice(drain=("n03",)), GrantResult(exclude=False, drain=False, storm=text), ())
    assert limited.execute and limited.action == ActionKind.REQUEUE
    assert limited.exclude_nodes == () and limited.drain_nodes == ()
    assert limited.reason.startswith(text) and "n03 not excluded or drained" in limited.reason
    assert advice_reason(limited) == "infra_storm"


def test_a_storm_keeps_exclusions_the_job_already_had() -> None:
    advice = hw_advice().model_copy(update={"exclude_nodes": ("n01", "n03")})
    limited = limit_advice(advice, GrantResult(exclude=False, storm="Storm: x"), ("n01",))
    assert limited.exclude_nodes == ("n01",)


def test_a_storm_with_storm_action_wait_waits_for_an_operator() -> None:
    limited = limit_advice(hw_advice(), GrantResult(requeue=False, exclude=False, storm="Storm: x"), ())
    assert limited.action == ActionKind.WAIT and "waiting for an operator" in limited.reason
    assert advice_reason(limited) == "infra_storm"


def test_a_refused_drain_keeps_the_requeue() -> None:
    text = "Not drained: cluster limit drains_per_hour=1 reached (1 nodes drained in the last hour)"
    limited = limit_advice(hw_advice(drain=("n03",)), GrantResult(drain=False, limit=text), ())
    assert limited.execute and limited.exclude_nodes == ("n03",) and limited.drain_nodes == ()
    assert "n03 left in service" in limited.reason
    assert advice_reason(limited) == "cluster_drain_limit"


def test_an_unreachable_cluster_watch_gives_advice_only() -> None:
    limited = limit_advice(
        hw_advice(drain=("n03",)),
        GrantResult(requeue=False, exclude=False, drain=False, unavailable=True),
        (),
    )
    assert not limited.execute and limited.drain_nodes == ()
    assert advice_reason(limited) == "cluster_limits_unavailable"


def test_a_full_grant_leaves_the_advice_unchanged() -> None:
    advice = hw_advice(drain=("n03",))
    assert limit_advice(advice, GrantResult(), ()) == advice
    assert advice_reason(advice) == "drain"


def test_every_cluster_limit_code_is_a_safety_limit() -> None:
    codes = {
        advice_reason(limit_advice(hw_advice(), GrantResult(requeue=False, exclude=False, limit=text), ()))
        for text in (
            "Advice only: cluster limit requeues_per_hour=1 reached (1 requeues in the last hour)",
            "Advice only: cluster limit exclusions_per_hour=1 reached (x)",
            "Advice only: cluster limit max_excluded_nodes=1 reached (x)",
        )
    }
    assert codes == {"cluster_requeue_limit", "cluster_exclusion_limit", "cluster_excluded_cap"}
    assert codes <= set(SAFETY_LIMITS)
    assert {"cluster_drain_limit", "infra_storm", "cluster_limits_unavailable"} <= set(SAFETY_LIMITS)


def test_storm_advice_for_a_node_failure_too() -> None:
    v = verdict(Category.SLURM_NODE_FAILURE, Attribution.INFRASTRUCTURE, nodes=("n04",), patterns=())
    advice, _ = decide(PolicyState(), v, ctx(T0, ckpt=1), PolicyConfig())
    limited = limit_advice(advice, GrantResult(exclude=False, storm="Storm: 5 jobs"), ())
    assert limited.exclude_nodes == () and limited.action == ActionKind.REQUEUE


def test_without_settling_alone_only_a_failure_after_another_jobs_waits() -> None:
    limits = ClusterLimits(storm_settle_alone=False)
    state = LimitsState()
    lone = req("w1", "n1")
    assert not needs_settle(lone, limits, state, T0)
    _, state = grant(state, lone, T0, limits)
    assert not needs_settle(req("w1", "n1", rid="w1/a1/s2"), limits, state, T0 + 5)  # its own failure
    assert needs_settle(req("w2", "n2"), limits, state, T0 + 5)
    assert not needs_settle(req("w2", "n2"), limits, state, T0 + 5 + limits.storm_window_s)
    assert not needs_settle(lone, ClusterLimits(), LimitsState(), T0)  # the default: a lone one acts at once
    assert needs_settle(lone, ClusterLimits(storm_settle_alone=True), LimitsState(), T0)


def test_a_settling_request_is_told_to_ask_again_and_decided_with_what_came_meanwhile() -> None:
    limits = ClusterLimits(storm_jobs=3, storm_settle_s=5, storm_settle_alone=True)
    state = LimitsState()
    first, state = ask(state, req("w1", "n1"), T0, limits)
    assert first.settle_s == 5 and state.failures  # counted at once, not decided
    early, state = ask(state, req("w1", "n1"), T0 + 2, limits)
    assert early.settle_s == 3
    for i in (2, 3):
        _, state = ask(state, req(f"w{i}", f"n{i}"), T0 + i, limits)
    decided, state = ask(state, req("w1", "n1"), T0 + 5, limits)
    assert decided.settle_s == 0 and decided.storm and not decided.exclude and decided.requeue
    assert ask(state, req("w1", "n1"), T0 + 9, limits)[0] == decided  # a retry gets the decision
    assert not any(p.request_id == "w1/a0/s1" for p in state.settling)


def test_a_request_that_needs_no_settling_is_decided_at_once() -> None:
    result, _ = ask(LimitsState(), req("w1", category=Category.PYTHON_EXCEPTION, exclude=False), T0, LIMITS)
    assert result.settle_s == 0 and result.requeue

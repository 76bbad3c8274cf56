"""Rules of decide(), one table row or test per rule and per combination that matters."""

from __future__ import annotations

from typing import Any

import pytest

from trainguard.models import (
    ActionKind,
    Attribution,
    Category,
    JobSnapshot,
    Mode,
    ProgressState,
    Verdict,
)
from trainguard.policy import (
    HISTORY_LIMIT,
    DecisionContext,
    PolicyConfig,
    PolicyState,
    decide,
    record_restart,
)

KEY = "lab/42/1700000000"
T0 = 1_700_000_000.0
NODES = tuple(f"n{i:02d}" for i in range(1, 11))
# The failed attempt's allocation: every node these tests implicate (the allocation guard has its own tests).
ALLOCATION = tuple(f"n{i:02d}" for i in range(0, 20))


def verdict(
    category: Category = Category.PYTHON_EXCEPTION,
    attribution: Attribution = Attribution.APPLICATION,
    *,
    fatal: bool = True,
    nodes: tuple[str, ...] = (),
    patterns: tuple[str, ...] = ("py_traceback",),
    summary: str = "",
    confidence: float = 0.9,
) -> Verdict:
    return Verdict(
        category=category,
        attribution=attribution,
        fatal=fatal,
        confidence=confidence,
        nodes=nodes,
        pattern_ids=patterns,
        summary=summary,
    )


def job(**kw: Any) -> JobSnapshot:
    base: dict[str, Any] = {"job_id": "42", "state": "FAILED", "num_nodes": 2, "nodes": ("n01", "n02")}
    base.update(kw)
    return JobSnapshot(**base)


def ctx(
    now: float = T0,
    *,
    mode: Mode = Mode.ACTION,
    acknowledged: bool = True,
    ckpt: int | None = None,
    usable: tuple[str, ...] = NODES,
    job_: JobSnapshot | None = None,
    progress: ProgressState | None = None,
    allocation: tuple[str, ...] = ALLOCATION,
) -> DecisionContext:
    return DecisionContext(
        allocation_nodes=allocation,
        workload_key=KEY,
        mode=mode,
        acknowledged=acknowledged,
        now=now,
        job=job_ if job_ is not None else job(),
        usable_nodes=usable,
        checkpoint_iteration=ckpt,
        progress=progress or ProgressState(),
    )


CFG = PolicyConfig()
HW = verdict(Category.GPU_HARDWARE, Attribution.HARDWARE, nodes=("n03",), patterns=("xid_79",))
NODE_FAIL = verdict(Category.SLURM_NODE_FAILURE, Attribution.INFRASTRUCTURE, nodes=("n04",), patterns=())
PREEMPT = verdict(Category.PREEMPTION_OR_TIMELIMIT, Attribution.INFRASTRUCTURE, patterns=("preempted",))
APP = verdict()
OOM = verdict(Category.CUDA_OOM, Attribution.APPLICATION, patterns=("cuda_oom",))


def run(
    verdicts: list[Verdict],
    config: PolicyConfig = CFG,
    step_s: float = 3600.0,
    ckpts: list[int | None] | None = None,
) -> tuple[list[ActionKind], PolicyState, list[str]]:
    """Feed failures one after another, as the workflow would, and collect the actions."""
    state = PolicyState()
    actions: list[ActionKind] = []
    reasons: list[str] = []
    for i, v in enumerate(verdicts):
        ck = ckpts[i] if ckpts else 100 * (i + 1)  # default: every attempt checkpoints further
        advice, state = decide(state, v, ctx(T0 + i * step_s, ckpt=ck), config)
        actions.append(advice.action)
        reasons.append(advice.reason)
    return actions, state, reasons


# --- single decisions ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("v", "action", "spends", "excluded"),
    [
        (APP, ActionKind.REQUEUE, True, ()),
        (OOM, ActionKind.REQUEUE, True, ()),
        (HW, ActionKind.REQUEUE, False, ("n03",)),
        (
            verdict(Category.INTERCONNECT, Attribution.HARDWARE, nodes=("n05", "n06"), patterns=("ib_link",)),
            ActionKind.REQUEUE,
            False,
            ("n05", "n06"),
        ),
        (NODE_FAIL, ActionKind.REQUEUE, False, ("n04",)),
        (PREEMPT, ActionKind.REQUEUE, False, ()),
        # Application attribution never excludes nodes, even with nodes named and a hardware-ish category.
        (
            verdict(Category.GPU_HARDWARE, Attribution.APPLICATION, nodes=("n03",)),
            ActionKind.REQUEUE,
            True,
            (),
        ),
        (
            verdict(Category.NCCL_TIMEOUT, Attribution.APPLICATION, nodes=("n03",)),
            ActionKind.REQUEUE,
            True,
            (),
        ),
        (
            verdict(Category.SLURM_NODE_FAILURE, Attribution.APPLICATION, nodes=("n03",)),
            ActionKind.REQUEUE,
            True,
            (),
        ),
        # Unknown attribution is charged to the job (conservative), and excludes nothing.
        (verdict(Category.HANG, Attribution.NONE, nodes=("n03",)), ActionKind.REQUEUE, True, ()),
        (verdict(Category.STORAGE_IO, Attribution.SYSTEM_SOFTWARE), ActionKind.REQUEUE, True, ()),
        (verdict(Category.STORAGE_IO, Attribution.INFRASTRUCTURE), ActionKind.REQUEUE, False, ()),
        # A hang attributed to hardware excludes the node it is stuck on.
        (verdict(Category.HANG, Attribution.HARDWARE, nodes=("n07",)), ActionKind.REQUEUE, False, ("n07",)),
        (verdict(Category.HEALTHY, Attribution.NONE, fatal=False), ActionKind.NONE, False, ()),
        (verdict(Category.NCCL_ERROR, Attribution.APPLICATION, fatal=False), ActionKind.NONE, False, ()),
    ],
)
def test_first_failure(v: Verdict, action: ActionKind, spends: bool, excluded: tuple[str, ...]) -> None:
    advice, state = decide(PolicyState(), v, ctx(ckpt=10), CFG)
    assert advice.action == action
    assert advice.spends_budget == spends
    assert advice.exclude_nodes == excluded
    assert state.excluded_nodes == excluded
    assert state.budget_spent == (1 if spends else 0)
    assert state.attempts == (1 if action == ActionKind.REQUEUE else 0)
    assert advice.reason


def test_advice_identity_fields() -> None:
    state = PolicyState(attempts=3, sequence=7)
    advice, new = decide(state, HW, ctx(ckpt=5), CFG)
    assert advice.advice_id == f"{KEY}/a3/s8"
    assert advice.attempt == 3
    assert advice.generation == 8
    assert new.sequence == 8
    assert new.attempts == 4
    assert advice.verdict == HW


@pytest.mark.parametrize(
    ("mode", "ack", "v", "execute"),
    [
        (Mode.ACTION, True, APP, True),
        (Mode.ACTION, False, APP, False),
        (Mode.OBSERVE, True, APP, False),
        (Mode.OBSERVE, False, APP, False),
        (Mode.ACTION, True, verdict(fatal=False), False),  # NONE never executes
    ],
)
def test_execute_flag(mode: Mode, ack: bool, v: Verdict, execute: bool) -> None:
    advice, _ = decide(PolicyState(), v, ctx(mode=mode, acknowledged=ack, ckpt=1), CFG)
    assert advice.execute is execute
    assert advice.mode == mode


def test_observe_mode_decides_the_same_as_action_mode() -> None:
    seq = [APP, HW, OOM, OOM]
    for mode in Mode:
        state = PolicyState()
        actions = []
        for i, v in enumerate(seq):
            advice, state = decide(state, v, ctx(T0 + i * 3600, mode=mode, ckpt=10), CFG)
            actions.append(advice.action)
            assert advice.execute is (mode == Mode.ACTION and advice.action != ActionKind.NONE)
        assert actions == [ActionKind.REQUEUE, ActionKind.REQUEUE, ActionKind.REQUEUE, ActionKind.CANCEL]


# --- ledger ----------------------------------------------------------------------------------------


def test_ledger_is_remembered_across_attempts_and_application_failures() -> None:
    seq = [
        verdict(Category.GPU_HARDWARE, Attribution.HARDWARE, nodes=("n03",)),
        APP,
        verdict(Category.INTERCONNECT, Attribution.HARDWARE, nodes=("n05",)),
        OOM,
    ]
    state = PolicyState()
    seen = []
    for i, v in enumerate(seq):
        advice, state = decide(state, v, ctx(T0 + i * 3600, ckpt=100 * (i + 1)), CFG)
        assert advice.action == ActionKind.REQUEUE
        seen.append(advice.exclude_nodes)
    assert seen == [("n03",), ("n03",), ("n03", "n05"), ("n03", "n05")]
    assert state.excluded_nodes == ("n03", "n05")


def test_ledger_has_no_duplicates_and_ignores_empty_names() -> None:
    v = verdict(Category.GPU_HARDWARE, Attribution.HARDWARE, nodes=("n03", "", "n03"))
    advice, state = decide(PolicyState(excluded_nodes=("n03",)), v, ctx(ckpt=1), CFG)
    assert advice.exclude_nodes == ("n03",)
    assert state.excluded_nodes == ("n03",)


def test_node_failure_exclusion_can_be_switched_off() -> None:
    cfg = PolicyConfig(exclude_on_node_failure=False)
    advice, state = decide(PolicyState(), NODE_FAIL, ctx(ckpt=1), cfg)
    assert advice.action == ActionKind.REQUEUE
    assert advice.exclude_nodes == ()
    assert state.excluded_nodes == ()


def test_ledger_over_its_bound_waits_and_keeps_the_ledger() -> None:
    cfg = PolicyConfig(max_excluded_nodes=2)
    state = PolicyState(excluded_nodes=("n01", "n02"))
    v = verdict(Category.GPU_HARDWARE, Attribution.HARDWARE, nodes=("n03",))
    advice, new = decide(state, v, ctx(ckpt=1), cfg)
    assert advice.action == ActionKind.WAIT
    assert advice.exclude_nodes == ("n01", "n02", "n03")  # what the job would need
    assert new.excluded_nodes == ("n01", "n02")  # the ledger itself stays bounded
    assert "max_excluded_nodes=2" in advice.reason
    assert new.attempts == 0


@pytest.mark.parametrize(
    ("usable", "num_nodes", "min_left", "ledger", "new", "action"),
    [
        (("n01", "n02", "n03"), 2, 1, (), ("n03",), ActionKind.REQUEUE),  # 2 left, 2 needed
        (("n01", "n02", "n03"), 2, 1, ("n01",), ("n03",), ActionKind.WAIT),  # 1 left, 2 needed
        (("n01", "n02", "n03"), 1, 3, (), ("n03",), ActionKind.WAIT),  # min_nodes_left dominates
        (("n01", "n02", "n03"), 0, 1, ("n01", "n02"), ("n03",), ActionKind.WAIT),  # nothing left at all
        ((), 4, 1, ("n01",), ("n03",), ActionKind.REQUEUE),  # usable unknown: no capacity check
        (("n01", "n02"), 2, 1, ("n09",), ("n08",), ActionKind.REQUEUE),  # excluded nodes not in partition
    ],
)
def test_too_few_nodes_left(
    usable: tuple[str, ...],
    num_nodes: int,
    min_left: int,
    ledger: tuple[str, ...],
    new: tuple[str, ...],
    action: ActionKind,
) -> None:
    cfg = PolicyConfig(min_nodes_left=min_left)
    v = verdict(Category.GPU_HARDWARE, Attribution.HARDWARE, nodes=new)
    c = ctx(ckpt=1, usable=usable, job_=job(num_nodes=num_nodes))
    advice, state = decide(PolicyState(excluded_nodes=ledger), v, c, cfg)
    assert advice.action == action
    assert advice.exclude_nodes == (*ledger, *new)
    # The implicated node is remembered even when the job must wait: it is still bad.
    assert state.excluded_nodes == (*ledger, *new)
    if action == ActionKind.WAIT:
        assert "fewer than" in advice.reason
        assert state.attempts == 0


def test_application_failure_waits_when_the_ledger_alone_leaves_too_few_nodes() -> None:
    # Nodes went down since the ledger was built: the check covers every requeue, not only new exclusions.
    c = ctx(ckpt=1, usable=("n01", "n02"), job_=job(num_nodes=2))
    advice, _ = decide(PolicyState(excluded_nodes=("n02",)), APP, c, CFG)
    assert advice.action == ActionKind.WAIT


# --- futile retries --------------------------------------------------------------------------------


def test_same_application_failure_twice_in_a_row_stops() -> None:
    actions, state, reasons = run([APP, APP], ckpts=[100, 100])
    assert actions == [ActionKind.REQUEUE, ActionKind.CANCEL]
    assert "same failure" in reasons[1]
    assert "py_traceback" in reasons[1]
    assert state.attempts == 1


@pytest.mark.parametrize(
    ("seq", "ckpts", "expected"),
    [
        # different failures do not form a streak
        ([APP, OOM, APP], [1, 1, 1], [ActionKind.REQUEUE] * 3),
        # same category, different top pattern: different failures
        (
            [APP, verdict(patterns=("other",)), APP],
            [1, 1, 1],
            [ActionKind.REQUEUE] * 3,
        ),
        # hardware/infra failures in between neither count nor break the streak
        ([APP, HW, APP], [1, 1, 1], [ActionKind.REQUEUE, ActionKind.REQUEUE, ActionKind.CANCEL]),
        ([APP, PREEMPT, APP], [1, 1, 1], [ActionKind.REQUEUE, ActionKind.REQUEUE, ActionKind.CANCEL]),
        # a newer checkpoint between two identical failures means progress: not futile
        ([APP, APP, APP], [100, 200, 300], [ActionKind.REQUEUE] * 3),
        ([APP, APP, APP], [100, 200, 200], [ActionKind.REQUEUE, ActionKind.REQUEUE, ActionKind.CANCEL]),
        # hardware failures repeated are not "futile" by this rule
        ([HW, HW, HW], [1, 2, 3], [ActionKind.REQUEUE] * 3),
    ],
)
def test_same_failure_streak(seq: list[Verdict], ckpts: list[int | None], expected: list[ActionKind]) -> None:
    actions, _, _ = run(seq, ckpts=ckpts)
    assert actions == expected


def test_same_failure_limit_is_configurable_and_reset_can_be_disabled() -> None:
    cfg = PolicyConfig(same_failure_limit=3)
    actions, _, _ = run([APP, APP, APP], cfg, ckpts=[1, 1, 1])
    assert actions == [ActionKind.REQUEUE, ActionKind.REQUEUE, ActionKind.CANCEL]
    cfg = PolicyConfig(same_failure_resets_on_checkpoint=False)
    actions, _, _ = run([APP, APP], cfg, ckpts=[100, 200])
    assert actions == [ActionKind.REQUEUE, ActionKind.CANCEL]


def test_retry_budget_counts_only_job_failures() -> None:
    cfg = PolicyConfig(retry_budget=2, same_failure_limit=10)
    seq = [APP, HW, NODE_FAIL, PREEMPT, OOM, APP]
    actions, state, reasons = run(seq, cfg)
    assert actions == [ActionKind.REQUEUE] * 5 + [ActionKind.CANCEL]
    assert state.budget_spent == 2
    assert state.attempts == 5
    assert "retry budget spent" in reasons[-1]
    assert "2 of 2" in reasons[-1]


def test_zero_budget_stops_the_first_job_failure_but_not_hardware() -> None:
    cfg = PolicyConfig(retry_budget=0)
    a1, _ = decide(PolicyState(), APP, ctx(ckpt=1), cfg)
    a2, _ = decide(PolicyState(), HW, ctx(ckpt=1), cfg)
    assert (a1.action, a2.action) == (ActionKind.CANCEL, ActionKind.REQUEUE)


@pytest.mark.parametrize(
    ("n", "ckpts", "expected"),
    [
        (1, [100, 100], [ActionKind.REQUEUE, ActionKind.CANCEL]),
        (1, [100, 200, 200], [ActionKind.REQUEUE, ActionKind.REQUEUE, ActionKind.CANCEL]),
        (3, [100, 100, 100, 100], [ActionKind.REQUEUE] * 3 + [ActionKind.CANCEL]),
        (3, [None, None, None, None], [ActionKind.REQUEUE] * 3 + [ActionKind.CANCEL]),
        (3, [None, None, None, 5], [ActionKind.REQUEUE] * 4),  # a first checkpoint is progress
        (3, [100, 100, 100, 150, 150], [ActionKind.REQUEUE] * 5),
        (
            2,
            [300, 200, 100],
            [ActionKind.REQUEUE, ActionKind.REQUEUE, ActionKind.CANCEL],
        ),  # older is not newer
    ],
)
def test_no_new_checkpoint_over_n_attempts(
    n: int, ckpts: list[int | None], expected: list[ActionKind]
) -> None:
    cfg = PolicyConfig(no_checkpoint_attempts=n)
    # Hardware failures on fresh nodes: nothing else would stop them.
    seq = [
        verdict(Category.GPU_HARDWARE, Attribution.HARDWARE, nodes=(f"n{i:02d}",)) for i in range(len(ckpts))
    ]
    actions, _, reasons = run(seq, cfg, ckpts=ckpts)
    assert actions == expected
    if expected[-1] == ActionKind.CANCEL:
        assert "no new checkpoint" in reasons[-1]


def test_checkpoint_progress_read_from_progress_state_too() -> None:
    cfg = PolicyConfig(no_checkpoint_attempts=1)
    state = PolicyState()
    for i, it in enumerate([100, 200]):
        prog = ProgressState(last_checkpoint_iteration=it)
        advice, state = decide(state, HW, ctx(T0 + i * 3600, progress=prog), cfg)
        assert advice.action == ActionKind.REQUEUE
    assert state.best_checkpoint == 200


def test_preemptions_do_not_count_as_futile_attempts() -> None:
    cfg = PolicyConfig(no_checkpoint_attempts=1, storm_restarts=100)
    actions, _, _ = run([PREEMPT] * 5, cfg, ckpts=[7] * 5)
    assert actions == [ActionKind.REQUEUE] * 5


def test_restart_storm_stops_any_failure() -> None:
    cfg = PolicyConfig(storm_restarts=3, storm_window_s=600)
    # Three hardware restarts 60 s apart, each on a new node and with progress: only the storm stops it.
    seq = [verdict(Category.GPU_HARDWARE, Attribution.HARDWARE, nodes=(f"n{i:02d}",)) for i in range(4)]
    actions, state, reasons = run(seq, cfg, step_s=60)
    assert actions == [ActionKind.REQUEUE] * 3 + [ActionKind.CANCEL]
    assert "restart storm" in reasons[-1]
    assert len(state.restart_times) == 3


def test_restarts_outside_the_window_are_not_a_storm() -> None:
    cfg = PolicyConfig(storm_restarts=3, storm_window_s=600)
    seq = [verdict(Category.GPU_HARDWARE, Attribution.HARDWARE, nodes=(f"n{i:02d}",)) for i in range(6)]
    actions, _, _ = run(seq, cfg, step_s=301)  # at most 2 earlier restarts inside any 600 s
    assert actions == [ActionKind.REQUEUE] * 6


def test_record_restart_feeds_the_storm_rule() -> None:
    cfg = PolicyConfig(storm_restarts=2, storm_window_s=600)
    state = record_restart(record_restart(PolicyState(), T0 - 100), T0 - 50)
    assert state.attempts == 0  # restarts the policy did not ask for are not its attempts
    advice, _ = decide(state, HW, ctx(T0, ckpt=1), cfg)
    assert advice.action == ActionKind.CANCEL


@pytest.mark.parametrize(
    ("v", "state", "cfg", "needle"),
    [
        (APP, PolicyState(budget_spent=5), CFG, "retry budget spent"),
        (HW, PolicyState(restart_times=(T0,) * 5), CFG, "restart storm"),
        (HW, PolicyState(restarts_without_checkpoint=3, best_checkpoint=9), CFG, "no new checkpoint"),
        (
            APP,
            PolicyState(streak_key="python_exception|py_traceback", streak_count=1, streak_checkpoint=9),
            CFG,
            "same failure",
        ),
    ],
)
def test_every_stop_explains_itself(v: Verdict, state: PolicyState, cfg: PolicyConfig, needle: str) -> None:
    advice, _ = decide(state, v, ctx(ckpt=9), cfg)
    assert advice.action == ActionKind.CANCEL
    assert advice.reason.startswith("Stop: ")
    assert needle in advice.reason
    assert advice.spends_budget is False


# --- time limit and preemption ---------------------------------------------------------------------

TIMEOUT = verdict(
    Category.PREEMPTION_OR_TIMELIMIT, Attribution.INFRASTRUCTURE, patterns=("slurm_time_limit",)
)


@pytest.mark.parametrize(
    ("v", "job_state", "ckpt", "cfg", "action"),
    [
        (TIMEOUT, "TIMEOUT", 500, CFG, ActionKind.REQUEUE),  # checkpointed: continue in a new allocation
        (TIMEOUT, "TIMEOUT", None, CFG, ActionKind.CANCEL),  # nothing to resume from: would start over
        (TIMEOUT, "TIMEOUT", 500, PolicyConfig(requeue_on_time_limit=False), ActionKind.CANCEL),
        (PREEMPT, "TIMEOUT", None, CFG, ActionKind.CANCEL),  # Slurm's state says time limit
        (PREEMPT, "PREEMPTED", None, CFG, ActionKind.REQUEUE),  # preemption needs no checkpoint to requeue
        (
            verdict(
                Category.PREEMPTION_OR_TIMELIMIT, Attribution.INFRASTRUCTURE, summary="DUE TO TIME LIMIT"
            ),
            "FAILED",
            None,
            CFG,
            ActionKind.CANCEL,
        ),
    ],
)
def test_time_limit(
    v: Verdict, job_state: str, ckpt: int | None, cfg: PolicyConfig, action: ActionKind
) -> None:
    advice, state = decide(PolicyState(), v, ctx(ckpt=ckpt, job_=job(state=job_state)), cfg)
    assert advice.action == action
    assert advice.spends_budget is False
    assert state.budget_spent == 0
    if action == ActionKind.CANCEL:
        assert "time limit" in advice.reason


def test_repeated_time_limits_without_new_checkpoint_stop() -> None:
    cfg = PolicyConfig(no_checkpoint_attempts=2)
    state = PolicyState()
    actions = []
    for i, ck in enumerate([100, 100, 100]):
        advice, state = decide(state, TIMEOUT, ctx(T0 + i * 7200, ckpt=ck, job_=job(state="TIMEOUT")), cfg)
        actions.append(advice.action)
    assert actions == [ActionKind.REQUEUE, ActionKind.REQUEUE, ActionKind.CANCEL]


def test_job_without_requeue_is_only_recorded() -> None:
    advice, state = decide(PolicyState(), HW, ctx(ckpt=1, job_=job(requeue_allowed=False)), CFG)
    assert advice.action == ActionKind.NONE
    assert advice.execute is False
    assert "--no-requeue" in advice.reason
    assert state.attempts == 0
    assert len(state.history) == 1


# --- state bookkeeping -----------------------------------------------------------------------------


def test_history_records_each_failure_and_is_bounded() -> None:
    cfg = PolicyConfig(
        retry_budget=1000, storm_restarts=1000, same_failure_limit=1000, no_checkpoint_attempts=1000
    )
    state = PolicyState()
    for i in range(HISTORY_LIMIT + 5):
        _, state = decide(state, APP, ctx(T0 + i, ckpt=i), cfg)
    assert len(state.history) == HISTORY_LIMIT
    assert state.history[-1].attempt == HISTORY_LIMIT + 4
    assert state.history[-1].action == ActionKind.REQUEUE
    assert state.history[-1].checkpoint_iteration == HISTORY_LIMIT + 4
    assert state.history[0].attempt == 5


def test_non_fatal_verdicts_do_not_enter_history_or_change_counters() -> None:
    start = PolicyState(attempts=2, budget_spent=1, excluded_nodes=("n01",))
    advice, state = decide(start, verdict(fatal=False), ctx(ckpt=None), CFG)
    assert advice.action == ActionKind.NONE
    assert advice.exclude_nodes == ()
    assert state == start.model_copy(update={"sequence": 1})


def test_cancel_does_not_count_as_attempt_or_restart() -> None:
    state = PolicyState(budget_spent=5)
    advice, new = decide(state, APP, ctx(ckpt=1), CFG)
    assert advice.action == ActionKind.CANCEL
    assert new.attempts == 0
    assert new.restart_times == ()
    assert new.budget_spent == 5
    assert new.history[-1].action == ActionKind.CANCEL


def test_hostile_pattern_ids_are_clipped_in_reason_and_history() -> None:
    long = "x" * 10_000 + "; rm -rf /\n"
    v = verdict(patterns=(long,))
    state = PolicyState(streak_key=f"python_exception|{long}", streak_count=1, streak_checkpoint=1)
    advice, new = decide(state, v, ctx(ckpt=1), CFG)
    assert advice.action == ActionKind.CANCEL
    assert len(advice.reason) <= 600
    assert all(len(p) <= 80 for p in new.history[-1].pattern_ids)


def test_lowering_the_bound_at_run_time_does_not_block_requeues_that_add_nothing() -> None:
    state = PolicyState(excluded_nodes=("n01", "n02", "n03"))
    cfg = PolicyConfig(max_excluded_nodes=1)
    advice, new = decide(state, APP, ctx(ckpt=1), cfg)
    assert advice.action == ActionKind.REQUEUE
    assert advice.exclude_nodes == ("n01", "n02", "n03")
    assert decide(state, HW, ctx(ckpt=1), cfg)[0].action == ActionKind.REQUEUE  # n03: already excluded
    v = verdict(Category.GPU_HARDWARE, Attribution.HARDWARE, nodes=("n04",))
    advice, new = decide(state, v, ctx(ckpt=1), cfg)
    assert advice.action == ActionKind.WAIT
    assert new.excluded_nodes == ("n01", "n02", "n03")


# ---- safety clause 3: only the job's own nodes -----------------------------------------------------------


def test_a_kernel_line_about_another_host_excludes_nothing_and_restarts_nothing() -> None:
    """A job on n01,n04 whose log holds `n03 kernel: NVRM: Xid 79` (a shared syslog)."""
    on_1_4 = job(state="RUNNING", nodes=("n01", "n04"))
    v = verdict(Category.GPU_HARDWARE, Attribution.HARDWARE, nodes=("n03",), patterns=("xid_79",))
    advice, state = decide(PolicyState(), v, ctx(job_=on_1_4, allocation=()), CFG)
    assert advice.action == ActionKind.NONE
    assert advice.exclude_nodes == () and state.excluded_nodes == ()
    assert "n03" in advice.reason and "outside" in advice.reason


def test_only_the_own_nodes_of_a_mixed_verdict_are_excluded() -> None:
    on_1_4 = job(state="FAILED", nodes=("n01", "n04"))
    v = verdict(
        Category.GPU_HARDWARE, Attribution.HARDWARE, nodes=("n03", "n04", "n07"), patterns=("xid_79",)
    )
    advice, state = decide(PolicyState(), v, ctx(job_=on_1_4, allocation=()), CFG)
    assert advice.action == ActionKind.REQUEUE
    assert advice.exclude_nodes == ("n04",) == state.excluded_nodes
    assert "n03" in advice.reason and "not part of the job's allocation" in advice.reason


def test_a_requeued_pending_job_uses_the_failed_attempts_allocation() -> None:
    # Slurm requeued the job after NODE_FAIL: it is pending, with no nodes; the allocation comes from
    # the attempt that failed.
    pending = job(state="PENDING", nodes=())
    v = verdict(
        Category.SLURM_NODE_FAILURE, Attribution.HARDWARE, nodes=("n02",), patterns=("slurm_job_node_fail",)
    )
    advice, _ = decide(PolicyState(), v, ctx(job_=pending, allocation=("n01", "n02")), CFG)
    assert advice.action == ActionKind.REQUEUE and advice.exclude_nodes == ("n02",)
    unknown, _ = decide(PolicyState(), v, ctx(job_=pending, allocation=()), CFG)
    assert unknown.exclude_nodes == ()


def test_a_straggler_outside_the_allocation_is_not_a_straggler_of_this_job() -> None:
    on_1_4 = job(state="RUNNING", nodes=("n01", "n04"))
    v = verdict(Category.STRAGGLER, Attribution.HARDWARE, nodes=("n03",), patterns=("straggler",))
    advice, state = decide(PolicyState(), v, ctx(job_=on_1_4, allocation=()), CFG)
    assert advice.action == ActionKind.NONE and state.excluded_nodes == ()


def test_legacy_replays_keep_their_old_decision() -> None:
    """Histories recorded before the guard replay with `legacy_unrestricted` (workflow.patched)."""
    on_1_4 = job(state="FAILED", nodes=("n01", "n04"))
    legacy = ctx(job_=on_1_4, allocation=()).model_copy(update={"legacy_unrestricted": True})
    advice, _ = decide(PolicyState(), HW, legacy, CFG)
    assert advice.action == ActionKind.REQUEUE and advice.exclude_nodes == ("n03",)


def test_a_storage_fault_excludes_no_node_and_says_it_is_the_filesystem() -> None:
    """ENOSPC / a failing filesystem: the site's fault, not the nodes' hardware; not charged."""
    storage = verdict(Category.STORAGE_IO, Attribution.INFRASTRUCTURE, patterns=("checkpoint_fs_full",))
    advice, state = decide(PolicyState(), storage, ctx(ckpt=10), PolicyConfig())
    assert advice.action == ActionKind.REQUEUE and advice.exclude_nodes == ()
    assert "filesystem" in advice.reason and "not the nodes' hardware" in advice.reason
    assert "not charged" in advice.reason and state.budget_spent == 0

"""Properties of decide() over arbitrary sequences of verdicts, contexts and configurations."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from trainguard.models import (
    ActionKind,
    Advice,
    Attribution,
    Category,
    JobSnapshot,
    Mode,
    ProgressState,
    Verdict,
)
from trainguard.policy import (
    HISTORY_LIMIT,
    RESTART_TIMES_LIMIT,
    DecisionContext,
    PolicyConfig,
    PolicyState,
    decide,
    effective_mode,
)

NODE_NAMES = [f"n{i:02d}" for i in range(12)]
nodes = st.lists(st.sampled_from(NODE_NAMES), max_size=4).map(tuple)

verdicts = st.builds(
    Verdict,
    category=st.sampled_from(list(Category)),
    attribution=st.sampled_from(list(Attribution)),
    fatal=st.booleans(),
    nodes=nodes,
    pattern_ids=st.lists(st.sampled_from(["a", "b", "slurm_time_limit", "xid_79"]), max_size=2).map(tuple),
)

progress = st.builds(
    ProgressState,
    last_iteration=st.none() | st.integers(0, 10_000),
    last_progress_at=st.none() | st.floats(0, 1e5),
    baseline_step_ms=st.none() | st.floats(1, 1000),
    recent_step_ms=st.none() | st.floats(1, 2000),
    last_checkpoint_iteration=st.none() | st.integers(0, 10_000),
)

jobs = st.none() | st.builds(
    JobSnapshot,
    job_id=st.just("1"),
    state=st.sampled_from(["FAILED", "TIMEOUT", "PREEMPTED", "NODE_FAIL", "RUNNING"]),
    num_nodes=st.integers(0, 6),
    start_time=st.integers(0, 100_000),
    end_time=st.integers(0, 200_000),
    requeue_allowed=st.booleans(),
    nodes=st.lists(st.sampled_from(NODE_NAMES), max_size=4, unique=True).map(tuple),
)

configs = st.builds(
    PolicyConfig,
    retry_budget=st.integers(0, 6),
    max_excluded_nodes=st.integers(0, 8),
    min_nodes_left=st.integers(0, 4),
    no_checkpoint_attempts=st.integers(1, 4),
    storm_restarts=st.integers(1, 6),
    storm_window_s=st.floats(1, 10_000),
    restart_cost_s=st.floats(0, 1000),
    same_failure_limit=st.integers(1, 4),
    same_failure_resets_on_checkpoint=st.booleans(),
    requeue_on_time_limit=st.booleans(),
    exclude_on_node_failure=st.booleans(),
)

steps = st.tuples(
    verdicts,
    st.floats(0, 5000),  # seconds since the previous decision
    st.sampled_from(list(Mode)),
    st.booleans(),  # acknowledged
    st.none() | st.integers(0, 10_000),  # checkpoint from logs
    progress,
    jobs,
    st.none() | st.lists(st.sampled_from(NODE_NAMES), max_size=12, unique=True).map(tuple),
    st.lists(st.sampled_from(NODE_NAMES), max_size=6, unique=True).map(tuple),  # the failed allocation
)


Step = tuple[PolicyState, DecisionContext, Advice, PolicyState]


def _run(config: PolicyConfig, seq: list[tuple]) -> list[Step]:
    state = PolicyState()
    now = 100_000.0
    out = []
    for v, dt, mode, ack, ckpt, prog, job, usable, allocation in seq:
        now += dt
        c = DecisionContext(
            workload_key="lab/1/1",
            mode=mode,
            acknowledged=ack,
            now=now,
            job=job,
            usable_nodes=usable or (),
            checkpoint_iteration=ckpt,
            progress=prog,
            allocation_nodes=allocation,
        )
        advice, new = decide(state, v, c, config)
        out.append((state, c, advice, new))
        state = new
    return out


@settings(max_examples=200, deadline=None)
@given(config=configs, seq=st.lists(steps, min_size=1, max_size=25))
def test_invariants_over_any_sequence(config: PolicyConfig, seq: list[tuple]) -> None:
    ids = set()
    for before, c, advice, after in _run(config, seq):
        # The ledger never shrinks and never reorders; it stays within its bound.
        assert after.excluded_nodes[: len(before.excluded_nodes)] == before.excluded_nodes
        assert len(after.excluded_nodes) <= max(config.max_excluded_nodes, len(before.excluded_nodes))
        assert len(set(after.excluded_nodes)) == len(after.excluded_nodes)
        # Execute only when acting is allowed, and never for NONE; observe never executes.
        assert advice.mode == c.mode
        assert advice.execute == (
            c.mode == Mode.ACTION and c.acknowledged and advice.action != ActionKind.NONE
        )
        # Counters: never negative, budget never beyond what it allows, attempts move only on requeue.
        assert 0 <= after.budget_spent <= config.retry_budget
        assert after.attempts == before.attempts + (1 if advice.action == ActionKind.REQUEUE else 0)
        assert after.budget_spent == before.budget_spent + (1 if advice.spends_budget else 0)
        assert not advice.spends_budget or advice.action == ActionKind.REQUEUE
        # Every decision gets a fresh id; sequence advances by one.
        assert advice.advice_id not in ids
        ids.add(advice.advice_id)
        assert after.sequence == before.sequence + 1 == advice.generation
        # Bounded payloads.
        assert len(after.history) <= HISTORY_LIMIT
        assert len(after.restart_times) <= RESTART_TIMES_LIMIT
        # Requeues carry the full ledger; application verdicts never add to it.
        if advice.action == ActionKind.REQUEUE:
            assert advice.exclude_nodes == after.excluded_nodes
        if advice.verdict.attribution == Attribution.APPLICATION:
            assert after.excluded_nodes == before.excluded_nodes
        # Non-fatal, non-straggler verdicts are only recorded.
        if not advice.verdict.fatal and advice.verdict.category != Category.STRAGGLER:
            assert advice.action == ActionKind.NONE
        # Stragglers never stop a running job, WAIT and CANCEL explain themselves.
        if advice.verdict.category == Category.STRAGGLER:
            assert advice.action in (ActionKind.NONE, ActionKind.REQUEUE)
        if advice.action in (ActionKind.CANCEL, ActionKind.WAIT):
            assert len(advice.reason) > 20
        assert advice.action != ActionKind.DRAIN
        # Safety clause 3: whatever the verdict names, only nodes of the job's own allocation are ever
        # added to the exclusions, and evidence naming only other hosts never restarts a job.
        allowed = set(c.allocation_nodes) | set(c.job.nodes if c.job else ())
        assert set(after.excluded_nodes) - set(before.excluded_nodes) <= allowed
        assert set(advice.exclude_nodes) - set(before.excluded_nodes) <= allowed
        hardware_only_foreign = (
            advice.verdict.fatal
            and advice.verdict.attribution == Attribution.HARDWARE
            and advice.verdict.category
            not in (Category.STRAGGLER, Category.PREEMPTION_OR_TIMELIMIT, Category.SLURM_NODE_FAILURE)
            and bool(advice.verdict.nodes)
            and not set(advice.verdict.nodes) & allowed
        )
        if hardware_only_foreign:
            assert advice.action != ActionKind.REQUEUE, advice.reason


@settings(max_examples=200, deadline=None)
@given(config=configs, seq=st.lists(steps, min_size=1, max_size=15))
def test_decide_is_deterministic(config: PolicyConfig, seq: list[tuple]) -> None:
    first = [(a, n) for _, _, a, n in _run(config, seq)]
    second = [(a, n) for _, _, a, n in _run(config, seq)]
    assert first == second


@settings(max_examples=200, deadline=None)
@given(config=configs, seq=st.lists(steps, min_size=1, max_size=15))
def test_state_survives_a_payload_round_trip(config: PolicyConfig, seq: list[tuple]) -> None:
    # What continue-as-new and activity payloads do: JSON out, JSON in, same decisions after.
    for _, _, advice, new in _run(config, seq):
        assert PolicyState.model_validate_json(new.model_dump_json()) == new
        assert Advice.model_validate_json(advice.model_dump_json()) == advice


@given(cluster=st.sampled_from(list(Mode)), job=st.sampled_from(list(Mode)))
def test_job_mode_never_escalates_past_the_cluster(cluster: Mode, job: Mode) -> None:
    mode = effective_mode(cluster, job, None)
    assert mode == Mode.OBSERVE or cluster == Mode.ACTION

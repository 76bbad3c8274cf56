"""Cross-job node reputation: drain a node implicated in hardware failures of several jobs."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainguard.models import Attribution, Category, NodeIncident
from trainguard.policy import PolicyConfig, nodes_to_drain
from trainguard.policy.reputation import counts

NOW = 1_700_000_000.0
ON = PolicyConfig(drain_enabled=True, drain_jobs_threshold=2, drain_window_s=86400)


def inc(
    node: str,
    job: str,
    ago: float = 60,
    cat: Category = Category.GPU_HARDWARE,
    attr: Attribution = Attribution.HARDWARE,
    *,
    user: str | None = None,
    job_nodes: tuple[str, ...] | None = None,
    metric: bool = False,
) -> NodeIncident:
    """By default each job belongs to its own user and ran on the node it implicates."""
    return NodeIncident(
        node=node,
        workload_key=f"lab/{job}/1",
        at=NOW - ago,
        category=cat,
        attribution=attr,
        user=f"user-{job}" if user is None else user,
        job_nodes=(node, "n9") if job_nodes is None else job_nodes,
        gpu_metric=metric,
    )


@pytest.mark.parametrize(
    ("incidents", "drained"),
    [
        ([], []),
        ([inc("n1", "a")], []),
        ([inc("n1", "a"), inc("n1", "a"), inc("n1", "a")], []),  # one job, many times: not several jobs
        ([inc("n1", "a"), inc("n1", "b")], ["n1"]),
        ([inc("n1", "a"), inc("n2", "b")], []),
        ([inc("n1", "a"), inc("n1", "b"), inc("n2", "a"), inc("n2", "c")], ["n1", "n2"]),
        ([inc("n1", "a", ago=90_000), inc("n1", "b")], []),  # outside the window
        (
            [inc("n1", "a", cat=Category.INTERCONNECT, attr=Attribution.SYSTEM_SOFTWARE), inc("n1", "b")],
            ["n1"],
        ),
        ([inc("n1", "a", cat=Category.CUDA_OOM, attr=Attribution.APPLICATION), inc("n1", "b")], []),
        ([inc("n1", "a", cat=Category.GPU_HARDWARE, attr=Attribution.APPLICATION), inc("n1", "b")], []),
        (
            [
                inc("n1", "a", cat=Category.SLURM_NODE_FAILURE, attr=Attribution.INFRASTRUCTURE),
                inc("n1", "b"),
            ],
            [],
        ),
        ([inc("n1", "a", ago=-30), inc("n1", "b")], ["n1"]),  # slight clock skew still counts
    ],
)
def test_drain(incidents: list[NodeIncident], drained: list[str]) -> None:
    out = nodes_to_drain(incidents, ON, NOW)
    assert [n for n, _ in out] == drained


def test_disabled_by_default() -> None:
    incidents = [inc("n1", "a"), inc("n1", "b"), inc("n1", "c")]
    assert PolicyConfig().drain_enabled is False
    assert nodes_to_drain(incidents, PolicyConfig(), NOW) == []


def test_threshold_and_already_drained() -> None:
    incidents = [inc("n1", "a"), inc("n1", "b"), inc("n2", "a"), inc("n2", "b"), inc("n2", "c")]
    three = ON.model_copy(update={"drain_jobs_threshold": 3})
    assert [n for n, _ in nodes_to_drain(incidents, three, NOW)] == ["n2"]
    assert [n for n, _ in nodes_to_drain(incidents, ON, NOW, already_drained={"n1"})] == ["n2"]


def test_reason_is_short_plain_and_explains() -> None:
    [(node, reason)] = nodes_to_drain([inc("n1", "a"), inc("n1", "b", cat=Category.INTERCONNECT)], ON, NOW)
    assert node == "n1"
    assert reason.isascii()
    assert len(reason) < 128
    assert "2 jobs of 2 users" in reason
    assert "24h" in reason
    assert "gpu_hardware" in reason and "interconnect" in reason


def test_evidence_about_a_node_outside_the_jobs_allocation_never_counts() -> None:
    # Two users' jobs on n8/n9 both logged a kernel line naming n1 (a shared syslog): n1 is not theirs.
    foreign = [inc("n1", "a", job_nodes=("n8", "n9")), inc("n1", "b", job_nodes=("n8", "n9"))]
    assert nodes_to_drain(foreign, ON, NOW) == []
    unknown = [inc("n1", "a", job_nodes=()), inc("n1", "b", job_nodes=())]  # allocation not recorded
    assert nodes_to_drain(unknown, ON, NOW) == []
    assert nodes_to_drain([*foreign, inc("n1", "c")], ON, NOW) == []  # one job of its own is not two


def test_log_evidence_needs_two_users_not_only_two_jobs() -> None:
    one_user = [inc("n1", "a", user="alice"), inc("n1", "b", user="alice"), inc("n1", "c", user="alice")]
    assert nodes_to_drain(one_user, ON, NOW) == []
    anonymous = [inc("n1", "a", user=""), inc("n1", "b", user="")]  # users not known: not two users
    assert nodes_to_drain(anonymous, ON, NOW) == []
    assert [n for n, _ in nodes_to_drain([*one_user, inc("n1", "d", user="bob")], ON, NOW)] == ["n1"]


def test_a_gpu_metric_on_the_jobs_own_node_is_enough_alone() -> None:
    [(node, reason)] = nodes_to_drain([inc("n1", "a", metric=True)], ON, NOW)
    assert node == "n1" and "GPU health metric" in reason
    assert nodes_to_drain([inc("n1", "a", metric=True, job_nodes=("n2",))], ON, NOW) == []
    assert nodes_to_drain([inc("n1", "a", metric=True, ago=90_000)], ON, NOW) == []


node_names = st.sampled_from([f"n{i}" for i in range(6)])
incidents = st.lists(
    st.builds(
        NodeIncident,
        node=node_names,
        workload_key=st.sampled_from([f"lab/{j}/1" for j in range(5)]),
        at=st.floats(NOW - 100_000, NOW + 60),
        category=st.sampled_from(list(Category)),
        attribution=st.sampled_from(list(Attribution)),
        job_nodes=st.lists(node_names, max_size=4, unique=True).map(tuple),
        user=st.sampled_from(["", "alice", "bob", "carol"]),
        gpu_metric=st.booleans(),
    ),
    max_size=30,
)


@settings(max_examples=300, deadline=None)
@given(found=incidents)
def test_every_drained_node_has_own_node_evidence_from_two_users_or_a_metric(
    found: list[NodeIncident],
) -> None:
    for node, reason in nodes_to_drain(found, ON, NOW):
        own = [
            i
            for i in found
            if i.node == node and node in i.job_nodes and counts(i) and NOW - i.at <= ON.drain_window_s
        ]
        users = {i.user for i in own if i.user}
        jobs = {i.workload_key for i in own}
        assert any(i.gpu_metric for i in own) or (len(users) >= 2 and len(jobs) >= 2), (node, reason)
        assert reason.isascii() and len(reason) < 128

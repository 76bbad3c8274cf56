"""Cross-job node reputation: drain a node implicated in hardware failures of several jobs."""

from __future__ import annotations

import pytest

from trainguard.models import Attribution, Category, NodeIncident
from trainguard.policy import PolicyConfig, nodes_to_drain

NOW = 1_700_000_000.0
ON = PolicyConfig(drain_enabled=True, drain_jobs_threshold=2, drain_window_s=86400)


def inc(
    node: str,
    job: str,
    ago: float = 60,
    cat: Category = Category.GPU_HARDWARE,
    attr: Attribution = Attribution.HARDWARE,
) -> NodeIncident:
    return NodeIncident(node=node, workload_key=f"lab/{job}/1", at=NOW - ago, category=cat, attribution=attr)


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
    assert "2 jobs" in reason
    assert "24h" in reason
    assert "gpu_hardware" in reason and "interconnect" in reason

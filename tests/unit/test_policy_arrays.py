"""Job arrays: when several tasks fail the same way on different nodes, stop recovering the array."""

from __future__ import annotations

import pytest

from trainguard.models import ArrayTaskFailure, Attribution, Category
from trainguard.policy import PolicyConfig, array_is_systemic

CFG = PolicyConfig(array_systemic_tasks=3, array_systemic_nodes=2, array_window_s=3600)


def f(
    task: str,
    node: str,
    *,
    at: float = 0.0,
    cat: Category = Category.CUDA_OOM,
    attr: Attribution = Attribution.APPLICATION,
    pattern: str = "cuda_oom",
    array: str = "100",
) -> ArrayTaskFailure:
    return ArrayTaskFailure(
        array_job_id=array,
        task_id=task,
        category=cat,
        attribution=attr,
        pattern_id=pattern,
        nodes=(node,),
        at=at,
    )


@pytest.mark.parametrize(
    ("failures", "systemic"),
    [
        ([], False),
        ([f("1", "n1"), f("2", "n2")], False),  # two tasks are not several
        ([f("1", "n1"), f("2", "n2"), f("3", "n3")], True),
        ([f("1", "n1"), f("2", "n2"), f("3", "n2")], True),  # 3 tasks on 2 nodes
        ([f("1", "n1"), f("2", "n1"), f("3", "n1")], False),  # one node: that node, not the array
        ([f("1", "n1"), f("1", "n2"), f("1", "n3")], False),  # one task failing thrice is that task
        ([f("1", "n1"), f("2", "n2"), f("3", "n3", pattern="other")], False),  # different ways
        ([f("1", "n1"), f("2", "n2"), f("3", "n3", cat=Category.SEGFAULT)], False),
        ([f("1", "n1"), f("2", "n2"), f("3", "n3", array="200")], False),  # different arrays
        ([f("1", "n1", at=0), f("2", "n2", at=100), f("3", "n3", at=5000)], False),  # outside the window
        ([f("1", "n1", at=2000), f("2", "n2", at=3000), f("3", "n3", at=5000)], True),
        (
            [
                f(str(i), f"n{i}", cat=Category.PREEMPTION_OR_TIMELIMIT, attr=Attribution.INFRASTRUCTURE)
                for i in range(5)
            ],
            False,  # the scheduler taking nodes away is not the array's fault
        ),
        ([f(str(i), f"n{i}", cat=Category.SLURM_NODE_FAILURE) for i in range(5)], False),
        ([f(str(i), f"n{i}", attr=Attribution.INFRASTRUCTURE) for i in range(5)], False),
        # Hardware failures on several nodes at once are systemic too (a bad driver roll-out, a switch).
        ([f(str(i), f"n{i}", cat=Category.GPU_HARDWARE, attr=Attribution.HARDWARE) for i in range(3)], True),
    ],
)
def test_systemic(failures: list[ArrayTaskFailure], systemic: bool) -> None:
    verdict, reason = array_is_systemic(failures, CFG)
    assert verdict is systemic
    assert reason


def test_reason_names_the_array_and_figures() -> None:
    systemic, reason = array_is_systemic([f("1", "n1"), f("2", "n2"), f("3", "n3")], CFG)
    assert systemic
    assert "array 100" in reason
    assert "3 tasks" in reason
    assert "3 different nodes" in reason
    assert "cuda_oom" in reason


def test_order_does_not_matter() -> None:
    failures = [f("1", "n1"), f("2", "n2", pattern="x"), f("3", "n3"), f("4", "n4", pattern="x")]
    results = {array_is_systemic(p, CFG) for p in (failures, failures[::-1], failures[1:] + failures[:1])}
    assert len(results) == 1


def test_thresholds_are_configurable() -> None:
    failures = [f("1", "n1"), f("2", "n2")]
    assert array_is_systemic(failures, PolicyConfig(array_systemic_tasks=2))[0]
    three_same_node = [f("1", "n1"), f("2", "n1"), f("3", "n1")]
    assert array_is_systemic(three_same_node, PolicyConfig(array_systemic_nodes=1))[0]

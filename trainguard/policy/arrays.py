"""Job arrays: each failed task is recovered on its own, until the failures look systemic."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from trainguard.models import ArrayTaskFailure, Attribution, Category, clip
from trainguard.policy.config import PolicyConfig

# The scheduler taking nodes away says nothing about the array's code or data.
_NOT_SYSTEMIC = frozenset({Category.SLURM_NODE_FAILURE, Category.PREEMPTION_OR_TIMELIMIT})


def array_is_systemic(failures: Sequence[ArrayTaskFailure], config: PolicyConfig) -> tuple[bool, str]:
    """Systemic when, within `array_window_s` of the newest failure, at least `array_systemic_tasks`
    different tasks of one array failed the same way (category + top pattern) on at least
    `array_systemic_nodes` different nodes. Same-way failures on one node point at the node instead."""
    considered = [
        f for f in failures if f.category not in _NOT_SYSTEMIC and f.attribution != Attribution.INFRASTRUCTURE
    ]
    if not considered:
        return False, "no task failure that could be systemic"
    groups: dict[tuple[str, str, str], list[ArrayTaskFailure]] = defaultdict(list)
    for f in considered:
        groups[(f.array_job_id, f.category.value, f.pattern_id)].append(f)
    best: tuple[int, int, str] = (0, 0, "")
    # Sorted, so the sentence returned does not depend on the order failures arrived in.
    for (array_id, category, pattern), group in sorted(groups.items()):
        newest = max(f.at for f in group)
        recent = [f for f in group if newest - f.at <= config.array_window_s]
        tasks = {f.task_id for f in recent}
        nodes = {n for f in recent for n in f.nodes}
        what = f"{category}" + (f" ({clip(pattern, 80)})" if pattern else "")
        if len(tasks) >= config.array_systemic_tasks and len(nodes) >= config.array_systemic_nodes:
            return True, (
                f"Stop recovering array {clip(array_id, 40)}: {len(tasks)} tasks failed with {what} on "
                f"{len(nodes)} different nodes within {config.array_window_s:g} s (thresholds: "
                f"{config.array_systemic_tasks} tasks, {config.array_systemic_nodes} nodes); the cause is "
                "in the array's code, data or environment, not in one task or node."
            )
        best = max(best, (len(tasks), len(nodes), what))
    tasks_n, nodes_n, what = best
    return False, (
        f"not systemic: at most {tasks_n} task(s) on {nodes_n} node(s) failed the same way ({what}); "
        f"thresholds are {config.array_systemic_tasks} tasks on {config.array_systemic_nodes} nodes"
    )

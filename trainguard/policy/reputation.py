"""Cross-job node reputation: a node implicated in hardware failures of several jobs gets drained."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Sequence

from trainguard.models import Attribution, Category, NodeIncident
from trainguard.policy.config import PolicyConfig

_HARDWARE = frozenset({Category.GPU_HARDWARE, Category.INTERCONNECT})


def _is_hardware(incident: NodeIncident) -> bool:
    if incident.attribution == Attribution.APPLICATION:
        return False
    return incident.attribution == Attribution.HARDWARE or incident.category in _HARDWARE


def nodes_to_drain(
    incidents: Sequence[NodeIncident],
    config: PolicyConfig,
    now: float,
    already_drained: Collection[str] = (),
) -> list[tuple[str, str]]:
    """(node, reason) for every node implicated in hardware failures of at least
    `drain_jobs_threshold` different workloads within `drain_window_s` before `now`; empty unless
    `drain_enabled`. The reason is short and plain ASCII because it becomes Slurm's `Reason=`."""
    if not config.drain_enabled:
        return []
    jobs: dict[str, set[str]] = defaultdict(set)
    kinds: dict[str, set[str]] = defaultdict(set)
    for inc in incidents:
        # Incidents stamped slightly in the future (clock skew) still count; old ones do not.
        if not inc.node or not _is_hardware(inc) or now - inc.at > config.drain_window_s:
            continue
        jobs[inc.node].add(inc.workload_key)
        kinds[inc.node].add(inc.category.value)
    out: list[tuple[str, str]] = []
    for node in sorted(jobs):
        count = len(jobs[node])
        if count < config.drain_jobs_threshold or node in already_drained:
            continue
        hours = config.drain_window_s / 3600
        categories = ",".join(sorted(kinds[node]))
        reason = f"trainguard: hw failures in {count} jobs within {hours:g}h ({categories})"
        out.append((node, reason))
    return out

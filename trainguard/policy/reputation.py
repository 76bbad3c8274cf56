"""Cross-job node reputation: a node implicated in hardware failures of several jobs gets drained.

Only evidence about a job's own nodes counts, and log evidence must come from several jobs of several
users: one user's job printing kernel-looking lines must not be able to drain nodes. A GPU health metric
(DCGM) measured on the node is evidence enough on its own.
"""

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


def counts(incident: NodeIncident) -> bool:
    """Hardware evidence about a node of the reporting job's own allocation."""
    return bool(incident.node) and incident.node in incident.job_nodes and _is_hardware(incident)


def nodes_to_drain(
    incidents: Sequence[NodeIncident],
    config: PolicyConfig,
    now: float,
    already_drained: Collection[str] = (),
) -> list[tuple[str, str]]:
    """(node, reason) for every node implicated, within `drain_window_s` before `now`, in hardware
    failures of at least `drain_jobs_threshold` different workloads of at least `drain_users_threshold`
    different users, or by a GPU health metric; empty unless `drain_enabled`. Incidents about a node
    outside the reporting job's allocation never count. The reason is short and plain ASCII because it
    becomes Slurm's `Reason=`."""
    if not config.drain_enabled:
        return []
    jobs: dict[str, set[str]] = defaultdict(set)
    users: dict[str, set[str]] = defaultdict(set)
    kinds: dict[str, set[str]] = defaultdict(set)
    metric: set[str] = set()
    for inc in incidents:
        # Incidents stamped slightly in the future (clock skew) still count; old ones do not.
        if not counts(inc) or now - inc.at > config.drain_window_s:
            continue
        jobs[inc.node].add(inc.workload_key)
        if inc.user:
            users[inc.node].add(inc.user)
        kinds[inc.node].add(inc.category.value)
        if inc.gpu_metric:
            metric.add(inc.node)
    out: list[tuple[str, str]] = []
    for node in sorted(jobs):
        if node in already_drained:
            continue
        count = len(jobs[node])
        several = count >= config.drain_jobs_threshold and len(users[node]) >= config.drain_users_threshold
        if not (several or node in metric):
            continue
        hours = config.drain_window_s / 3600
        categories = ",".join(sorted(kinds[node]))
        if several:
            reason = f"trainguard: hw failures in {count} jobs of {len(users[node])} users within {hours:g}h"
        else:
            reason = "trainguard: GPU health metric"
        out.append((node, f"{reason} ({categories})"))
    return out

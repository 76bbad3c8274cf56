"""Prometheus metrics of TrainGuard itself. Activities call the functions; `/metrics` exposes them.

Everything lives in prometheus-client's default registry, so a worker process only needs
`serve_metrics(port)` and the API process exposes the same registry plus gauges computed from the
audit store (see trainguard.api.metrics).
"""

from __future__ import annotations

import contextlib
import threading

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from trainguard.models import clip

LATENCY_BUCKETS = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 90.0, 120.0, 300.0, 600.0)
PRODUCTIVE_BUCKETS = (10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0, 7200.0, 14400.0)
SUCCESS = "success"
"""The recovery outcome that counts as a success (others: failed, stopped, watchdog, abandoned)."""

_LABEL_MAX = 120  # label values come from logs and job metadata; keep them bounded

DETECTION_LATENCY = Histogram(
    "trainguard_detection_latency_seconds",
    "Time from the failure's first log line (or scheduler signal) to its detection.",
    ["category"],
    buckets=LATENCY_BUCKETS,
)
ACTION_LATENCY = Histogram(
    "trainguard_action_latency_seconds",
    "Time from detection to the scheduler confirming an action step.",
    ["step"],
    buckets=LATENCY_BUCKETS,
)
DETECTIONS = Counter("trainguard_detections_total", "Failures detected, by category.", ["category"])
RECOVERIES = Counter("trainguard_recoveries_total", "Recoveries finished, by outcome.", ["outcome"])
RECOVERY_SUCCESS_RATIO = Gauge(
    "trainguard_recovery_success_ratio",
    "Share of recoveries in this process that ended in success (PromQL over "
    "trainguard_recoveries_total gives the same across processes).",
)
TIME_TO_PRODUCTIVE = Histogram(
    "trainguard_time_to_productive_seconds",
    "Time from the fault to the first training progress line after the restart.",
    buckets=PRODUCTIVE_BUCKETS,
)
WATCHDOG_FIRINGS = Counter(
    "trainguard_watchdog_firings_total", "Watchdog expiries (held job released unchanged)."
)
GOODPUT = Gauge(
    "trainguard_goodput_ratio", "Productive training time / wall time, per workload.", ["workload"]
)
ADVICE = Counter(
    "trainguard_advice_total",
    "Advice recorded, by cluster, action and reason (trainguard.policy.reasons: why recovery stopped "
    "or a safety limit held it back).",
    ["cluster", "action", "reason", "executed"],
)
NODE_DRAINS = Counter(
    "trainguard_node_drains_total", "Nodes TrainGuard drained for repair, by cluster.", ["cluster"]
)
DISCOVERY_LAST_SUCCESS = Gauge(
    "trainguard_discovery_last_success_timestamp_seconds",
    "Unix time of the last job discovery pass that read Slurm's queue, per cluster (ClusterWatch alive).",
    ["cluster"],
)
DISCOVERED_JOBS = Gauge(
    "trainguard_discovery_jobs", "Jobs in Slurm's queue at the last discovery pass, per cluster.", ["cluster"]
)
AUDIT_WRITE_FAILURES = Counter(
    "trainguard_audit_write_failures_total",
    "Audit writes a worker could not make (store down or refusing); no action runs unrecorded.",
)

CLUSTER_WORKERS = Gauge(
    "trainguard_cluster_workers",
    "Cluster workers polling the cluster's presence queue at the last check, seen by this worker.",
    ["cluster"],
)
WATCH_TAKEOVERS = Counter(
    "trainguard_watch_takeovers_total",
    "Watch and discovery activities taken over from a cluster worker that stopped polling.",
    ["cluster"],
)
WATCH_SLOTS_USED = Gauge(
    "trainguard_watch_slots_used",
    "Activity slots in use on this cluster worker (one per watched workload).",
    ["cluster"],
)
WATCH_SLOTS = Gauge(
    "trainguard_watch_slots",
    "Activity slots of this cluster worker (worker.max_watches): past it, new watches wait unserved.",
    ["cluster"],
)
WORKFLOWS_RUNNING = Gauge(
    "trainguard_control_workflows_running",
    "Running workflows on this control worker's task queue (JobRecovery and ClusterWatch), last counted.",
)
WORKFLOW_CACHE_SLOTS = Gauge(
    "trainguard_workflow_cache_slots",
    "Workflows this control worker caches (temporal.max_cached_workflows): past it, tasks replay histories.",
)
WORKLOADS_RUNNING = Gauge(
    "trainguard_workloads_running",
    "Running JobRecovery workflows of the cluster (monitored workloads), counted by the control worker.",
    ["cluster"],
)

_lock = threading.Lock()
_outcomes: dict[str, int] = {}


def _label(value: str) -> str:
    return clip(value, _LABEL_MAX) or "unknown"


def observe_detection_latency(seconds: float, category: str) -> None:
    DETECTION_LATENCY.labels(category=_label(category)).observe(max(0.0, seconds))
    DETECTIONS.labels(category=_label(category)).inc()


def observe_action_latency(seconds: float, step: str) -> None:
    ACTION_LATENCY.labels(step=_label(step)).observe(max(0.0, seconds))


def count_recovery(outcome: str) -> None:
    RECOVERIES.labels(outcome=_label(outcome)).inc()
    with _lock:
        _outcomes[outcome] = _outcomes.get(outcome, 0) + 1
        total = sum(_outcomes.values())
        RECOVERY_SUCCESS_RATIO.set(_outcomes.get(SUCCESS, 0) / total)


def observe_time_to_productive(seconds: float) -> None:
    TIME_TO_PRODUCTIVE.observe(max(0.0, seconds))


def count_watchdog() -> None:
    WATCHDOG_FIRINGS.inc()


def count_advice(cluster: str, action: str, reason: str, executed: bool) -> None:
    ADVICE.labels(
        cluster=_label(cluster), action=_label(action), reason=_label(reason), executed=str(executed).lower()
    ).inc()


def count_drain(cluster: str, nodes: int) -> None:
    NODE_DRAINS.labels(cluster=_label(cluster)).inc(max(1, nodes))


def mark_discovery(cluster: str, jobs: int, at: float) -> None:
    DISCOVERY_LAST_SUCCESS.labels(cluster=_label(cluster)).set(at)
    DISCOVERED_JOBS.labels(cluster=_label(cluster)).set(jobs)


def count_audit_failure() -> None:
    AUDIT_WRITE_FAILURES.inc()


def set_cluster_workers(cluster: str, live: int) -> None:
    CLUSTER_WORKERS.labels(cluster=_label(cluster)).set(live)


def count_takeovers(cluster: str, n: int) -> None:
    WATCH_TAKEOVERS.labels(cluster=_label(cluster)).inc(n)


def set_watch_slots(cluster: str, used: int, capacity: int) -> None:
    WATCH_SLOTS_USED.labels(cluster=_label(cluster)).set(used)
    WATCH_SLOTS.labels(cluster=_label(cluster)).set(capacity)


def set_workflow_cache(running: int, slots: int) -> None:
    WORKFLOWS_RUNNING.set(running)
    WORKFLOW_CACHE_SLOTS.set(slots)


def set_workloads_running(cluster: str, n: int) -> None:
    WORKLOADS_RUNNING.labels(cluster=_label(cluster)).set(n)


def watch_started(cluster: str) -> None:
    WATCH_SLOTS_USED.labels(cluster=_label(cluster)).inc()


def watch_ended(cluster: str) -> None:
    WATCH_SLOTS_USED.labels(cluster=_label(cluster)).dec()


def set_goodput(workload_key: str, ratio: float) -> None:
    GOODPUT.labels(workload=_label(workload_key)).set(min(1.0, max(0.0, ratio)))


def forget_workload(workload_key: str) -> None:
    """Drop a finished workload's series so the label set does not grow without bound."""
    with contextlib.suppress(KeyError):
        GOODPUT.remove(_label(workload_key))


def serve_metrics(port: int, addr: str = "127.0.0.1", registry: CollectorRegistry = REGISTRY) -> None:
    """Expose /metrics of a worker process (the API serves its own on its port)."""
    start_http_server(port, addr=addr, registry=registry)

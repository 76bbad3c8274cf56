"""Gauges computed from the audit store at scrape time, exposed next to the process's own metrics."""

from __future__ import annotations

import time
from collections.abc import Iterator

from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy.exc import SQLAlchemyError

from trainguard.audit import AuditStore

AGREEMENT_WINDOW_S = 7 * 86400.0


class StoreCollector(Collector):
    def __init__(self, store: AuditStore) -> None:
        self._store = store

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("trainguard_audit_up", "1 when the audit store answered this scrape.")
        try:
            counts = self._store.workload_counts()
            active = self._store.list_advice(only_active=True, limit=1000)
            rates = self._store.agreement_rates(since=time.time() - AGREEMENT_WINDOW_S, until=None)
        except SQLAlchemyError:
            up.add_metric([], 0.0)
            yield up
            return
        up.add_metric([], 1.0)
        yield up
        workloads = GaugeMetricFamily(
            "trainguard_monitored_workloads",
            "Workloads known to the audit store, by cluster, mode and state.",
            labels=["cluster", "mode", "state"],
        )
        for cluster, mode, state, n in counts:
            workloads.add_metric([cluster, mode, state], float(n))
        yield workloads
        pending = GaugeMetricFamily(
            "trainguard_pending_advice", "Advice not yet converged or abandoned (capped at 1000)."
        )
        pending.add_metric([], float(len(active)))
        yield pending
        agreement = GaugeMetricFamily(
            "trainguard_operator_agreement_ratio",
            "Share of advice operators agreed with over the last 7 days, per category or cluster.",
            labels=["scope", "key"],
        )
        for row in rates:
            agreement.add_metric([row.scope, row.key], row.rate)
        yield agreement


def render_metrics(store_registry: CollectorRegistry) -> bytes:
    """The process-wide registry (telemetry.py) followed by the store-derived gauges."""
    return generate_latest(REGISTRY) + generate_latest(store_registry)


def store_registry(store: AuditStore) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StoreCollector(store))
    return registry

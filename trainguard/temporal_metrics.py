"""The Temporal SDK's own metrics (temporal.metrics_bind), served for Prometheus by the SDK's runtime.

Workflow-task latency, task slots, pollers, sticky-cache size and every request to the server come from
the SDK (names prefixed `temporal_`); TrainGuard's own metrics stay on the worker's --metrics-port.
One runtime per process and bind address: the SDK binds the port when the runtime is created.
"""

from __future__ import annotations

import threading

from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig

_lock = threading.Lock()
_runtimes: dict[str, Runtime] = {}


def sdk_runtime(bind: str) -> Runtime | None:
    """The runtime exporting SDK metrics on `bind` (host:port), or None (the SDK's default) when "" ."""
    if not bind:
        return None
    with _lock:
        runtime = _runtimes.get(bind)
        if runtime is None:
            runtime = _runtimes[bind] = Runtime(
                telemetry=TelemetryConfig(metrics=PrometheusConfig(bind_address=bind))
            )
        return runtime

"""Issue 15 §7: TrainGuard's own observability on the real stack.

A worker process started with `temporal.metrics_bind` (from the environment) and `--metrics-port` runs a
short training job through one recovery to completion. The SDK's Prometheus endpoint serves Temporal's
own metrics (workflow task latency, requests); TrainGuard's per-workload goodput gauge is there while the
workload runs and gone once it ended; the worker's log lines about the workload carry its key. With one
watch slot the worker reports its full capacity (audit event, gauge) instead of leaving workloads
silently unwatched. With one watch slot, the
worker reports its full capacity (audit event and gauge) instead of leaving workloads silently unwatched.
"""

from __future__ import annotations

import re
import time

import httpx

from tests.e2e.crash_stack import crash_stack
from tests.e2e.stack import free_port
from trainguard.models import EventType


def scrape(port: int) -> str:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    except httpx.HTTPError:
        return ""


def has_series(text: str, name: str, label: str = "") -> bool:
    return any(line.startswith(name) and label in line for line in text.splitlines())


async def test_sdk_metrics_served_gauges_removed_at_end_and_log_lines_keyed() -> None:
    async with crash_stack("observability", supervise=False) as stack:
        await stack.worker.stop()  # replaced by one with its metrics endpoints on
        sdk_port, tg_port = free_port(), free_port()
        worker = stack.add_worker(
            args=("--metrics-port", str(tg_port)),
            # one watch slot: the one workload fills the worker, which must say so (audit, metric)
            env={
                "TRAINGUARD_TEMPORAL__METRICS_BIND": f"127.0.0.1:{sdk_port}",
                "TRAINGUARD_WATCH__MAX_WATCHES": "1",
            },
        )
        # a recovery (the workload's status, and its goodput, are reported with its events), then the end
        job = stack.submit("action", fault="xid", fault_at=30, iters=200)
        await stack.wait_event(job, EventType.WORKLOAD_DISCOVERED, timeout=120)
        key = stack.workload(job).key
        goodput = f'workload="{key}"'
        await stack.wait_for(
            lambda: has_series(scrape(tg_port), "trainguard_goodput_ratio", goodput),
            "the running workload's goodput gauge",
            timeout=60,
            job_id=job.job_id,
        )

        sdk = scrape(sdk_port)
        assert has_series(sdk, "temporal_workflow_task_execution_latency"), sdk[:2000]
        assert has_series(sdk, "temporal_request", 'operation="PollActivityTaskQueue"'), sdk[:2000]
        assert has_series(sdk, "temporal_worker_task_slots_available", 'worker_type="ActivityWorker"')

        await stack.wait_event(job, EventType.COMPLETED, timeout=120)
        await stack.wait_for(
            lambda: not has_series(scrape(tg_port), "trainguard_goodput_ratio", goodput),
            "the ended workload's gauge to disappear",
            timeout=15,
            job_id=job.job_id,
        )
        metrics = scrape(tg_port)
        assert 'trainguard_watch_slots{cluster="crash"} 1.0' in metrics, metrics[-3000:]
        limit = stack.store.list_events(event_type=EventType.CAPACITY_LIMIT, limit=10).items
        assert limit and limit[0].cluster == "crash" and limit[0].data["max_watches"] == 1, limit

        time.sleep(0.5)  # the last lines reach the log file
        text = worker.log_file.read_text(errors="replace")
        keyed = [line for line in text.splitlines() if f"[{key}]" in line]
        assert any(re.search(r"temporalio\.workflow \[.*\]: completed ", line) for line in keyed), keyed
        assert any("workload_discovered" in line for line in keyed), keyed
        # lines about no workload in particular say so, never another workload's key
        assert any(" [-]: " in line for line in text.splitlines()), text[-2000:]

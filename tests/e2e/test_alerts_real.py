"""TrainGuard's alerting rules on the real stack: a real Slurm job fails in a way TrainGuard must not
recover by itself (a 4-node job on the 4-node cluster loses a GPU: excluding the node would leave too
few nodes), the worker's real /metrics are scraped by a real Prometheus (Debian's binary) that loads
deploy/prometheus/alerts.yaml, and TrainGuardSafetyLimitReached fires for that cluster, while
discovery is fresh and TrainGuardNoDiscovery stays silent."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.stack import REPO, Stack, free_port
from trainguard.localstack.prometheus import LocalPrometheus
from trainguard.models import EventType
from trainguard.telemetry import serve_metrics

RULES = REPO / "deploy" / "prometheus" / "alerts.yaml"


def get(prom: LocalPrometheus, path: str, **params: str) -> Any:
    url = f"{prom.url}{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
    with urllib.request.urlopen(url, timeout=5) as resp:
        doc = json.loads(resp.read())
    assert doc["status"] == "success", doc
    return doc["data"]


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalPrometheus]:
    port = free_port()
    serve_metrics(port)  # the in-process worker's registry, as `trainguard worker --metrics-port` serves it
    prom = LocalPrometheus(
        Path(tmp_path_factory.mktemp("prometheus")),
        port=free_port(),
        scrape_targets=[f"127.0.0.1:{port}"],
        scrape_interval_s=1.0,
        rule_files=[RULES],
    )
    prom.start()
    try:
        groups = get(prom, "/api/v1/rules")["groups"]
        assert {g["name"] for g in groups} == {
            "trainguard-recovery",
            "trainguard-latency",
            "trainguard-health",
        }
        yield prom
    finally:
        prom.stop()


async def wait_for(check: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = await asyncio.to_thread(check)
        if found:
            return found
        await asyncio.sleep(1.0)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


async def test_a_safety_limit_on_the_real_stack_raises_its_alert(
    stack: Stack, prometheus: LocalPrometheus
) -> None:
    cluster = stack.settings.cluster.name
    job = stack.submit(
        comment=json.dumps({"trainguard": {"environment": "e2e", "mode": "observe"}}),
        nodes=4,
        env={"TRAINSIM_FAULT": "xid", "TRAINSIM_FAULT_NODE": "node2", "TRAINSIM_FAULT_AT": "8"},
    )
    events = await stack.wait_for_event(job.job_id, EventType.ADVICE, timeout=120)
    advice = next(e for e in events if e.event_type == EventType.ADVICE)
    assert advice.action == "wait", advice.message  # what the rule is about: recovery held back

    def firing() -> list[dict[str, Any]]:
        alerts = get(prometheus, "/api/v1/alerts")["alerts"]
        return [
            a
            for a in alerts
            if a["labels"]["alertname"] == "TrainGuardSafetyLimitReached"
            and a["labels"].get("cluster") == cluster
            and a["state"] == "firing"
        ]

    (alert,) = await wait_for(firing, 60, "TrainGuardSafetyLimitReached to fire")
    assert alert["labels"]["reason"] == "capacity"
    assert alert["annotations"]["runbook_url"].endswith("docs/runbook.md#trainguardsafetylimitreached")

    # Discovery is alive: the gauge is fresh in Prometheus and its alert is silent.
    age = get(
        prometheus,
        "/api/v1/query",
        query=f'time() - trainguard_discovery_last_success_timestamp_seconds{{cluster="{cluster}"}}',
    )
    assert age["result"] and float(age["result"][0]["value"][1]) < 30
    # Only firing alerts: `absent()` rules are pending from before the first scrape until the next evaluation.
    alerts = get(prometheus, "/api/v1/alerts")["alerts"]
    names = {a["labels"]["alertname"] for a in alerts if a["state"] == "firing"}
    assert "TrainGuardNoDiscovery" not in names and "TrainGuardClusterWatchDown" not in names

"""GPU findings through a real Prometheus (Debian's binary) scraping the simulated dcgm-exporter."""

from __future__ import annotations

import asyncio
import json
import socket
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from trainguard.gpumetrics.prometheus import gpu_findings
from trainguard.gpumetrics.sim_exporter import GpuFleet, SimExporter
from trainguard.localstack.prometheus import LocalPrometheus
from trainguard.models import Attribution, Category, Finding, FindingSource
from trainguard.settings import MetricsSettings

pytestmark = pytest.mark.e2e

NODES = ["node1", "node2", "node3", "node4"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def instant(prom: LocalPrometheus, query: str) -> list[dict[str, object]]:
    url = f"{prom.url}/api/v1/query?{urllib.parse.urlencode({'query': query})}"
    with urllib.request.urlopen(url, timeout=5) as resp:
        result: list[dict[str, object]] = json.load(resp)["data"]["result"]
        return result


def wait_until(predicate: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise TimeoutError(f"{what} not within {timeout}s")


@pytest.fixture(scope="module")
def exporter() -> Iterator[SimExporter]:
    with SimExporter(GpuFleet(NODES, gpus_per_node=4), port=free_port()) as running:
        yield running


@pytest.fixture(scope="module")
def prometheus(exporter: SimExporter, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalPrometheus]:
    prom = LocalPrometheus(
        tmp_path_factory.mktemp("prometheus"),
        port=free_port(),
        scrape_targets=[exporter.target],
        scrape_interval_s=0.5,
    )
    prom.start()
    try:
        # Prometheus's scrape manager applies new targets on a 5 s tick; wait for real samples.
        wait_until(lambda: instant(prom, 'count(DCGM_FI_DEV_XID_ERRORS{job="dcgm"})'), 30, "first scrape")
        yield prom
    finally:
        prom.stop()


def metrics_settings(prom: LocalPrometheus, timeout_s: float = 5.0) -> MetricsSettings:
    return MetricsSettings(prometheus_url=prom.url, timeout_s=timeout_s)


async def test_healthy_fleet_gives_no_findings(prometheus: LocalPrometheus) -> None:
    assert await gpu_findings(metrics_settings(prometheus), NODES, since_s=60) == []


async def test_xid_79_on_node2_is_found_and_attributed_to_node2(
    exporter: SimExporter, prometheus: LocalPrometheus
) -> None:
    exporter.fleet.inject("node2", 3, "xid", 79)
    try:
        injected = time.monotonic()
        found: list[Finding] = []
        while time.monotonic() - injected < 20 and not found:
            found = await gpu_findings(metrics_settings(prometheus), NODES, since_s=60)
            if not found:
                await asyncio.sleep(0.25)
        latency = time.monotonic() - injected
        assert len(found) == 1, found
        xid = found[0]
        assert xid.nodes == ("node2",)
        assert xid.category == Category.GPU_HARDWARE and xid.attribution == Attribution.HARDWARE and xid.fatal
        assert xid.source == FindingSource.METRICS and xid.pattern_id == "dcgm_xid_79"
        assert "gpu=3" in xid.detail
        print(f"xid visible through Prometheus {latency:.2f}s after injection")
        # Only the job's own nodes count.
        assert await gpu_findings(metrics_settings(prometheus), ["node1", "node3"], since_s=60) == []
    finally:
        exporter.fleet.clear()


async def test_ecc_and_temperature_faults_are_found(
    exporter: SimExporter, prometheus: LocalPrometheus
) -> None:
    exporter.fleet.inject("node4", 0, "ecc_dbe", 1)
    exporter.fleet.inject("node1", 2, "temp", 97)
    try:
        wanted = {("dcgm_ecc_dbe", ("node4",)), ("dcgm_gpu_temp", ("node1",))}
        got: set[tuple[str, tuple[str, ...]]] = set()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not wanted <= got:
            found = await gpu_findings(metrics_settings(prometheus), NODES, since_s=60)
            got = {(f.pattern_id, f.nodes) for f in found}
            await asyncio.sleep(0.25)
        assert wanted <= got
    finally:
        exporter.fleet.clear()


async def test_stopped_prometheus_gives_empty_quickly(exporter: SimExporter, tmp_path: Path) -> None:
    prom = LocalPrometheus(tmp_path, port=free_port(), scrape_targets=[exporter.target])
    prom.start()
    prom.stop()
    assert prom.pid() is None
    start = time.monotonic()
    assert await gpu_findings(metrics_settings(prom, timeout_s=2.0), NODES) == []
    assert time.monotonic() - start < 2.5

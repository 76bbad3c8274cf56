"""gpu_findings against a scripted Prometheus HTTP API (httpx.MockTransport)."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from trainguard.gpumetrics.prometheus import gpu_findings, xid_verdict
from trainguard.models import Attribution, Category, FindingSource
from trainguard.settings import MetricsSettings

URL = "http://prom.test:9090"
LABELS = {"gpu": "3", "UUID": "GPU-abc", "modelName": "NVIDIA H100 80GB HBM3", "Hostname": "node2"}


def vector(*items: tuple[dict[str, str], float]) -> dict[str, Any]:
    result = [{"metric": labels, "value": [1700000000.0, str(value)]} for labels, value in items]
    return {"status": "success", "data": {"resultType": "vector", "result": result}}


def matrix(*items: tuple[dict[str, str], list[tuple[float, float]]]) -> dict[str, Any]:
    result = [{"metric": labels, "values": [[t, str(v)] for t, v in points]} for labels, points in items]
    return {"status": "success", "data": {"resultType": "matrix", "result": result}}


EMPTY_VECTOR = vector()
EMPTY_MATRIX = matrix()

Responder = Callable[[str], dict[str, Any] | None]


class FakePrometheus:
    """Answers by metric name found in the query; records every query it was sent."""

    def __init__(self, answers: dict[str, dict[str, Any]] | None = None) -> None:
        self.answers = answers or {}
        self.queries: list[str] = []

    def handler(self, request: httpx.Request) -> httpx.Response:
        query = request.url.params["query"]
        self.queries.append(query)
        for metric, doc in self.answers.items():
            if metric in query:
                return httpx.Response(200, json=doc)
        empty = EMPTY_MATRIX if request.url.path.endswith("query_range") else EMPTY_VECTOR
        return httpx.Response(200, json=empty)

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.MockTransport(self.handler))


def settings(**kw: Any) -> MetricsSettings:
    return MetricsSettings(prometheus_url=URL, **kw)


async def test_xid_79_is_a_fatal_hardware_finding_on_that_node() -> None:
    prom = FakePrometheus({"DCGM_FI_DEV_XID_ERRORS": matrix((LABELS, [(100.0, 79), (101.0, 79)]))})
    async with prom.client() as client:
        found = await gpu_findings(settings(), ["node1", "node2"], client=client)
    assert len(found) == 1
    f = found[0]
    assert (f.source, f.category, f.attribution, f.fatal) == (
        FindingSource.METRICS,
        Category.GPU_HARDWARE,
        Attribution.HARDWARE,
        True,
    )
    assert f.nodes == ("node2",) and f.pattern_id == "dcgm_xid_79" and f.timestamp == 100.0
    assert "79" in f.line and "fallen off the bus" in f.line and "gpu=3" in f.detail
    assert 'Hostname=~"(?:node1|node2)(?:[.:].*)?"' in prom.queries[0]


async def test_each_distinct_xid_in_the_window_is_reported_in_time_order() -> None:
    prom = FakePrometheus({"DCGM_FI_DEV_XID_ERRORS": matrix((LABELS, [(10.0, 13), (11.0, 13), (12.0, 48)]))})
    async with prom.client() as client:
        found = await gpu_findings(settings(), ["node2"], client=client)
    assert [(f.pattern_id, f.category, f.attribution, f.fatal) for f in found] == [
        ("dcgm_xid_13", Category.CUDA_ILLEGAL_ACCESS, Attribution.APPLICATION, False),
        ("dcgm_xid_48", Category.GPU_HARDWARE, Attribution.HARDWARE, True),
    ]


@pytest.mark.parametrize(
    ("code", "category", "attribution", "fatal"),
    [
        *[
            (c, Category.GPU_HARDWARE, Attribution.HARDWARE, True)
            for c in (48, 63, 64, 79, 92, 94, 95, 119, 120)
        ],
        (74, Category.INTERCONNECT, Attribution.HARDWARE, True),
        *[(c, Category.CUDA_ILLEGAL_ACCESS, Attribution.APPLICATION, False) for c in (13, 31, 43)],
        (999, Category.GPU_HARDWARE, Attribution.HARDWARE, False),
    ],
)
def test_xid_buckets(code: int, category: Category, attribution: Attribution, fatal: bool) -> None:
    assert xid_verdict(code)[:3] == (category, attribution, fatal)


async def test_counter_and_gauge_checks_become_findings() -> None:
    prom = FakePrometheus(
        {
            "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": vector((LABELS, 2)),
            "DCGM_FI_DEV_ROW_REMAP_FAILURE": vector(({**LABELS, "Hostname": "node1"}, 1)),
            "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": vector((LABELS, 340)),
            "DCGM_FI_DEV_GPU_TEMP": vector(({**LABELS, "gpu": "5"}, 96)),
        }
    )
    async with prom.client() as client:
        found = await gpu_findings(settings(), ["node1", "node2"], since_s=60, client=client)
    got = {(f.pattern_id, f.nodes, f.category, f.fatal) for f in found}
    assert got == {
        ("dcgm_ecc_dbe", ("node2",), Category.GPU_HARDWARE, True),
        ("dcgm_row_remap_failure", ("node1",), Category.GPU_HARDWARE, True),
        ("dcgm_nvlink_errors", ("node2",), Category.INTERCONNECT, False),
        ("dcgm_gpu_temp", ("node2",), Category.GPU_HARDWARE, False),
    }
    assert all(f.attribution == Attribution.HARDWARE for f in found)
    assert any(
        q.startswith("increase(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{") and q.endswith("[60s]) > 0")
        for q in prom.queries
    )


async def test_metric_names_node_label_and_node_map_are_configurable() -> None:
    labels = {"gpu": "0", "instance": "gpu-node-07.dc1:9400"}
    prom = FakePrometheus({"my_xid": matrix((labels, [(5.0, 94)]))})
    cfg = settings(node_label="instance", metric_names={"xid": "my_xid"}, node_map={"gpu-node-07": "node7"})
    async with prom.client() as client:
        found = await gpu_findings(cfg, ["node7"], client=client)
    assert [(f.pattern_id, f.nodes) for f in found] == [("dcgm_xid_94", ("node7",))]
    assert prom.queries[0].startswith('my_xid{instance=~"(?:gpu\\\\-node\\\\-07|node7)')
    assert not any("DCGM_FI_DEV_XID_ERRORS" in q for q in prom.queries)


async def test_series_of_other_nodes_are_ignored() -> None:
    prom = FakePrometheus({"DCGM_FI_DEV_XID_ERRORS": matrix(({**LABELS, "Hostname": "node22"}, [(1.0, 79)]))})
    async with prom.client() as client:
        assert await gpu_findings(settings(), ["node2"], client=client) == []


async def test_untrusted_node_names_never_reach_the_query() -> None:
    prom = FakePrometheus()
    async with prom.client() as client:
        await gpu_findings(settings(), ['node1"} or vector(1) #', "node.2"], client=client)
    assert prom.queries
    assert all("vector(1)" not in q for q in prom.queries)
    assert all("node\\\\.2" in q for q in prom.queries)  # regex dot escaped, then string-escaped


async def test_no_url_or_no_nodes_means_no_queries() -> None:
    prom = FakePrometheus()
    async with prom.client() as client:
        assert await gpu_findings(MetricsSettings(), ["node1"], client=client) == []
        assert await gpu_findings(settings(), [], client=client) == []
    assert prom.queries == []


async def test_query_errors_are_logged_and_other_signals_still_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    bad = {"status": "error", "errorType": "bad_data", "error": "parse error"}
    prom = FakePrometheus({"DCGM_FI_DEV_XID_ERRORS": bad, "DCGM_FI_DEV_ECC_DBE": vector((LABELS, 1))})
    with caplog.at_level(logging.WARNING, logger="trainguard.gpumetrics.prometheus"):
        async with prom.client() as client:
            found = await gpu_findings(settings(), ["node2"], client=client)
    assert [f.pattern_id for f in found] == ["dcgm_ecc_dbe"]
    assert "parse error" in caplog.text


async def test_slow_prometheus_gives_empty_within_the_timeout(caplog: pytest.LogCaptureFixture) -> None:
    async def slow(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(10)
        return httpx.Response(200, json=EMPTY_VECTOR)

    start = time.monotonic()
    with caplog.at_level(logging.WARNING):
        async with httpx.AsyncClient(transport=httpx.MockTransport(slow)) as client:
            found = await gpu_findings(settings(timeout_s=0.3), ["node2"], client=client)
    assert found == []
    assert time.monotonic() - start < 2.0
    assert "did not answer within" in caplog.text


async def test_unreachable_prometheus_gives_empty(caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again before the query: nothing listens there
    start = time.monotonic()
    with caplog.at_level(logging.WARNING):
        found = await gpu_findings(MetricsSettings(prometheus_url=f"http://127.0.0.1:{port}"), ["node2"])
    assert found == []
    assert time.monotonic() - start < 2.0
    assert "failed" in caplog.text or "unusable" in caplog.text

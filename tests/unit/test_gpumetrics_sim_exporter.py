"""The simulated dcgm-exporter: exposition format, fault injection, HTTP API, CLI wiring."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from trainguard.cli import build_parser
from trainguard.gpumetrics.sim_exporter import GpuFleet, InjectError, SimExporter

DCGM_LABELS = {"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname"}


def samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    return [
        (s.labels, s.value)
        for family in text_string_to_metric_families(text)
        if family.name == name  # by family: this parser renames counter samples to NAME_total
        for s in family.samples
    ]


def test_exposition_parses_and_carries_dcgm_names_and_labels() -> None:
    fleet = GpuFleet(["node1", "node2"], gpus_per_node=4)
    text = fleet.render()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for name in (
        "DCGM_FI_DEV_XID_ERRORS",
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_GPU_UTIL",
    ):
        assert name in families, name
    xid = samples(text, "DCGM_FI_DEV_XID_ERRORS")
    assert len(xid) == 8
    assert all(labels.keys() >= DCGM_LABELS for labels, _ in xid)
    assert {labels["Hostname"] for labels, _ in xid} == {"node1", "node2"}
    assert len({labels["UUID"] for labels, _ in xid}) == 8  # every GPU has its own UUID
    assert all(labels["device"] == f"nvidia{labels['gpu']}" for labels, _ in xid)
    assert all(value == 0 for _, value in xid)
    assert "# TYPE DCGM_FI_DEV_ECC_DBE_VOL_TOTAL counter" in text


def test_inject_sets_gauges_bumps_counters_and_clear_restores() -> None:
    fleet = GpuFleet(["node1", "node2"], gpus_per_node=2)
    fleet.inject("node2", 1, "xid", 79)
    fleet.inject("node1", 0, "ecc_dbe", 2)
    fleet.inject("node1", 0, "ecc_dbe")
    text = fleet.render()
    hot = [(lab["Hostname"], lab["gpu"], v) for lab, v in samples(text, "DCGM_FI_DEV_XID_ERRORS") if v]
    assert hot == [("node2", "1", 79)]
    dbe = {(lab["Hostname"], lab["gpu"]): v for lab, v in samples(text, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL")}
    assert dbe[("node1", "0")] == 3 and dbe[("node2", "0")] == 0
    assert fleet.clear(node="node2") == 2
    assert not [v for _, v in samples(fleet.render(), "DCGM_FI_DEV_XID_ERRORS") if v]
    assert fleet.clear() == 4
    assert not [v for _, v in samples(fleet.render(), "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL") if v]


@pytest.mark.parametrize(
    ("node", "gpu", "kind", "value"),
    [("node9", 0, "xid", 79), ("node1", 8, "xid", 79), ("node1", 0, "meltdown", 1), ("node1", 0, "xid", -1)],
)
def test_inject_rejects_unknown_targets_and_values(node: str, gpu: int, kind: str, value: float) -> None:
    with pytest.raises(InjectError):
        GpuFleet(["node1"], gpus_per_node=8).inject(node, gpu, kind, value)


@pytest.fixture
def exporter() -> Iterator[SimExporter]:
    with SimExporter(GpuFleet(["node1", "node2"], gpus_per_node=2)) as running:
        yield running


def post(url: str, body: bytes) -> tuple[int, dict[str, object]]:
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_http_inject_shows_up_in_scrape_and_clear_removes_it(exporter: SimExporter) -> None:
    status, doc = post(f"{exporter.url}/inject", b'{"node":"node2","gpu":1,"kind":"xid","value":79}')
    assert status == 200 and doc == {"changed": {"DCGM_FI_DEV_XID_ERRORS": 79.0}}
    with urllib.request.urlopen(f"{exporter.url}/metrics", timeout=5) as resp:
        assert resp.headers["Content-Type"].startswith("text/plain")
        text = resp.read().decode()
    assert [(lab["Hostname"], v) for lab, v in samples(text, "DCGM_FI_DEV_XID_ERRORS") if v] == [
        ("node2", 79)
    ]
    assert post(f"{exporter.url}/clear", b"{}") == (200, {"reset_gpus": 4})
    with urllib.request.urlopen(f"{exporter.url}/metrics", timeout=5) as resp:
        assert not [v for _, v in samples(resp.read().decode(), "DCGM_FI_DEV_XID_ERRORS") if v]


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"[1,2]",
        b'{"node":"node2"}',
        b'{"node":"nodeX","kind":"xid"}',
        b'{"node":2,"kind":"xid"}',
    ],
)
def test_http_inject_rejects_bad_requests_with_400(exporter: SimExporter, body: bytes) -> None:
    status, doc = post(f"{exporter.url}/inject", body)
    assert status == 400 and doc["error"]


def test_unknown_paths_are_404(exporter: SimExporter) -> None:
    assert post(f"{exporter.url}/reboot", b"{}")[0] == 404


def test_cli_registers_gpusim() -> None:
    args = build_parser().parse_args(["gpusim", "--port", "19400", "--nodes", "gpu[01-02]", "--gpus", "2"])
    assert (args.port, args.nodes, args.gpus) == (19400, "gpu[01-02]", 2)
    assert callable(args.handler)

"""`signals check` metrics checks against a real Prometheus scraping the simulated DCGM exporter.

Prometheus is the real binary (apt `prometheus`), started by trainguard.localstack.prometheus on a
free loopback port; the exporter is trainguard.gpumetrics.sim_exporter. Slurm's node list comes
from a canned `sinfo --json` captured from the real local cluster (node1..node4). The log side uses
the fake Loki (Loki cannot be installed here; its responses follow the documented API shapes).
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.stack import free_port
from tests.fakes.loki import FakeLoki
from tests.fakes.slurm_runner import CannedSlurmRunner
from trainguard.gpumetrics.sim_exporter import GpuFleet, SimExporter
from trainguard.localstack.prometheus import LocalPrometheus, prometheus_binary
from trainguard.settings import Settings
from trainguard.signals.check import CheckRequest, run_checks
from trainguard.signals.report import Report, Status

pytestmark = pytest.mark.e2e
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
NS = 1_000_000_000


def _has_prometheus() -> bool:
    try:
        prometheus_binary()
    except Exception:
        return False
    return True


def _wait_for_series(url: str, metric: str, count: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with urllib.request.urlopen(f"{url}/api/v1/query?query={metric}", timeout=2) as resp:
            if len(json.load(resp)["data"]["result"]) >= count:
                return
        time.sleep(0.3)
    raise TimeoutError(f"Prometheus has no {metric} series after {timeout} s")


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """One Prometheus scraping two exporters: one labelled like Slurm, one with FQDN host names."""
    if not _has_prometheus():
        pytest.fail("prometheus binary not installed (scripts/bootstrap.sh installs it)")
    plain = SimExporter(GpuFleet(["node1", "node2", "node3", "node4"], gpus_per_node=2)).start()
    fqdn = SimExporter(
        GpuFleet(["node1.lab.example:9400", "node2.lab.example:9400"], gpus_per_node=1)
    ).start()
    base = tmp_path_factory.mktemp("prom")
    prom = LocalPrometheus(
        base, port=free_port(), scrape_targets=[plain.target, fqdn.target], scrape_interval_s=1
    )
    try:
        prom.start()
        _wait_for_series(prom.url, "DCGM_FI_DEV_XID_ERRORS", 10)
        yield prom.url, fqdn.target
    finally:
        prom.stop()
        plain.stop()
        fqdn.stop()


@pytest.fixture
def loki() -> Iterator[FakeLoki]:
    with FakeLoki() as server:
        server.push({"job_id": "42"}, [(time.time_ns() - NS, " iteration 1/ 10 | TG-42")])
        yield server


def _status(report: Report) -> dict[str, Status]:
    return {c.name: c.status for c in report.checks}


def _runner() -> CannedSlurmRunner:
    return CannedSlurmRunner({"sinfo": (FIXTURES / "sinfo_mixed.json").read_text()})


async def test_default_names_pass_against_real_prometheus(
    prometheus: tuple[str, str], loki: FakeLoki
) -> None:
    url, _ = prometheus
    settings = Settings.model_validate(
        {"logs": {"backend": "loki", "url": loki.url}, "metrics": {"prometheus_url": url}}
    )
    report = await run_checks(settings, _runner(), CheckRequest(job_id="42", marker="TG-42"))
    print(report.to_table())
    status = _status(report)
    assert status["metrics.prometheus"] is Status.PASS
    assert status["metrics.names"] is Status.PASS
    assert status["metrics.node_label"] is Status.PASS
    # The FQDN exporter's names are not Slurm's: 4/4 Slurm nodes covered, 2 unknown values: a warning.
    node_check = next(c for c in report.checks if c.name == "metrics.node_names")
    assert node_check.status is Status.WARN and "node1.lab.example:9400" in node_check.detail
    assert report.ok


async def test_wrong_node_label_and_metric_name_propose_a_mapping(
    prometheus: tuple[str, str], loki: FakeLoki
) -> None:
    url, _ = prometheus
    settings = Settings.model_validate(
        {
            "logs": {"backend": "loki", "url": loki.url},
            "metrics": {
                "prometheus_url": url,
                "node_label": "host",
                "metric_names": {"xid": "dcgm_xid_errors"},
            },
        }
    )
    report = await run_checks(settings, _runner(), CheckRequest(job_id="42"))
    print(report.to_table())
    status = _status(report)
    assert status["metrics.names"] is Status.FAIL  # xid is required and misnamed
    assert report.proposed["metrics"]["metric_names"]["xid"] == "DCGM_FI_DEV_XID_ERRORS"
    assert status["metrics.node_label"] is Status.FAIL
    assert report.proposed["metrics"]["node_label"] == "Hostname"
    assert report.proposed["metrics"]["node_map"] == {
        "node1.lab.example:9400": "node1",
        "node2.lab.example:9400": "node2",
    }
    assert not report.ok


async def test_unreachable_prometheus_fails(loki: FakeLoki) -> None:
    settings = Settings.model_validate(
        {
            "logs": {"backend": "loki", "url": loki.url},
            "metrics": {"prometheus_url": f"http://127.0.0.1:{free_port()}"},
        }
    )
    report = await run_checks(settings, _runner(), CheckRequest(job_id="42"))
    assert _status(report)["metrics.prometheus"] is Status.FAIL and not report.ok

"""`trainguard signals check` against fake Loki / VictoriaLogs servers over real loopback HTTP.

Loki and VictoriaLogs cannot be installed here; the fakes in tests/fakes/ answer with the response
shapes copied from their HTTP API documentation. Slurm answers come from a canned runner
(the real-Slurm parsers run on them). The Prometheus checks run against a real Prometheus in
tests/e2e/test_signals_prometheus.py; here metrics are left unconfigured (a warning, not a failure).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.fakes.loki import FakeLoki
from tests.fakes.slurm_runner import CannedSlurmRunner, scontrol_line
from tests.fakes.victorialogs import FakeVictoriaLogs
from trainguard.cli import main
from trainguard.settings import Settings
from trainguard.signals.check import CheckRequest, run_checks
from trainguard.signals.report import Report, Status

NS = 1_000_000_000
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
MEGATRON = [
    "Setting up model parallel groups",
    "TG-MARKER-42 starting",
    " iteration       10/    1000 | consumed samples: 640 | elapsed time per iteration (ms): 812.3",
    " iteration       20/    1000 | consumed samples: 1280 | elapsed time per iteration (ms): 809.9",
]


def _statuses(report: Report) -> dict[str, Status]:
    return {c.name: c.status for c in report.checks}


@pytest.fixture
def loki() -> Iterator[FakeLoki]:
    with FakeLoki(require_tenant=True) as server:
        now = time.time()
        entries = [(int((now - 30 + i) * NS), line) for i, line in enumerate(MEGATRON)]
        # The operator's collector labels the job as `slurm_job_id`, not TrainGuard's default `job_id`.
        server.push(
            {"slurm_job_id": "42", "filename": "/scratch/slurm-42.out", "host": "node1"}, entries, "ops"
        )
        server.push(
            {"slurm_job_id": "41", "filename": "/scratch/slurm-41.out"}, [(int(now * NS), "x")], "ops"
        )
        yield server


def _loki_settings(url: str, **logs: object) -> Settings:
    return Settings.model_validate({"logs": {"backend": "loki", "url": url, "tenant": "ops", **logs}})


async def test_loki_with_other_label_name_fails_and_proposes_a_mapping_that_works(loki: FakeLoki) -> None:
    request = CheckRequest(job_id="42", marker="TG-MARKER-42", use_slurm=False)
    report = await run_checks(_loki_settings(loki.url), CannedSlurmRunner({}), request)
    status = _statuses(report)
    assert status["logs.backend"] is Status.PASS
    assert status["logs.job_label"] is Status.FAIL
    assert report.proposed["logs"]["labels"] == {"job_id": "slurm_job_id", "filename": "filename"}
    # The remaining checks ran with the proposed mapping and found the job's lines.
    assert status["logs.job_query"] is Status.PASS
    assert status["logs.marker"] is Status.PASS
    assert status["logs.progress"] is Status.PASS
    assert "2 progress line" in next(c.detail for c in report.checks if c.name == "logs.progress")
    assert status["logs.timestamps"] is Status.PASS
    assert status["metrics.prometheus"] is Status.WARN
    assert not report.ok
    table = report.to_table()
    assert "logs.job_label  FAIL" in table.replace("   ", "  ") or "FAIL" in table
    assert "slurm_job_id" in table and "signals check FAILED" in table

    fixed = _loki_settings(loki.url, labels=report.proposed["logs"]["labels"])
    report2 = await run_checks(fixed, CannedSlurmRunner({}), request)
    assert report2.ok, report2.to_table()
    assert _statuses(report2)["logs.job_label"] is Status.PASS
    assert not report2.proposed


async def test_wrong_marker_and_missing_tenant_fail(loki: FakeLoki) -> None:
    labels = {"job_id": "slurm_job_id"}
    wrong = CheckRequest(job_id="42", marker="never-logged", use_slurm=False)
    report = await run_checks(_loki_settings(loki.url, labels=labels), CannedSlurmRunner({}), wrong)
    assert _statuses(report)["logs.marker"] is Status.FAIL and not report.ok
    no_tenant = Settings.model_validate({"logs": {"backend": "loki", "url": loki.url, "labels": labels}})
    report = await run_checks(no_tenant, CannedSlurmRunner({}), wrong)
    backend = next(c for c in report.checks if c.name == "logs.backend")
    assert backend.status is Status.FAIL and "401" in backend.detail and "tenant" in backend.fix
    assert "logs.job_query" not in _statuses(report)


async def test_future_timestamps_fail(loki: FakeLoki) -> None:
    future = int((time.time() + 3 * 3600) * NS)  # a collector parsing local time as UTC, say
    loki.push({"slurm_job_id": "43"}, [(future, " iteration 1/ 10 |")], "ops")
    settings = _loki_settings(loki.url, labels={"job_id": "slurm_job_id"})
    report = await run_checks(settings, CannedSlurmRunner({}), CheckRequest(job_id="43", use_slurm=False))
    check = next(c for c in report.checks if c.name == "logs.timestamps")
    assert check.status is Status.FAIL and "in the future" in check.detail and "NTP" in check.fix
    assert not report.ok


async def test_timestamps_before_submission_warn(loki: FakeLoki) -> None:
    now = time.time()
    loki.push({"slurm_job_id": "44"}, [(int((now - 5000) * NS), "old line from a reused id")], "ops")
    loki.push({"slurm_job_id": "44"}, [(int((now - 5) * NS), " iteration 1/ 10 |")], "ops")
    sinfo = (FIXTURES / "sinfo_mixed.json").read_text()
    runner = CannedSlurmRunner({"scontrol": scontrol_line("44", "/x.out", submit=now - 3600), "sinfo": sinfo})
    settings = _loki_settings(loki.url, labels={"job_id": "slurm_job_id"})
    report = await run_checks(settings, runner, CheckRequest(job_id="44"), now=now)
    status = _statuses(report)
    assert status["slurm.job"] is Status.PASS and status["slurm.nodes"] is Status.PASS
    check = next(c for c in report.checks if c.name == "logs.timestamps")
    assert check.status is Status.WARN and "older than the job's submission" in check.detail
    assert report.ok


async def test_victorialogs_pass_and_hang_blind_warning() -> None:
    with FakeVictoriaLogs() as vlogs:
        now = time.time()
        vlogs.push(
            {"job_id": "9"}, [(int((now - 10) * NS), "hello TG-9"), (int((now - 9) * NS), "no progress")]
        )
        settings = Settings.model_validate({"logs": {"backend": "victorialogs", "url": vlogs.url}})
        report = await run_checks(settings, CannedSlurmRunner({}), CheckRequest("9", "TG-9", use_slurm=False))
    status = _statuses(report)
    assert status["logs.job_label"] is Status.PASS
    assert status["logs.marker"] is Status.PASS
    assert status["logs.progress"] is Status.WARN  # no iteration lines: hang detection would be blind
    assert report.ok  # warnings do not fail the check


async def test_victorialogs_future_timestamps_fail() -> None:
    with FakeVictoriaLogs() as vlogs:
        vlogs.push({"job_id": "9"}, [(int((time.time() + 1800) * NS), " iteration 5/ 10 |")])
        settings = Settings.model_validate({"logs": {"backend": "victorialogs", "url": vlogs.url}})
        report = await run_checks(settings, CannedSlurmRunner({}), CheckRequest("9", use_slurm=False))
    check = next(c for c in report.checks if c.name == "logs.timestamps")
    assert check.status is Status.FAIL and "future" in check.detail


async def test_files_backend_reads_the_job_output_from_scontrol(tmp_path: Path) -> None:
    out = tmp_path / "slurm-7.out"
    out.write_text("\n".join(MEGATRON) + "\n")
    runner = CannedSlurmRunner({"scontrol": scontrol_line("7", str(out))})
    report = await run_checks(Settings(), runner, CheckRequest(job_id="7", marker="TG-MARKER-42"))
    status = _statuses(report)
    assert status["logs.job_query"] is Status.PASS
    assert status["logs.marker"] is Status.PASS and status["logs.progress"] is Status.PASS
    assert status["slurm.nodes"] is Status.FAIL  # the canned runner has no sinfo
    missing = CannedSlurmRunner({"scontrol": scontrol_line("7", str(tmp_path / "gone.out"))})
    report = await run_checks(Settings(), missing, CheckRequest(job_id="7"))
    assert _statuses(report)["logs.job_query"] is Status.FAIL


def test_cli_json_and_exit_status(loki: FakeLoki, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "trainguard.yaml"
    config.write_text(yaml.safe_dump({"logs": {"backend": "loki", "url": loki.url, "tenant": "ops"}}))
    argv = ["--config", str(config), "signals", "check", "--job-id", "42", "--marker", "TG-MARKER-42"]
    assert main([*argv, "--no-slurm", "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is False
    assert doc["proposed_settings"]["logs"]["labels"]["job_id"] == "slurm_job_id"
    config.write_text(
        yaml.safe_dump(
            {
                "logs": {
                    "backend": "loki",
                    "url": loki.url,
                    "tenant": "ops",
                    "labels": {"job_id": "slurm_job_id"},
                }
            }
        )
    )
    assert main([*argv, "--no-slurm"]) == 0
    assert "signals check OK" in capsys.readouterr().out

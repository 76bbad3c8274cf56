from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest

from tests.unit.test_detection_corpus import KNOWN_HELDOUT_HEALTHY_CALLED_FATAL
from trainguard.cli import main


def test_classify_prints_one_object_per_input_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    oom = tmp_path / "oom.log"
    oom.write_text("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    healthy = tmp_path / "ok.log"
    healthy.write_bytes(b"host:1:2 [0] NCCL INFO Init COMPLETE\n\xff\xfe\n")
    stdin = "slurmstepd: error: *** JOB 7 ON n1 CANCELLED AT 2024-01-01T00:00:00 DUE TO TIME LIMIT ***\n"
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin.encode())))
    rc = main(["classify", str(oom), "-", str(healthy), str(tmp_path / "missing.log")])
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert rc == 1  # the missing file
    assert [r["category"] for r in rows[:3]] == ["cuda_oom", "preemption_or_timelimit", "healthy"]
    assert [r["fatal"] for r in rows[:3]] == [True, True, False]
    for r in rows:
        assert {"fatal", "category", "attribution", "nodes", "evidence", "confidence"} <= r.keys()
        assert 0.0 <= r["confidence"] <= 1.0
    assert "error" in rows[3]


def test_corpus_report_prints_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["corpus-report"]) == 0
    out = capsys.readouterr().out
    assert "fatal-vs-healthy" in out and "nccl_timeout" in out
    assert "== tuning part" in out and "== held-out part" in out and "confidence calibration" in out
    assert main(["corpus-report", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["samples"] == doc["tuning"]["samples"] + doc["heldout"]["samples"]
    assert doc["tuning"]["healthy_classified_fatal"] == []
    # The held-out part may only hold the listed known false positives (see test_detection_corpus).
    assert set(doc["heldout"]["healthy_classified_fatal"]) <= KNOWN_HELDOUT_HEALTHY_CALLED_FATAL
    for part in ("tuning", "heldout"):
        assert sum(row["verdicts"] for row in doc[part]["calibration"]) == doc[part]["samples"]

"""`trainguard audit` and `trainguard decide` against a temp SQLite store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainguard.audit import AuditStore
from trainguard.cli import main
from trainguard.models import (
    ActionKind,
    Advice,
    Attribution,
    AuditEventIn,
    Category,
    EventType,
    Verdict,
    WorkloadId,
    WorkloadStatus,
)

WID = WorkloadId(cluster="lab", job_id="7", submit_time=1000)


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AuditStore:
    url = f"sqlite:///{tmp_path / 'audit.db'}"
    monkeypatch.setenv("TRAINGUARD_AUDIT__URL", url)
    monkeypatch.delenv("TRAINGUARD_CONFIG", raising=False)
    s = AuditStore.from_url(url)
    s.record(
        AuditEventIn(
            event_id="d1",
            event_type=EventType.DETECTION,
            workload_key=WID.key,
            job_id="7",
            ts=5.0,
            category="nccl_timeout",
            message="watchdog \x1b[2J timeout",
            evidence=("[rank0] Watchdog caught collective operation timeout",),
        )
    )
    s.record(
        AuditEventIn(
            event_id="r1", event_type=EventType.TRAINING_RESUMED, workload_key=WID.key, job_id="7", ts=9.0
        )
    )
    s.upsert_workload(
        WorkloadStatus(workload_key=WID.key, cluster="lab", job_id="7", submit_time=1000, attempts=1)
    )
    verdict = Verdict(category=Category.HANG, attribution=Attribution.APPLICATION, fatal=True)
    s.record_advice(
        WID, Advice(advice_id="a1", action=ActionKind.REQUEUE, reason="r", verdict=verdict), ts=6.0
    )
    return s


def test_audit_list_prints_events_in_order_and_escapes_control_chars(
    store: AuditStore, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["audit", "list", "--workload", WID.key]) == 0
    out = capsys.readouterr().out
    assert out.index("detection") < out.index("advice") < out.index("training_resumed")
    assert "\x1b" not in out and "\\x1b[2J" in out
    assert "| [rank0] Watchdog caught" in out


def test_audit_list_json_and_type_filter(store: AuditStore, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit", "list", "--job-id", "7", "--type", "training_resumed", "--json"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [json.loads(line)["event_id"] for line in lines] == ["r1"]


def test_audit_workloads(store: AuditStore, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit", "workloads"]) == 0
    assert "lab/7/1000" in capsys.readouterr().out


def test_decide_records_and_rejects_unknown_advice(
    store: AuditStore, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["decide", "a1", "disagree", "--did", "drained gpu-2", "--who", "ana"]) == 0
    got = store.get_decision("a1")
    assert got is not None and (got.agree, got.did_instead, got.who) == (False, "drained gpu-2", "ana")
    assert main(["decide", "zzz", "agree"]) == 1
    assert "no advice" in capsys.readouterr().err

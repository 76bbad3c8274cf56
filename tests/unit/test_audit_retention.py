"""Audit retention (`audit.retention_days`, `trainguard audit prune --older-than`) on SQLite and MariaDB."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from tests.unit.test_audit_migrations import mariadb_url, sqlite_url, url  # noqa: F401  (fixtures)
from tests.unit.test_audit_store import WID, advice
from trainguard.audit.retention import parse_age, prune
from trainguard.audit.store import AuditStore
from trainguard.cli import main
from trainguard.models import AuditEventIn, EventType, Mode, WorkloadId, WorkloadState, WorkloadStatus
from trainguard.settings import Settings
from workers.worker import enforce_retention

DAY = 86400.0
NOW = 1_800_000_000.0


@pytest.mark.parametrize(
    ("text", "seconds"), [("90d", 90 * DAY), ("12h", 43200), ("2w", 14 * DAY), ("7", 7 * DAY)]
)
def test_parse_age(text: str, seconds: float) -> None:
    assert parse_age(text) == seconds


@pytest.mark.parametrize("text", ["", "0d", "-1d", "90x", "d"])
def test_parse_age_refuses_nonsense(text: str) -> None:
    with pytest.raises(ValueError):
        parse_age(text)


def _status(key: int, state: WorkloadState, updated_at: float) -> WorkloadStatus:
    w = WorkloadId(cluster="lab", job_id=str(key), submit_time=1)
    return WorkloadStatus(
        workload_key=w.key,
        cluster="lab",
        job_id=w.job_id,
        submit_time=1,
        workflow_id=w.workflow_id,
        mode=Mode.OBSERVE,
        state=state,
        updated_at=updated_at,
        first_seen_at=updated_at,
    )


def _fill(store: AuditStore) -> None:
    for age_days in range(0, 200, 10):  # 20 events, 10 of them 100 days old or more
        store.record(
            AuditEventIn(
                event_id=f"e{age_days}",
                event_type=EventType.DETECTION,
                workload_key=WID.key,
                cluster="lab",
                ts=NOW - age_days * DAY,
            )
        )
    store.record_advice(WID, advice(1), ts=NOW - 120 * DAY)  # + its ADVICE event, old
    store.record_advice(WID, advice(2), ts=NOW - 1 * DAY)
    store.record_operator_decision(advice(1).advice_id, agree=True, ts=NOW - 119 * DAY)
    store.upsert_workload(_status(1, WorkloadState.COMPLETED, NOW - 150 * DAY))
    store.upsert_workload(_status(2, WorkloadState.WATCHING, NOW - 150 * DAY))  # healthy, quiet for months
    store.upsert_workload(_status(3, WorkloadState.COMPLETED, NOW - 5 * DAY))


def test_prune_deletes_old_rows_in_batches_and_audits_it(url: str) -> None:  # noqa: F811
    store = AuditStore.from_url(url)
    try:
        _fill(store)
        result = prune(store, older_than_s=90 * DAY, source="test", now=NOW, batch=3)
        assert result.deleted == {"events": 12, "advice": 1, "operator_decisions": 1, "workloads": 1}
        left = [
            e.event_id for e in store.list_events(limit=1000).items if e.event_type == EventType.DETECTION
        ]
        assert sorted(left, key=lambda i: int(i[1:])) == [
            f"e{d}" for d in range(0, 100, 10)
        ]  # e90 is the cutoff: kept
        assert store.get_advice(advice(1).advice_id) is None and store.get_advice(advice(2).advice_id)
        keys = {w.workload_key for w in store.list_workloads(limit=100)}
        assert keys == {"lab/2/1", "lab/3/1"}  # the quiet but running workload stays
        pruned = store.list_events(event_type=EventType.AUDIT_PRUNED).items
        assert len(pruned) == 1 and pruned[0].data["events"] == 12 and pruned[0].data["source"] == "test"
        again = prune(store, older_than_s=90 * DAY, source="test", now=NOW)
        assert again.total == 0
        assert len(store.list_events(event_type=EventType.AUDIT_PRUNED).items) == 1  # nothing to report
    finally:
        store.close()


def test_cli_prune_and_migrate(
    sqlite_url: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("TRAINGUARD_AUDIT__URL", sqlite_url)
    store = AuditStore.from_url(sqlite_url)
    store.record(AuditEventIn(event_id="old", event_type=EventType.DETECTION, ts=1000.0))
    store.record(AuditEventIn(event_id="new", event_type=EventType.DETECTION, ts=4e9))
    assert main(["audit", "prune"]) == 2  # no age and no retention_days: refuse rather than guess
    assert main(["audit", "prune", "--older-than", "90d"]) == 0
    assert "events=1" in capsys.readouterr().out
    assert [e.event_id for e in store.list_events(event_type=EventType.DETECTION).items] == ["new"]
    assert main(["audit", "migrate"]) == 0
    assert "already at" in capsys.readouterr().out
    assert main(["audit", "migrate", "--status"]) == 0
    assert "current: 0002" in capsys.readouterr().out
    store.close()


async def test_the_control_worker_enforces_retention_days(sqlite_url: str) -> None:  # noqa: F811
    store = AuditStore.from_url(sqlite_url)
    store.record(AuditEventIn(event_id="ancient", event_type=EventType.DETECTION, ts=1000.0))
    settings = Settings(audit={"url": sqlite_url, "retention_days": 30, "prune_interval_s": 3600})
    task = asyncio.create_task(enforce_retention(store, settings))
    try:
        for _ in range(50):
            if store.list_events(event_type=EventType.AUDIT_PRUNED).items:
                break
            await asyncio.sleep(0.1)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert store.list_events(event_type=EventType.DETECTION).items == []
    (pruned,) = store.list_events(event_type=EventType.AUDIT_PRUNED).items
    assert pruned.data["source"] == "control worker"
    store.close()


def test_retention_days_default_keeps_everything() -> None:
    assert Settings().audit.retention_days == 0

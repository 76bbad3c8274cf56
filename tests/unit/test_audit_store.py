"""Audit store behaviour on SQLite and MariaDB (the MariaDB runs skip only when the server is unreachable)."""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine
from sqlalchemy.exc import OperationalError

from tests.fakes.mysql import DatabaseUnavailable, temporary_mysql_database
from trainguard.audit import AdviceNotFound, AuditStore, Disposition, InvalidCursor, iter_all_events
from trainguard.models import (
    ActionKind,
    Actor,
    Advice,
    Attribution,
    AuditEventIn,
    Category,
    EventType,
    Level,
    Mode,
    Verdict,
    WorkloadId,
    WorkloadState,
    WorkloadStatus,
)

WID = WorkloadId(cluster="lab", job_id="42", submit_time=1_700_000_000)


@pytest.fixture(params=["sqlite", "mariadb"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'nested' / 'audit.db'}"
        return
    try:
        with temporary_mysql_database() as url:
            yield url
    except DatabaseUnavailable as err:
        pytest.fail(f"MariaDB unreachable (scripts/bootstrap.sh installs and starts it): {err}")


@pytest.fixture
def store(store_url: str) -> Iterator[AuditStore]:
    s = AuditStore.from_url(store_url)
    yield s
    s.close()


def event(n: int, *, ts: float, **kw: object) -> AuditEventIn:
    base: dict[str, object] = {
        "event_id": f"ev-{n}",
        "event_type": EventType.DETECTION,
        "workload_key": WID.key,
        "cluster": WID.cluster,
        "job_id": WID.job_id,
        "submit_time": WID.submit_time,
        "ts": ts,
    }
    base.update(kw)
    return AuditEventIn.model_validate(base)


def advice(seq: int, *, category: Category = Category.NCCL_TIMEOUT, cluster_attempt: int = 0) -> Advice:
    return Advice(
        advice_id=f"{WID.key}:{cluster_attempt}:{seq}",
        action=ActionKind.REQUEUE,
        reason="NCCL watchdog timeout after Xid 79 on gpu-03",
        verdict=Verdict(
            category=category,
            attribution=Attribution.HARDWARE,
            fatal=True,
            confidence=0.9,
            nodes=("gpu-03",),
            evidence=("[rank3] Xid 79: GPU has fallen off the bus",),
            summary="GPU fell off the bus",
        ),
        exclude_nodes=("gpu-03",),
        mode=Mode.ACTION,
        execute=True,
        attempt=cluster_attempt,
        generation=seq,
    )


def test_record_is_idempotent_by_event_id(store: AuditStore) -> None:
    assert store.record(event(1, ts=10.0)) is True
    assert store.record(event(1, ts=99.0, message="retry of the same event")) is False
    page = store.list_events(workload_key=WID.key)
    assert [(e.event_id, e.ts, e.message) for e in page.items] == [("ev-1", 10.0, "")]


def test_untrusted_text_round_trips_exactly(store: AuditStore) -> None:
    nasty = "<img src=x onerror=alert(1)> ' \"; DROP TABLE tg_audit_events; -- 🚀 \x1b[31m" + "x" * 5000
    store.record(
        event(1, ts=1.0, message=nasty, evidence=(nasty,), nodes=("gpu-[01-02]",), data={"k": nasty})
    )
    got = store.list_events().items[0]
    assert got.message == nasty
    assert got.evidence == (nasty,)
    assert got.nodes == ("gpu-[01-02]",)
    assert got.data == {"k": nasty}


def test_timestamps_keep_sub_second_precision(store: AuditStore) -> None:
    ts = 1_750_000_123.456789
    store.record(event(1, ts=ts))
    assert store.list_events().items[0].ts == ts


def test_record_advice_writes_row_and_event_once(store: AuditStore) -> None:
    a = advice(1)
    assert store.record_advice(WID, a, ts=100.0) is True
    assert store.record_advice(WID, a, ts=200.0) is False
    rec = store.get_advice(a.advice_id)
    assert rec is not None
    assert (rec.workload_key, rec.action, rec.generation, rec.desired_state) == (
        WID.key,
        "requeue",
        1,
        "requeued",
    )
    assert rec.exclude_nodes == ("gpu-03",)
    assert rec.verdict == a.verdict
    assert rec.execute is True and rec.mode == "action"
    assert rec.disposition == Disposition.PENDING and rec.active
    assert rec.ts == 100.0
    events = store.list_events(event_type=EventType.ADVICE).items
    assert [e.event_id for e in events] == [f"advice:{a.advice_id}"]
    assert events[0].nodes == ("gpu-03",)
    assert events[0].evidence == a.verdict.evidence
    assert events[0].data["generation"] == 1
    assert store.get_advice("nope") is None


def test_advice_disposition_and_active_filter(store: AuditStore) -> None:
    store.record_advice(WID, advice(1), ts=1.0)
    store.record_advice(WID, advice(2), ts=2.0)
    store.set_advice_disposition(
        advice(1).advice_id, disposition="converged", observed_generation=1, reason="ok"
    )
    rec = store.get_advice(advice(1).advice_id)
    assert rec is not None
    assert (rec.disposition, rec.observed_generation, rec.disposition_reason) == ("converged", 1, "ok")
    assert rec.disposition_at is not None
    active = store.list_advice(only_active=True)
    assert [r.advice_id for r in active] == [advice(2).advice_id]
    assert [r.advice_id for r in store.list_advice(workload_key=WID.key)] == [
        advice(2).advice_id,
        advice(1).advice_id,
    ]
    with pytest.raises(AdviceNotFound):
        store.set_advice_disposition("missing", disposition="converged", observed_generation=None)
    with pytest.raises(ValueError, match="disposition must be one of"):
        store.set_advice_disposition(advice(2).advice_id, disposition="done", observed_generation=None)


def test_cursor_pagination_is_stable_and_complete(store: AuditStore) -> None:
    # Ties on ts are the hard case: only (ts, id) gives a total order.
    for n in range(25):
        store.record(event(n, ts=float(n // 3)))
    seen: list[str] = []
    page = store.list_events(limit=10)
    seen += [e.event_id for e in page.items]
    # Events arriving between pages must neither duplicate nor hide older ones.
    store.record(event(100, ts=50.0))
    while page.next_cursor:
        page = store.list_events(limit=10, cursor=page.next_cursor)
        seen += [e.event_id for e in page.items]
    assert len(seen) == len(set(seen)) == 26
    assert seen[-1] == "ev-100"

    desc = [e.event_id for e in iter_all_events(store, descending=True)]
    assert desc[0] == "ev-100"
    assert desc == list(reversed(seen))


def test_cursor_rejects_garbage_and_wrong_direction(store: AuditStore) -> None:
    for n in range(3):
        store.record(event(n, ts=float(n)))
    cursor = store.list_events(limit=1).next_cursor
    assert cursor is not None
    with pytest.raises(InvalidCursor):
        store.list_events(cursor=cursor, descending=True)
    for garbage in ("!!", "e30", "W10", "bm90IGpzb24"):
        with pytest.raises(InvalidCursor):
            store.list_events(cursor=garbage)


def test_page_size_is_bounded(store: AuditStore) -> None:
    for n in range(3):
        store.record(event(n, ts=float(n)))
    assert len(store.list_events(limit=0).items) == 1
    assert len(store.list_events(limit=10**9).items) == 3


def test_event_filters(store: AuditStore) -> None:
    store.record(event(1, ts=1.0, attempt=0, level=Level.INFO, actor=Actor.POLICY))
    store.record(
        event(
            2, ts=2.0, attempt=1, level=Level.ERROR, actor=Actor.WATCHDOG, event_type=EventType.WATCHDOG_FIRED
        )
    )
    store.record(event(3, ts=3.0, attempt=1, job_id="43", workload_key="lab/43/1"))

    def ids(**kw: object) -> list[str]:
        return [e.event_id for e in store.list_events(**kw).items]  # type: ignore[arg-type]

    assert ids(job_id="42", attempt=1) == ["ev-2"]
    assert ids(event_type=EventType.WATCHDOG_FIRED) == ["ev-2"]
    assert ids(level="error") == ["ev-2"]
    assert ids(actor=Actor.POLICY) == ["ev-1"]
    assert ids(since=2.0) == ["ev-2", "ev-3"]
    assert ids(until=2.0) == ["ev-1"]
    assert ids(workload_key="lab/43/1") == ["ev-3"]
    assert ids(descending=True) == ["ev-3", "ev-2", "ev-1"]


def status(key: str = WID.key, **kw: object) -> WorkloadStatus:
    cluster, job_id, submit = key.split("/")
    base: dict[str, object] = {
        "workload_key": key,
        "cluster": cluster,
        "job_id": job_id,
        "submit_time": int(submit),
        "workflow_id": f"trainguard-job-{cluster}-{job_id}-{submit}",
        "updated_at": 10.0,
    }
    base.update(kw)
    return WorkloadStatus.model_validate(base)


def test_upsert_workload_never_goes_back_in_time(store: AuditStore) -> None:
    store.upsert_workload(status(attempts=1, excluded_nodes=("gpu-03",), updated_at=10.0))
    store.upsert_workload(status(attempts=0, updated_at=9.0))  # a late, stale write
    got = store.get_workload(WID.key)
    assert got is not None and got.attempts == 1 and got.excluded_nodes == ("gpu-03",)
    store.upsert_workload(status(attempts=2, state=WorkloadState.RECOVERING, updated_at=11.0))
    got = store.get_workload(WID.key)
    assert got is not None and (got.attempts, got.state, got.excluded_nodes) == (2, "recovering", ())
    assert store.get_workload("lab/0/0") is None


def test_list_workloads_filters_and_pages(store: AuditStore) -> None:
    store.upsert_workload(status("lab/1/1", mode=Mode.ACTION, last_category="hang", updated_at=1.0))
    store.upsert_workload(status("lab/2/1", state=WorkloadState.COMPLETED, updated_at=2.0))
    store.upsert_workload(status("other/3/1", last_category="hang", updated_at=3.0))

    def keys(**kw: object) -> list[str]:
        return [w.workload_key for w in store.list_workloads(**kw)]  # type: ignore[arg-type]

    assert keys() == ["other/3/1", "lab/2/1", "lab/1/1"]
    assert keys(cluster="lab") == ["lab/2/1", "lab/1/1"]
    assert keys(mode="action") == ["lab/1/1"]
    assert keys(state=WorkloadState.COMPLETED) == ["lab/2/1"]
    assert keys(category="hang") == ["other/3/1", "lab/1/1"]
    assert keys(limit=1, offset=1) == ["lab/2/1"]
    counts = {(c, m, s): n for c, m, s, n in store.workload_counts()}
    assert counts[("lab", "observe", "completed")] == 1
    assert sum(counts.values()) == 3


def test_operator_decisions_and_agreement_rates(store: AuditStore) -> None:
    store.record_advice(WID, advice(1), ts=1.0)
    store.record_advice(WID, advice(2, category=Category.HANG), ts=2.0)
    store.record_advice(WID, advice(3, category=Category.HANG), ts=3.0)
    store.record_operator_decision(advice(1).advice_id, agree=True, who="ana", ts=100.0)
    store.record_operator_decision(advice(2).advice_id, agree=True, who="ana", ts=101.0)
    # Changing one's mind: the latest decision on an advice is the one that counts.
    store.record_operator_decision(advice(2).advice_id, agree=False, did_instead="drained gpu-07", ts=102.0)
    store.record_operator_decision(advice(3).advice_id, agree=True, ts=500.0)

    rates = {(r.scope, r.key): (r.decisions, r.agreed, r.rate) for r in store.agreement_rates()}
    assert rates[("category", "nccl_timeout")] == (1, 1, 1.0)
    assert rates[("category", "hang")] == (2, 1, 0.5)
    assert rates[("cluster", "lab")] == (3, 2, pytest.approx(2 / 3))

    windowed = {(r.scope, r.key): r.decisions for r in store.agreement_rates(since=0.0, until=200.0)}
    assert windowed == {("category", "nccl_timeout"): 1, ("category", "hang"): 1, ("cluster", "lab"): 2}

    got = store.get_decision(advice(2).advice_id)
    assert got is not None and (got.agree, got.did_instead) == (False, "drained gpu-07")
    decisions = store.list_events(event_type=EventType.OPERATOR_DECISION).items
    assert len(decisions) == 4 and all(e.actor == Actor.OPERATOR for e in decisions)
    with pytest.raises(AdviceNotFound):
        store.record_operator_decision("missing", agree=True)


def test_overlong_keys_are_refused_not_truncated(store: AuditStore) -> None:
    with pytest.raises(ValueError, match="event_id"):
        store.record(event(1, ts=1.0, event_id="e" * 300))


def test_ping_raises_when_database_unreachable() -> None:
    dead = AuditStore(
        create_engine("mysql+pymysql://root@127.0.0.1:1/test", connect_args={"connect_timeout": 1})
    )
    with pytest.raises(OperationalError):
        dead.ping()


def _writer(url: str, worker: int, results: multiprocessing.Queue) -> None:
    store = AuditStore.from_url(url)
    inserted = 0
    for n in range(150):
        inserted += store.record(event(n, ts=float(n), message=f"worker {worker}"))
        inserted += store.record_advice(WID, advice(n), ts=float(n))
        store.upsert_workload(status(attempts=n, updated_at=float(n)))
    store.close()
    results.put(inserted)


def test_two_processes_writing_the_same_records(store_url: str) -> None:
    """Two workers racing on the same idempotency keys: each record is stored exactly once, no errors."""
    AuditStore.from_url(store_url).close()
    ctx = multiprocessing.get_context("spawn")
    results: multiprocessing.Queue = ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(store_url, w, results)) for w in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0, 0]
    assert results.get(timeout=5) + results.get(timeout=5) == 300  # 150 events + 150 advice, once each
    store = AuditStore.from_url(store_url)
    all_events = list(iter_all_events(store))
    assert len(all_events) == 300
    assert len({e.event_id for e in all_events}) == 300
    got = store.get_workload(WID.key)
    assert got is not None and got.attempts == 149
    store.close()

"""The audit repository: durable, queryable record of everything TrainGuard saw, advised and did.

Synchronous on purpose: activities call it from a thread and the API from its threadpool. Several
workers may write at once, so every write is either a single statement (inserts, upserts) or one short
transaction, and a unique-key collision on insert means "somebody already recorded this", never an
error.
"""

from __future__ import annotations

import base64
import binascii
import json
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import Select, Table, and_, case, event, func, insert, inspect, or_, select, update
from sqlalchemy.dialects import mysql as mysql_dialect
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.engine import Connection, Engine, RowMapping, make_url
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlalchemy.pool import StaticPool
from sqlalchemy.sql.elements import ColumnElement
from sqlmodel import create_engine

from trainguard.audit import migrate
from trainguard.audit.migrate import MigrationReport
from trainguard.audit.schemas import (
    DESIRED_STATE,
    MAX_PAGE,
    AdviceRecord,
    AgreementRow,
    AuditEventOut,
    Disposition,
    EventPage,
    OperatorDecision,
)
from trainguard.audit.tables import ADVICE, ALL_TABLES, DECISIONS, EVENTS, KEY_LENGTH, WORKLOADS
from trainguard.models import (
    Actor,
    Advice,
    AuditEventIn,
    EventType,
    Level,
    Mode,
    Verdict,
    WorkloadId,
    WorkloadState,
    WorkloadStatus,
    clip,
)

_MYSQL_NAMES = {"mysql", "mariadb"}


class InvalidCursor(ValueError):
    pass


class AdviceNotFound(LookupError):
    pass


def _dumps(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _tuple(text: str) -> tuple[str, ...]:
    return tuple(json.loads(text)) if text else ()


def _key_str(value: str, what: str) -> str:
    if len(value) > KEY_LENGTH:
        raise ValueError(f"{what} is longer than {KEY_LENGTH} characters")
    return value


def _short(value: str) -> str:
    """Free-text values in key-sized columns are clipped rather than rejected (MySQL strict mode)."""
    return clip(value, KEY_LENGTH)


def encode_cursor(ts: float, row_id: int, descending: bool) -> str:
    raw = _dumps([repr(ts), row_id, "d" if descending else "a"]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str, descending: bool) -> tuple[float, int]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        ts_text, row_id, direction = json.loads(raw)
        ts = float(ts_text)
        if not isinstance(row_id, int) or direction not in ("a", "d"):
            raise ValueError("malformed")
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError) as err:
        raise InvalidCursor("cursor is not one this API issued") from err
    if (direction == "d") != descending:
        raise InvalidCursor("cursor was issued for the other sort order")
    return ts, row_id


class AuditStore:
    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._dialect = engine.dialect.name

    # -- lifecycle -----------------------------------------------------------------------------

    @classmethod
    def from_url(cls, url: str) -> AuditStore:
        """Open the store a TrainGuard unit writes to, creating the database file and tables if needed."""
        store = cls(_engine_for(url, create_dirs=True))
        store.create_tables()
        return store

    @classmethod
    def connect(cls, url: str) -> AuditStore:
        """The store a worker writes to, without reaching the server yet (a bad URL still fails here). A
        worker must start while the audit database is down: the jobs it holds are released by its
        cluster activities, which never wait for the store. Call create_tables() once it answers."""
        return cls(_engine_for(url, create_dirs=True))

    @classmethod
    def open_existing(cls, url: str) -> AuditStore:
        """Open a store that must already hold TrainGuard's audit (the CLI's reads and decisions): a
        missing SQLite file, an unreachable server or a database without our tables raise
        AuditStoreUnavailable instead of quietly creating an empty store and finding nothing in it."""
        parsed = make_url(url)
        shown = parsed.render_as_string(hide_password=True)
        hint = "set audit.url in the settings file (or TRAINGUARD_AUDIT__URL) to the deployment's database"
        if parsed.get_backend_name() == "sqlite" and not _in_memory(parsed.database or ""):
            path = Path(parsed.database or "").expanduser()
            if not path.is_file():
                raise AuditStoreUnavailable(f"no audit store at {path} (audit.url {shown}); {hint}")
        store = cls(_engine_for(url, create_dirs=False))
        try:
            present = set(inspect(store.engine).get_table_names())
        except SQLAlchemyError as err:
            store.close()
            cause = str(getattr(err, "orig", err)).splitlines()[0][:300]
            raise AuditStoreUnavailable(f"audit store {shown} is unreachable: {cause}") from None
        if not present & {t.name for t in ALL_TABLES}:
            store.close()
            raise AuditStoreUnavailable(f"{shown} holds no TrainGuard audit tables; {hint}")
        store.create_tables()  # tables a newer version added
        return store

    def create_tables(self) -> MigrationReport:
        """Create or upgrade the schema with the Alembic migrations (trainguard/audit/migrate.py), under a
        lock, so several units starting at once against an empty database take turns."""
        return migrate.upgrade(self._engine)

    def close(self) -> None:
        self._engine.dispose()

    @property
    def engine(self) -> Engine:
        return self._engine

    def ping(self) -> None:
        with self._engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1")

    # -- events --------------------------------------------------------------------------------

    def record(self, event_in: AuditEventIn) -> bool:
        """Store one event; False when its event_id is already stored (by us or a concurrent writer)."""
        values = _event_values(event_in)
        try:
            with self._engine.begin() as conn:
                conn.execute(insert(EVENTS).values(**values))
        except IntegrityError:
            if self._event_exists(event_in.event_id):
                return False
            raise
        return True

    def _event_exists(self, event_id: str) -> bool:
        with self._engine.connect() as conn:
            found = conn.execute(select(EVENTS.c.id).where(EVENTS.c.event_id == event_id)).first()
        return found is not None

    def list_events(
        self,
        *,
        workload_key: str | None = None,
        job_id: str | None = None,
        attempt: int | None = None,
        event_type: EventType | str | None = None,
        level: Level | str | None = None,
        actor: Actor | str | None = None,
        cluster: str | None = None,
        since: float | None = None,
        until: float | None = None,
        descending: bool = False,
        cursor: str | None = None,
        limit: int = 100,
    ) -> EventPage:
        """One page of events ordered by (ts, id); pass `next_cursor` back to get the next page.

        Keyset pagination stays stable while new events arrive, unlike offsets.
        """
        limit = max(1, min(limit, MAX_PAGE))
        stmt = events_query(
            workload_key=workload_key,
            job_id=job_id,
            attempt=attempt,
            event_type=event_type,
            level=level,
            actor=actor,
            cluster=cluster,
            since=since,
            until=until,
            descending=descending,
            cursor=cursor,
            limit=limit,
        )
        with self._engine.connect() as conn:
            rows = conn.execute(stmt).mappings().all()
        items = [_event_out(r) for r in rows[:limit]]
        next_cursor = None
        if len(rows) > limit:
            last = items[-1]
            next_cursor = encode_cursor(last.ts, last.id, descending)
        return EventPage(items=items, next_cursor=next_cursor)

    # -- advice --------------------------------------------------------------------------------

    def record_advice(self, workload: WorkloadId, advice: Advice, *, ts: float) -> bool:
        """Advice row and its ADVICE event in one transaction, before anything touches the scheduler."""
        _key_str(advice.advice_id, "advice_id")
        verdict = advice.verdict
        row = {
            "advice_id": advice.advice_id,
            "workload_key": workload.key,
            "cluster": workload.cluster,
            "job_id": workload.job_id,
            "submit_time": workload.submit_time,
            "attempt": advice.attempt,
            "generation": advice.generation,
            "action": str(advice.action),
            "reason": advice.reason,
            "category": str(verdict.category),
            "attribution": str(verdict.attribution),
            "mode": str(advice.mode),
            "execute": advice.execute,
            "actor": str(advice.actor),
            "desired_state": str(DESIRED_STATE.get(advice.action, "")),
            "exclude_nodes_json": _dumps(list(advice.exclude_nodes)),
            "drain_nodes_json": _dumps(list(advice.drain_nodes)),
            "verdict_json": verdict.model_dump_json(),
            "ts": ts,
            "observed_generation": None,
            "disposition": str(Disposition.PENDING),
            "disposition_reason": "",
            "disposition_at": None,
        }
        audit = AuditEventIn(
            event_id=f"advice:{advice.advice_id}",
            event_type=EventType.ADVICE,
            workload_key=workload.key,
            cluster=workload.cluster,
            job_id=workload.job_id,
            submit_time=workload.submit_time,
            attempt=advice.attempt,
            level=Level.WARNING if verdict.fatal else Level.INFO,
            actor=advice.actor,
            ts=ts,
            category=str(verdict.category),
            attribution=str(verdict.attribution),
            action=str(advice.action),
            mode=str(advice.mode),
            nodes=advice.exclude_nodes,
            evidence=verdict.evidence,
            message=advice.reason,
            data={
                "advice_id": advice.advice_id,
                "generation": advice.generation,
                "execute": advice.execute,
                "confidence": verdict.confidence,
                "summary": verdict.summary,
                "pattern_id": verdict.pattern_ids[0] if verdict.pattern_ids else "",
                "implicated": ",".join(verdict.nodes)[:1000],
                "array_job_id": advice.array_job_id,
                "array_task_id": advice.array_task_id,
                "job_nodes": ",".join(advice.job_nodes)[:1000],
                "job_user": advice.job_user[:200],
            },
        )
        try:
            with self._engine.begin() as conn:
                conn.execute(insert(ADVICE).values(**row))
                conn.execute(insert(EVENTS).values(**_event_values(audit)))
        except IntegrityError:
            if self.get_advice(advice.advice_id) is not None:
                return False
            raise
        return True

    def get_advice(self, advice_id: str) -> AdviceRecord | None:
        with self._engine.connect() as conn:
            row = conn.execute(select(ADVICE).where(ADVICE.c.advice_id == advice_id)).mappings().first()
        return _advice_out(row) if row is not None else None

    def list_advice(
        self,
        *,
        workload_key: str | None = None,
        cluster: str | None = None,
        only_active: bool = False,
        limit: int = 100,
        offset: int = 0,
    ) -> list[AdviceRecord]:
        limit = max(1, min(limit, MAX_PAGE))
        where: list[ColumnElement[bool]] = []
        if workload_key is not None:
            where.append(ADVICE.c.workload_key == workload_key)
        if cluster is not None:
            where.append(ADVICE.c.cluster == cluster)
        if only_active:
            where.append(ADVICE.c.disposition == str(Disposition.PENDING))
        stmt = (
            select(ADVICE)
            .where(*where)
            .order_by(ADVICE.c.ts.desc(), ADVICE.c.id.desc())
            .limit(limit)
            .offset(max(0, offset))
        )
        with self._engine.connect() as conn:
            return [_advice_out(r) for r in conn.execute(stmt).mappings().all()]

    def set_advice_disposition(
        self,
        advice_id: str,
        *,
        disposition: str,
        observed_generation: int | None,
        reason: str = "",
        ts: float | None = None,
    ) -> None:
        """Reconciliation status from whoever applies the advice (our cluster worker or a controller)."""
        try:
            value = Disposition(disposition)
        except ValueError:
            allowed = ", ".join(d.value for d in Disposition)
            raise ValueError(f"disposition must be one of: {allowed}") from None
        stmt = (
            update(ADVICE)
            .where(ADVICE.c.advice_id == advice_id)
            .values(
                disposition=str(value),
                observed_generation=observed_generation,
                disposition_reason=reason,
                disposition_at=time.time() if ts is None else ts,
            )
        )
        with self._engine.begin() as conn:
            result = conn.execute(stmt)
        if result.rowcount == 0:
            raise AdviceNotFound(advice_id)

    # -- workloads -----------------------------------------------------------------------------

    def upsert_workload(self, status: WorkloadStatus) -> None:
        """Insert or replace; an older status (smaller updated_at) never overwrites a newer one."""
        values = {
            "workload_key": _key_str(status.workload_key, "workload_key"),
            "cluster": status.cluster,
            "job_id": status.job_id,
            "submit_time": status.submit_time,
            "workflow_id": status.workflow_id,
            "name": status.name,
            "environment": _short(status.environment),
            "mode": str(status.mode),
            "state": str(status.state),
            "attempts": status.attempts,
            "excluded_nodes_json": _dumps(list(status.excluded_nodes)),
            "last_category": status.last_category,
            "last_attribution": status.last_attribution,
            "current_advice_id": status.current_advice_id,
            "paused": status.paused,
            "last_iteration": status.last_iteration,
            "updated_at": status.updated_at,
            "first_seen_at": status.first_seen_at,
            "lost_s": status.lost_s,
            "goodput": status.goodput,
        }
        with self._engine.begin() as conn:
            self._upsert(conn, WORKLOADS, values, key="workload_key", guard="updated_at")

    def get_workload(self, workload_key: str) -> WorkloadStatus | None:
        stmt = select(WORKLOADS).where(WORKLOADS.c.workload_key == workload_key)
        with self._engine.connect() as conn:
            row = conn.execute(stmt).mappings().first()
        return _workload_out(row) if row is not None else None

    def list_workloads(
        self,
        *,
        cluster: str | None = None,
        state: WorkloadState | str | None = None,
        mode: Mode | str | None = None,
        category: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[WorkloadStatus]:
        limit = max(1, min(limit, MAX_PAGE))
        where: list[ColumnElement[bool]] = []
        for column, value in (
            (WORKLOADS.c.cluster, cluster),
            (WORKLOADS.c.state, _enum_str(state)),
            (WORKLOADS.c.mode, _enum_str(mode)),
            (WORKLOADS.c.last_category, category),
        ):
            if value is not None:
                where.append(column == value)
        stmt = (
            select(WORKLOADS)
            .where(*where)
            .order_by(WORKLOADS.c.updated_at.desc(), WORKLOADS.c.id.desc())
            .limit(limit)
            .offset(max(0, offset))
        )
        with self._engine.connect() as conn:
            return [_workload_out(r) for r in conn.execute(stmt).mappings().all()]

    def workload_counts(self) -> list[tuple[str, str, str, int]]:
        """(cluster, mode, state, count) for the monitored-workloads gauge."""
        stmt = select(WORKLOADS.c.cluster, WORKLOADS.c.mode, WORKLOADS.c.state, func.count()).group_by(
            WORKLOADS.c.cluster, WORKLOADS.c.mode, WORKLOADS.c.state
        )
        with self._engine.connect() as conn:
            return [(str(c), str(m), str(s), int(n)) for c, m, s, n in conn.execute(stmt).all()]

    # -- operator decisions --------------------------------------------------------------------

    def record_operator_decision(
        self,
        advice_id: str,
        *,
        agree: bool,
        did_instead: str = "",
        who: str = "",
        ts: float | None = None,
    ) -> OperatorDecision:
        """An operator's verdict on an advice. The latest one counts; the audit keeps all of them."""
        advice = self.get_advice(advice_id)
        if advice is None:
            raise AdviceNotFound(advice_id)
        now = time.time() if ts is None else ts
        decision = OperatorDecision(
            advice_id=advice_id,
            agree=agree,
            did_instead=did_instead,
            who=_short(who),
            ts=now,
            workload_key=advice.workload_key,
            cluster=advice.cluster,
            category=advice.category,
        )
        audit = AuditEventIn(
            event_id=f"decision:{uuid.uuid4().hex}",
            event_type=EventType.OPERATOR_DECISION,
            workload_key=advice.workload_key,
            cluster=advice.cluster,
            job_id=advice.job_id,
            submit_time=advice.submit_time,
            attempt=advice.attempt,
            actor=Actor.OPERATOR,
            ts=now,
            category=advice.category,
            action=advice.action,
            mode=advice.mode,
            message=("agree" if agree else "disagree") + (f": {did_instead}" if did_instead else ""),
            data={"advice_id": advice_id, "agree": agree, "who": decision.who, "did_instead": did_instead},
        )
        with self._engine.begin() as conn:
            self._upsert(conn, DECISIONS, decision.model_dump(), key="advice_id", guard="ts")
            conn.execute(insert(EVENTS).values(**_event_values(audit)))
        return decision

    def get_decision(self, advice_id: str) -> OperatorDecision | None:
        stmt = select(DECISIONS).where(DECISIONS.c.advice_id == advice_id)
        with self._engine.connect() as conn:
            row = conn.execute(stmt).mappings().first()
        if row is None:
            return None
        return OperatorDecision.model_validate({k: row[k] for k in OperatorDecision.model_fields})

    def agreement_rates(
        self, *, since: float | None = None, until: float | None = None
    ) -> list[AgreementRow]:
        """Share of advice operators agreed with, per failure category and per cluster."""
        where: list[ColumnElement[bool]] = []
        if since is not None:
            where.append(DECISIONS.c.ts >= since)
        if until is not None:
            where.append(DECISIONS.c.ts < until)
        agreed = func.sum(case((DECISIONS.c.agree.is_(True), 1), else_=0))
        out: list[AgreementRow] = []
        with self._engine.connect() as conn:
            for scope, column in (("category", DECISIONS.c.category), ("cluster", DECISIONS.c.cluster)):
                stmt = select(column, func.count(), agreed).where(*where).group_by(column).order_by(column)
                for key, total, yes in conn.execute(stmt).all():
                    total_i, yes_i = int(total), int(yes or 0)
                    out.append(
                        AgreementRow(
                            scope=scope,
                            key=str(key),
                            decisions=total_i,
                            agreed=yes_i,
                            rate=yes_i / total_i if total_i else 0.0,
                        )
                    )
        return out

    # -- helpers -------------------------------------------------------------------------------

    def _upsert(
        self, conn: Connection, table: Table, values: Mapping[str, Any], *, key: str, guard: str
    ) -> None:
        """Atomic insert-or-update in one statement, so concurrent writers cannot race on the key."""
        columns = [c for c in values if c != key]
        if self._dialect == "sqlite":
            s_stmt = sqlite_dialect.insert(table).values(**values)
            s_stmt = s_stmt.on_conflict_do_update(
                index_elements=[key],
                set_={c: s_stmt.excluded[c] for c in columns},
                where=table.c[guard] <= s_stmt.excluded[guard],
            )
            conn.execute(s_stmt)
        elif self._dialect in _MYSQL_NAMES:
            m_stmt = mysql_dialect.insert(table).values(**values)
            newer = m_stmt.inserted[guard] >= table.c[guard]
            # MySQL applies assignments left to right, so the guard column must be assigned last.
            assignments: list[tuple[str, Any]] = [
                (c, case((newer, m_stmt.inserted[c]), else_=table.c[c])) for c in columns if c != guard
            ]
            assignments.append((guard, case((newer, m_stmt.inserted[guard]), else_=table.c[guard])))
            conn.execute(m_stmt.on_duplicate_key_update(assignments))
        else:
            nested = conn.begin_nested()
            try:
                conn.execute(insert(table).values(**values))
                nested.commit()
            except IntegrityError:
                nested.rollback()
                conn.execute(
                    update(table)
                    .where(table.c[key] == values[key], table.c[guard] <= values[guard])
                    .values(**{c: values[c] for c in columns})
                )


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    try:
        # WAL: the API keeps reading while a worker writes; NORMAL is durable across app crashes.
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA busy_timeout=30000")
    finally:
        cursor.close()


def events_query(
    *,
    workload_key: str | None = None,
    job_id: str | None = None,
    attempt: int | None = None,
    event_type: EventType | str | None = None,
    level: Level | str | None = None,
    actor: Actor | str | None = None,
    cluster: str | None = None,
    since: float | None = None,
    until: float | None = None,
    descending: bool = False,
    cursor: str | None = None,
    limit: int = 100,
) -> Select[Any]:
    """The statement behind `AuditStore.list_events` (one page + 1 row), also EXPLAINed by
    bench/audit_indexes.py and tests/unit/test_audit_indexes.py to prove each filter uses its index."""
    where: list[ColumnElement[bool]] = []
    for column, value in (
        (EVENTS.c.workload_key, workload_key),
        (EVENTS.c.job_id, job_id),
        (EVENTS.c.attempt, attempt),
        (EVENTS.c.event_type, _enum_str(event_type)),
        (EVENTS.c.level, _enum_str(level)),
        (EVENTS.c.actor, _enum_str(actor)),
        (EVENTS.c.cluster, cluster),
    ):
        if value is not None:
            where.append(column == value)
    if since is not None:
        where.append(EVENTS.c.ts >= since)
    if until is not None:
        where.append(EVENTS.c.ts < until)
    if cursor:
        c_ts, c_id = decode_cursor(cursor, descending)
        if descending:
            where.append(or_(EVENTS.c.ts < c_ts, and_(EVENTS.c.ts == c_ts, EVENTS.c.id < c_id)))
        else:
            where.append(or_(EVENTS.c.ts > c_ts, and_(EVENTS.c.ts == c_ts, EVENTS.c.id > c_id)))
    order = (EVENTS.c.ts.desc(), EVENTS.c.id.desc()) if descending else (EVENTS.c.ts.asc(), EVENTS.c.id.asc())
    return select(EVENTS).where(*where).order_by(*order).limit(limit + 1)


def _enum_str(value: object) -> str | None:
    return None if value is None else str(value)


def _event_values(event_in: AuditEventIn) -> dict[str, Any]:
    _key_str(event_in.event_id, "event_id")
    return {
        "event_id": event_in.event_id,
        "event_type": str(event_in.event_type),
        "workload_key": _key_str(event_in.workload_key, "workload_key"),
        "cluster": _short(event_in.cluster),
        "job_id": _short(event_in.job_id),
        "submit_time": event_in.submit_time,
        "attempt": event_in.attempt,
        "level": str(event_in.level),
        "actor": str(event_in.actor),
        "ts": event_in.ts,
        "category": _short(event_in.category),
        "attribution": _short(event_in.attribution),
        "action": _short(event_in.action),
        "mode": _short(event_in.mode),
        "nodes_json": _dumps(list(event_in.nodes)),
        "evidence_json": _dumps(list(event_in.evidence)),
        "message": event_in.message,
        "data_json": _dumps(event_in.data),
    }


def _event_out(row: RowMapping) -> AuditEventOut:
    return AuditEventOut(
        id=row["id"],
        event_id=row["event_id"],
        event_type=EventType(row["event_type"]),
        workload_key=row["workload_key"],
        cluster=row["cluster"],
        job_id=row["job_id"],
        submit_time=row["submit_time"],
        attempt=row["attempt"],
        level=Level(row["level"]),
        actor=Actor(row["actor"]),
        ts=row["ts"],
        category=row["category"],
        attribution=row["attribution"],
        action=row["action"],
        mode=row["mode"],
        nodes=_tuple(row["nodes_json"]),
        evidence=_tuple(row["evidence_json"]),
        message=row["message"],
        data=json.loads(row["data_json"]) if row["data_json"] else {},
    )


def _advice_out(row: RowMapping) -> AdviceRecord:
    return AdviceRecord(
        advice_id=row["advice_id"],
        workload_key=row["workload_key"],
        cluster=row["cluster"],
        job_id=row["job_id"],
        submit_time=row["submit_time"],
        attempt=row["attempt"],
        generation=row["generation"],
        action=row["action"],
        reason=row["reason"],
        category=row["category"],
        attribution=row["attribution"],
        mode=row["mode"],
        execute=bool(row["execute"]),
        actor=row["actor"],
        desired_state=row["desired_state"],
        exclude_nodes=_tuple(row["exclude_nodes_json"]),
        drain_nodes=_tuple(row["drain_nodes_json"]),
        verdict=Verdict.model_validate_json(row["verdict_json"]),
        ts=row["ts"],
        observed_generation=row["observed_generation"],
        disposition=Disposition(row["disposition"]),
        disposition_reason=row["disposition_reason"],
        disposition_at=row["disposition_at"],
    )


def _workload_out(row: RowMapping) -> WorkloadStatus:
    return WorkloadStatus(
        workload_key=row["workload_key"],
        cluster=row["cluster"],
        job_id=row["job_id"],
        submit_time=row["submit_time"],
        workflow_id=row["workflow_id"],
        name=row["name"],
        environment=row["environment"],
        mode=Mode(row["mode"]),
        state=WorkloadState(row["state"]),
        attempts=row["attempts"],
        excluded_nodes=_tuple(row["excluded_nodes_json"]),
        last_category=row["last_category"],
        last_attribution=row["last_attribution"],
        current_advice_id=row["current_advice_id"],
        paused=bool(row["paused"]),
        last_iteration=row["last_iteration"],
        updated_at=row["updated_at"],
        first_seen_at=row["first_seen_at"],
        lost_s=row["lost_s"],
        goodput=row["goodput"],
    )


def iter_all_events(store: AuditStore, **filters: Any) -> Iterable[AuditEventOut]:
    """Walk every page of a query (CLI export, tests)."""
    cursor: str | None = None
    while True:
        page = store.list_events(cursor=cursor, limit=MAX_PAGE, **filters)
        yield from page.items
        if page.next_cursor is None:
            return
        cursor = page.next_cursor


__all__: Sequence[str] = (
    "AdviceNotFound",
    "AuditStore",
    "InvalidCursor",
    "iter_all_events",
)


class AuditStoreUnavailable(RuntimeError):
    """The audit store a command needs is missing or unreachable (the message says which and how)."""


def _in_memory(database: str) -> bool:
    return database in ("", ":memory:") or database.startswith("file::memory:")


def _engine_for(url: str, *, create_dirs: bool) -> Engine:
    parsed = make_url(url)
    kwargs: dict[str, Any] = {}
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database or ""
        if _in_memory(database):
            kwargs["poolclass"] = StaticPool
        elif create_dirs:
            Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        # The API serves from a threadpool; the busy timeout lets two worker processes take turns.
        kwargs["connect_args"] = {"check_same_thread": False, "timeout": 30.0}
    elif parsed.get_backend_name() in _MYSQL_NAMES:
        kwargs["pool_pre_ping"] = True
        kwargs["pool_recycle"] = 1800
        kwargs["connect_args"] = {"charset": "utf8mb4", "connect_timeout": 10}
    engine = create_engine(url, **kwargs)
    if engine.dialect.name == "sqlite":
        event.listen(engine, "connect", _sqlite_pragmas)
    return engine

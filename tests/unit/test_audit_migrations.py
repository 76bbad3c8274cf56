"""Audit-store schema migrations (Alembic) on SQLite and on the local MariaDB (127.0.0.1:3306, root).

The "today's schema" fixtures are the DDL that the `create_all` code of release 0.1.0 produced (captured
from SQLite's sqlite_master and MariaDB's SHOW CREATE TABLE): a database created by it must upgrade in
place, keeping its rows. MariaDB must be running: these tests fail, not skip, without it.
"""

from __future__ import annotations

import multiprocessing
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path

import pymysql
import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, insert, inspect

from trainguard.audit import migrate
from trainguard.audit.store import AuditStore
from trainguard.audit.tables import ALL_TABLES, EVENTS
from trainguard.models import AuditEventIn, EventType

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "audit"
MARIADB = {"host": "127.0.0.1", "port": 3306, "user": "root"}


def _root(*statements: str, database: str | None = None) -> None:
    conn = pymysql.connect(**MARIADB, database=database, autocommit=True)  # type: ignore[arg-type]
    try:
        with conn.cursor() as cur:
            for statement in statements:
                cur.execute(statement)
    finally:
        conn.close()


@pytest.fixture
def mariadb_url() -> Iterator[str]:
    name = f"tg_mig_{uuid.uuid4().hex[:10]}"
    _root(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
    try:
        yield f"mysql+pymysql://root@127.0.0.1:3306/{name}"
    finally:
        _root(f"DROP DATABASE IF EXISTS `{name}`")


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'audit.db'}"


def _create_old_schema(url: str) -> None:
    """What release 0.1.0's create_all left in the database."""
    if url.startswith("sqlite"):
        con = sqlite3.connect(url.removeprefix("sqlite:///"))
        con.executescript((FIXTURES / "create_all_0.1.0.sqlite.sql").read_text())
        con.close()
    else:
        ddl = (FIXTURES / "create_all_0.1.0.mariadb.sql").read_text()
        statements = [s.strip() for s in ddl.split(";\n") if s.strip()]
        _root(*statements, database=url.rsplit("/", 1)[1])


def _event(n: int) -> AuditEventIn:
    return AuditEventIn(
        event_id=f"lab/1/0/e{n}", event_type=EventType.DETECTION, workload_key="lab/1/0", cluster="lab", ts=n
    )


def _schema_diff(store: AuditStore) -> list[object]:
    with store.engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"compare_type": False})
        return list(compare_metadata(ctx, ALL_TABLES[0].metadata))


@pytest.fixture(params=["sqlite", "mariadb"])
def url(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue(f"{request.param}_url"))


def test_an_empty_database_is_built_to_head_and_matches_the_tables(url: str) -> None:
    store = AuditStore.from_url(url)
    try:
        assert migrate.current_revision(store.engine) == migrate.head_revision()
        assert _schema_diff(store) == []
        assert store.record(_event(1))
    finally:
        store.close()


def test_a_create_all_database_of_today_upgrades_in_place_keeping_its_rows(url: str) -> None:
    _create_old_schema(url)
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(
            insert(EVENTS),
            [
                {
                    "event_id": f"old-{i}",
                    "event_type": "detection",
                    "workload_key": "lab/1/0",
                    "cluster": "lab",
                    "job_id": "1",
                    "submit_time": 0,
                    "attempt": 0,
                    "level": "info",
                    "actor": "system",
                    "ts": float(i),
                    "category": "",
                    "attribution": "",
                    "action": "",
                    "mode": "observe",
                    "nodes_json": "[]",
                    "evidence_json": "[]",
                    "message": "kept",
                    "data_json": "{}",
                }
                for i in range(5)
            ],
        )
    assert migrate.current_revision(engine) is None
    report = migrate.upgrade(engine)
    assert report.stamped and report.before is None and report.after == migrate.head_revision()
    engine.dispose()
    store = AuditStore.from_url(url)  # opening again is a no-op at head
    try:
        assert [e.message for e in store.list_events(cluster="lab").items] == ["kept"] * 5
        indexes = {i["name"] for i in inspect(store.engine).get_indexes("tg_audit_events")}
        assert {"ix_tg_audit_events_cluster_ts", "ix_tg_audit_events_type_ts"} <= indexes
        assert "ix_tg_audit_events_event_type" not in indexes  # made redundant by type_ts
        assert _schema_diff(store) == []
        assert store.record(_event(99))
    finally:
        store.close()


def _open(url: str) -> str:
    store = AuditStore.from_url(url)
    try:
        return str(migrate.current_revision(store.engine))
    finally:
        store.close()


def test_units_starting_together_on_an_empty_database_all_start(url: str) -> None:
    """Six processes open the same empty store at once: one migrates, the others wait for it."""
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(6) as pool:
        revisions = pool.map(_open, [url] * 6)
    assert revisions == [migrate.head_revision()] * 6


def test_downgrade_to_baseline_and_back(sqlite_url: str) -> None:
    store = AuditStore.from_url(sqlite_url)
    with store.engine.connect() as conn:
        command.downgrade(migrate._config(conn), migrate.BASELINE)
        conn.commit()
    assert migrate.current_revision(store.engine) == migrate.BASELINE
    assert migrate.upgrade(store.engine).after == migrate.head_revision()
    assert _schema_diff(store) == []
    store.close()

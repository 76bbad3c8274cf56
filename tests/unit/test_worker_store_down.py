"""A worker starts while its audit database is down (the jobs it holds must still be released: its cluster
steps never wait for the store), and creates the schema once the store answers."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from sqlalchemy import inspect

from trainguard.audit.store import AuditStore
from workers import worker


async def test_the_schema_is_created_once_the_store_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = AuditStore.connect(f"sqlite:///{tmp_path / 'audit.db'}")
    real = store.create_tables
    calls = 0

    def flaky() -> object:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise OSError("connection refused")
        return real()

    monkeypatch.setattr(store, "create_tables", flaky)
    await asyncio.wait_for(worker.ensure_schema(store, retry_s=0.01), timeout=10)
    assert calls == 3
    assert "tg_audit_events" in set(inspect(store.engine).get_table_names())
    store.close()


def test_connect_does_not_reach_the_server_but_a_bad_url_fails_at_once() -> None:
    store = AuditStore.connect("mysql+pymysql://trainguard@127.0.0.1:1/audit")  # nothing listens on port 1
    store.close()
    with pytest.raises(Exception, match=r"(?i)could not parse|invalid|argument"):
        AuditStore.connect("not a url")

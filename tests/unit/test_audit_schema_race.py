"""Several TrainGuard units starting at once against an empty MariaDB must all come up: the tables are
created once, by whichever process gets there first, and the others find them (a real race between
real processes on the real server at 127.0.0.1:3306; the test fails when MariaDB is not running)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from sqlalchemy import create_engine, inspect

from tests.fakes.mysql import temporary_mysql_database
from trainguard.audit.tables import ALL_TABLES

ROOT = Path(__file__).resolve().parents[2]
PROCESSES = 8
# Each process imports everything, says "ready" and waits for "go" on stdin: all of them then open the
# store (creating the tables) within a millisecond or so of each other, and write one event.
CHILD = """
import sys
from trainguard.audit import AuditStore
from trainguard.models import AuditEventIn, EventType
url, n = sys.argv[1], sys.argv[2]
print("ready", flush=True)
sys.stdin.readline()
store = AuditStore.from_url(url)
store.record(AuditEventIn(event_id=f"boot-{n}", event_type=EventType.WORKLOAD_DISCOVERED, cluster="race"))
print("ok", n)
"""


def test_units_starting_together_on_an_empty_database_all_come_up() -> None:
    # Without the schema lock this failed in 3 of 3 runs (`Table 'tg_operator_decisions' already exists`).
    with temporary_mysql_database() as url:
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", CHILD, url, str(n)],
                cwd=ROOT,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for n in range(PROCESSES)
        ]
        for p in procs:
            assert p.stdout is not None and p.stdout.readline().strip() == "ready", p.communicate()[1][-800:]
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        results = [(p.wait(timeout=120), *p.communicate()) for p in procs]
        failures = [err[-800:] for rc, _, err in results if rc != 0]
        assert failures == [], failures[0]
        engine = create_engine(url)
        try:
            assert {t.name for t in ALL_TABLES} <= set(inspect(engine).get_table_names())
            with engine.connect() as conn:
                rows = conn.exec_driver_sql("SELECT COUNT(*) FROM tg_audit_events WHERE cluster='race'")
                assert rows.scalar() == PROCESSES
        finally:
            engine.dispose()

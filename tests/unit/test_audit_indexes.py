"""Each API query of the audit store uses its index on MariaDB (EXPLAIN), on a 20,000-event table.

The same code (bench/audit_indexes.py) measures 1,000,000 events; see bench/README.md for the figures.
MariaDB at 127.0.0.1:3306 (root) must be running: this test fails, not skips, without it.
"""

from __future__ import annotations

from bench.audit_indexes import run


def test_every_api_query_uses_its_index_without_a_sort() -> None:
    results = run(20_000, "mysql+pymysql://root@127.0.0.1:3306")
    assert len(results) >= 7
    for query, plan, seconds in results:
        assert plan["key"] == query.index, (query.name, plan)
        assert "filesort" not in (plan.get("Extra") or ""), (query.name, plan)
        assert seconds < 1.0, (query.name, seconds)


def test_without_the_0002_indexes_the_same_queries_scan_or_sort() -> None:
    """What the check above guards against, measured on the 0001 (0.1.0) schema: a small cluster's page
    walks the whole ts index, a rare event type is sorted after the lookup."""
    plans = {q.name: p for q, p, _ in run(20_000, "mysql+pymysql://root@127.0.0.1:3306", "0001_baseline")}
    small = plans["events?cluster=small (1%)"]
    assert small["key"] == "ix_tg_audit_events_ts" and small["type"] == "index", small
    assert "filesort" in (plans["events?jobId=J"].get("Extra") or ""), plans["events?jobId=J"]

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


def test_the_baseline_schema_had_no_index_for_the_cluster_and_type_filters() -> None:
    """The same check against the pre-0002 schema fails for these filters (so the test above can fail)."""
    results = {
        q.name: plan for q, plan, _ in run(20_000, "mysql+pymysql://root@127.0.0.1:3306", "0001_baseline")
    }
    assert results["events?cluster=small (1%)"]["key"] != "ix_tg_audit_events_cluster_ts"
    assert results["events?type=watchdog_fired (rare)"]["key"] != "ix_tg_audit_events_type_ts"

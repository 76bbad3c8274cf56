"""Indexes for the API's queries (checked with EXPLAIN on MariaDB at 1M events: bench/audit_indexes.py).

Each list query filters on one column and orders by (ts, id) (keyset pagination), so each filter gets a
(column, ts, id) index that serves the filter, the order and the LIMIT without a sort; single-column
indexes that became their prefix are dropped (one less index to maintain per insert).

Revision ID: 0002_api_indexes
Revises: 0001_baseline
Create Date: 2026-11-30
"""

from __future__ import annotations

from alembic import op

revision = "0002_api_indexes"
down_revision = "0001_baseline"
branch_labels = None
depends_on = None

NEW = (
    ("ix_tg_audit_events_cluster_ts", "tg_audit_events", ["cluster", "ts", "id"]),
    ("ix_tg_audit_events_type_ts", "tg_audit_events", ["event_type", "ts", "id"]),
    ("ix_tg_audit_events_job_ts", "tg_audit_events", ["job_id", "ts", "id"]),
    ("ix_tg_advice_cluster_ts", "tg_advice", ["cluster", "ts", "id"]),
    ("ix_tg_advice_disposition_ts", "tg_advice", ["disposition", "ts", "id"]),
    ("ix_tg_workloads_cluster_updated", "tg_workloads", ["cluster", "updated_at", "id"]),
)
# (name, table, columns) of the indexes the new ones make redundant (their leading column)
REDUNDANT = (
    ("ix_tg_audit_events_event_type", "tg_audit_events", ["event_type"]),
    ("ix_tg_advice_cluster", "tg_advice", ["cluster"]),
    ("ix_tg_advice_disposition", "tg_advice", ["disposition"]),
)


def upgrade() -> None:
    for name, table, columns in NEW:
        op.create_index(name, table, columns, unique=False)
    for name, table, _ in REDUNDANT:
        op.drop_index(name, table_name=table)


def downgrade() -> None:
    for name, table, columns in REDUNDANT:
        op.create_index(name, table, columns, unique=False)
    for name, table, _ in NEW:
        op.drop_index(name, table_name=table)

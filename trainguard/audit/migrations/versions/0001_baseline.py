"""Baseline: the schema TrainGuard created with `create_all` before migrations existed.

A database created by that code is stamped at this revision (trainguard/audit/migrate.py), so it is never
re-created; an empty database gets it from here.

Revision ID: 0001_baseline
Revises:
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001_baseline"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tg_advice",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("advice_id", sa.String(length=255), nullable=False),
        sa.Column("workload_key", sa.String(length=255), nullable=False),
        sa.Column("cluster", sa.String(length=255), nullable=False),
        sa.Column("job_id", sa.String(length=255), nullable=False),
        sa.Column("submit_time", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("action", sa.String(length=255), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("category", sa.String(length=255), nullable=False),
        sa.Column("attribution", sa.String(length=255), nullable=False),
        sa.Column("mode", sa.String(length=255), nullable=False),
        sa.Column("execute", sa.Boolean(), nullable=False),
        sa.Column("actor", sa.String(length=255), nullable=False),
        sa.Column("desired_state", sa.String(length=255), nullable=False),
        sa.Column("exclude_nodes_json", sa.Text(), nullable=False),
        sa.Column("drain_nodes_json", sa.Text(), nullable=False),
        sa.Column("verdict_json", sa.Text(), nullable=False),
        sa.Column("ts", sa.Double(), nullable=False),
        sa.Column("observed_generation", sa.Integer(), nullable=True),
        sa.Column("disposition", sa.String(length=255), nullable=False),
        sa.Column("disposition_reason", sa.Text(), nullable=False),
        sa.Column("disposition_at", sa.Double(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("advice_id", name="uq_tg_advice_advice_id"),
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
    )
    op.create_index(op.f("ix_tg_advice_cluster"), "tg_advice", ["cluster"], unique=False)
    op.create_index(op.f("ix_tg_advice_disposition"), "tg_advice", ["disposition"], unique=False)
    op.create_index(op.f("ix_tg_advice_ts"), "tg_advice", ["ts"], unique=False)
    op.create_index("ix_tg_advice_workload_ts", "tg_advice", ["workload_key", "ts"], unique=False)
    op.create_table(
        "tg_audit_events",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("event_id", sa.String(length=255), nullable=False),
        sa.Column("event_type", sa.String(length=255), nullable=False),
        sa.Column("workload_key", sa.String(length=255), nullable=False),
        sa.Column("cluster", sa.String(length=255), nullable=False),
        sa.Column("job_id", sa.String(length=255), nullable=False),
        sa.Column("submit_time", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("level", sa.String(length=255), nullable=False),
        sa.Column("actor", sa.String(length=255), nullable=False),
        sa.Column("ts", sa.Double(), nullable=False),
        sa.Column("category", sa.String(length=255), nullable=False),
        sa.Column("attribution", sa.String(length=255), nullable=False),
        sa.Column("action", sa.String(length=255), nullable=False),
        sa.Column("mode", sa.String(length=255), nullable=False),
        sa.Column("nodes_json", sa.Text(), nullable=False),
        sa.Column("evidence_json", sa.Text(), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("data_json", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("event_id", name="uq_tg_audit_events_event_id"),
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
    )
    op.create_index(op.f("ix_tg_audit_events_event_type"), "tg_audit_events", ["event_type"], unique=False)
    op.create_index("ix_tg_audit_events_job_attempt", "tg_audit_events", ["job_id", "attempt"], unique=False)
    op.create_index(op.f("ix_tg_audit_events_level"), "tg_audit_events", ["level"], unique=False)
    op.create_index("ix_tg_audit_events_ts", "tg_audit_events", ["ts", "id"], unique=False)
    op.create_index(
        "ix_tg_audit_events_workload_ts", "tg_audit_events", ["workload_key", "ts", "id"], unique=False
    )
    op.create_table(
        "tg_operator_decisions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("advice_id", sa.String(length=255), nullable=False),
        sa.Column("workload_key", sa.String(length=255), nullable=False),
        sa.Column("cluster", sa.String(length=255), nullable=False),
        sa.Column("category", sa.String(length=255), nullable=False),
        sa.Column("agree", sa.Boolean(), nullable=False),
        sa.Column("did_instead", sa.Text(), nullable=False),
        sa.Column("who", sa.String(length=255), nullable=False),
        sa.Column("ts", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("advice_id", name="uq_tg_operator_decisions_advice_id"),
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
    )
    op.create_index(op.f("ix_tg_operator_decisions_ts"), "tg_operator_decisions", ["ts"], unique=False)
    op.create_table(
        "tg_workloads",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("workload_key", sa.String(length=255), nullable=False),
        sa.Column("cluster", sa.String(length=255), nullable=False),
        sa.Column("job_id", sa.String(length=255), nullable=False),
        sa.Column("submit_time", sa.Integer(), nullable=False),
        sa.Column("workflow_id", sa.String(length=255), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("environment", sa.String(length=255), nullable=False),
        sa.Column("mode", sa.String(length=255), nullable=False),
        sa.Column("state", sa.String(length=255), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("excluded_nodes_json", sa.Text(), nullable=False),
        sa.Column("last_category", sa.String(length=255), nullable=False),
        sa.Column("last_attribution", sa.String(length=255), nullable=False),
        sa.Column("current_advice_id", sa.String(length=255), nullable=False),
        sa.Column("paused", sa.Boolean(), nullable=False),
        sa.Column("last_iteration", sa.Integer(), nullable=True),
        sa.Column("updated_at", sa.Double(), nullable=False),
        sa.Column("first_seen_at", sa.Double(), nullable=False),
        sa.Column("lost_s", sa.Double(), nullable=False),
        sa.Column("goodput", sa.Double(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("workload_key", name="uq_tg_workloads_workload_key"),
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
    )
    op.create_index("ix_tg_workloads_cluster_state", "tg_workloads", ["cluster", "state"], unique=False)
    op.create_index(op.f("ix_tg_workloads_job_id"), "tg_workloads", ["job_id"], unique=False)
    op.create_index(op.f("ix_tg_workloads_last_category"), "tg_workloads", ["last_category"], unique=False)
    op.create_index(op.f("ix_tg_workloads_mode"), "tg_workloads", ["mode"], unique=False)
    op.create_index(op.f("ix_tg_workloads_updated_at"), "tg_workloads", ["updated_at"], unique=False)


def downgrade() -> None:
    for table in ("tg_workloads", "tg_operator_decisions", "tg_audit_events", "tg_advice"):
        op.drop_table(table)

"""Audit tables: the only place that knows the relational layout.

Changing a table or index here needs an Alembic revision under trainguard/audit/migrations/versions/;
tests/unit/test_audit_migrations.py fails when the migrated schema and these tables differ.

Portable between SQLite and MySQL/MariaDB: timestamps are DOUBLE epoch seconds (MySQL's FLOAT is
single precision and would round a timestamp to minutes), tuples and dicts are JSON text, and every
indexed string column has an explicit length because MySQL cannot index unbounded text.
"""

from __future__ import annotations

from sqlalchemy import Column, Double, Index, String, Table, Text, UniqueConstraint
from sqlmodel import Field, SQLModel

_MYSQL = {"mysql_charset": "utf8mb4", "mysql_collate": "utf8mb4_bin"}
"""Binary collation: ids compare byte for byte, so `Job-1` and `job-1` stay two keys."""

KEY_LENGTH = 255


def _key(*, index: bool = False, unique: bool = False, default: str = "") -> str:
    return Field(default=default, index=index, unique=unique, sa_type=String(KEY_LENGTH), nullable=False)


def _text() -> str:
    return Field(default="", sa_type=Text, nullable=False)


def _ts(*, index: bool = False) -> float:
    return Field(default=0.0, sa_type=Double, nullable=False, index=index)


class AuditEventRow(SQLModel, table=True):
    __tablename__ = "tg_audit_events"
    __table_args__ = (
        UniqueConstraint("event_id", name="uq_tg_audit_events_event_id"),
        Index("ix_tg_audit_events_workload_ts", "workload_key", "ts", "id"),
        Index("ix_tg_audit_events_job_attempt", "job_id", "attempt"),
        Index("ix_tg_audit_events_ts", "ts", "id"),
        # the API's filters, each ordered by (ts, id) for keyset pages (migration 0002_api_indexes)
        Index("ix_tg_audit_events_cluster_ts", "cluster", "ts", "id"),
        Index("ix_tg_audit_events_type_ts", "event_type", "ts", "id"),
        Index("ix_tg_audit_events_job_ts", "job_id", "ts", "id"),
        _MYSQL,
    )

    id: int | None = Field(default=None, primary_key=True)
    event_id: str = _key()
    event_type: str = _key()
    workload_key: str = _key()
    cluster: str = _key()
    job_id: str = _key()
    submit_time: int = 0
    attempt: int = 0
    level: str = _key(index=True)
    actor: str = _key()
    ts: float = _ts()
    category: str = _key()
    attribution: str = _key()
    action: str = _key()
    mode: str = _key()
    nodes_json: str = _text()
    evidence_json: str = _text()
    message: str = _text()
    data_json: str = _text()


class AdviceRow(SQLModel, table=True):
    __tablename__ = "tg_advice"
    __table_args__ = (
        UniqueConstraint("advice_id", name="uq_tg_advice_advice_id"),
        Index("ix_tg_advice_workload_ts", "workload_key", "ts"),
        Index("ix_tg_advice_cluster_ts", "cluster", "ts", "id"),
        Index("ix_tg_advice_disposition_ts", "disposition", "ts", "id"),
        _MYSQL,
    )

    id: int | None = Field(default=None, primary_key=True)
    advice_id: str = _key()
    workload_key: str = _key()
    cluster: str = _key()
    job_id: str = _key()
    submit_time: int = 0
    attempt: int = 0
    generation: int = 0
    action: str = _key()
    reason: str = _text()
    category: str = _key()
    attribution: str = _key()
    mode: str = _key()
    execute: bool = False
    actor: str = _key()
    desired_state: str = _key()
    exclude_nodes_json: str = _text()
    drain_nodes_json: str = _text()
    verdict_json: str = _text()
    ts: float = _ts(index=True)
    observed_generation: int | None = Field(default=None, nullable=True)
    disposition: str = _key(default="pending")
    disposition_reason: str = _text()
    disposition_at: float | None = Field(default=None, sa_column=Column(Double, nullable=True))


class WorkloadRow(SQLModel, table=True):
    __tablename__ = "tg_workloads"
    __table_args__ = (
        UniqueConstraint("workload_key", name="uq_tg_workloads_workload_key"),
        Index("ix_tg_workloads_cluster_state", "cluster", "state"),
        Index("ix_tg_workloads_cluster_updated", "cluster", "updated_at", "id"),
        _MYSQL,
    )

    id: int | None = Field(default=None, primary_key=True)
    workload_key: str = _key()
    cluster: str = _key()
    job_id: str = _key(index=True)
    submit_time: int = 0
    workflow_id: str = _key()
    name: str = _text()
    environment: str = _key()
    mode: str = _key(index=True)
    state: str = _key()
    attempts: int = 0
    excluded_nodes_json: str = _text()
    last_category: str = _key(index=True)
    last_attribution: str = _key()
    current_advice_id: str = _key()
    paused: bool = False
    last_iteration: int | None = Field(default=None, nullable=True)
    updated_at: float = _ts(index=True)
    first_seen_at: float = _ts()
    lost_s: float = _ts()
    goodput: float | None = Field(default=None, sa_column=Column(Double, nullable=True))


class OperatorDecisionRow(SQLModel, table=True):
    """The latest decision of operators on one advice (the audit keeps every decision)."""

    __tablename__ = "tg_operator_decisions"
    __table_args__ = (
        UniqueConstraint("advice_id", name="uq_tg_operator_decisions_advice_id"),
        _MYSQL,
    )

    id: int | None = Field(default=None, primary_key=True)
    advice_id: str = _key()
    workload_key: str = _key()
    cluster: str = _key()
    category: str = _key()
    agree: bool = False
    did_instead: str = _text()
    who: str = _key()
    ts: float = _ts(index=True)


EVENTS: Table = SQLModel.metadata.tables[AuditEventRow.__tablename__]
ADVICE: Table = SQLModel.metadata.tables[AdviceRow.__tablename__]
WORKLOADS: Table = SQLModel.metadata.tables[WorkloadRow.__tablename__]
DECISIONS: Table = SQLModel.metadata.tables[OperatorDecisionRow.__tablename__]
ALL_TABLES: tuple[Table, ...] = (EVENTS, ADVICE, WORKLOADS, DECISIONS)

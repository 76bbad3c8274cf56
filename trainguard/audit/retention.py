"""Audit retention: delete what is older than `audit.retention_days` (or `trainguard audit prune
--older-than 90d`), in small batches so a years-old table never holds one long lock, and audit the prune.

Workloads are pruned only in a final state (completed, stopped, gone, failed): a healthy job watched for
months may not have changed its status row in that time.
"""

from __future__ import annotations

import re
import time
import uuid
from dataclasses import dataclass, field

from sqlalchemy import Table, delete, select
from sqlalchemy.sql.elements import ColumnElement

from trainguard.audit.store import AuditStore
from trainguard.audit.tables import ADVICE, DECISIONS, EVENTS, WORKLOADS
from trainguard.models import Actor, AuditEventIn, EventType, Level, WorkloadState

BATCH = 5000
FINAL_STATES = (WorkloadState.COMPLETED, WorkloadState.STOPPED, WorkloadState.GONE, WorkloadState.FAILED)
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "": 86400}


def parse_age(text: str) -> float:
    """`90d`, `12h`, `2w`, `30m`, `45s`; a bare number is days. Returns seconds."""
    m = _DURATION.match(text)
    if not m or float(m.group(1)) <= 0:
        raise ValueError(f"age must be a positive number with unit s, m, h, d or w (e.g. 90d), not {text!r}")
    return float(m.group(1)) * _UNIT_S[m.group(2)]


@dataclass
class PruneResult:
    cutoff: float
    deleted: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.deleted.values())


def prune(
    store: AuditStore, *, older_than_s: float, source: str, now: float | None = None, batch: int = BATCH
) -> PruneResult:
    """Delete audit rows older than `older_than_s`; record an `audit_pruned` event when any went."""
    now = time.time() if now is None else now
    cutoff = now - older_than_s
    result = PruneResult(cutoff=cutoff)
    targets: tuple[tuple[str, Table, ColumnElement[bool]], ...] = (
        ("events", EVENTS, EVENTS.c.ts < cutoff),
        ("advice", ADVICE, ADVICE.c.ts < cutoff),
        ("operator_decisions", DECISIONS, DECISIONS.c.ts < cutoff),
        (
            "workloads",
            WORKLOADS,
            (WORKLOADS.c.updated_at < cutoff) & WORKLOADS.c.state.in_([str(s) for s in FINAL_STATES]),
        ),
    )
    for name, table, where in targets:
        result.deleted[name] = _delete_batched(store, table, where, batch)
    if result.total:
        days = older_than_s / 86400
        store.record(
            AuditEventIn(
                event_id=f"audit-pruned/{uuid.uuid4().hex}",
                event_type=EventType.AUDIT_PRUNED,
                level=Level.INFO,
                actor=Actor.SYSTEM,
                ts=now,
                message=f"audit rows older than {days:g} days deleted by {source}: "
                + ", ".join(f"{k}={v}" for k, v in result.deleted.items()),
                data={"source": source, "cutoff": cutoff, "older_than_s": older_than_s, **result.deleted},
            )
        )
    return result


def _delete_batched(store: AuditStore, table: Table, where: ColumnElement[bool], batch: int) -> int:
    # MariaDB refuses LIMIT inside an IN subquery: read a batch of ids, delete them, one short transaction.
    total = 0
    while True:
        with store.engine.begin() as conn:
            oldest = select(table.c.id).where(where).limit(batch)  # no ORDER BY: the ts index serves it
            ids = list(conn.execute(oldest).scalars())
            if not ids:
                return total
            conn.execute(delete(table).where(table.c.id.in_(ids)))
        total += len(ids)

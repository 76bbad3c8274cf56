"""Durable audit trail: events, advice with reconciliation status, workload status, operator decisions."""

from trainguard.audit.schemas import (
    AdviceRecord,
    AgreementRow,
    AuditEventOut,
    DesiredState,
    Disposition,
    EventPage,
    OperatorDecision,
)
from trainguard.audit.store import (
    AdviceNotFound,
    AuditStore,
    AuditStoreUnavailable,
    InvalidCursor,
    iter_all_events,
)

__all__ = [
    "AdviceNotFound",
    "AdviceRecord",
    "AgreementRow",
    "AuditEventOut",
    "AuditStore",
    "AuditStoreUnavailable",
    "DesiredState",
    "Disposition",
    "EventPage",
    "InvalidCursor",
    "OperatorDecision",
    "iter_all_events",
]

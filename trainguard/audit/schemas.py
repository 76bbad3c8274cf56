"""What the audit store returns: read models, separate from the tables and from the Temporal models."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from trainguard.models import ActionKind, AuditEventIn, Verdict

MAX_PAGE = 1000


class Disposition(StrEnum):
    """How far an advice has been applied, as reported by whoever reconciles it."""

    PENDING = "pending"
    CONVERGED = "converged"
    ABANDONED = "abandoned"


class DesiredState(StrEnum):
    """What the scheduler should look like once an advice is applied."""

    RUNNING = "running"  # nothing to change
    REQUEUED = "requeued"  # requeued (with exclusions) and released
    CANCELLED = "cancelled"
    DRAINED = "drained"
    HELD = "held"  # waiting for an operator


DESIRED_STATE: dict[ActionKind, DesiredState] = {
    ActionKind.NONE: DesiredState.RUNNING,
    ActionKind.REQUEUE: DesiredState.REQUEUED,
    ActionKind.CANCEL: DesiredState.CANCELLED,
    ActionKind.DRAIN: DesiredState.DRAINED,
    ActionKind.WAIT: DesiredState.HELD,
}


class AuditEventOut(AuditEventIn):
    id: int


class EventPage(BaseModel):
    items: list[AuditEventOut]
    next_cursor: str | None = None


class AdviceRecord(BaseModel):
    model_config = ConfigDict(frozen=True)

    advice_id: str
    workload_key: str
    cluster: str
    job_id: str
    submit_time: int
    attempt: int
    generation: int
    action: str
    reason: str
    category: str
    attribution: str
    mode: str
    execute: bool
    actor: str
    desired_state: str
    exclude_nodes: tuple[str, ...] = ()
    drain_nodes: tuple[str, ...] = ()
    verdict: Verdict
    ts: float
    observed_generation: int | None = None
    disposition: Disposition = Disposition.PENDING
    disposition_reason: str = ""
    disposition_at: float | None = None

    @property
    def active(self) -> bool:
        return self.disposition == Disposition.PENDING


class OperatorDecision(BaseModel):
    model_config = ConfigDict(frozen=True)

    advice_id: str
    agree: bool
    did_instead: str = ""
    who: str = ""
    ts: float = 0.0
    workload_key: str = ""
    cluster: str = ""
    category: str = ""


class AgreementRow(BaseModel):
    model_config = ConfigDict(frozen=True)

    scope: str = Field(description="'category' or 'cluster'")
    key: str
    decisions: int
    agreed: int
    rate: float = Field(description="agreed / decisions, 0..1")

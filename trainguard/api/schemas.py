"""Request and response bodies of the advisor API (domain models stay in trainguard.models)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr

from trainguard.audit.schemas import AdviceRecord, AgreementRow, Disposition, OperatorDecision
from trainguard.models import Mode, WorkloadStatus

MAX_TEXT = 2000
MAX_INT = 2**31 - 1
MAX_EPOCH = 1e11  # year 5138: anything larger is a client bug, not a time
MAX_OFFSET = 1_000_000
CLUSTER_PATTERN = r"^[A-Za-z0-9._-]{1,100}$"
JOB_ID_PATTERN = r"^[A-Za-z0-9._+-]{1,64}$"


class Body(BaseModel):
    # Clients may send camelCase (the controller convention) or snake_case.
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


class ErrorBody(BaseModel):
    error: str
    detail: Any = None


class WorkloadPage(BaseModel):
    items: list[WorkloadStatus]
    limit: int
    offset: int
    next_offset: int | None = None


class AttemptSummary(BaseModel):
    attempt: int
    started_at: float | None = None
    last_event_at: float | None = None
    detections: int = 0
    categories: list[str] = Field(default_factory=list)
    advice_ids: list[str] = Field(default_factory=list)
    actions: list[str] = Field(default_factory=list)
    allocation_restarted: bool = False
    training_resumed: bool = False
    completed: bool = False
    watchdog_fired: bool = False


class WorkloadDetail(BaseModel):
    status: WorkloadStatus
    attempts: list[AttemptSummary]
    excluded_nodes: list[str]
    current_advice: AdviceRecord | None = None
    current_decision: OperatorDecision | None = None
    recent_advice: list[AdviceRecord] = Field(default_factory=list)


# Request fields are strict: `{"paused": "yes"}` or `{"paused": 1}` is a client bug, not a true (422).
# No `who` in any body: the audit names the caller from their credential (trainguard.api.deps).
class ModeChangeBody(Body):
    mode: Mode
    reason: StrictStr = Field(default="", max_length=MAX_TEXT)


class PauseBody(Body):
    paused: StrictBool
    reason: StrictStr = Field(default="", max_length=MAX_TEXT)


class PauseResult(BaseModel):
    workload_key: str
    paused: bool


class ClusterModeResult(BaseModel):
    cluster: str
    mode: Mode


class ClusterSummary(BaseModel):
    cluster: str
    workloads: int
    by_state: dict[str, int]
    by_mode: dict[str, int]


class ReconciliationReport(Body):
    """What an external controller (or our cluster worker) reports after applying an advice."""

    observed_generation: StrictInt | None = Field(default=None, ge=0, le=MAX_INT, alias="observedGeneration")
    disposition: Disposition
    reason: StrictStr = Field(default="", max_length=MAX_TEXT)


class DecisionBody(Body):
    decision: Literal["agree", "disagree"]
    did_instead: StrictStr = Field(default="", max_length=MAX_TEXT, alias="didInstead")


class AdviceDetail(BaseModel):
    advice: AdviceRecord
    active: bool
    decision: OperatorDecision | None = None


class AgreementReport(BaseModel):
    since: float | None
    until: float | None
    rows: list[AgreementRow]


class Health(BaseModel):
    status: Literal["ok", "unavailable"]
    checks: dict[str, str] = Field(default_factory=dict)

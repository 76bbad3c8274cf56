"""Advice (with reconciliation status), operator decisions, agreement rates, and the audit event feed."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, HTTPException, Path, Query, status

from trainguard.api.deps import Caller, get_store, require_read, require_write
from trainguard.api.schemas import (
    MAX_EPOCH,
    MAX_INT,
    MAX_OFFSET,
    AdviceDetail,
    AgreementReport,
    DecisionBody,
    ErrorBody,
    ReconciliationReport,
)
from trainguard.api.workloads import READ_ERRORS, WRITE_ERRORS
from trainguard.audit import AdviceNotFound, AuditStore
from trainguard.audit.schemas import MAX_PAGE, AdviceRecord, EventPage, OperatorDecision
from trainguard.models import Actor, EventType, Level

router = APIRouter(prefix="/api/v1", tags=["advice"])

AdviceId = Annotated[str, Path(min_length=1, max_length=255, description="advice id (may contain '/')")]
Epoch = Annotated[float | None, Query(ge=0, le=MAX_EPOCH, description="epoch seconds")]


@router.get(
    "/advice", response_model=list[AdviceRecord], dependencies=[Depends(require_read)], responses=READ_ERRORS
)
def list_advice(
    store: Annotated[AuditStore, Depends(get_store)],
    only_active: Annotated[bool, Query(alias="onlyActive", description="pending advice only")] = False,
    workload: Annotated[str | None, Query(max_length=255, description="workload key")] = None,
    cluster: Annotated[str | None, Query(max_length=100)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
) -> list[AdviceRecord]:
    return store.list_advice(
        workload_key=workload, cluster=cluster, only_active=only_active, limit=limit, offset=offset
    )


def _advice_or_404(store: AuditStore, advice_id: str) -> AdviceRecord:
    found = store.get_advice(advice_id)
    if found is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no advice {advice_id}")
    return found


@router.put(
    "/advice/{advice_id:path}/status",
    response_model=AdviceRecord,
    dependencies=[Depends(require_write)],
    responses=WRITE_ERRORS,
)
def report_reconciliation(
    advice_id: AdviceId, body: ReconciliationReport, store: Annotated[AuditStore, Depends(get_store)]
) -> AdviceRecord:
    """A controller reports how far it applied an advice (observedGeneration, disposition, reason)."""
    try:
        store.set_advice_disposition(
            advice_id,
            disposition=body.disposition.value,
            observed_generation=body.observed_generation,
            reason=body.reason,
        )
    except AdviceNotFound:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no advice {advice_id}") from None
    return _advice_or_404(store, advice_id)


@router.post(
    "/advice/{advice_id:path}/decision",
    response_model=OperatorDecision,
    status_code=status.HTTP_201_CREATED,
    responses=WRITE_ERRORS,
)
def record_decision(
    advice_id: AdviceId, body: DecisionBody, store: Annotated[AuditStore, Depends(get_store)], caller: Caller
) -> OperatorDecision:
    """An operator agrees or disagrees with an advice (and says what they did instead); recorded under
    the caller's name."""
    try:
        return store.record_operator_decision(
            advice_id, agree=body.decision == "agree", did_instead=body.did_instead, who=caller.name
        )
    except AdviceNotFound:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no advice {advice_id}") from None


@router.get(
    "/advice/{advice_id:path}",
    response_model=AdviceDetail,
    dependencies=[Depends(require_read)],
    responses={**READ_ERRORS, 404: {"model": ErrorBody}},
)
def get_advice(advice_id: AdviceId, store: Annotated[AuditStore, Depends(get_store)]) -> AdviceDetail:
    found = _advice_or_404(store, advice_id)
    return AdviceDetail(advice=found, active=found.active, decision=store.get_decision(advice_id))


@router.get(
    "/agreement", response_model=AgreementReport, dependencies=[Depends(require_read)], responses=READ_ERRORS
)
def agreement(
    store: Annotated[AuditStore, Depends(get_store)], since: Epoch = None, until: Epoch = None
) -> AgreementReport:
    """Share of advice that operators agreed with, per failure category and per cluster, in [since, until)."""
    return AgreementReport(since=since, until=until, rows=store.agreement_rates(since=since, until=until))


@router.get(
    "/events",
    response_model=EventPage,
    dependencies=[Depends(require_read)],
    responses={**READ_ERRORS, 400: {"model": ErrorBody}},
)
def list_events(
    store: Annotated[AuditStore, Depends(get_store)],
    workload: Annotated[str | None, Query(max_length=255, description="workload key")] = None,
    job_id: Annotated[str | None, Query(alias="jobId", max_length=64)] = None,
    attempt: Annotated[int | None, Query(ge=0, le=MAX_INT)] = None,
    event_type: Annotated[EventType | None, Query(alias="type")] = None,
    level: Level | None = None,
    actor: Annotated[Actor | None, Query(description="producer: policy, watchdog, operator, system")] = None,
    cluster: Annotated[str | None, Query(max_length=100)] = None,
    since: Epoch = None,
    until: Epoch = None,
    order: Literal["asc", "desc"] = "asc",
    cursor: Annotated[str | None, Query(max_length=512)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
) -> EventPage:
    """Audit events ordered by time; follow `next_cursor` for the next page (stable under new writes)."""
    return store.list_events(
        workload_key=workload,
        job_id=job_id,
        attempt=attempt,
        event_type=event_type,
        level=level,
        actor=actor,
        cluster=cluster,
        since=since,
        until=until,
        descending=order == "desc",
        cursor=cursor,
        limit=limit,
    )

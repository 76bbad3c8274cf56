"""Workloads: list, detail with attempts, and the operator's controls (mode, pause) per workload/cluster."""

from __future__ import annotations

import time
import uuid
from collections import defaultdict
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Path, Query, Request, status
from starlette.concurrency import run_in_threadpool

from trainguard.api.deps import Admin, Caller, Principal, context, get_store, require_read
from trainguard.api.schemas import (
    CLUSTER_PATTERN,
    JOB_ID_PATTERN,
    MAX_OFFSET,
    AttemptSummary,
    ClusterModeResult,
    ClusterSummary,
    ErrorBody,
    ModeChangeBody,
    PauseBody,
    PauseResult,
    WorkloadDetail,
    WorkloadPage,
)
from trainguard.audit import AuditStore, iter_all_events
from trainguard.audit.schemas import MAX_PAGE, AuditEventOut
from trainguard.models import (
    Actor,
    AuditEventIn,
    EventType,
    Mode,
    ModeChange,
    PauseRequest,
    WorkloadId,
    WorkloadState,
    WorkloadStatus,
    clip,
)

router = APIRouter(prefix="/api/v1", tags=["workloads"])

ClusterName = Annotated[str, Path(pattern=CLUSTER_PATTERN, description="cluster name")]
JobId = Annotated[str, Path(pattern=JOB_ID_PATTERN, description="Slurm job id")]
SubmitTime = Annotated[int, Path(ge=0, le=2**53, description="Slurm SubmitTime, epoch seconds")]
DETAIL_EVENT_LIMIT = 5000
"""Attempt summaries read at most this many events; a workload with more is summarised from its start."""

WRITE_ERRORS: dict[int | str, dict[str, object]] = {
    401: {"model": ErrorBody},
    403: {"model": ErrorBody},
    404: {"model": ErrorBody},
    409: {"model": ErrorBody},
    503: {"model": ErrorBody},
}
READ_ERRORS: dict[int | str, dict[str, object]] = {401: {"model": ErrorBody}, 403: {"model": ErrorBody}}


@router.get(
    "/workloads", response_model=WorkloadPage, dependencies=[Depends(require_read)], responses=READ_ERRORS
)
def list_workloads(
    store: Annotated[AuditStore, Depends(get_store)],
    cluster: Annotated[str | None, Query(max_length=100)] = None,
    state: WorkloadState | None = None,
    mode: Mode | None = None,
    category: Annotated[str | None, Query(max_length=100)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
) -> WorkloadPage:
    items = store.list_workloads(
        cluster=cluster, state=state, mode=mode, category=category, limit=limit + 1, offset=offset
    )
    more = len(items) > limit
    return WorkloadPage(
        items=items[:limit], limit=limit, offset=offset, next_offset=offset + limit if more else None
    )


@router.get(
    "/clusters",
    response_model=list[ClusterSummary],
    dependencies=[Depends(require_read)],
    responses=READ_ERRORS,
)
def list_clusters(store: Annotated[AuditStore, Depends(get_store)]) -> list[ClusterSummary]:
    by_cluster: dict[str, ClusterSummary] = {}
    for cluster, mode, state, count in store.workload_counts():
        summary = by_cluster.setdefault(
            cluster, ClusterSummary(cluster=cluster, workloads=0, by_state={}, by_mode={})
        )
        summary.workloads += count
        summary.by_state[state] = summary.by_state.get(state, 0) + count
        summary.by_mode[mode] = summary.by_mode.get(mode, 0) + count
    return [by_cluster[k] for k in sorted(by_cluster)]


def _workload_or_404(store: AuditStore, key: str) -> WorkloadStatus:
    found = store.get_workload(key)
    if found is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no workload {key}")
    return found


def summarize_attempts(events: list[AuditEventOut]) -> list[AttemptSummary]:
    attempts: dict[int, AttemptSummary] = {}
    categories: dict[int, dict[str, None]] = defaultdict(dict)  # ordered set
    for e in events:
        a = attempts.setdefault(e.attempt, AttemptSummary(attempt=e.attempt, started_at=e.ts))
        a.last_event_at = e.ts
        if e.event_type == EventType.DETECTION:
            a.detections += 1
            if e.category:
                categories[e.attempt][e.category] = None
        elif e.event_type == EventType.ADVICE:
            advice_id = e.data.get("advice_id")
            if isinstance(advice_id, str):
                a.advice_ids.append(advice_id)
        elif e.event_type == EventType.ACTION and e.action:
            a.actions.append(e.action)
        elif e.event_type == EventType.ALLOCATION_RESTARTED:
            a.allocation_restarted = True
        elif e.event_type == EventType.TRAINING_RESUMED:
            a.training_resumed = True
        elif e.event_type == EventType.COMPLETED:
            a.completed = True
        elif e.event_type == EventType.WATCHDOG_FIRED:
            a.watchdog_fired = True
    for attempt, cats in categories.items():
        attempts[attempt].categories = list(cats)
    return [attempts[k] for k in sorted(attempts)]


@router.get(
    "/workloads/{cluster}/{job_id}/{submit_time}",
    response_model=WorkloadDetail,
    dependencies=[Depends(require_read)],
    responses={**READ_ERRORS, 404: {"model": ErrorBody}},
)
def get_workload(
    cluster: ClusterName,
    job_id: JobId,
    submit_time: SubmitTime,
    store: Annotated[AuditStore, Depends(get_store)],
) -> WorkloadDetail:
    key = WorkloadId(cluster=cluster, job_id=job_id, submit_time=submit_time).key
    found = _workload_or_404(store, key)
    events: list[AuditEventOut] = []
    for e in iter_all_events(store, workload_key=key):
        events.append(e)
        if len(events) >= DETAIL_EVENT_LIMIT:
            break
    current = store.get_advice(found.current_advice_id) if found.current_advice_id else None
    recent = store.list_advice(workload_key=key, limit=20)
    if current is None and recent:
        current = recent[0]
    return WorkloadDetail(
        status=found,
        attempts=summarize_attempts(events),
        excluded_nodes=list(found.excluded_nodes),
        current_advice=current,
        current_decision=store.get_decision(current.advice_id) if current else None,
        recent_advice=recent,
    )


def _mode_event(
    *, scope: str, cluster: str, change: ModeChange, workload: WorkloadStatus | None, caller: Principal
) -> AuditEventIn:
    target = workload.workload_key if workload else f"cluster {cluster}"
    return AuditEventIn(
        event_id=f"api-mode:{uuid.uuid4().hex}",
        event_type=EventType.MODE_CHANGED,
        workload_key=workload.workload_key if workload else "",
        cluster=cluster,
        job_id=workload.job_id if workload else "",
        submit_time=workload.submit_time if workload else 0,
        attempt=workload.attempts if workload else 0,
        actor=Actor.OPERATOR,
        ts=time.time(),
        mode=change.mode.value,
        message=clip(
            f"{caller.name} ({caller.role.value}) set {scope} mode of {target} to {change.mode.value} "
            f"via the API. {change.reason}"
        ),
        data={
            "who": caller.name,
            "role": caller.role.value,
            "via": caller.via,
            "scope": scope,
            "source": "api",
        },
    )


@router.put(
    "/workloads/{cluster}/{job_id}/{submit_time}/mode",
    response_model=WorkloadStatus,
    responses=WRITE_ERRORS,
)
async def set_workload_mode(
    cluster: ClusterName,
    job_id: JobId,
    submit_time: SubmitTime,
    body: ModeChangeBody,
    request: Request,
    caller: Caller,
) -> WorkloadStatus:
    """Switch one workload's mode (role operator); the audit names the caller."""
    ctx = context(request)
    key = WorkloadId(cluster=cluster, job_id=job_id, submit_time=submit_time).key
    workload = await run_in_threadpool(_workload_or_404, ctx.store, key)
    change = ModeChange(
        mode=body.mode,
        actor=Actor.OPERATOR,
        who=caller.name,
        reason=body.reason,
        role=caller.role.value,
        via=caller.via,
    )
    workflow_id = (
        workload.workflow_id
        or WorkloadId(cluster=cluster, job_id=job_id, submit_time=submit_time).workflow_id
    )
    updated = await ctx.temporal.set_workload_mode(workflow_id, change)
    # The workflow persists its status too; writing the update's answer now lets the console show it at once.
    # The audit row is the workflow's own (durable, written once by its update handler): writing another
    # here gave two `mode_changed` rows for one operator action.
    await run_in_threadpool(ctx.store.upsert_workload, updated)
    return updated


@router.put(
    "/workloads/{cluster}/{job_id}/{submit_time}/paused",
    response_model=PauseResult,
    status_code=status.HTTP_202_ACCEPTED,
    responses=WRITE_ERRORS,
)
async def set_workload_paused(
    cluster: ClusterName,
    job_id: JobId,
    submit_time: SubmitTime,
    body: PauseBody,
    request: Request,
    caller: Caller,
) -> PauseResult:
    """Pause or resume monitoring (role operator); the workflow records the change, with the caller's
    name, in the audit when it applies it."""
    ctx = context(request)
    key = WorkloadId(cluster=cluster, job_id=job_id, submit_time=submit_time).key
    workload = await run_in_threadpool(_workload_or_404, ctx.store, key)
    workflow_id = (
        workload.workflow_id
        or WorkloadId(cluster=cluster, job_id=job_id, submit_time=submit_time).workflow_id
    )
    await ctx.temporal.set_workload_paused(
        workflow_id, PauseRequest(paused=body.paused, who=caller.name, reason=body.reason)
    )
    return PauseResult(workload_key=key, paused=body.paused)


@router.put(
    "/clusters/{cluster}/mode",
    response_model=ClusterModeResult,
    responses=WRITE_ERRORS,
)
async def set_cluster_mode(
    cluster: ClusterName, body: ModeChangeBody, request: Request, caller: Admin
) -> ClusterModeResult:
    """Switch a whole cluster's mode (role admin); the audit names the caller."""
    ctx = context(request)
    change = ModeChange(
        mode=body.mode,
        actor=Actor.OPERATOR,
        who=caller.name,
        reason=body.reason,
        role=caller.role.value,
        via=caller.via,
    )
    await ctx.temporal.set_cluster_mode(cluster, change)
    await run_in_threadpool(
        ctx.store.record,
        _mode_event(scope="cluster", cluster=cluster, change=change, workload=None, caller=caller),
    )
    return ClusterModeResult(cluster=cluster, mode=body.mode)

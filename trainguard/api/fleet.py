"""Fleet, node and workload-timeline aggregates for the console's charts (role viewer)."""

from __future__ import annotations

import time
from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Depends, HTTPException, Path, Query, Request, status

from trainguard.api import charts
from trainguard.api.deps import context, get_store, require_read
from trainguard.api.schemas import CLUSTER_PATTERN, JOB_ID_PATTERN
from trainguard.audit import AuditStore, iter_all_events
from trainguard.audit.schemas import AuditEventOut
from trainguard.models import WorkloadId
from trainguard.settings import TemporalSettings

router = APIRouter(prefix="/api/v1", tags=["charts"], dependencies=[Depends(require_read)])

MAX_EVENTS = 100_000
"""Events read per aggregate; a window holding more is summarised from its start."""
TIMELINE_EVENT_LIMIT = 5000
Cluster = Annotated[str | None, Query(max_length=100, pattern=CLUSTER_PATTERN)]


def _events(store: AuditStore, since: float, cluster: str | None) -> list[AuditEventOut]:
    found: list[AuditEventOut] = []
    for e in iter_all_events(store, since=since, cluster=cluster):
        found.append(e)
        if len(found) >= MAX_EVENTS:
            break
    return found


def temporal_ui_url(cfg: TemporalSettings, workflow_id: str) -> str | None:
    """The workflow's page in the Temporal UI (temporal.ui_url); None when no UI is configured."""
    if not cfg.ui_url or not workflow_id:
        return None
    base = cfg.ui_url.rstrip("/")
    return f"{base}/namespaces/{quote(cfg.namespace, safe='')}/workflows/{quote(workflow_id, safe='')}"


@router.get("/fleet/summary", response_model=charts.FleetSummary)
def fleet_summary(
    store: Annotated[AuditStore, Depends(get_store)],
    days: Annotated[int, Query(ge=1, le=90)] = 14,
    cluster: Cluster = None,
) -> charts.FleetSummary:
    """Recoveries per day by category and outcome, latency distributions, goodput lost per workload."""
    until = time.time()
    since = until - days * 86400
    # A detection's outcome can come from events after it; they are all after `since` too.
    events = _events(store, since, cluster)
    workloads = store.list_workloads(cluster=cluster, limit=1000)
    return charts.fleet_summary(events, workloads, since, until)


@router.get("/fleet/nodes", response_model=charts.NodeReport)
def fleet_nodes(
    store: Annotated[AuditStore, Depends(get_store)],
    days: Annotated[int, Query(ge=1, le=90)] = 7,
    cluster: Cluster = None,
) -> charts.NodeReport:
    """Nodes by implicated incidents (the lemon nodes), with exclusions and drains and their evidence."""
    until = time.time()
    since = until - days * 86400
    return charts.node_report(_events(store, since, cluster), since, until, days)


@router.get("/workloads/{cluster}/{job_id}/{submit_time}/timeline", response_model=charts.WorkloadTimeline)
def workload_timeline(
    cluster: Annotated[str, Path(pattern=CLUSTER_PATTERN)],
    job_id: Annotated[str, Path(pattern=JOB_ID_PATTERN)],
    submit_time: Annotated[int, Path(ge=0, le=2**53)],
    request: Request,
    store: Annotated[AuditStore, Depends(get_store)],
) -> charts.WorkloadTimeline:
    """Attempts, faults, time lost and recovery steps of one workload, each with its audit evidence,
    and the link to its workflow in the Temporal UI."""
    wid = WorkloadId(cluster=cluster, job_id=job_id, submit_time=submit_time)
    found = store.get_workload(wid.key)
    if found is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no workload {wid.key}")
    events: list[AuditEventOut] = []
    for e in iter_all_events(store, workload_key=wid.key):
        events.append(e)
        if len(events) >= TIMELINE_EVENT_LIMIT:
            break
    url = temporal_ui_url(context(request).settings.temporal, found.workflow_id or wid.workflow_id)
    return charts.workload_timeline(found, events, temporal_url=url)

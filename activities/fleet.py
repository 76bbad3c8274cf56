"""Cross-workload context from the audit store: systemic array failures and node reputation."""

from __future__ import annotations

import asyncio

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.heartbeat import heartbeats
from trainguard import contracts as c
from trainguard.audit.store import AuditStore
from trainguard.models import ArrayTaskFailure, Attribution, AuditEventIn, Category, EventType, NodeIncident
from trainguard.policy import array_is_systemic, nodes_to_drain
from trainguard.policy.limits import STORM_OPENING

MAX_EVENTS = 1000


def _category(value: str) -> Category:
    try:
        return Category(value)
    except ValueError:
        return Category.HEALTHY


def _attribution(value: str) -> Attribution:
    try:
        return Attribution(value)
    except ValueError:
        return Attribution.NONE


def _nodes(event: AuditEventIn, key: str) -> tuple[str, ...]:
    text = str(event.data.get(key) or "")
    return tuple(n for n in text.split(",") if n)


def _is_metric(pattern_id: str) -> bool:
    """Findings of the GPU metrics probe (DCGM via Prometheus) carry `dcgm_*` pattern ids."""
    return pattern_id.startswith("dcgm_")


def _in_storm(event: AuditEventIn) -> bool:
    """Failures judged part of a storm across jobs point at shared infrastructure, not at their nodes:
    they never count toward a node's reputation (trainguard/policy/limits.py)."""
    return event.message.startswith(STORM_OPENING)


class FleetActivities:
    def __init__(self, store: AuditStore) -> None:
        self.store = store

    @activity.defn(name=c.FLEET_CONTEXT)
    @heartbeats
    async def fleet_context(self, inp: c.FleetInput) -> c.FleetContext:
        try:
            return await asyncio.to_thread(self._sync, inp)
        except Exception as err:
            raise ApplicationError(
                f"audit store unavailable: {str(err)[:300]}", type="AuditUnavailable"
            ) from None

    def _recent(self, inp: c.FleetInput, window_s: float) -> list[AuditEventIn]:
        page = self.store.list_events(
            cluster=inp.workload.cluster,
            event_type=EventType.ADVICE,
            since=inp.now - window_s,
            descending=True,
            limit=MAX_EVENTS,
        )
        return list(page.items)

    def _sync(self, inp: c.FleetInput) -> c.FleetContext:
        cfg = inp.policy
        systemic, why = False, ""
        job = inp.job
        if job is not None and job.array_job_id:
            failures = [
                ArrayTaskFailure(
                    array_job_id=str(e.data.get("array_job_id")),
                    task_id=str(e.data.get("array_task_id") or e.job_id),
                    category=_category(e.category),
                    attribution=_attribution(e.attribution),
                    pattern_id=str(e.data.get("pattern_id") or ""),
                    nodes=_nodes(e, "job_nodes"),
                    at=e.ts,
                )
                for e in self._recent(inp, cfg.array_window_s)
                if e.data.get("array_job_id") == job.array_job_id
            ]
            failures.append(
                ArrayTaskFailure(
                    array_job_id=job.array_job_id,
                    task_id=job.array_task_id or job.job_id,
                    category=inp.verdict.category,
                    attribution=inp.verdict.attribution,
                    pattern_id=inp.verdict.pattern_ids[0] if inp.verdict.pattern_ids else "",
                    nodes=job.nodes,
                    at=inp.now,
                )
            )
            systemic, why = array_is_systemic(failures, cfg)
        drains: list[tuple[str, str]] = []
        if cfg.drain_enabled and inp.verdict.attribution == Attribution.HARDWARE:
            incidents = [
                NodeIncident(
                    node=node,
                    workload_key=e.workload_key,
                    at=e.ts,
                    category=_category(e.category),
                    attribution=_attribution(e.attribution),
                    pattern_id=str(e.data.get("pattern_id") or ""),
                    job_nodes=_nodes(e, "job_nodes"),
                    user=str(e.data.get("job_user") or ""),
                    gpu_metric=_is_metric(str(e.data.get("pattern_id") or "")),
                )
                for e in self._recent(inp, cfg.drain_window_s)
                for node in _nodes(e, "implicated")
                if e.workload_key != inp.workload.key and not _in_storm(e)
            ]
            own = inp.allocation or (job.nodes if job is not None else ())
            incidents += [
                NodeIncident(
                    node=n,
                    workload_key=inp.workload.key,
                    at=inp.now,
                    category=inp.verdict.category,
                    attribution=inp.verdict.attribution,
                    job_nodes=own,
                    user=job.user if job is not None else "",
                    gpu_metric=any(_is_metric(p) for p in inp.verdict.pattern_ids),
                )
                for n in inp.verdict.nodes
            ]
            drains = nodes_to_drain(incidents, cfg, inp.now)
        return c.FleetContext(array_systemic=systemic, array_reason=why, drain=tuple(drains))

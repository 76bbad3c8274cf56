"""Control-plane activities (task queue trainguard-control): attribution, audit, mode propagation."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from activities.heartbeat import heartbeating, heartbeats
from trainguard import contracts as c
from trainguard import failpoints, telemetry
from trainguard.attribution.rules import attribute
from trainguard.audit.store import AuditStore
from trainguard.detection.severity import job_is_running
from trainguard.models import AuditEventIn, EventType, Verdict, WorkloadState
from trainguard.policy.reasons import advice_reason
from trainguard.settings import AttributionSettings
from workflows.search_attributes import CLUSTER

# A workload in one of these states is over: its per-workload series are removed.
ENDED = frozenset({WorkloadState.COMPLETED, WorkloadState.STOPPED, WorkloadState.GONE})

log = logging.getLogger(__name__)


class ControlActivities:
    def __init__(self, store: AuditStore, temporal: Client, attribution: AttributionSettings) -> None:
        self.store = store
        self.temporal = temporal
        self.attribution = attribution

    @activity.defn(name=c.ATTRIBUTE)
    @heartbeats
    async def attribute(self, inp: c.AttributeInput) -> Verdict:
        verdict = attribute(inp.findings, inp.job)
        if job_is_running(inp.job) and not verdict.fatal:
            # Safety clause 2: no evidence shows the running job failing; no service may make it fatal.
            return verdict
        if self.attribution.external_url:
            from trainguard.attribution.external import ExternalRequest, external_attribution

            request = ExternalRequest(
                workload_key=inp.workload.key,
                cluster=inp.workload.cluster,
                job=inp.job,
                findings=inp.findings,
                builtin=verdict,
            )
            external = await external_attribution(
                self.attribution.external_url,
                request,
                timeout_s=self.attribution.external_timeout_s,
                token=token.get_secret_value() if (token := self.attribution.external_token) else None,
            )
            if external is not None:
                verdict = external
        return verdict

    @activity.defn(name=c.RECORD_EVENTS)
    async def record_events(self, inp: c.RecordEventsInput) -> int:
        async with heartbeating():
            inserted = await asyncio.to_thread(self._record_events_sync, inp)
        return inserted

    def _record_events_sync(self, inp: c.RecordEventsInput) -> int:
        try:
            inserted = 0
            for event in inp.events:
                if self.store.record(event):
                    inserted += 1
                    _observe(event)
            if inp.status is not None:
                self.store.upsert_workload(inp.status)
                if inp.status.state in ENDED:  # its series must not outlive it
                    telemetry.forget_workload(inp.status.workload_key)
                elif inp.status.goodput is not None:
                    telemetry.set_goodput(inp.status.workload_key, inp.status.goodput)
            return inserted
        except Exception as err:  # the DB is down or refusing: retry (the workflow's policy backs off)
            telemetry.count_audit_failure()
            raise ApplicationError(
                f"audit store unavailable: {str(err)[:300]}", type="AuditUnavailable"
            ) from None

    @activity.defn(name=c.RECORD_ADVICE)
    async def record_advice(self, inp: c.RecordAdviceInput) -> bool:
        def _sync() -> bool:
            try:
                inserted = self.store.record_advice(inp.workload, inp.advice, ts=inp.ts)
            except Exception as err:
                telemetry.count_audit_failure()
                raise ApplicationError(
                    f"audit store unavailable: {str(err)[:300]}", type="AuditUnavailable"
                ) from None
            if inserted:  # counted once, however often the activity is retried
                advice = inp.advice
                telemetry.count_advice(
                    inp.workload.cluster, advice.action.value, advice_reason(advice), advice.execute
                )
            return inserted

        async with heartbeating():
            inserted = await asyncio.to_thread(_sync)
        failpoints.hit("after_advice", inp.advice.advice_id)
        return inserted

    @activity.defn(name=c.PROPAGATE_CLUSTER_MODE)
    async def propagate_cluster_mode(self, inp: c.PropagateModeInput) -> int:
        count = await self._signal_running(inp.cluster, "set_cluster_mode", inp.change)
        log.info("cluster %s mode %s propagated to %d workloads", inp.cluster, inp.change.mode.value, count)
        return count

    @activity.defn(name=c.PROPAGATE_CLUSTER_SETTINGS)
    async def propagate_cluster_settings(self, inp: c.PropagateSettingsInput) -> int:
        count = await self._signal_running(inp.cluster, "apply_settings", inp.settings)
        log.info("cluster %s settings (%s) sent to %d workloads", inp.cluster, inp.settings.source, count)
        return count

    async def _signal_running(self, cluster: str, signal: str, arg: object) -> int:
        """Signal every running JobRecovery of the cluster (a signal is idempotent to repeat on retry:
        mode and settings changes carry the target value, not a delta)."""
        query = (
            f"{CLUSTER.name} = '{_quote(cluster)}' AND ExecutionStatus = 'Running'"
            " AND WorkflowType = 'JobRecovery'"
        )
        count = 0
        async for wf in self.temporal.list_workflows(query):
            with contextlib.suppress(RPCError):  # it ended between the listing and the signal
                await self.temporal.get_workflow_handle(wf.id).signal(signal, arg)
                count += 1
            activity.heartbeat(count)
        return count


def _quote(value: str) -> str:
    if not all(ch.isalnum() or ch in "-_." for ch in value):
        raise ApplicationError("invalid cluster name", type="InvalidInput", non_retryable=True)
    return value


def _observe(event: AuditEventIn) -> None:
    """Feed TrainGuard's own Prometheus metrics from the audit events as they are first stored."""
    data = event.data
    if event.event_type == EventType.DETECTION and isinstance(data.get("detection_latency_s"), int | float):
        telemetry.observe_detection_latency(float(data["detection_latency_s"] or 0.0), event.category)
    elif event.event_type == EventType.TRAINING_RESUMED and isinstance(
        data.get("time_to_productive_s"), int | float
    ):
        telemetry.observe_time_to_productive(float(data["time_to_productive_s"] or 0.0))
    elif event.event_type == EventType.ACTION and isinstance(data.get("action_latency_s"), int | float):
        telemetry.observe_action_latency(float(data["action_latency_s"] or 0.0), "recovery")
    elif event.event_type == EventType.WATCHDOG_FIRED:
        telemetry.count_watchdog()
    elif event.event_type == EventType.COMPLETED:
        telemetry.count_recovery("success")
    elif event.event_type == EventType.STOPPED:
        telemetry.count_recovery("stopped")
    elif event.event_type == EventType.NODE_DRAINED:
        telemetry.count_drain(event.cluster, len(event.nodes))

"""The audit queue: handlers and the run loop enqueue events; the run loop stores them (with the status)
in one activity per flush, and drains the queue before the run ends. Deterministic.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

from workflows.recovery_patches import PATCH_DRAIN
from workflows.recovery_state import RecoveryState

with workflow.unsafe.imports_passed_through():
    from trainguard import contracts as c
    from trainguard.models import AuditEventIn, EventType
    from workflows import story
    from workflows.search_attributes import status_search_attributes

# Audit writes must not be lost: retry until the store comes back (it may be down for minutes).
AUDIT_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=10))


class AuditQueue(RecoveryState):
    def _event(
        self,
        event_type: EventType,
        *,
        key: str | None = None,
        attempt: int | None = None,
        **fields: object,
    ) -> None:
        w = self.inp.workload
        seq = self.carry.event_seq + 1
        self.carry = self.carry.model_copy(update={"event_seq": seq})
        event_id = f"{w.key}/{key}" if key else f"{w.key}/e{seq}"
        # One line per audit event, with the workload key (workflow.logger is silent during replay).
        workflow.logger.info(
            "%s %s: %s", event_type.value, w.key, fields.get("message", ""), extra={"workload_key": w.key}
        )
        self.pending.append(
            AuditEventIn(
                event_id=event_id,
                event_type=event_type,
                workload_key=w.key,
                cluster=w.cluster,
                job_id=w.job_id,
                submit_time=w.submit_time,
                attempt=self.carry.phase.attempt_restarts if attempt is None else attempt,
                ts=workflow.time(),
                mode=fields.pop("mode", self.mode.value),
                **fields,
            )
        )

    async def _flush(self) -> None:
        if not self.pending and not self.status_dirty:
            return
        events, self.pending = tuple(self.pending), []
        now = workflow.time()
        watched = now - self.carry.status.first_seen_at
        goodput = max(0.0, 1.0 - self.carry.status.lost_s / watched) if watched > 0 else None
        status = self.carry.status.model_copy(update={"updated_at": now, "goodput": goodput})
        self.carry = self.carry.model_copy(update={"status": status})  # derived values: not a change
        self.status_dirty = False
        # Upserts are billed Temporal actions: only when a filterable value changed.
        attrs = (status.mode, status.state, status.last_category)
        if self.cfg.search_attributes and attrs != self.last_search_attrs:
            self.last_search_attrs = attrs
            workflow.upsert_search_attributes(status_search_attributes(status))
        self._show_details()
        await workflow.execute_activity(
            c.RECORD_EVENTS,
            c.RecordEventsInput(events=events, status=status),
            task_queue=self.cfg.control_queue,
            start_to_close_timeout=timedelta(seconds=30),
            heartbeat_timeout=timedelta(seconds=self.cfg.step_heartbeat_timeout_s),
            retry_policy=AUDIT_RETRY,
            summary=story.audit_summary(len(events), self.inp.workload.job_id),
        )

    async def _drain(self) -> None:
        """Before completion or continue-as-new: every handler finished and nothing left to store. A
        signal can land while the final flush runs (its event would be dropped): flush again."""
        while True:
            await workflow.wait_condition(workflow.all_handlers_finished)
            await self._flush()
            if not self.pending or not workflow.patched(PATCH_DRAIN):
                return

    def _show_details(self) -> None:
        """The Temporal UI's "current details": job, attempt, state, mode and last verdict."""
        workflow.set_current_details(
            story.current_details(self.carry.status, self.carry.phase.attempt_restarts)
        )

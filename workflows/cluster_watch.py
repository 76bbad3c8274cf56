"""ClusterWatch: one workflow per cluster; discovers opted-in jobs and starts one JobRecovery per workload.

Discovery itself is a long heartbeating activity (one batched snapshot per interval, shared by every watch
activity in the worker), so this workflow's history grows by a few events per slice, not per poll.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from trainguard import contracts as c
    from trainguard.identity import workload_of
    from trainguard.models import Actor, AuditEventIn, EventType, Level, ModeChange, clip

RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30))


@workflow.defn(name="ClusterWatch")
class ClusterWatchWorkflow:
    @workflow.init
    def __init__(self, inp: c.ClusterWatchInput) -> None:
        self.inp = inp
        self.mode = inp.mode
        self.changes: list[ModeChange] = []
        self.stop_requested = False
        self.pending: list[AuditEventIn] = []

    @workflow.query
    def current_mode(self) -> str:
        return self.mode.value

    @workflow.update
    async def set_mode(self, change: ModeChange) -> None:
        self.mode = change.mode
        self.changes.append(change)

    @workflow.signal
    async def stop(self) -> None:
        self.stop_requested = True

    @workflow.signal
    async def report_malformed(self, report: c.MalformedReport) -> None:
        w = workload_of(self.inp.cluster, report.job)
        self.pending.append(
            AuditEventIn(
                event_id=f"{w.key}/malformed-comment",
                event_type=EventType.MALFORMED_COMMENT,
                workload_key=w.key,
                cluster=w.cluster,
                job_id=w.job_id,
                submit_time=w.submit_time,
                level=Level.WARNING,
                actor=Actor.SYSTEM,
                ts=workflow.time(),
                message=clip(f"job ignored: {report.problem}"),
                evidence=(clip(report.job.comment),),
            )
        )

    @workflow.run
    async def run(self, inp: c.ClusterWatchInput) -> None:
        while not self.stop_requested:
            handle = workflow.start_activity(
                c.DISCOVER_JOBS,
                c.DiscoverInput(
                    cluster=inp.cluster,
                    mode=self.mode,
                    recovery=inp.recovery,
                    slice_s=inp.discover_slice_s,
                    environment_pattern=inp.environment_pattern,
                ),
                result_type=c.DiscoverResult,
                task_queue=inp.cluster_queue,
                start_to_close_timeout=timedelta(seconds=inp.discover_slice_s + 120),
                heartbeat_timeout=timedelta(seconds=inp.recovery.heartbeat_timeout_s),
                retry_policy=RETRY,
            )
            while not self._interrupted(handle):
                await workflow.wait_condition(lambda h=handle: self._interrupted(h) or bool(self.pending))  # type: ignore[misc]
                await self._flush()
            if not handle.done():
                # New workloads must start in the new mode: restart discovery with it.
                handle.cancel()
            with contextlib.suppress(ActivityError, asyncio.CancelledError):
                await handle
            while self.changes:
                change = self.changes.pop(0)
                await workflow.execute_activity(
                    c.PROPAGATE_CLUSTER_MODE,
                    c.PropagateModeInput(cluster=inp.cluster, change=change),
                    task_queue=inp.recovery.control_queue,
                    start_to_close_timeout=timedelta(seconds=120),
                    retry_policy=RETRY,
                )
            await self._flush()
            info = workflow.info()
            if info.is_continue_as_new_suggested() or info.get_current_history_length() > 1000:
                await workflow.wait_condition(workflow.all_handlers_finished)
                if not self.changes and not self.stop_requested:
                    workflow.continue_as_new(inp.model_copy(update={"mode": self.mode}))

    def _interrupted(self, handle: workflow.ActivityHandle[c.DiscoverResult]) -> bool:
        return handle.done() or bool(self.changes) or self.stop_requested

    async def _flush(self) -> None:
        if not self.pending:
            return
        events, self.pending = tuple(self.pending), []
        await workflow.execute_activity(
            c.RECORD_EVENTS,
            c.RecordEventsInput(events=events),
            task_queue=self.inp.recovery.control_queue,
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=RETRY,
        )

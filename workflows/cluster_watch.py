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
    from trainguard.policy import limits as lim
    from trainguard.runtime_config import describe_diff, diff_data, settings_diff

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
        self.configured = inp.configured or configured_from(inp)
        self.settings_out: list[c.WorkloadSettings] = []  # settings changes still to fan out to workloads
        # Cluster-wide safety limits: every JobRecovery asks here before acting (update `grant`), so
        # the budget is one state changed by one workflow, one request at a time.
        self.limits_state = inp.limits_state or lim.LimitsState()

    @workflow.query
    def current_mode(self) -> str:
        return self.mode.value

    @workflow.update
    async def set_mode(self, change: ModeChange) -> None:
        self.mode = change.mode
        self.changes.append(change)

    @workflow.update
    async def apply_settings(self, update: c.SettingsUpdate) -> c.SettingsApplied:
        """Settings from a worker's start or `trainguard config reload`: apply what differs from the settings
        last applied (not from the current mode: an operator's run-time mode change survives a restart
        that did not change the file), audit it with its source, and fan it out to running workloads."""
        new = update.config
        diff = settings_diff(self.configured, new)
        if not diff:
            return c.SettingsApplied()
        mode_changed = "mode" in diff
        if mode_changed:
            self.mode = new.mode
        self.inp = self.inp.model_copy(
            update={
                "acknowledged": new.acknowledged,
                "recovery": new.recovery,
                "environment_pattern": new.environment_pattern,
            }
        )
        self.configured = new
        summary = clip(describe_diff(diff), 800)
        self.pending.append(
            AuditEventIn(
                event_id=f"cluster/{self.inp.cluster}/settings/{workflow.uuid4()}",
                event_type=EventType.SETTINGS_CHANGED,
                cluster=self.inp.cluster,
                level=Level.WARNING if mode_changed else Level.INFO,
                actor=Actor.SYSTEM,
                ts=workflow.time(),
                mode=self.mode.value,
                message=clip(f"cluster settings changed by {update.source}: {summary}"),
                data={"source": clip(update.source, 100), "who": clip(update.who, 200), **diff_data(diff)},
            )
        )
        self.settings_out.append(
            c.WorkloadSettings(
                config=new.recovery,
                cluster_mode=new.mode if mode_changed else None,
                source=update.source,
                who=update.who,
            )
        )
        return c.SettingsApplied(changed=tuple(diff), summary=summary)

    @workflow.update
    async def grant(self, req: lim.GrantRequest) -> lim.GrantResult:
        """May this workload requeue, exclude, drain? Answered against the last hour's budget and the storm
        picture (`limits.ask`). An exclusion or drain is first told to ask again after
        `limits.storm_settle_s`, so the first jobs of a storm are judged with those failing seconds later."""
        result, self.limits_state = lim.ask(self.limits_state, req, workflow.time(), self.inp.recovery.limits)
        return result

    @workflow.signal
    async def workload_ended(self, ended: c.WorkloadEnded) -> None:
        self.limits_state = lim.workload_ended(self.limits_state, ended.workload_key)

    @workflow.signal
    async def stop(self) -> None:
        self.stop_requested = True

    @workflow.signal
    async def record_event(self, event: AuditEventIn) -> None:
        """An audit event from a cluster activity (a stuck hold released by discovery), stored in order."""
        self.pending.append(event)

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

    @workflow.signal
    async def report_cluster_event(self, report: c.ClusterReport) -> None:
        """A cluster worker's report (a peer vanished and its watches were taken over, a limit reached):
        audited like any other event. A new handler only: old histories never carry this signal."""
        self.pending.append(
            AuditEventIn(
                event_id=f"cluster/{self.inp.cluster}/{clip(report.key, 300)}",
                event_type=report.event_type,
                cluster=self.inp.cluster,
                level=report.level,
                actor=Actor.SYSTEM,
                ts=workflow.time(),
                mode=self.mode.value,
                message=clip(report.message),
                data={k: clip(v, 300) if isinstance(v, str) else v for k, v in report.data.items()},
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
                    recovery=self.inp.recovery,
                    slice_s=inp.discover_slice_s,
                    environment_pattern=self.inp.environment_pattern,
                ),
                result_type=c.DiscoverResult,
                task_queue=inp.cluster_queue,
                start_to_close_timeout=timedelta(seconds=inp.discover_slice_s + 120),
                heartbeat_timeout=timedelta(seconds=self.inp.recovery.heartbeat_timeout_s),
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
            await self._flush()  # the cluster-level settings_changed event is stored before the fan-out
            if self.settings_out and workflow.patched("cluster-settings-fan-out"):
                while self.settings_out:
                    await workflow.execute_activity(
                        c.PROPAGATE_CLUSTER_SETTINGS,
                        c.PropagateSettingsInput(cluster=inp.cluster, settings=self.settings_out.pop(0)),
                        task_queue=self.inp.recovery.control_queue,
                        start_to_close_timeout=timedelta(seconds=300),
                        heartbeat_timeout=timedelta(seconds=60),
                        retry_policy=RETRY,
                    )
            info = workflow.info()
            if info.is_continue_as_new_suggested() or info.get_current_history_length() > 1000:
                await workflow.wait_condition(workflow.all_handlers_finished)
                # Audit events enqueued meanwhile (malformed comments, a settings change) are not carried
                # by continue-as-new: store them first.
                while self.pending and workflow.patched("cluster-watch-drain-before-can"):
                    await self._flush()
                    await workflow.wait_condition(workflow.all_handlers_finished)
                if not self.changes and not self.stop_requested and not self.settings_out:
                    workflow.continue_as_new(
                        self.inp.model_copy(
                            update={
                                "mode": self.mode,
                                "configured": self.configured,
                                "limits_state": lim.prune(
                                    self.limits_state, workflow.time(), self.inp.recovery.limits
                                ),
                            }
                        )
                    )

    def _interrupted(self, handle: workflow.ActivityHandle[c.DiscoverResult]) -> bool:
        return handle.done() or bool(self.changes) or self.stop_requested or bool(self.settings_out)

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


def configured_from(inp: c.ClusterWatchInput) -> c.ClusterConfig:
    """The settings a ClusterWatch started before settings reload existed was started with."""
    return c.ClusterConfig(
        mode=inp.mode,
        acknowledged=inp.acknowledged,
        environment_pattern=inp.environment_pattern,
        recovery=inp.recovery,
    )

"""The action executor: runs an advice's scheduler steps in order (each an idempotent activity that
checks Slurm first, audited), the containment hold of a job Slurm requeued, and the watchdog's release of
a job TrainGuard holds. Deterministic.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

from workflows.recovery_audit import AUDIT_RETRY
from workflows.recovery_patches import PATCH_FAILED_HOLD, PATCH_FAILED_HOLD_OURS, PATCH_RECORD_ONLY
from workflows.recovery_settings import SettingsGate

with workflow.unsafe.imports_passed_through():
    from trainguard import contracts as c
    from trainguard.models import (
        ActionKind,
        ActionResult,
        Actor,
        Advice,
        Attribution,
        Category,
        EventType,
        JobSnapshot,
        Level,
        Mode,
        Verdict,
        WorkloadState,
        clip,
    )
    from trainguard.slurm.states import COMPLETING, PENDING, REQUEUE_HELD_REASON, RUNNING
    from workflows import story

# Scheduler actions retry with backoff while slurmctld is unreachable; non-retryable errors stop at once.
ACTION_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=5), backoff_coefficient=2.0
)


class ActionExecutor(SettingsGate):
    async def _contain(self, attempt: int, job: JobSnapshot) -> bool:
        """Hold the pending job while the failure is attributed, so it does not start on a bad node."""
        key = self.inp.workload.key
        hold = Advice(
            advice_id=f"{key}/a{attempt}/hold",
            action=ActionKind.HOLD,
            reason="hold the requeued job while the failure is attributed",
            verdict=Verdict(
                category=Category.HEALTHY, attribution=Attribution.NONE, fatal=True, summary="pending"
            ),
            mode=self.mode,
            execute=True,
            attempt=attempt,
        )
        await self._record_advice(hold)
        result = await self._action(c.REQUEUE_HOLD, hold.advice_id, attempt)
        if result is None or not result.held:
            return False
        self.our_hold = _own_hold(result)
        self.held_at = workflow.time()
        self._set_status(state=WorkloadState.HELD)
        return True

    async def _watchdog_release(self, held: bool, why: str) -> None:
        attempt = self.carry.phase.attempt_restarts
        # Fail open: undoing our own hold restores normal scheduling; its audit rows follow, retried.
        self._event(
            EventType.WATCHDOG_FIRED,
            level=Level.WARNING,
            actor=Actor.WATCHDOG,
            message=f"{why}; {'releasing the held job unchanged' if held else 'no action taken'}",
        )
        if held:
            advice_id = f"{self.inp.workload.key}/a{attempt}/watchdog"
            await self._action(
                c.RELEASE_JOB,
                advice_id,
                attempt,
                actor=Actor.WATCHDOG,
                flush_now=True,
                our_hold=self.our_hold,
            )
        self._set_carry(phase=self.carry.phase.model_copy(update={"failure_handled": True}))
        self._set_status(state=WorkloadState.WATCHING if held else WorkloadState.FAILED)

    async def _execute(
        self, advice: Advice, held: bool, first_signal: float, detected_at: float, job: JobSnapshot | None
    ) -> None:
        await self._execute_main(advice, held, first_signal, detected_at, job)
        if advice.drain_nodes and self.mode == Mode.ACTION and self.cfg.acknowledged:
            attempt = self.carry.phase.attempt_restarts
            result = await self._action(
                c.DRAIN_NODE,
                advice.advice_id,
                attempt,
                nodes=advice.drain_nodes,
                reason=clip(advice.reason, 200),
            )
            if result is not None:
                self._event(
                    EventType.NODE_DRAINED,
                    level=Level.WARNING,
                    actor=advice.actor,
                    nodes=advice.drain_nodes,
                    message=clip(f"drained for repair: {result.detail}"),
                )

    async def _execute_main(
        self, advice: Advice, held: bool, first_signal: float, detected_at: float, job: JobSnapshot | None
    ) -> None:
        attempt = self.carry.phase.attempt_restarts
        handled = self.carry.phase.model_copy(update={"failure_handled": True, "fault_at": first_signal})
        if not advice.execute:
            # A verdict that is not fatal (recorded and watched) leaves the attempt watched: a real failure
            # of the same attempt must still be seen.
            watched = not advice.verdict.fatal and workflow.patched(PATCH_RECORD_ONLY)
            self._set_carry(phase=self.carry.phase if watched else handled)
            if held:  # a decision not to act releases our containment hold unchanged
                await self._action(c.RELEASE_JOB, advice.advice_id, attempt, our_hold=self.our_hold)
            terminal = job is not None and job.state not in (RUNNING, PENDING, COMPLETING)
            state = WorkloadState.FAILED if terminal and advice.verdict.fatal else WorkloadState.WATCHING
            if advice.action == ActionKind.WAIT:
                state = WorkloadState.WAITING
            self._set_status(state=state)
            return
        if advice.action == ActionKind.REQUEUE:
            if not held:
                requeued = await self._action(c.REQUEUE_HOLD, advice.advice_id, attempt)
                if requeued is None:
                    if workflow.patched(PATCH_FAILED_HOLD):
                        # Slurm may have applied it before the step failed: lift a requeue-hold if one is
                        # there (a user's or an admin's hold has another Reason and stays).
                        lifted = await self._action(
                            c.RELEASE_JOB, advice.advice_id, attempt, our_hold=REQUEUE_HELD_REASON
                        )
                        if (
                            lifted is not None
                            and lifted.performed
                            and workflow.patched(PATCH_FAILED_HOLD_OURS)
                        ):
                            # The requeue took effect and runs unchanged: its pending attempt is our
                            # restart, not a failure Slurm requeued (which would be contained and
                            # recovered a second time).
                            self._set_carry(
                                phase=handled.model_copy(update={"restart_requested_at": workflow.time()})
                            )
                    return
                self.our_hold = _own_hold(requeued)
            self._set_status(state=WorkloadState.RECOVERING, excluded_nodes=advice.exclude_nodes)
            stop = self._switched_to_observe(advice)
            if stop:
                self._set_status(excluded_nodes=())
            elif advice.exclude_nodes:
                await self._action(c.SET_EXCLUDED, advice.advice_id, attempt, nodes=advice.exclude_nodes)
            released = await self._action(c.RELEASE_JOB, advice.advice_id, attempt, our_hold=self.our_hold)
            now = workflow.time()
            self._set_carry(phase=handled.model_copy(update={"restart_requested_at": now}))
            if released is not None:
                self._event(
                    EventType.ACTION,
                    actor=advice.actor,
                    action="recovery_requested",
                    message="job requeued; waiting for the new allocation",
                    data={"action_latency_s": round(released.confirmed_at - detected_at, 3)},
                )
        elif advice.action == ActionKind.CANCEL:
            await self._action(c.CANCEL_JOB, advice.advice_id, attempt, reason=advice.reason)
            self._event(
                EventType.STOPPED, level=Level.WARNING, actor=advice.actor, message=clip(advice.reason)
            )
            self._set_carry(phase=handled)
            self._set_status(state=WorkloadState.STOPPED)
        elif advice.action == ActionKind.WAIT:
            self._set_carry(phase=handled)
            self._set_status(state=WorkloadState.WAITING)
        else:
            if held:
                await self._action(c.RELEASE_JOB, advice.advice_id, attempt, our_hold=self.our_hold)
            self._set_carry(phase=handled if advice.verdict.fatal else self.carry.phase)
            self._set_status(state=WorkloadState.WATCHING)

    async def _action(
        self,
        name: str,
        advice_id: str,
        attempt: int,
        *,
        nodes: tuple[str, ...] = (),
        reason: str = "",
        actor: Actor = Actor.POLICY,
        flush_now: bool = False,
        our_hold: str | None = None,
    ) -> ActionResult | None:
        """Run one scheduler step (checks Slurm first, idempotent); audit its outcome."""
        try:
            result = await workflow.execute_activity(
                name,
                c.JobActionInput(
                    workload=self.inp.workload,
                    advice_id=advice_id,
                    expected_restarts=attempt,
                    nodes=nodes,
                    reason=reason,
                    our_hold=our_hold,
                ),
                result_type=ActionResult,
                task_queue=self.cfg.cluster_queue,
                # A release is retried until Slurm takes it (or refuses for good): a job we hold must
                # never stay held because slurmctld was away longer than one action's budget.
                schedule_to_close_timeout=None
                if name == c.RELEASE_JOB
                else timedelta(seconds=self.cfg.action_timeout_s),
                start_to_close_timeout=timedelta(seconds=min(30.0, self.cfg.action_timeout_s)),
                heartbeat_timeout=timedelta(seconds=self.cfg.step_heartbeat_timeout_s),
                retry_policy=ACTION_RETRY,
                summary=story.action_summary(name, self.inp.workload.job_id, nodes),
            )
        except ActivityError as err:
            self._event(
                EventType.ACTION_FAILED,
                level=Level.ERROR,
                actor=actor,
                action=name,
                message=clip(f"{name} failed: {err.cause}"),
                data={"advice_id": advice_id},
                key=f"{advice_id}/{name}/failed",
            )
            return None
        self._event(
            EventType.ACTION,
            actor=actor,
            action=result.step.value,
            nodes=nodes,
            message=clip(result.detail or result.step.value),
            data={"advice_id": advice_id, "performed": result.performed, "confirmed_at": result.confirmed_at},
            key=f"{advice_id}/{result.step.value}",
        )
        if flush_now:
            await self._flush()
        return result

    async def _record_advice(self, advice: Advice) -> None:
        await self._flush()
        await workflow.execute_activity(
            c.RECORD_ADVICE,
            c.RecordAdviceInput(workload=self.inp.workload, advice=advice, ts=workflow.time()),
            task_queue=self.cfg.control_queue,
            start_to_close_timeout=timedelta(seconds=30),
            heartbeat_timeout=timedelta(seconds=self.cfg.step_heartbeat_timeout_s),
            retry_policy=AUDIT_RETRY,
            summary=story.advice_summary(advice.action.value, self.inp.workload.job_id, advice.attempt),
        )


def _own_hold(result: ActionResult) -> str | None:
    """Slurm's Reason for the hold TrainGuard placed; "" when the step found the job held by someone
    else (never ours to lift); None when an older worker did not say (release as before)."""
    return result.own_hold

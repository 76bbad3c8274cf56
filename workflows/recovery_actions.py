"""The action executor: runs an advice's scheduler steps in order (each an idempotent activity that
checks Slurm first, audited), the containment hold of a job Slurm requeued, and the watchdog's release of
a job TrainGuard holds. Deterministic.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

from workflows.recovery_audit import AUDIT_RETRY
from workflows.recovery_patches import (
    PATCH_FAILED_HOLD,
    PATCH_FAILED_HOLD_OURS,
    PATCH_FAILED_PENDING_HOLD,
    PATCH_RACED_HOLD,
    PATCH_RECORD_ONLY,
)
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
    from trainguard.slurm.states import (
        ADMIN_HELD_REASON,
        COMPLETING,
        PENDING,
        REQUEUE_HELD_REASON,
        REQUEUING_STATES,
        RUNNING,
    )
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
        reading = self._read_ahead(attempt)  # beside the advice's write: not in the hold's path
        await self._record_advice(hold)
        result = await self._action(c.REQUEUE_HOLD, hold.advice_id, attempt)
        before = await _evidence(reading, needed=result is None)
        if before is not None:
            await self._release_failed_hold(hold.advice_id, attempt, before)
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
        self,
        advice: Advice,
        held: bool,
        first_signal: float,
        detected_at: float,
        job: JobSnapshot | None,
        reading: Reading | None = None,
    ) -> None:
        await self._execute_main(advice, held, first_signal, detected_at, job, reading)
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
        self,
        advice: Advice,
        held: bool,
        first_signal: float,
        detected_at: float,
        job: JobSnapshot | None,
        reading: Reading | None,
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
                before = await _evidence(reading, needed=requeued is None)
                if before is not None and before[0].restart_count > attempt:
                    # Slurm requeued it itself and it was not contained: the step could only hold it.
                    # Slurm's own requeue runs unchanged; this attempt's failure stays handled.
                    await self._release_failed_hold(advice.advice_id, attempt, before)
                    self._set_carry(phase=handled)
                    self._set_status(state=WorkloadState.WATCHING)
                    return
                if requeued is None:
                    if workflow.patched(PATCH_FAILED_HOLD):
                        # Slurm may have applied it before the step failed: lift a requeue-hold if one is
                        # there (a user's or an admin's hold has another Reason and stays).
                        lifted = await self._action(
                            c.RELEASE_JOB, advice.advice_id, attempt, our_hold=REQUEUE_HELD_REASON
                        )
                        ours = lifted is not None and lifted.performed
                        if ours and workflow.patched(PATCH_FAILED_HOLD_OURS):
                            # The requeue took effect and runs unchanged: its pending attempt is our
                            # restart, not a failure Slurm requeued (which would be contained and
                            # recovered a second time).
                            self._set_carry(
                                phase=handled.model_copy(update={"restart_requested_at": workflow.time()})
                            )
                        elif not ours and before is not None:
                            # Only a raced read gets here (PATCH_RACED_HOLD): Slurm requeued the job itself
                            # after the read, and the step, finding it pending, held it (JobHeldAdmin).
                            raced = await self._release_failed_hold(advice.advice_id, attempt, before)
                            if raced is not None and raced.performed:
                                self._set_carry(phase=handled)  # Slurm's own requeue runs unchanged
                                self._set_status(state=WorkloadState.WATCHING)
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

    def _read_ahead(self, attempt: int) -> Reading | None:
        """Start reading the job from Slurm before TrainGuard holds a job Slurm requeued itself: the
        evidence `_release_failed_hold` needs should that step fail. It runs beside the advice's audit
        write, which precedes every step anyway, so the hold waits for nothing more (an extra round trip
        there lets Slurm start the requeued job before it is held)."""
        if not workflow.patched(PATCH_FAILED_PENDING_HOLD):
            return None
        return asyncio.ensure_future(self._read_before_hold(attempt))

    def _read_ahead_for(self, advice: Advice, held: bool, job: JobSnapshot | None) -> Reading | None:
        """`_read_ahead` for a decided advice whose requeue step will hold a job Slurm requeued itself, or
        (raced) one Slurm may requeue before the step runs."""
        attempt = self.carry.phase.attempt_restarts
        if not (advice.execute and advice.action == ActionKind.REQUEUE and not held):
            return None
        if job is not None and job.restart_count > attempt:
            return self._read_ahead(attempt)
        if workflow.patched(PATCH_RACED_HOLD):
            # Slurm may requeue the job itself after the decision's snapshot (a node failure under a
            # --requeue job): the step then finds it pending and holds it with `scontrol hold`, whose
            # JobHeldAdmin a failed step could not lift as a requeue-hold. This read narrows the window in
            # which that hold could be an administrator's to one audit write.
            return asyncio.ensure_future(self._read_before_hold(attempt, raced=True))
        return None

    async def _read_before_hold(self, attempt: int, *, raced: bool = False) -> Evidence | None:
        """Slurm's record of the job around TrainGuard's hold of a job Slurm requeued itself, and when it
        was asked for. None when the job is not pending and unheld past `attempt` (also when the read came
        after that hold took effect: no evidence then) or Slurm could not be read. A record that shows the
        job unheld was taken before the hold took effect, whichever step Slurm answered first. `raced`:
        the decision saw the attempt not yet requeued; a record of it still on `attempt` and unheld is
        evidence too (a hold after Slurm's own requeue would be on the next attempt)."""
        asked_at = workflow.time()
        try:
            found = await workflow.execute_activity(
                c.JOB_STATE,
                c.JobActionInput(workload=self.inp.workload, advice_id=""),
                result_type=c.JobStateResult,
                task_queue=self.cfg.cluster_queue,
                schedule_to_close_timeout=timedelta(seconds=self.cfg.action_timeout_s),
                start_to_close_timeout=timedelta(seconds=min(30.0, self.cfg.action_timeout_s)),
                retry_policy=ACTION_RETRY,
                summary=story.evidence_summary(self.inp.workload.job_id),
            )
        except ActivityError:
            return None
        job = found.job
        if raced and job is not None and not job.held and job.restart_count == attempt:
            return job, asked_at
        if job is None or job.held or job.restart_count <= attempt:
            return None
        if job.state != PENDING and job.state not in REQUEUING_STATES:
            return None
        return job, asked_at

    async def _release_failed_hold(
        self, advice_id: str, attempt: int, before: Evidence
    ) -> ActionResult | None:
        """Fail-open after a hold of a pending job (one Slurm requeued itself) whose step failed: Slurm may
        have applied it. Such a hold reads Reason=JobHeldAdmin, exactly as an administrator's `scontrol hold`
        does, and Slurm records nothing more (who, why). It is taken as TrainGuard's own only on this
        evidence: Slurm showed the job pending and not held on this attempt right before the step (`before`),
        and shows it held with JobHeldAdmin on the same attempt now. Then it is released unchanged, and the
        audit says why and how long the window was in which an administrator's hold would be mistaken for
        ours (docs/safety.md). Any other hold, or a job requeued since, stays. A raced record (the attempt
        not yet requeued, see `_read_before_hold`) binds the release to the next attempt: Slurm's requeue."""
        job, seen_at = before
        window_s = round(max(0.0, workflow.time() - seen_at), 3)
        raced = job.restart_count <= attempt
        held_restarts = attempt + 1 if raced else job.restart_count
        lifted = await self._action(
            c.RELEASE_JOB,
            advice_id,
            attempt,
            actor=Actor.WATCHDOG,
            our_hold=ADMIN_HELD_REASON,
            held_restarts=held_restarts,
            tag="/raced" if raced else "",
        )
        if lifted is not None and lifted.performed:
            seen = (
                f"the job was {job.state}, not held and not yet requeued (restarts={job.restart_count}) "
                f"{window_s:.1f} s before the step failed; Slurm requeued it itself meanwhile, and it is "
                f"held with Reason={ADMIN_HELD_REASON} on that requeue (restarts={held_restarts}) right after"
                if raced
                else f"the job was pending and not held (restarts={job.restart_count}) {window_s:.1f} s "
                f"before the step failed, and held with Reason={ADMIN_HELD_REASON} on that same attempt "
                "right after"
            )
            self._event(
                EventType.WATCHDOG_FIRED,
                level=Level.WARNING,
                actor=Actor.WATCHDOG,
                action="release",
                message=clip(
                    f"the hold step failed, but Slurm had applied it: {seen}. Slurm does not record who "
                    "holds a job, so the hold was taken as TrainGuard's own and released unchanged "
                    f"(fail-open); an administrator's hold placed within those {window_s:.1f} s would have "
                    "been lifted too: hold the job again if so",
                    600,
                ),
                data={
                    "advice_id": advice_id,
                    "window_s": window_s,
                    "restarts": held_restarts,
                    "reason": ADMIN_HELD_REASON,
                    "raced": raced,
                },
                key=f"{advice_id}/failed-hold-released",
            )
            await self._flush()
        return lifted

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
        held_restarts: int | None = None,
        tag: str = "",
    ) -> ActionResult | None:
        """Run one scheduler step (checks Slurm first, idempotent); audit its outcome. `tag` tells apart two
        steps of one kind for the same advice (the audit keeps one row per key)."""
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
                    held_restarts=held_restarts,
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
                key=f"{advice_id}/{name}{tag}/failed",
            )
            return None
        self._event(
            EventType.ACTION,
            actor=actor,
            action=result.step.value,
            nodes=nodes,
            message=clip(result.detail or result.step.value),
            data={"advice_id": advice_id, "performed": result.performed, "confirmed_at": result.confirmed_at},
            key=f"{advice_id}/{result.step.value}{tag}",
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


Evidence = tuple[JobSnapshot, float]  # Slurm's record of the job, and when the workflow asked for it
Reading = asyncio.Task[Evidence | None]


async def _evidence(reading: Reading | None, *, needed: bool) -> Evidence | None:
    """The read-ahead's record when the hold step failed; otherwise it is not needed and is cancelled, so no
    read outlives its step."""
    if reading is None:
        return None
    if not needed:
        reading.cancel()
        return None
    return await reading


def _own_hold(result: ActionResult) -> str | None:
    """Slurm's Reason for the hold TrainGuard placed; "" when the step found the job held by someone
    else (never ours to lift); None when an older worker did not say (release as before)."""
    return result.own_hold

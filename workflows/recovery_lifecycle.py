"""The lifecycle of a workload: watching its job one slice at a time, what each observation does to the
workload's state (a new allocation, training resumed, completed, gone, cancelled), the paused wait, and
the end of a run (limits given back, continue-as-new suggested). Deterministic.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

from workflows.recovery_failure import FailurePipeline
from workflows.recovery_patches import PATCH_CANCELLED, PATCH_ENDED_FAILED, PATCH_LIMITS, PATCH_PAUSED_GONE

with workflow.unsafe.imports_passed_through():
    from trainguard import contracts as c
    from trainguard.models import (
        EventType,
        JobSnapshot,
        Level,
        Observation,
        ObservationKind,
        WorkloadState,
        clip,
    )
    from trainguard.policy import record_restart
    from trainguard.slurm.states import ALLOCATED_STATES, CANCELLED, FAILED_STATES, PREEMPTED_STATES
    from workflows import story

WATCH_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30))
# Slurm states that prove a new attempt got an allocation. Not COMPLETING: a requeued job's old
# allocation is still tearing down under the new restart count.
ALLOCATED = ALLOCATED_STATES
# Slurm's word that an attempt ended without success (CANCELLED and COMPLETED have their own paths).
ENDED_FAILED = FAILED_STATES | PREEMPTED_STATES


class Lifecycle(FailurePipeline):
    async def _wait_paused(self) -> None:
        """Paused: nothing is watched, but a job Slurm no longer reports still ends its workload (one
        read of Slurm per watch slice, so a forgotten pause costs a few actions an hour)."""

        def woken() -> bool:
            return not self.carry.status.paused or bool(self.pending) or bool(self.pending_settings)

        if not workflow.patched(PATCH_PAUSED_GONE):
            await workflow.wait_condition(woken)
            return
        with contextlib.suppress(TimeoutError):
            await workflow.wait_condition(woken, timeout=self.cfg.watch_slice_s)
            return
        found = await workflow.execute_activity(
            c.JOB_STATE,
            c.JobActionInput(workload=self.inp.workload, advice_id=""),
            result_type=c.JobStateResult,
            task_queue=self.cfg.cluster_queue,
            start_to_close_timeout=timedelta(seconds=60),
            retry_policy=WATCH_RETRY,
            summary=story.state_summary(self.inp.workload.job_id),
        )
        job = found.job
        if job is None:
            self._event(EventType.STOPPED, message="Slurm no longer reports this job; paused monitoring ends")
            self._set_status(state=WorkloadState.GONE)
        elif job.state == CANCELLED:
            self._cancelled(job)

    async def _watch(self) -> Observation | None:
        carry = self.carry
        handle = workflow.start_activity(
            c.WATCH_JOB,
            c.WatchInput(
                workload=self.inp.workload,
                cursor=carry.cursor,
                progress=carry.progress,
                phase=carry.phase,
                stdout_path=carry.stdout_path,
                slice_s=self.cfg.watch_slice_s,
                poll_interval_s=self.cfg.poll_interval_s,
                settle_s=self.cfg.settle_s,
                last_job=carry.last_job,
                context=carry.watched,
            ),
            result_type=c.WatchResult,
            task_queue=self.cfg.cluster_queue,
            start_to_close_timeout=timedelta(seconds=self.cfg.watch_slice_s + 120),
            heartbeat_timeout=timedelta(seconds=self.cfg.heartbeat_timeout_s),
            retry_policy=WATCH_RETRY,
            summary=story.watch_summary(self.inp.workload.job_id, carry.phase.attempt_restarts),
        )
        while not handle.done():
            await workflow.wait_condition(
                lambda: (
                    handle.done()
                    or bool(self.pending)
                    or self.carry.status.paused
                    or bool(self.pending_settings)
                )
            )
            self._apply_settings()  # safe point: only the watch runs, nothing acts on Slurm
            await self._flush()
            if self.carry.status.paused and not handle.done():
                handle.cancel()
                with contextlib.suppress(ActivityError, asyncio.CancelledError):
                    await handle
                return None
        result = await handle
        self.iteration_before_watch = carry.progress.last_iteration
        self._set_carry(cursor=result.cursor, stdout_path=result.stdout_path or carry.stdout_path)
        obs = result.observation
        self._set_carry(progress=obs.progress, last_job=obs.job or self.carry.last_job)
        if obs.job is not None and obs.job.nodes:
            self._set_carry(allocation=obs.job.nodes)
        if obs.progress.last_iteration is not None:
            self._set_status(last_iteration=obs.progress.last_iteration)
        return obs

    async def _on_observation(self, obs: Observation) -> None:
        kind = obs.kind
        job = obs.job
        phase = self.carry.phase
        if job is not None and job.state == CANCELLED and workflow.patched(PATCH_CANCELLED):
            self._cancelled(job)
        elif kind == ObservationKind.COMPLETED:
            self._derive_missed_lifecycle(obs)
            self._event(EventType.COMPLETED, message="training completed", data=self._job_data(job))
            self._set_status(state=WorkloadState.COMPLETED)
        elif kind == ObservationKind.GONE:
            self._event(EventType.STOPPED, message="Slurm no longer reports this job; monitoring ends")
            self._set_status(state=WorkloadState.GONE)
        elif kind == ObservationKind.STATE_CHANGE and job is not None:
            # A new attempt got an allocation (it may already have failed again when we look).
            if job.restart_count > phase.attempt_restarts and job.state in ALLOCATED and not job.held:
                if phase.restart_requested_at is None:  # Slurm's or an operator's requeue, not ours
                    self._set_carry(policy_state=record_restart(self.carry.policy_state, obs.observed_at))
                self._event(
                    EventType.ALLOCATION_RESTARTED,
                    attempt=job.restart_count,
                    message=f"allocation restarted on {','.join(job.nodes) or '?'}",
                    nodes=job.nodes,
                    data=self._job_data(job),
                )
                # The new attempt's rhythm starts now: startup and checkpoint loading are not a hang.
                self._set_carry(
                    watched=(),
                    progress=self.carry.progress.model_copy(update={"last_progress_at": None}),
                    phase=c.Phase(
                        attempt_restarts=job.restart_count,
                        awaiting_progress=True,
                        restart_requested_at=phase.restart_requested_at,
                        fault_at=phase.fault_at or obs.observed_at,
                    ),
                )
                self._set_status(attempts=job.restart_count, state=WorkloadState.RECOVERING)
            if self._advised_attempt_ended(job):
                self._set_status(state=WorkloadState.FAILED)
            else:
                self._set_status(state=self._state_for_job(job))
        elif kind == ObservationKind.PROGRESS:
            data: dict[str, str | int | float | bool | None] = {"iteration": obs.progress.last_iteration}
            if phase.fault_at is not None:
                lost = max(0.0, obs.observed_at - phase.fault_at)
                data["time_to_productive_s"] = round(lost, 3)
                self._set_status(lost_s=self.carry.status.lost_s + lost)
            self._event(
                EventType.TRAINING_RESUMED,
                message=f"training resumed; latest iteration seen {obs.progress.last_iteration}",
                data=data,
            )
            self._set_carry(phase=c.Phase(attempt_restarts=phase.attempt_restarts))
            self._set_status(state=WorkloadState.WATCHING)
        elif kind in (ObservationKind.FAILURE, ObservationKind.STRAGGLER) and not phase.failure_handled:
            await self._on_failure(obs)

    def _advised_attempt_ended(self, job: JobSnapshot) -> bool:
        """The failure of this attempt was decided while Slurm still said RUNNING and only advised
        (observe mode, or no recovery): when Slurm then ends the attempt it is `failed`, not `watching`
        until slurmctld forgets the job. Still watched: Slurm or a person may requeue it."""
        return (
            self.carry.phase.failure_handled
            and self.carry.status.state == WorkloadState.WATCHING
            and job.restart_count == self.carry.phase.attempt_restarts
            and job.state in ENDED_FAILED
            and workflow.patched(PATCH_ENDED_FAILED)
        )

    def _cancelled(self, job: JobSnapshot) -> None:
        """A user or an administrator cancelled the job (Slurm's state says so): it stays cancelled."""
        who = f"by {clip(job.cancelled_by, 100)}" if job.cancelled_by else "(Slurm does not record by whom)"
        self._event(
            EventType.STOPPED,
            level=Level.WARNING,
            message=f"job cancelled {who}: Slurm reports JobState=CANCELLED"
            + (f" (Reason={clip(job.reason, 100)})" if job.reason else "")
            + "; TrainGuard stops watching and will not requeue or release it",
            data={**self._job_data(job), "cancelled": True, "cancelled_by": clip(job.cancelled_by, 100)},
        )
        self._set_status(state=WorkloadState.STOPPED)

    def _derive_missed_lifecycle(self, obs: Observation) -> None:
        """A whole attempt can pass while no worker watched (e.g. a long worker outage): record its
        restart and resumption from Slurm's restart count and the log, marked as derived."""
        job, phase = obs.job, self.carry.phase
        if job is None:
            return
        if job.restart_count > phase.attempt_restarts:
            self._event(
                EventType.ALLOCATION_RESTARTED,
                attempt=job.restart_count,
                nodes=job.nodes,
                message=f"allocation restarted on {','.join(job.nodes) or '?'} (seen after the fact)",
                data={**self._job_data(job), "derived": True},
            )
            self._set_status(attempts=job.restart_count)
        restarted = job.restart_count > phase.attempt_restarts or phase.awaiting_progress
        before, after = self.iteration_before_watch, obs.progress.last_iteration
        if restarted and after is not None and (before is None or after != before):
            self._event(
                EventType.TRAINING_RESUMED,
                attempt=job.restart_count,
                message=f"training resumed (seen after the fact); reached iteration {after}",
                data={"iteration": after, "derived": True},
            )

    def _state_for_job(self, job: JobSnapshot) -> WorkloadState:
        current = self.carry.status.state
        if job.held and current in (WorkloadState.WATCHING, WorkloadState.RECOVERING):
            return WorkloadState.HELD
        return current

    def _job_data(self, job: JobSnapshot | None) -> dict[str, str | int | float | bool | None]:
        if job is None:
            return {}
        return {"state": job.state, "restarts": job.restart_count, "exit_code": job.exit_code}

    async def _release_limits(self) -> None:
        """A workload that ends stops counting against the cluster-wide cap on excluded nodes."""
        if not (self.carry.policy_state.excluded_nodes and self.cfg.limits.enabled):
            return
        if not workflow.patched(PATCH_LIMITS):
            return
        with contextlib.suppress(ActivityError):  # the cap's entry then expires on its own
            await workflow.execute_activity(
                c.WORKLOAD_ENDED,
                c.WorkloadEnded(cluster=self.inp.workload.cluster, workload_key=self.inp.workload.key),
                task_queue=self.cfg.control_queue,
                start_to_close_timeout=timedelta(seconds=30),
                retry_policy=RetryPolicy(maximum_attempts=5),
                summary=story.ended_summary(self.inp.workload.job_id),
            )

    def _should_continue_as_new(self) -> bool:
        info = workflow.info()
        return (
            info.is_continue_as_new_suggested() or info.get_current_history_length() > self.cfg.history_limit
        )

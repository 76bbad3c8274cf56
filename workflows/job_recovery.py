"""JobRecovery: one long-lived workflow per monitored workload (cluster + job id + submit time).

Deterministic: imports only models, contracts and the pure policy. Every I/O is an activity. Handlers only
change state or enqueue audit events; the run loop makes every decision.
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
    from trainguard.models import (
        ActionKind,
        ActionResult,
        Actor,
        Advice,
        Attribution,
        AuditEventIn,
        Category,
        EventType,
        Finding,
        JobSnapshot,
        Level,
        Mode,
        ModeChange,
        Observation,
        ObservationKind,
        PauseRequest,
        Verdict,
        WorkloadState,
        WorkloadStatus,
        clip,
        mode_change_text,
    )
    from trainguard.policy import DecisionContext, PolicyState, decide, effective_mode, record_restart
    from trainguard.policy import limits as lim
    from trainguard.runtime_config import describe_diff, diff_data, settings_diff, watchdog_guards
    from trainguard.slurm.states import (
        ALLOCATED_STATES,
        CANCELLED,
        COMPLETING,
        FAILED_STATES,
        PENDING,
        PREEMPTED_STATES,
        REQUEUE_HELD_REASON,
        RUNNING,
    )
    from workflows import story
    from workflows.search_attributes import status_search_attributes

# Audit writes must not be lost: retry until the store comes back (it may be down for minutes).
AUDIT_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=10))
# Scheduler actions retry with backoff while slurmctld is unreachable; non-retryable errors stop at once.
ACTION_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=5), backoff_coefficient=2.0
)
WATCH_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30))
WATCHED_LIMIT = 20  # watched findings kept per attempt (they travel in every watch input)
TERMINAL = {WorkloadState.COMPLETED, WorkloadState.STOPPED, WorkloadState.GONE}
# workflow.patched ids: each guards a command-sequence change for running workflows.
PATCH_SETTINGS = "workload-settings-reload"  # settings changes applied to a running workload
PATCH_WATCHDOG_SCOPE = "watchdog-settings"  # watchdog.mode / acknowledge / environment_pattern read
PATCH_DRAIN = "drain-audit-before-close"  # events a handler enqueued during the final flush are stored
PATCH_STOP_ON_OBSERVE = "observe-mid-recovery-stops"  # a switch to observe mid-sequence skips the rest
# Slurm states that prove a new attempt got an allocation. Not COMPLETING: a requeued job's old
# allocation is still tearing down under the new restart count.
ALLOCATED = ALLOCATED_STATES
# workflow.patched ids: histories recorded before each change replay their old command sequence.
PATCH_CANCELLED = "safety-cancelled-by-slurm"  # a job Slurm reports CANCELLED ends the workload
PATCH_ALLOCATION = "safety-allocation-guard"  # the policy sees the job's allocation and excludes only it
PATCH_ENDED_FAILED = "advised-attempt-ends-failed"  # an advised attempt that Slurm ends is `failed`
# Slurm's word that an attempt ended without success (CANCELLED and COMPLETED have their own paths).
ENDED_FAILED = FAILED_STATES | PREEMPTED_STATES
# Fail-open on every path (docs/upgrading.md lists every id and when it may go).
PATCH_PAUSE_STOPS = "paused-mid-recovery-stops"  # a pause between hold and exclusion skips the rest
PATCH_FAILED_HOLD = "release-after-failed-requeue-hold"  # a requeue-hold reported failed may have held
PATCH_HELD_ADVICE = "held-advice-write-bounded"  # an audit outage cannot keep a contained job held
PATCH_PAUSED_GONE = "paused-workload-ends-when-gone"  # a paused workload still ends when its job is gone
PATCH_LIMITS = "cluster-safety-limits"  # ClusterWatch grants requeues/exclusions/drains (cluster-wide limits)
PATCH_FAILED_HOLD_OURS = "failed-hold-requeue-is-ours"  # that released requeue is ours, not a new failure


@workflow.defn(name="JobRecovery")
class JobRecoveryWorkflow:
    @workflow.init
    def __init__(self, inp: c.JobRecoveryInput) -> None:
        self.inp = inp
        self.cfg = inp.config
        w = inp.workload
        carry = inp.carry or c.RecoveryCarry(
            status=WorkloadStatus(
                workload_key=w.key,
                cluster=w.cluster,
                job_id=w.job_id,
                submit_time=w.submit_time,
                workflow_id=w.workflow_id,
                name=inp.name,
                environment=inp.opt_in.environment,
                mode=effective_mode(inp.cluster_mode, inp.opt_in.mode, None),
                first_seen_at=workflow.time(),
            ),
            job_mode=inp.opt_in.mode,
            cluster_mode=inp.cluster_mode,
            phase=c.Phase(attempt_restarts=inp.initial_restarts),
        )
        self.carry = carry
        self.pending: list[AuditEventIn] = []
        self.status_dirty = inp.carry is None
        self.last_search_attrs: tuple[object, ...] = ()
        self.iteration_before_watch: int | None = None
        # Slurm's Reason right after TrainGuard's own hold in the current failure ("" = none of ours;
        # None = a hold from a worker that did not report it: release as before). Rebuilt on replay.
        self.our_hold: str | None = ""
        self.pending_settings: list[c.WorkloadSettings] = []
        self.held_at = 0.0  # when the containment hold of the current failure was placed

    # ---- handlers: change state, enqueue audit; no decisions -------------------------------------
    @workflow.query
    def status(self) -> WorkloadStatus:
        return self.carry.status

    @workflow.update
    async def set_mode(self, change: ModeChange) -> WorkloadStatus:
        self._set_carry(operator_mode=change.mode)
        self._mode_changed(change, scope="workload")
        return self.carry.status

    @workflow.signal
    async def set_cluster_mode(self, change: ModeChange) -> None:
        self._set_carry(cluster_mode=change.mode)
        self._mode_changed(change, scope="cluster")

    @workflow.signal
    async def apply_settings(self, update: c.WorkloadSettings) -> None:
        # Applied by the run loop at a safe point; between two steps of an action sequence only to stop it.
        self.pending_settings.append(update)

    @workflow.signal
    async def set_paused(self, req: PauseRequest) -> None:
        if req.paused == self.carry.status.paused:
            return
        self._set_status(paused=req.paused)
        self._event(
            EventType.MONITORING_PAUSED if req.paused else EventType.MONITORING_RESUMED,
            actor=Actor.OPERATOR,
            message=clip(req.reason or ("paused" if req.paused else "resumed")),
            data={"who": clip(req.who, 200)},
        )

    # ---- main loop ----------------------------------------------------------------------------------
    @workflow.run
    async def run(self, inp: c.JobRecoveryInput) -> WorkloadStatus:
        self._show_details()  # user metadata (Temporal UI), not a command: old histories replay unchanged
        if inp.carry is None:
            self._event(
                EventType.WORKLOAD_DISCOVERED,
                message=f"watching job {inp.workload.job_id} in {self.mode.value} mode",
                data={"environment": clip(inp.opt_in.environment, 200), "job_mode": inp.opt_in.mode.value},
            )
        while True:
            self._apply_settings()
            await self._flush()
            if self.carry.status.paused:
                await self._wait_paused()
                if self.carry.status.state in TERMINAL:
                    await self._flush()
                    await self._drain()
                    return self.carry.status
                continue
            obs = await self._watch()
            if obs is not None:
                await self._on_observation(obs)
            await self._flush()
            if self.carry.status.state in TERMINAL:
                await self._release_limits()
                await self._drain()
                return self.carry.status
            if self._should_continue_as_new():
                await self._drain()
                # The config travels too: settings applied at run time must survive continue-as-new.
                workflow.continue_as_new(inp.model_copy(update={"carry": self.carry, "config": self.cfg}))

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

    # ---- watching -------------------------------------------------------------------------------------
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

    # ---- failure handling -------------------------------------------------------------------------------
    async def _on_failure(self, obs: Observation) -> None:
        job = obs.job or self.carry.last_job
        findings = obs.findings
        attempt = self.carry.phase.attempt_restarts
        top = _top_finding(findings)
        detected_at = obs.observed_at
        first_signal = obs.first_signal_at or detected_at
        self._event(
            EventType.DETECTION,
            level=Level.ERROR if any(f.fatal for f in findings) else Level.WARNING,
            actor=Actor.POLICY,
            category=top.category.value if top else "",
            attribution=top.attribution.value if top else "",
            nodes=tuple(sorted({n for f in findings for n in f.nodes})),
            evidence=tuple(clip(f.line) for f in findings[:10]),
            message=f"{len(findings)} finding(s): "
            + ", ".join(sorted({f.pattern_id for f in findings}))[:300],
            data={
                "first_signal_at": first_signal,
                "detected_at": detected_at,
                "detection_latency_s": round(max(0.0, detected_at - first_signal), 3),
                "job_state": job.state if job else "",
            },
        )
        await self._flush()
        fatal = any(f.fatal for f in findings)
        acting = self.mode == Mode.ACTION and self.cfg.acknowledged
        held = False
        self.our_hold = ""
        # Contain only a job Slurm itself requeued (e.g. after NODE_FAIL): it is pending and could start
        # again on the bad node before the exclusion is set. Releasing it unchanged is then exactly what
        # Slurm would have done without us, which is what the watchdog's fail-open must mean.
        pending = job is not None and job.state == PENDING and not job.held
        if acting and fatal and pending and job is not None and self._may_contain():
            held = await self._contain(attempt, job)

        decision = await self._decide_with_watchdog(findings, job, held, obs.usable_nodes)
        if decision is None:
            return  # watchdog released the job unchanged; keep watching this attempt's cascades out
        verdict, advice = decision
        if not verdict.fatal and job is not None and job.state == "RUNNING":
            # Recorded and watched: keep the evidence for the attribution if this attempt stops later.
            kept = (*self.carry.watched, *(f for f in findings if f.fatal and f not in self.carry.watched))
            self._set_carry(watched=kept[-WATCHED_LIMIT:])
        elif verdict.fatal and self.carry.watched:
            self._set_carry(watched=())
        self._set_status(
            last_category=verdict.category.value,
            last_attribution=verdict.attribution.value,
            current_advice_id=advice.advice_id,
        )
        if held and workflow.patched(PATCH_HELD_ADVICE):
            # The advice must be stored before its steps run, but a job we hold must not wait for an
            # audit store that is down: past the decision budget it is released unchanged.
            stored = asyncio.ensure_future(self._record_advice(advice))
            budget = max(1.0, self.cfg.decision_timeout_s - (workflow.time() - self.held_at))
            try:
                await workflow.wait_condition(stored.done, timeout=budget)
            except TimeoutError:
                await self._watchdog_release(held, "audit store did not take the advice in time")
                await stored  # stored once the store is back; its steps are not run
                return
            await stored
        else:
            await self._record_advice(advice)
        await self._execute(advice, held, first_signal, detected_at, job)

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

    async def _decide_with_watchdog(
        self, findings: tuple[Finding, ...], job: JobSnapshot | None, held: bool, usable: tuple[str, ...]
    ) -> tuple[Verdict, Advice] | None:
        started = workflow.time()
        try:
            if self._watchdog_guards():
                return await asyncio.wait_for(
                    self._decide(findings, job, usable), self.cfg.decision_timeout_s
                )
            return await self._decide(findings, job, usable)
        except (TimeoutError, ActivityError) as err:
            # The timer cancels the attribution activity, which can surface as a cancelled ActivityError.
            late = workflow.time() - started >= self.cfg.decision_timeout_s
            if late or not isinstance(err, ActivityError):
                why = f"timed out after {self.cfg.decision_timeout_s:g} s"
            else:
                why = f"failed: {clip(str(err.cause), 200)}"
            await self._watchdog_release(held, f"attribution/decision {why}")
            return None

    async def _decide(
        self, findings: tuple[Finding, ...], job: JobSnapshot | None, usable: tuple[str, ...]
    ) -> tuple[Verdict, Advice]:
        verdict = await workflow.execute_activity(
            c.ATTRIBUTE,
            c.AttributeInput(workload=self.inp.workload, findings=findings, job=job),
            result_type=Verdict,
            task_queue=self.cfg.control_queue,
            start_to_close_timeout=timedelta(seconds=self.cfg.decision_timeout_s),
            retry_policy=RetryPolicy(maximum_attempts=3),
            summary=story.attribute_summary(self.inp.workload.job_id, self.carry.phase.attempt_restarts),
        )
        # Safe point: nothing acted yet for this failure; a rollback to observe that arrived during
        # attribution makes this decision an advice only.
        self._apply_settings()
        guard = workflow.patched(PATCH_ALLOCATION)
        allocation = self._allocation(job) if guard else ()
        ctx = DecisionContext(
            workload_key=self.inp.workload.key,
            mode=self.mode,
            acknowledged=self.cfg.acknowledged,
            now=workflow.time(),
            job=job,
            usable_nodes=usable,
            checkpoint_iteration=self.carry.progress.last_checkpoint_iteration,
            progress=self.carry.progress,
            allocation_nodes=allocation,
            legacy_unrestricted=not guard,
        )
        policy = self.cfg.policy
        if not workflow.patched("exclude-min-confidence"):
            # Histories recorded before low-confidence verdicts stopped excluding replay as they ran.
            policy = policy.model_copy(update={"exclude_min_confidence": 0.0})
        before = self.carry.policy_state
        advice, new_state = decide(before, verdict, ctx, policy)
        self._set_carry(policy_state=new_state)
        if job is not None:
            advice = advice.model_copy(
                update={
                    "array_job_id": job.array_job_id or "",
                    "array_task_id": job.array_task_id or "",
                    "job_nodes": job.nodes or allocation,
                    "job_user": job.user,
                }
            )
        advice = await self._with_fleet_context(verdict, advice, job, allocation)
        advice = await self._within_limits(verdict, advice, before, allocation)
        return verdict, advice

    async def _within_limits(
        self, verdict: Verdict, advice: Advice, before: PolicyState, allocation: tuple[str, ...]
    ) -> Advice:
        """Ask the cluster's ClusterWatch before acting: the hour's budget of requeues, exclusions and
        drains, the cap on nodes excluded at once, and storms across jobs are the cluster's, not one job's.
        Every fatal failure is reported (observe mode too), so a storm is seen whoever acts."""
        limits = self.cfg.limits
        requeue = advice.execute and advice.action == ActionKind.REQUEUE
        if not limits.enabled or not (verdict.fatal or requeue) or not workflow.patched(PATCH_LIMITS):
            return advice
        acting = self.mode == Mode.ACTION and self.cfg.acknowledged
        own = set(allocation)
        new = tuple(n for n in advice.exclude_nodes if n not in before.excluded_nodes)
        request = lim.GrantRequest(
            request_id=advice.advice_id,
            workload_key=self.inp.workload.key,
            failure=lim.FailureReport(
                workload_key=self.inp.workload.key,
                category=verdict.category,
                attribution=verdict.attribution,
                nodes=tuple(n for n in verdict.nodes if not own or n in own)[:32],
            )
            if verdict.fatal
            else None,
            requeue=requeue,
            exclude=new if requeue else (),
            drain=advice.drain_nodes if acting else (),
        )
        result = await workflow.execute_activity(
            c.GRANT_ACTIONS,
            c.GrantInput(cluster=self.inp.workload.cluster, request=request, settle_s=limits.storm_settle_s),
            result_type=lim.GrantResult,
            task_queue=self.cfg.control_queue,
            start_to_close_timeout=timedelta(seconds=limits.storm_settle_s + 30),
            retry_policy=AUDIT_RETRY,
            summary=story.grant_summary(self.inp.workload.job_id, advice.attempt),
        )
        if result.unavailable and not (request.requeue or request.drain):
            return advice  # nothing was to be done: advice without the limits is still the same advice
        limited = lim.limit_advice(advice, result, before.excluded_nodes)
        state = self.carry.policy_state
        if requeue and not (limited.execute and limited.action == ActionKind.REQUEUE):
            # Not restarted after all: the policy's counters stay as they were; advice ids move on.
            state = before.model_copy(update={"sequence": state.sequence, "history": state.history})
        elif set(limited.exclude_nodes) != set(advice.exclude_nodes):
            state = state.model_copy(update={"excluded_nodes": before.excluded_nodes})
        self._set_carry(policy_state=state)
        return limited

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

    def _allocation(self, job: JobSnapshot | None) -> tuple[str, ...]:
        """The failed attempt's nodes: Slurm's current list, else the newest one it reported."""
        return tuple(dict.fromkeys((*(job.nodes if job is not None else ()), *self.carry.allocation)))

    async def _with_fleet_context(
        self, verdict: Verdict, advice: Advice, job: JobSnapshot | None, allocation: tuple[str, ...] = ()
    ) -> Advice:
        """Other workloads' failures: a systemic array failure stops recovery; repeat-offender nodes drain."""
        policy = self.cfg.policy
        in_array = job is not None and bool(job.array_job_id)
        hardware = policy.drain_enabled and verdict.attribution == Attribution.HARDWARE
        if not (in_array or hardware):
            return advice
        fleet = await workflow.execute_activity(
            c.FLEET_CONTEXT,
            c.FleetInput(
                workload=self.inp.workload,
                verdict=verdict,
                job=job,
                now=workflow.time(),
                policy=policy,
                allocation=allocation,
            ),
            result_type=c.FleetContext,
            task_queue=self.cfg.control_queue,
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=AUDIT_RETRY,
            summary=story.fleet_summary(self.inp.workload.job_id),
        )
        if fleet.array_systemic and advice.action == ActionKind.REQUEUE:
            advice = advice.model_copy(
                update={"action": ActionKind.NONE, "execute": False, "reason": clip(fleet.array_reason, 600)}
            )
        if fleet.drain:
            nodes = tuple(node for node, _ in fleet.drain)
            reasons = "; ".join(f"{node}: {reason}" for node, reason in fleet.drain)
            advice = advice.model_copy(
                update={"drain_nodes": nodes, "reason": clip(f"{advice.reason} Drain {reasons}.", 800)}
            )
        return advice

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
            watched = not advice.verdict.fatal and workflow.patched("keep-watching-after-record-only")
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

    async def _drain(self) -> None:
        """Before completion or continue-as-new: every handler finished and nothing left to store. A
        signal can land while the final flush runs (its event would be dropped): flush again."""
        while True:
            await workflow.wait_condition(workflow.all_handlers_finished)
            await self._flush()
            if not self.pending or not workflow.patched(PATCH_DRAIN):
                return

    # ---- settings that reach running workloads ----------------------------------------------------------
    def _apply_settings(self) -> None:
        """Apply settings changes signalled by ClusterWatch (worker restart / config reload), audited."""
        if not self.pending_settings or not workflow.patched(PATCH_SETTINGS):
            return
        updates, self.pending_settings = self.pending_settings, []
        for update in updates:
            diff = settings_diff(self.cfg, update.config)
            mode_before = self.mode
            self.cfg = update.config
            if update.cluster_mode is not None and update.cluster_mode != self.carry.cluster_mode:
                diff = {"cluster_mode": (self.carry.cluster_mode.value, update.cluster_mode.value), **diff}
                self._set_carry(cluster_mode=update.cluster_mode)
            if not diff:
                continue
            self._event(
                EventType.SETTINGS_CHANGED,
                level=Level.WARNING if self.mode != mode_before else Level.INFO,
                actor=Actor.SYSTEM,
                message=clip(
                    f"settings changed by {update.source}: {describe_diff(diff)}; "
                    f"effective mode {mode_before.value} → {self.mode.value}"
                ),
                data={"source": clip(update.source, 100), "who": clip(update.who, 200), **diff_data(diff)},
            )

    def _switched_to_observe(self, advice: Advice) -> bool:
        """Between requeue-hold and the exclusion: if the workload left action mode meanwhile (operator,
        cluster mode, settings reload), skip the remaining steps; the caller still releases the job
        TrainGuard holds, unchanged (fail-open: Slurm runs it as it would have without us)."""
        self._apply_settings()  # the sequence stops here if they say observe
        paused = self.carry.status.paused and workflow.patched(PATCH_PAUSE_STOPS)
        if self.mode == Mode.ACTION and self.cfg.acknowledged and not paused:
            return False
        if not workflow.patched(PATCH_STOP_ON_OBSERVE):
            return False
        why = "monitoring paused" if paused else f"switched to {self.mode.value} mode"
        self._event(
            EventType.ACTION,
            level=Level.WARNING,
            actor=Actor.SYSTEM,
            action="recovery_stopped",
            message=f"{why} mid-recovery: exclusion skipped; releasing the job TrainGuard held, unchanged",
            data={"advice_id": advice.advice_id},
        )
        return True

    def _may_contain(self) -> bool:
        """Hold a job only where the watchdog is sure to release it: it guards this workload
        (watchdog.enabled, watchdog.environment_pattern) and may act (watchdog.mode=action, acknowledged)."""
        if self.cfg.watchdog_release and self._watchdog_guards():
            return True
        return not workflow.patched(PATCH_WATCHDOG_SCOPE)

    def _watchdog_guards(self) -> bool:
        """watchdog.enabled and watchdog.environment_pattern: is this workload's decision time-boxed?"""
        if not self.cfg.watchdog_enabled:
            return False
        if watchdog_guards(self.cfg.watchdog_environment_pattern, self.inp.opt_in.environment):
            return True
        return not workflow.patched(PATCH_WATCHDOG_SCOPE)

    # ---- state helpers ------------------------------------------------------------------------------------
    @property
    def mode(self) -> Mode:
        return effective_mode(self.carry.cluster_mode, self.carry.job_mode, self.carry.operator_mode)

    def _set_carry(self, **update: object) -> None:
        self.carry = self.carry.model_copy(update=update)
        if {"cluster_mode", "operator_mode", "job_mode"} & update.keys():
            self._set_status(mode=self.mode)

    def _set_status(self, **update: object) -> None:
        status = self.carry.status.model_copy(update=update)
        if status != self.carry.status:
            self.carry = self.carry.model_copy(update={"status": status})
            self.status_dirty = True

    def _mode_changed(self, change: ModeChange, *, scope: str) -> None:
        # A cluster-wide change is one operator action with one operator row (the API's); each workload
        # records what it did to its own effective mode as the system.
        data: dict[str, str | int | float | bool | None] = {"who": clip(change.who, 200), "scope": scope}
        if change.role:
            data.update(role=clip(change.role, 50), via=clip(change.via, 50), source="api")
        self._event(
            EventType.MODE_CHANGED,
            actor=change.actor if scope == "workload" else Actor.SYSTEM,
            mode=self.mode.value,
            message=mode_change_text(change, scope=scope, target=self.inp.workload.key, effective=self.mode),
            data=data,
        )

    def _state_for_job(self, job: JobSnapshot) -> WorkloadState:
        current = self.carry.status.state
        if job.held and current in (WorkloadState.WATCHING, WorkloadState.RECOVERING):
            return WorkloadState.HELD
        return current

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

    def _show_details(self) -> None:
        """The Temporal UI's "current details": job, attempt, state, mode and last verdict."""
        workflow.set_current_details(
            story.current_details(self.carry.status, self.carry.phase.attempt_restarts)
        )

    def _job_data(self, job: JobSnapshot | None) -> dict[str, str | int | float | bool | None]:
        if job is None:
            return {}
        return {"state": job.state, "restarts": job.restart_count, "exit_code": job.exit_code}

    def _should_continue_as_new(self) -> bool:
        info = workflow.info()
        return (
            info.is_continue_as_new_suggested() or info.get_current_history_length() > self.cfg.history_limit
        )


def _own_hold(result: ActionResult) -> str | None:
    """Slurm's Reason for the hold TrainGuard placed; "" when the step found the job held by someone
    else (never ours to lift); None when an older worker did not say (release as before)."""
    return result.own_hold


def _top_finding(findings: tuple[Finding, ...]) -> Finding | None:
    ranked = [f for f in findings if f.fatal and not f.cascade] or [f for f in findings if f.fatal]
    ranked = ranked or list(findings)
    return ranked[0] if ranked else None

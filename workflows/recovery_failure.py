"""The failure pipeline: a failure observed → detection audited → (containment hold) → attribution under
the watchdog's budget → the policy's decision → fleet context and the cluster's limits → advice recorded
→ the action executor. Deterministic.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

from workflows.recovery_actions import ActionExecutor
from workflows.recovery_audit import AUDIT_RETRY
from workflows.recovery_patches import PATCH_ALLOCATION, PATCH_HELD_ADVICE, PATCH_LIMITS, PATCH_MIN_CONFIDENCE

with workflow.unsafe.imports_passed_through():
    from trainguard import contracts as c
    from trainguard.models import (
        ActionKind,
        Actor,
        Advice,
        Attribution,
        EventType,
        Finding,
        JobSnapshot,
        Level,
        Mode,
        Observation,
        Verdict,
        clip,
    )
    from trainguard.policy import DecisionContext, PolicyState, decide
    from trainguard.policy import limits as lim
    from trainguard.slurm.states import PENDING
    from workflows import story

WATCHED_LIMIT = 20  # watched findings kept per attempt (they travel in every watch input)


class FailurePipeline(ActionExecutor):
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
        reading = self._read_ahead_for(advice, held, job)
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
        await self._execute(advice, held, first_signal, detected_at, job, reading)

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
            heartbeat_timeout=timedelta(seconds=self.cfg.step_heartbeat_timeout_s),
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
        if not workflow.patched(PATCH_MIN_CONFIDENCE):
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
            heartbeat_timeout=timedelta(seconds=self.cfg.step_heartbeat_timeout_s),
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
            heartbeat_timeout=timedelta(seconds=self.cfg.step_heartbeat_timeout_s),
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


def _top_finding(findings: tuple[Finding, ...]) -> Finding | None:
    ranked = [f for f in findings if f.fatal and not f.cascade] or [f for f in findings if f.fatal]
    ranked = ranked or list(findings)
    return ranked[0] if ranked else None

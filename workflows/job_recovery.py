"""JobRecovery: one long-lived workflow per monitored workload (cluster + job id + submit time).

Deterministic: imports only models, contracts and the pure policy. Every I/O is an activity. Handlers only
change state or enqueue audit events; the run loop makes every decision.

The roles live in their own modules, each class building on the one before it:
- recovery_state: what a run holds (the carry continue-as-new hands on) and its setters;
- recovery_audit: the audit queue (enqueue, flush with the status, drain before the run ends);
- recovery_settings: settings and mode changes at safe points; the gates that stop or allow actions;
- recovery_actions: the action executor (scheduler steps, containment hold, watchdog release);
- recovery_failure: the failure pipeline (detection, attribution, decision, limits, advice);
- recovery_lifecycle: watching, observations, the paused wait, the end of a run;
- recovery_patches: every `workflow.patched` id.
This module: the handlers and the run loop.
"""

from __future__ import annotations

from typing import NoReturn

from temporalio import workflow

from workflows.recovery_lifecycle import Lifecycle
from workflows.recovery_patches import PATCH_PAUSED_CAN

with workflow.unsafe.imports_passed_through():
    from trainguard import contracts as c
    from trainguard.models import (
        Actor,
        EventType,
        ModeChange,
        PauseRequest,
        WorkloadState,
        WorkloadStatus,
        clip,
        mode_change_text,
    )

    # Re-exported: tests name the Reason of TrainGuard's own requeue-hold from here.
    from trainguard.slurm.states import REQUEUE_HELD_REASON

__all__ = ["REQUEUE_HELD_REASON", "TERMINAL", "JobRecoveryWorkflow"]

TERMINAL = {WorkloadState.COMPLETED, WorkloadState.STOPPED, WorkloadState.GONE}


@workflow.defn(name="JobRecovery")
class JobRecoveryWorkflow(Lifecycle):
    @workflow.init
    def __init__(self, inp: c.JobRecoveryInput) -> None:
        super().__init__(inp)

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
                if self._should_continue_as_new() and workflow.patched(PATCH_PAUSED_CAN):
                    await self._continue_as_new(inp)
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
                await self._continue_as_new(inp)

    async def _continue_as_new(self, inp: c.JobRecoveryInput) -> NoReturn:
        await self._drain_before_continue_as_new()
        # The config travels too: settings applied at run time must survive continue-as-new.
        workflow.continue_as_new(inp.model_copy(update={"carry": self.carry, "config": self.cfg}))

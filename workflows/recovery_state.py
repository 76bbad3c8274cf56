"""What one JobRecovery run holds, and the two setters every role changes it through.

The carry (status, phase, policy state, cursor) is what continue-as-new hands to the next run; the rest
is rebuilt from the history on replay. Deterministic: imports only models and pure logic.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from trainguard import contracts as c
    from trainguard.models import AuditEventIn, Mode, WorkloadStatus
    from trainguard.policy import effective_mode


class RecoveryState:
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

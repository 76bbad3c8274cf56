"""Settings and mode gates: settings changes that reach a running workload (applied at safe points,
audited), the check that stops an action sequence when the workload left action mode or was paused, and
whether the watchdog guards this workload so that a job may be held. Deterministic.
"""

from __future__ import annotations

from temporalio import workflow

from workflows.recovery_audit import AuditQueue
from workflows.recovery_patches import (
    PATCH_PAUSE_STOPS,
    PATCH_SETTINGS,
    PATCH_SETTINGS_AT_CAN,
    PATCH_STOP_ON_OBSERVE,
    PATCH_WATCHDOG_SCOPE,
)

with workflow.unsafe.imports_passed_through():
    from trainguard.models import Actor, Advice, EventType, Level, Mode, clip
    from trainguard.runtime_config import describe_diff, diff_data, settings_diff, watchdog_guards


class SettingsGate(AuditQueue):
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

    async def _drain_before_continue_as_new(self) -> None:
        """Settings live in this run's config, which the next run receives, but a reload signalled while
        the run drains is only queued: apply it here (a safe point: nothing acts on Slurm), else the next
        run never sees it. Its audit row is drained like any other."""
        while True:
            await self._drain()
            if not self.pending_settings or not workflow.patched(PATCH_SETTINGS_AT_CAN):
                return
            self._apply_settings()
            if self.pending_settings:
                return  # a run from before settings reloads never applies them (they stay queued)

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

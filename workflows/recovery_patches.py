"""Every `workflow.patched` id JobRecovery uses, in one place (docs/upgrading.md says when each may go).

Each id guards one change to the command sequence: a history recorded before the change replays its old
branch (`patched` is False there), new work takes the new one. The comment names the module whose
branch it guards.
"""

from __future__ import annotations

# Safety (recovery_lifecycle, recovery_failure).
PATCH_CANCELLED = "safety-cancelled-by-slurm"  # a job Slurm reports CANCELLED ends the workload
PATCH_ALLOCATION = "safety-allocation-guard"  # the policy sees the job's allocation and excludes only it
PATCH_MIN_CONFIDENCE = "exclude-min-confidence"  # a low-confidence verdict advises without excluding
PATCH_RECORD_ONLY = "keep-watching-after-record-only"  # a non-fatal verdict leaves the attempt watched
PATCH_ENDED_FAILED = "advised-attempt-ends-failed"  # an advised attempt that Slurm ends is `failed`
# Audit (recovery_audit).
PATCH_DRAIN = "drain-audit-before-close"  # events a handler enqueued during the final flush are stored
# Settings that reach running workloads (recovery_settings).
PATCH_SETTINGS = "workload-settings-reload"  # settings changes applied to a running workload
PATCH_WATCHDOG_SCOPE = "watchdog-settings"  # watchdog.mode / acknowledge / environment_pattern read
PATCH_STOP_ON_OBSERVE = "observe-mid-recovery-stops"  # a switch to observe mid-sequence skips the rest
PATCH_PAUSE_STOPS = "paused-mid-recovery-stops"  # a pause between hold and exclusion skips the rest
PATCH_SETTINGS_AT_CAN = "settings-applied-before-continue-as-new"  # a reload signalled while draining
# Fail-open on every path (recovery_actions, recovery_failure, recovery_lifecycle).
PATCH_FAILED_HOLD = "release-after-failed-requeue-hold"  # a requeue-hold reported failed may have held
PATCH_FAILED_HOLD_OURS = "failed-hold-requeue-is-ours"  # that released requeue is ours, not a new failure
PATCH_FAILED_PENDING_HOLD = "release-after-failed-pending-hold"  # so may a hold of a job Slurm requeued
PATCH_RACED_HOLD = "release-after-raced-hold"  # Slurm requeued it between the decision and the step
PATCH_HELD_ADVICE = "held-advice-write-bounded"  # an audit outage cannot keep a contained job held
PATCH_PAUSED_GONE = "paused-workload-ends-when-gone"  # a paused workload still ends when its job is gone
# Continue-as-new (job_recovery).
PATCH_PAUSED_CAN = "paused-workload-continues-as-new"  # a paused run's history is bounded too
# Cluster-wide limits (recovery_failure, recovery_lifecycle).
PATCH_LIMITS = "cluster-safety-limits"  # ClusterWatch grants requeues/exclusions/drains (cluster-wide limits)

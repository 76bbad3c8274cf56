"""Inputs and outputs of TrainGuard's workflows and activities (one model per call, so fields can grow)."""

from __future__ import annotations

from pydantic import Field

from trainguard.models import (
    Advice,
    AuditEventIn,
    EventType,
    Finding,
    Frozen,
    JobSnapshot,
    Level,
    LogCursor,
    Mode,
    ModeChange,
    Observation,
    OptIn,
    ProgressState,
    Verdict,
    WorkloadId,
    WorkloadStatus,
)
from trainguard.policy import PolicyConfig, PolicyState
from trainguard.policy.limits import ClusterLimits, GrantRequest, LimitsState

# Activity names: the worker registers functions under these, tests register replacements under them.
DISCOVER_JOBS = "discover_jobs"
WATCH_JOB = "watch_job"
REQUEUE_HOLD = "requeue_hold"
SET_EXCLUDED = "set_excluded"
RELEASE_JOB = "release_job"
CANCEL_JOB = "cancel_job"
DRAIN_NODE = "drain_node"
JOB_STATE = "job_state"  # Slurm's record of one job, read while its workload is paused
ATTRIBUTE = "attribute"
RECORD_EVENTS = "record_events"
RECORD_ADVICE = "record_advice"
UPDATE_WORKLOAD = "update_workload"
PROPAGATE_CLUSTER_MODE = "propagate_cluster_mode"
PROPAGATE_CLUSTER_SETTINGS = "propagate_cluster_settings"
FLEET_CONTEXT = "fleet_context"
GRANT_ACTIONS = "grant_actions"  # asks the cluster's ClusterWatch (update `grant`) before acting
WORKLOAD_ENDED = "workload_ended"  # tells ClusterWatch (signal `workload_ended`) a workload's exclusions end


class RecoveryConfig(Frozen):
    """Per-cluster knobs a JobRecovery workflow needs; fixed at start, carried across continue-as-new."""

    cluster_queue: str
    control_queue: str = "trainguard-control"
    acknowledged: bool = False
    watch_slice_s: float = 1800.0
    poll_interval_s: float = 1.0
    settle_s: float = 1.0
    heartbeat_timeout_s: float = 300.0  # the long watch activities
    step_heartbeat_timeout_s: float = 10.0  # scheduler steps and audit writes: a dead worker is noticed fast
    watchdog_enabled: bool = True
    decision_timeout_s: float = 120.0
    action_timeout_s: float = 60.0
    policy: PolicyConfig = PolicyConfig()
    search_attributes: bool = True
    history_limit: int = 2000  # continue-as-new earlier than this even if the server does not suggest it
    # watchdog.mode == action and watchdog.acknowledge_scheduler_actions: the watchdog may release a job
    # TrainGuard held (only undoes our own hold, so it may even when the cluster observes).
    watchdog_release: bool = True
    watchdog_environment_pattern: str = ".*"  # opt-in environments the watchdog guards
    limits: ClusterLimits = ClusterLimits()  # cluster-wide budget and storm rules, kept by ClusterWatch


class Phase(Frozen):
    """Where the workload is in its attempt lifecycle (drives what the watch activity reports)."""

    attempt_restarts: int = 0  # Slurm restart count of the current attempt
    failure_handled: bool = False  # a failure of this attempt was already handled: ignore its cascades
    awaiting_progress: bool = False  # restarted; waiting for the first progress line
    restart_requested_at: float | None = None
    fault_at: float | None = None  # first signal time of the failure being recovered from


class RecoveryCarry(Frozen):
    """Everything a JobRecovery workflow keeps across continue-as-new."""

    status: WorkloadStatus
    policy_state: PolicyState = PolicyState()
    phase: Phase = Phase()
    cursor: LogCursor = LogCursor()
    progress: ProgressState = ProgressState()
    job_mode: Mode = Mode.OBSERVE
    cluster_mode: Mode = Mode.OBSERVE
    operator_mode: Mode | None = None
    stdout_path: str = ""
    event_seq: int = 0
    last_job: JobSnapshot | None = None
    # Nodes of the newest allocation Slurm reported: a job Slurm requeued (pending, no nodes) still
    # knows where it failed. Only these can be excluded.
    allocation: tuple[str, ...] = ()
    # Evidence recorded and watched while the attempt kept running (safety clause 2): context for the
    # attribution if the attempt later stops. Bounded; cleared when a new allocation starts.
    watched: tuple[Finding, ...] = ()


class JobRecoveryInput(Frozen):
    workload: WorkloadId
    opt_in: OptIn = OptIn()
    cluster_mode: Mode = Mode.OBSERVE
    config: RecoveryConfig
    name: str = ""
    initial_restarts: int = 0  # Slurm's restart count when discovered (earlier attempts are not ours)
    carry: RecoveryCarry | None = None


class ClusterConfig(Frozen):
    """What the settings file and environment say about a cluster's running workloads."""

    mode: Mode = Mode.OBSERVE
    acknowledged: bool = False
    environment_pattern: str = ".*"
    recovery: RecoveryConfig


class ClusterWatchInput(Frozen):
    cluster: str
    cluster_queue: str
    mode: Mode = Mode.OBSERVE  # the cluster's current mode (an operator may have changed it at run time)
    acknowledged: bool = False
    recovery: RecoveryConfig
    discover_slice_s: float = 600.0
    environment_pattern: str = ".*"
    # The settings last applied from a settings source (None before the first one, or before upgrade):
    # a worker restart applies only what differs from it, so an operator's run-time mode change survives
    # restarts that did not change the file.
    configured: ClusterConfig | None = None
    limits_state: LimitsState | None = None  # the budget's last hour and recent failures (continue-as-new)


class SettingsUpdate(Frozen):
    """Sent to ClusterWatch by a worker at start (source "worker restart") or `trainguard config reload`."""

    config: ClusterConfig
    source: str = "worker restart"
    who: str = ""  # host/user that sent it (untrusted free text)


class SettingsApplied(Frozen):
    changed: tuple[str, ...] = ()  # dotted keys (cluster.mode, recovery.policy.retry_budget, ...)
    summary: str = ""


class WorkloadSettings(Frozen):
    """Signalled to each running JobRecovery of the cluster; applied at the workload's next safe point."""

    config: RecoveryConfig
    cluster_mode: Mode | None = None  # None: the settings did not change the cluster mode
    source: str = ""
    who: str = ""


class PropagateSettingsInput(Frozen):
    cluster: str
    settings: WorkloadSettings


class DiscoverInput(Frozen):
    cluster: str
    mode: Mode
    recovery: RecoveryConfig
    slice_s: float = 600.0
    environment_pattern: str = ".*"


class DiscoverResult(Frozen):
    started: int = 0
    already_known: int = 0
    malformed: int = 0
    unsupported: int = 0  # opted-in jobs TrainGuard does not follow (heterogeneous jobs), reported once


class WatchInput(Frozen):
    workload: WorkloadId
    cursor: LogCursor = LogCursor()
    progress: ProgressState = ProgressState()
    phase: Phase = Phase()
    stdout_path: str = ""
    slice_s: float = 300.0
    poll_interval_s: float = 1.0
    settle_s: float = 1.0
    last_job: JobSnapshot | None = None
    context: tuple[Finding, ...] = ()  # watched evidence of this attempt: reported again with a failure


class WatchResult(Frozen):
    observation: Observation
    cursor: LogCursor
    stdout_path: str = ""


class AttributeInput(Frozen):
    workload: WorkloadId
    findings: tuple[Finding, ...]
    job: JobSnapshot | None = None


class JobActionInput(Frozen):
    workload: WorkloadId
    advice_id: str
    expected_restarts: int = 0
    nodes: tuple[str, ...] = ()
    reason: str = ""
    # Release only: Slurm's Reason right after TrainGuard's own hold; a job held with any other reason
    # (a user's or an admin's hold) is left held. "" = TrainGuard holds nothing here; None = a step
    # scheduled before this field existed (the old behaviour).
    our_hold: str | None = None
    # Release only: lift the hold only while Slurm's restart count is this (the attempt TrainGuard saw
    # pending and not held right before its own hold); None = any attempt (every release before it).
    held_restarts: int | None = None


class JobStateResult(Frozen):
    job: JobSnapshot | None  # None: Slurm no longer reports the job


class RecordEventsInput(Frozen):
    events: tuple[AuditEventIn, ...]
    status: WorkloadStatus | None = None


class RecordAdviceInput(Frozen):
    workload: WorkloadId
    advice: Advice
    ts: float


class PropagateModeInput(Frozen):
    cluster: str
    change: ModeChange


class MalformedReport(Frozen):
    """Signalled to ClusterWatch by discovery; the workflow audits it (the cluster side has no DB)."""

    job: JobSnapshot
    problem: str


class ClusterReport(Frozen):
    """A cluster worker's report about itself or a peer (a vanished worker, a limit reached), signalled to
    ClusterWatch, which audits it (the cluster side has no DB). `key` makes the event id: one per fact."""

    key: str
    event_type: EventType
    level: Level = Level.WARNING
    message: str
    data: dict[str, str | int | float] = Field(default_factory=dict)


class FleetInput(Frozen):
    workload: WorkloadId
    verdict: Verdict
    job: JobSnapshot | None = None
    now: float
    policy: PolicyConfig = PolicyConfig()
    allocation: tuple[str, ...] = ()  # the failed attempt's nodes: only evidence about these counts


class FleetContext(Frozen):
    """What other workloads' failures say about this one: systemic array failure, nodes to drain."""

    array_systemic: bool = False
    array_reason: str = ""
    drain: tuple[tuple[str, str], ...] = ()  # (node, reason)


class GrantInput(Frozen):
    """For the grant_actions activity: which cluster's ClusterWatch to ask, and what."""

    cluster: str
    request: GrantRequest
    settle_s: float = 0.0  # how long the answer may take on purpose (storm settling); adds to the timeout


class WorkloadEnded(Frozen):
    cluster: str = ""
    workload_key: str

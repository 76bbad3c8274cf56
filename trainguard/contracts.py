"""Inputs and outputs of TrainGuard's workflows and activities (one model per call, so fields can grow)."""

from __future__ import annotations

from trainguard.models import (
    Advice,
    AuditEventIn,
    Finding,
    Frozen,
    JobSnapshot,
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

# Activity names: the worker registers functions under these, tests register replacements under them.
DISCOVER_JOBS = "discover_jobs"
WATCH_JOB = "watch_job"
REQUEUE_HOLD = "requeue_hold"
SET_EXCLUDED = "set_excluded"
RELEASE_JOB = "release_job"
CANCEL_JOB = "cancel_job"
DRAIN_NODE = "drain_node"
ATTRIBUTE = "attribute"
RECORD_EVENTS = "record_events"
RECORD_ADVICE = "record_advice"
UPDATE_WORKLOAD = "update_workload"
PROPAGATE_CLUSTER_MODE = "propagate_cluster_mode"
FLEET_CONTEXT = "fleet_context"


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


class ClusterWatchInput(Frozen):
    cluster: str
    cluster_queue: str
    mode: Mode = Mode.OBSERVE
    acknowledged: bool = False
    recovery: RecoveryConfig
    discover_slice_s: float = 600.0
    environment_pattern: str = ".*"


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


class FleetInput(Frozen):
    workload: WorkloadId
    verdict: Verdict
    job: JobSnapshot | None = None
    now: float
    policy: PolicyConfig = PolicyConfig()


class FleetContext(Frozen):
    """What other workloads' failures say about this one: systemic array failure, nodes to drain."""

    array_systemic: bool = False
    array_reason: str = ""
    drain: tuple[tuple[str, str], ...] = ()  # (node, reason)

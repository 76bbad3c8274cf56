"""Models that cross Temporal boundaries (workflow/activity inputs and outputs).

Every field added later must carry a default, so running workflows keep decoding old payloads.
Nothing here does I/O: workflows import this module inside the sandbox.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, field_validator

MAX_EVIDENCE_CHARS = 400
"""Log lines are untrusted and can be megabytes long; only a bounded excerpt enters history."""


def clip(text: str, limit: int = MAX_EVIDENCE_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True)


class Mode(StrEnum):
    OBSERVE = "observe"
    ACTION = "action"


class Category(StrEnum):
    """Public failure taxonomy (what `trainguard classify` prints)."""

    NCCL_TIMEOUT = "nccl_timeout"
    NCCL_ERROR = "nccl_error"
    CUDA_OOM = "cuda_oom"
    CUDA_ILLEGAL_ACCESS = "cuda_illegal_access"
    GPU_HARDWARE = "gpu_hardware"
    INTERCONNECT = "interconnect"
    PYTHON_EXCEPTION = "python_exception"
    SEGFAULT = "segfault"
    KILLED_OOM_HOST = "killed_oom_host"
    SIGNAL_KILL = "signal_kill"  # killed by a signal with no OOM evidence: who sent it is not known
    HANG = "hang"
    DATA_LOADER = "data_loader"
    STORAGE_IO = "storage_io"
    SLURM_NODE_FAILURE = "slurm_node_failure"
    PREEMPTION_OR_TIMELIMIT = "preemption_or_timelimit"
    STRAGGLER = "straggler"
    HEALTHY = "healthy"


class Attribution(StrEnum):
    HARDWARE = "hardware"
    SYSTEM_SOFTWARE = "system_software"
    APPLICATION = "application"
    INFRASTRUCTURE = "infrastructure"
    UNKNOWN = "unknown"  # a failure whose cause the evidence does not name (e.g. an outside SIGKILL)
    NONE = "none"


class FindingSource(StrEnum):
    LOG = "log"
    SCHEDULER = "scheduler"
    METRICS = "metrics"
    PROGRESS = "progress"  # hang / straggler detectors


class WorkloadId(Frozen):
    """Cluster + job id + submit time: a job id reused after a cluster reset is a new workload."""

    cluster: str
    job_id: str
    submit_time: int  # epoch seconds, from Slurm's SubmitTime

    @property
    def key(self) -> str:
        return f"{self.cluster}/{self.job_id}/{self.submit_time}"

    @property
    def workflow_id(self) -> str:
        return workflow_id_for(self.cluster, self.job_id, self.submit_time)


def workflow_id_for(cluster: str, job_id: str, submit_time: int) -> str:
    """A workload's JobRecovery workflow id, without building a WorkloadId (discovery asks it of every
    job in every snapshot)."""
    return f"trainguard-job-{cluster}-{job_id}-{submit_time}"


class OptIn(Frozen):
    """The `trainguard` object of a job's --comment."""

    environment: str = Field(default="default", min_length=1, max_length=200)
    mode: Mode = Mode.OBSERVE
    # Where the job writes checkpoints (absolute; read only under the job's work dir or the cluster's
    # watch.checkpoint_roots): the newest complete one there counts as checkpoint progress.
    checkpoint_dir: str | None = Field(default=None, max_length=4096)

    @field_validator("environment")
    @classmethod
    def _printable(cls, value: str) -> str:
        if any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
            raise ValueError("must not contain control characters (newlines, tabs, ...)")
        return value


class Finding(Frozen):
    """One compact piece of evidence. Raw logs never enter workflow history; findings do."""

    source: FindingSource
    pattern_id: str
    category: Category
    attribution: Attribution
    fatal: bool = True
    cascade: bool = False
    line: str = ""  # clipped evidence line
    line_no: int | None = None
    offset: int | None = None  # byte offset in the log
    timestamp: float | None = None  # when the line was seen (epoch s)
    nodes: tuple[str, ...] = ()
    rank: int | None = None
    detail: str = ""
    priority: int = 2  # 1 generic, 2 specific, 3 platform verdict (see docs/detection.md)
    # A launcher's line announcing that it kills the job's other processes (the catalog's `tears_down`):
    # signal kills after it are its teardown (attribution.rules).
    tears_down: bool = False


class JobSnapshot(Frozen):
    """What Slurm reports about one job at one instant."""

    job_id: str
    name: str = ""
    state: str = ""  # PENDING, RUNNING, COMPLETED, FAILED, NODE_FAIL, ...
    reason: str = ""
    comment: str = ""
    nodes: tuple[str, ...] = ()
    excluded_nodes: tuple[str, ...] = ()
    restart_count: int = 0
    submit_time: int = 0
    start_time: int = 0
    end_time: int = 0
    exit_code: int | None = None
    exit_signal: int | None = None
    held: bool = False
    requeue_allowed: bool = True
    stdout_path: str = ""
    stderr_path: str = ""
    work_dir: str = ""
    array_job_id: str | None = None
    array_task_id: str | None = None
    num_nodes: int = 0
    num_tasks: int = 0  # tasks of the allocation (ranks under srun); 0 when Slurm did not say
    user: str = ""
    partition: str = ""
    het_job_id: str | None = None  # a heterogeneous job's leader id, on every component (incl. the leader)
    het_job_offset: int | None = None
    cancelled_by: str = ""  # who cancelled it, when Slurm says (accounting); "" = not known


class NodeSnapshot(Frozen):
    name: str
    state: str = ""  # idle, allocated, down, drained, ... (lower case, flags stripped)
    flags: tuple[str, ...] = ()  # NOT_RESPONDING, DRAIN, ...
    reason: str = ""


class ClusterSnapshot(Frozen):
    cluster: str
    taken_at: float
    jobs: tuple[JobSnapshot, ...] = ()
    nodes: tuple[NodeSnapshot, ...] = ()


class ProgressState(Frozen):
    """Compact training-progress summary carried across activity slices."""

    last_iteration: int | None = None
    last_progress_at: float | None = None  # epoch s of the last progress line
    iterations_seen: int = 0
    mean_interval_s: float | None = None
    baseline_step_ms: float | None = None
    recent_step_ms: float | None = None
    in_checkpoint: bool = False
    last_checkpoint_iteration: int | None = None
    checkpoint_started_at: float | None = None
    recent_steps_ms: tuple[float, ...] = ()  # bounded by ProgressConfig.straggler_window
    step_samples: int = 0  # step-time samples since the last (re)start, for warm-up
    slow_streak: int = 0
    straggling: bool = False
    finished: bool = False  # the job said it finished training: teardown is not a hang


class ObservationKind(StrEnum):
    FAILURE = "failure"  # fatal evidence (log, scheduler, metrics, hang)
    STRAGGLER = "straggler"
    PROGRESS = "progress"  # first progress line after an (re)start
    STATE_CHANGE = "state_change"
    COMPLETED = "completed"
    GONE = "gone"  # Slurm no longer knows the job
    SLICE_END = "slice_end"  # nothing happened within the bounded slice


class Observation(Frozen):
    kind: ObservationKind
    job: JobSnapshot | None = None
    findings: tuple[Finding, ...] = ()
    progress: ProgressState = ProgressState()
    log_offset: int = 0
    observed_at: float = 0.0
    first_signal_at: float | None = None  # when the earliest new fatal evidence appeared
    usable_nodes: tuple[str, ...] = ()  # nodes of the job's partition that are neither down nor drained


class Verdict(Frozen):
    category: Category
    attribution: Attribution
    fatal: bool
    confidence: float = 0.5
    nodes: tuple[str, ...] = ()
    evidence: tuple[str, ...] = ()
    summary: str = ""
    pattern_ids: tuple[str, ...] = ()
    external: str | None = None  # id/name of an external attribution service that enriched it


class ActionKind(StrEnum):
    NONE = "none"  # record and keep watching
    REQUEUE = "requeue"  # requeue-hold -> exclude -> release
    CANCEL = "cancel"  # stop futile retries
    DRAIN = "drain"
    WAIT = "wait"  # not enough nodes left; keep the job held/pending for an operator
    HOLD = "hold"  # containment: requeue-hold while the failure is attributed (workflow-issued)
    RELEASE = "release"  # watchdog fail-open: release a held job unchanged


class Actor(StrEnum):
    POLICY = "policy"
    WATCHDOG = "watchdog"
    OPERATOR = "operator"
    SYSTEM = "system"


class Advice(Frozen):
    advice_id: str  # idempotency key: workload key + attempt + sequence
    action: ActionKind
    reason: str
    verdict: Verdict
    exclude_nodes: tuple[str, ...] = ()
    drain_nodes: tuple[str, ...] = ()
    mode: Mode = Mode.OBSERVE
    execute: bool = False  # True only in action mode with acknowledged scheduler actions
    actor: Actor = Actor.POLICY
    attempt: int = 0
    generation: int = 0
    spends_budget: bool = True
    array_job_id: str = ""  # set for tasks of a job array (systemic-failure checks across tasks)
    array_task_id: str = ""
    job_nodes: tuple[str, ...] = ()  # the allocation the failure happened on
    job_user: str = ""  # the job's owner (node reputation counts users, not only jobs)


class ActionStep(StrEnum):
    REQUEUE_HOLD = "requeue_hold"
    EXCLUDE = "exclude"
    RELEASE = "release"
    CANCEL = "cancel"
    DRAIN = "drain"
    RESUME = "resume"  # a drained node returned to service


class ActionResult(Frozen):
    step: ActionStep
    performed: bool  # False when Slurm's state showed it was already done / not applicable
    detail: str = ""
    confirmed_at: float = 0.0  # when Slurm's own record showed the step's effect
    job_state: str = ""  # Slurm's state of the job after the step
    held: bool = False  # whether Slurm reports the job held after the step
    restart_count: int = 0
    reason: str = ""  # Slurm's Reason after the step (which hold: ours, a user's, an admin's)
    # Hold steps: Slurm's Reason for the hold this step placed (or an earlier try of this same step,
    # killed before it could report); "" when the job was already held by someone else. None: not a
    # hold step, or a worker from before this field.
    own_hold: str | None = None


class EventType(StrEnum):
    WORKLOAD_DISCOVERED = "workload_discovered"
    MALFORMED_COMMENT = "malformed_comment"
    DETECTION = "detection"
    ADVICE = "advice"
    ACTION = "action"
    ACTION_FAILED = "action_failed"
    WATCHDOG_FIRED = "watchdog_fired"
    ALLOCATION_RESTARTED = "allocation_restarted"
    TRAINING_RESUMED = "training_resumed"
    COMPLETED = "completed"
    STOPPED = "stopped"
    MODE_CHANGED = "mode_changed"
    MONITORING_PAUSED = "monitoring_paused"
    MONITORING_RESUMED = "monitoring_resumed"
    OPERATOR_DECISION = "operator_decision"
    NODE_DRAINED = "node_drained"
    SETTINGS_CHANGED = "settings_changed"  # settings file/environment changed (worker restart, reload)
    AUDIT_PRUNED = "audit_pruned"  # audit rows past audit.retention_days deleted
    WORKER_LOST = "worker_lost"  # a cluster worker vanished; its watches were taken over by another
    CAPACITY_LIMIT = "capacity_limit"  # a cluster worker's watch slots are all taken: new watches wait


class Level(StrEnum):
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


class AuditEventIn(Frozen):
    """One audit record. `event_id` is the idempotency key: writing it twice stores it once."""

    event_id: str
    event_type: EventType
    workload_key: str = ""
    cluster: str = ""
    job_id: str = ""
    submit_time: int = 0
    attempt: int = 0
    level: Level = Level.INFO
    actor: Actor = Actor.SYSTEM
    ts: float = 0.0
    category: str = ""
    attribution: str = ""
    action: str = ""
    mode: str = ""
    nodes: tuple[str, ...] = ()
    evidence: tuple[str, ...] = ()
    message: str = ""
    data: dict[str, str | int | float | bool | None] = Field(default_factory=dict)


class WorkloadState(StrEnum):
    WATCHING = "watching"
    RECOVERING = "recovering"
    HELD = "held"
    WAITING = "waiting"  # needs an operator (e.g. too few nodes)
    COMPLETED = "completed"
    STOPPED = "stopped"
    FAILED = "failed"  # ended with a failure and no recovery (observe mode or futile)
    GONE = "gone"
    PAUSED = "paused"


class LogCursor(Frozen):
    """Where a log source left off. `identity` detects rotation (inode) or holds a backend's position."""

    source: str = ""  # path or query
    offset: int = 0
    identity: str = ""


class WorkloadStatus(Frozen):
    """Live state of one workload, as the workflow sees it (query result; also persisted for the API)."""

    workload_key: str
    cluster: str
    job_id: str
    submit_time: int
    workflow_id: str = ""
    name: str = ""
    environment: str = ""
    mode: Mode = Mode.OBSERVE
    state: WorkloadState = WorkloadState.WATCHING
    attempts: int = 0  # restarts so far (0 = first allocation)
    excluded_nodes: tuple[str, ...] = ()
    last_category: str = ""
    last_attribution: str = ""
    current_advice_id: str = ""
    paused: bool = False
    last_iteration: int | None = None
    updated_at: float = 0.0
    first_seen_at: float = 0.0
    lost_s: float = 0.0  # fault -> training resumed, summed over recoveries
    goodput: float | None = None  # 1 - lost / watched wall time


class ModeChange(Frozen):
    mode: Mode
    actor: Actor = Actor.OPERATOR
    who: str = ""  # operator identity, free text (untrusted)
    reason: str = ""
    role: str = ""  # the caller's role and how they authenticated, when the change came through the API
    via: str = ""


def mode_change_text(change: ModeChange, *, scope: str, target: str, effective: Mode) -> str:
    """The one audit message of an operator's mode change (written by the workflow that applies it)."""
    who = f"{change.who} ({change.role})" if change.role else (change.who or change.actor.value)
    via = " via the API" if change.via else ""
    return clip(
        f"{who} set {scope} mode of {target} to {change.mode.value}{via}; effective {effective.value}. "
        f"{change.reason}"
    )


class PauseRequest(Frozen):
    paused: bool
    who: str = ""
    reason: str = ""


class ArrayTaskFailure(Frozen):
    """One failed task of a Slurm job array, as the policy needs it to judge whether failures are systemic."""

    array_job_id: str
    task_id: str
    category: Category
    attribution: Attribution
    pattern_id: str = ""  # top (initiating) pattern of the task's verdict
    nodes: tuple[str, ...] = ()
    at: float = 0.0  # epoch s the failure was handled


class NodeIncident(Frozen):
    """A node implicated in one workload's failure (from the audit store), for cross-job reputation."""

    node: str
    workload_key: str
    at: float
    category: Category = Category.GPU_HARDWARE
    attribution: Attribution = Attribution.HARDWARE
    pattern_id: str = ""
    # The allocation of the job that reported it: evidence about a node outside it does not count
    # (a shared syslog line names its own host, not this job's). () = not known: does not count.
    job_nodes: tuple[str, ...] = ()
    user: str = ""  # the job's owner; "" = not known (counts toward no user threshold)
    gpu_metric: bool = False  # the evidence is a GPU health metric (DCGM), not a log line

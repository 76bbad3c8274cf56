"""Policy knobs. `trainguard.settings.PolicySettings` is this model (stricter: unknown keys fail), so the
worker builds the workflow's copy with `PolicyConfig(**settings.policy.model_dump())`."""

from __future__ import annotations

from pydantic import Field

from trainguard.models import Frozen


class PolicyConfig(Frozen):
    retry_budget: int = Field(default=5, ge=0)
    """Restarts after failures that are the job's own (application, system software, unknown)."""
    max_excluded_nodes: int = Field(default=8, ge=0)
    """Cap on the per-workload exclusion ledger; more implicated nodes than this asks for a human."""
    min_nodes_left: int = Field(default=1, ge=0)
    """A requeue needs at least max(min_nodes_left, job's node count) usable nodes outside the ledger."""
    no_checkpoint_attempts: int = Field(default=3, ge=1)
    """Stop when this many restarts in a row brought no newer checkpoint."""
    storm_restarts: int = Field(default=5, ge=1)
    storm_window_s: float = Field(default=1800.0, gt=0)
    """Stop when `storm_restarts` restarts already happened within `storm_window_s`."""
    restart_cost_s: float = Field(default=120.0, ge=0)
    """Seconds a restart costs besides the work since the last checkpoint (queue, load, warm-up)."""
    drain_enabled: bool = False
    drain_jobs_threshold: int = Field(default=2, ge=1)
    drain_window_s: float = Field(default=86400.0, gt=0)
    same_failure_limit: int = Field(default=2, ge=1)
    """Stop after this many identical job-side failures in a row (category + top pattern)."""
    same_failure_resets_on_checkpoint: bool = True
    """A newer checkpoint between two identical failures means progress: the streak starts over."""
    straggler_horizon_s: float = Field(default=3600.0, gt=0)
    """How far ahead a slowdown is assumed to last; the job's own remaining time caps it."""
    requeue_on_time_limit: bool = True
    """Requeue a job that hit its time limit and has a checkpoint to resume from."""
    exclude_min_confidence: float = Field(default=0.7, ge=0.0, le=1.0)
    """A verdict below this confidence gives advice without exclusion: no node is blamed on a guess."""
    exclude_on_node_failure: bool = True
    """Nodes named by a Slurm node failure go into the ledger like hardware-implicated ones."""
    array_systemic_tasks: int = Field(default=3, ge=2)
    array_systemic_nodes: int = Field(default=2, ge=1)
    array_window_s: float = Field(default=3600.0, gt=0)
    """Array tasks failing the same way on this many tasks and nodes within the window: systemic."""

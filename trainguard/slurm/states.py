"""Slurm's state vocabulary, in one place: job base states and flags, node states, and what they mean.

Names are Slurm's own (src/common/slurm_protocol_defs.c, data_parser JOB_STATE/NODE_STATES flag tables).
Pure data and pure functions only: workflow code may import this module.
"""

from __future__ import annotations

from collections.abc import Iterable

# --- jobs ------------------------------------------------------------------------------------------

PENDING = "PENDING"
RUNNING = "RUNNING"
SUSPENDED = "SUSPENDED"
COMPLETED = "COMPLETED"
CANCELLED = "CANCELLED"
FAILED = "FAILED"
TIMEOUT = "TIMEOUT"
NODE_FAIL = "NODE_FAIL"
PREEMPTED = "PREEMPTED"
BOOT_FAIL = "BOOT_FAIL"
DEADLINE = "DEADLINE"
OUT_OF_MEMORY = "OUT_OF_MEMORY"
COMPLETING = "COMPLETING"
CONFIGURING = "CONFIGURING"
REQUEUED = "REQUEUED"

JOB_BASE_STATES = frozenset(
    {
        PENDING,
        RUNNING,
        SUSPENDED,
        COMPLETED,
        CANCELLED,
        FAILED,
        TIMEOUT,
        NODE_FAIL,
        PREEMPTED,
        BOOT_FAIL,
        DEADLINE,
        OUT_OF_MEMORY,
    }
)
"""Slurm's JOB_STATE_BASE values."""

JOB_FLAG_PRECEDENCE: tuple[str, ...] = (
    COMPLETING,
    "STAGE_OUT",
    CONFIGURING,
    "EXPEDITING",
    "RESIZING",
    REQUEUED,
    "REQUEUE_FED",
    "REQUEUE_HOLD",
    "SPECIAL_EXIT",
    "STOPPED",
    "REVOKED",
    "RESV_DEL_HOLD",
    "SIGNALING",
)
"""JOB_STATE_FLAGS that name the state in Slurm's job_state_string(), in the order it tests them.

scontrol, squeue's text output and 22.05's JSON print this one word; 23.11+ JSON prints the base state
and every flag as a list (e.g. ["PENDING", "COMPLETING"] while scontrol says JobState=COMPLETING).
Other flags (LAUNCH_FAILED, RECONFIG_FAIL, POWER_UP_NODE, UPDATE_DB, ...) never name the state.
"""

TERMINAL_STATES = frozenset(
    {BOOT_FAIL, CANCELLED, COMPLETED, DEADLINE, FAILED, NODE_FAIL, OUT_OF_MEMORY, PREEMPTED, TIMEOUT}
)
"""A job in one of these has ended (its record stays until MinJobAge)."""

FAILED_STATES = frozenset({BOOT_FAIL, DEADLINE, FAILED, NODE_FAIL, OUT_OF_MEMORY, TIMEOUT})
"""Ended without success, and not by someone's decision (cancel) or the scheduler's (preemption)."""

PREEMPTED_STATES = frozenset({PREEMPTED})
CANCELLED_STATES = frozenset({CANCELLED})

NEVER_REQUEUE_STATES = frozenset({COMPLETED, CANCELLED})
"""Slurm would revive these on requeue (seen on 22.05); finishing or cancelling is the user's decision."""

ACTIVE_STATES = frozenset({RUNNING, COMPLETING, SUSPENDED, CONFIGURING, "STOPPED", "RESIZING"})
"""The job holds (or is tearing down) an allocation: `scontrol requeuehold` applies."""

REQUEUING_STATES = frozenset({COMPLETING, REQUEUED, "REQUEUE_HOLD", "REQUEUE_FED", "SPECIAL_EXIT"})
"""Words Slurm prints while a requeued job's old allocation tears down; it turns PENDING next."""

ALLOCATED_STATES = frozenset({RUNNING, COMPLETED, FAILED, TIMEOUT, NODE_FAIL, OUT_OF_MEMORY, PREEMPTED})
"""States that prove an attempt got an allocation. Not COMPLETING: a requeued job's old allocation is
still tearing down under the new restart count."""

HELD_REASONS = frozenset(
    {"JobHeldUser", "JobHeldAdmin", "job_requeued_in_held_state", "launch_failed_requeued_held"}
)
"""Pending reasons that mean the job is held (scontrol text says job_requeued_in_held_state where
23.11+ JSON says JobHeldUser for the same requeue-hold)."""


def job_state_word(base: str, flags: Iterable[str] = ()) -> str:
    """The one word Slurm means for a base state plus flags, as job_state_string() prints it."""
    present = {flag.upper() for flag in flags}
    for flag in JOB_FLAG_PRECEDENCE:
        if flag in present:
            return flag
    return base.upper()


def job_state_from_list(values: Iterable[str]) -> tuple[str, tuple[str, ...]]:
    """Split a 23.11+ `job_state` list into (the state Slurm means, every flag present).

    The base state may come at any position (Slurm prints it first today); unknown words are kept as
    flags so they are never mistaken for the base state.
    """
    words = [v.upper() for v in values]
    base = next((w for w in words if w in JOB_BASE_STATES), "")
    flags = tuple(w for w in words if w != base)
    if not base and not flags:
        return "", ()
    return job_state_word(base, flags) or (flags[0] if flags else ""), flags


# --- nodes -----------------------------------------------------------------------------------------

NODE_BASE_STATES = frozenset({"UNKNOWN", "DOWN", "IDLE", "ALLOCATED", "ERROR", "MIXED", "FUTURE"})
DRAIN = "DRAIN"
NOT_RESPONDING = "NOT_RESPONDING"
NODE_UNUSABLE_WORDS = ("down", "drain", "fail", "not_responding", "maint", "future", "reboot")
"""Any of these in a node's state or flags: do not place a job there."""
NODE_BAD_STATES = ("down", "fail", "failing", "not_responding", "no_respond")
"""Node states that implicate a node in a job's failure."""


def node_state(base: str, flags: Iterable[str]) -> str:
    """One lower-case state as operators say it: DRAIN on an idle/down node is `drained`."""
    state = base.lower()
    if DRAIN in {f.upper() for f in flags}:
        return "drained" if state in ("idle", "down") else "draining"
    return state


def node_state_from_list(values: Iterable[str]) -> tuple[str, tuple[str, ...]]:
    """Split a 23.11+ node `state` list (base + flags, e.g. ["IDLE", "DRAIN"]) into (state, flags)."""
    words = [v.upper() for v in values]
    base = next((w for w in words if w in NODE_BASE_STATES), "")
    flags = tuple(w for w in words if w != base)
    return node_state(base or (flags[0] if flags else ""), flags), flags


# Slurm's Reason for a job `scontrol requeuehold` put back (22.05 and 24.11): the hold TrainGuard places on
# a failed attempt. A user's or an admin's `scontrol hold` shows JobHeldUser / JobHeldAdmin instead.
REQUEUE_HELD_REASON = "job_requeued_in_held_state"

# Slurm's Reason for a job held by `scontrol hold` run as root, SlurmUser or an operator (22.05 and 24.11,
# text and JSON): TrainGuard's containment hold of a job Slurm requeued itself, and any administrator's
# hold, alike. Slurm records nothing else about a hold (no description, no author; a job's Reason cannot be
# set by `scontrol update`), and a second `scontrol hold` of a held job changes nothing.
ADMIN_HELD_REASON = "JobHeldAdmin"

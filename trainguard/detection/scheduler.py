"""Findings from what Slurm says about a job and its nodes (pure)."""

from __future__ import annotations

from collections.abc import Mapping

from trainguard.models import Attribution, Category, Finding, FindingSource, JobSnapshot, NodeSnapshot, clip
from trainguard.slurm.states import (
    BOOT_FAIL,
    DEADLINE,
    FAILED,
    NODE_BAD_STATES,
    NODE_FAIL,
    OUT_OF_MEMORY,
    PREEMPTED,
    TIMEOUT,
)

_SIGNAL_NAMES = {6: "SIGABRT", 7: "SIGBUS", 9: "SIGKILL", 11: "SIGSEGV", 15: "SIGTERM"}

# state -> (pattern id, category, attribution, priority, cascade)
_JOB_STATES: dict[str, tuple[str, Category, Attribution, int, bool]] = {
    NODE_FAIL: ("slurm_job_node_fail", Category.SLURM_NODE_FAILURE, Attribution.HARDWARE, 3, False),
    BOOT_FAIL: ("slurm_job_boot_fail", Category.SLURM_NODE_FAILURE, Attribution.HARDWARE, 3, False),
    TIMEOUT: ("slurm_job_timeout", Category.PREEMPTION_OR_TIMELIMIT, Attribution.INFRASTRUCTURE, 3, False),
    DEADLINE: (
        "slurm_job_deadline",
        Category.PREEMPTION_OR_TIMELIMIT,
        Attribution.INFRASTRUCTURE,
        3,
        False,
    ),
    PREEMPTED: (
        "slurm_job_preempted",
        Category.PREEMPTION_OR_TIMELIMIT,
        Attribution.INFRASTRUCTURE,
        3,
        False,
    ),
    OUT_OF_MEMORY: ("slurm_job_oom", Category.KILLED_OOM_HOST, Attribution.APPLICATION, 3, False),
}

# exit signal -> (pattern id, category, attribution, priority)
_SIGNALS: dict[int, tuple[str, Category, Attribution, int]] = {
    # A SIGKILL alone is a signal kill: OOM only when Slurm (OUT_OF_MEMORY) or the kernel says so.
    9: ("slurm_exit_sigkill", Category.SIGNAL_KILL, Attribution.UNKNOWN, 1),
    11: ("slurm_exit_sigsegv", Category.SEGFAULT, Attribution.SYSTEM_SOFTWARE, 2),
    7: ("slurm_exit_sigbus", Category.DATA_LOADER, Attribution.SYSTEM_SOFTWARE, 1),
    6: ("slurm_exit_sigabrt", Category.SEGFAULT, Attribution.SYSTEM_SOFTWARE, 1),
}

_BAD_NODE_STATES = NODE_BAD_STATES


def _base_state(state: str) -> str:
    # squeue/sacct can print "CANCELLED by 1000" or "FAILED+"; keep the word.
    return state.strip().split(" ", 1)[0].rstrip("+*").upper()


def _node_problem(node: NodeSnapshot) -> str | None:
    state = node.state.lower().rstrip("*~#!%$@^-+")
    flags = {f.upper() for f in node.flags}
    if "NOT_RESPONDING" in flags or node.state.endswith("*"):
        return "NOT_RESPONDING"
    if any(state.startswith(s) for s in _BAD_NODE_STATES):
        return "DOWN" if state.startswith("down") else state.upper()
    if "DRAIN" in flags or state.startswith("drain"):
        return "DRAIN"
    return None


def _job_line(job: JobSnapshot, state: str) -> str:
    parts = [f"job {job.job_id} state {state}"]
    if job.exit_code is not None:
        parts.append(f"exit code {job.exit_code}")
    if job.exit_signal:
        parts.append(f"signal {job.exit_signal} ({_SIGNAL_NAMES.get(job.exit_signal, '?')})")
    if job.reason:
        parts.append(f"reason {job.reason}")
    return clip(", ".join(parts))


def scheduler_findings(
    job: JobSnapshot,
    nodes: Mapping[str, NodeSnapshot],
    previous: JobSnapshot | None = None,
    *,
    now: float | None = None,
) -> list[Finding]:
    """Job-state findings (only on a change when `previous` is given) and node findings for the job."""
    out: list[Finding] = []
    state = _base_state(job.state)
    ts = now if now is not None else (float(job.end_time) if job.end_time else None)
    bad_nodes: dict[str, str] = {}
    for name in job.nodes:
        snap = nodes.get(name)
        if snap is None:
            continue
        problem = _node_problem(snap)
        if problem is not None:
            bad_nodes[name] = problem
    unchanged = previous is not None and (
        _base_state(previous.state),
        previous.exit_code,
        previous.exit_signal,
    ) == (state, job.exit_code, job.exit_signal)
    if not unchanged:
        out.extend(_job_state_findings(job, state, bad_nodes, ts))
    for name, problem in bad_nodes.items():
        snap = nodes[name]
        fatal = problem != "DRAIN"
        out.append(
            Finding(
                source=FindingSource.SCHEDULER,
                pattern_id=f"slurm_node_{problem.lower()}",
                category=Category.SLURM_NODE_FAILURE,
                attribution=Attribution.HARDWARE,
                fatal=fatal,
                line=clip(f"node {name} is {problem}" + (f": {snap.reason}" if snap.reason else "")),
                timestamp=ts,
                nodes=(name,),
                detail=clip(snap.reason),
                priority=3 if fatal else 2,
            )
        )
    return out


def _job_state_findings(
    job: JobSnapshot, state: str, bad_nodes: Mapping[str, str], ts: float | None
) -> list[Finding]:
    line = _job_line(job, state)
    known = _JOB_STATES.get(state)
    if known is not None:
        pattern_id, category, attribution, priority, cascade = known
        implicated: tuple[str, ...] = ()
        if category == Category.SLURM_NODE_FAILURE:
            implicated = tuple(n for n, p in bad_nodes.items() if p != "DRAIN")
        return [
            Finding(
                source=FindingSource.SCHEDULER,
                pattern_id=pattern_id,
                category=category,
                attribution=attribution,
                cascade=cascade,
                line=line,
                timestamp=ts,
                nodes=implicated,
                priority=priority,
            )
        ]
    if state != FAILED:
        return []
    signal = job.exit_signal
    if not signal and job.exit_code is not None and job.exit_code > 128:
        signal = job.exit_code - 128
    by_signal = _SIGNALS.get(signal or 0)
    if by_signal is not None:
        pattern_id, category, attribution, priority = by_signal
        return [
            Finding(
                source=FindingSource.SCHEDULER,
                pattern_id=pattern_id,
                category=category,
                attribution=attribution,
                line=line,
                timestamp=ts,
                priority=priority,
            )
        ]
    # A plain non-zero exit: the reason is in the log, so this only decides when the log is silent.
    return [
        Finding(
            source=FindingSource.SCHEDULER,
            pattern_id="slurm_job_failed",
            category=Category.PYTHON_EXCEPTION,
            attribution=Attribution.APPLICATION,
            cascade=True,
            line=line,
            timestamp=ts,
            priority=1,
        )
    ]

"""How a JobRecovery workflow reads in the Temporal UI: its static summary and details (set when it is
started), its current details (kept up to date by the workflow) and a summary on each activity.

Pure text from models: deterministic, safe to call from workflow code. User metadata is not part of
the command sequence, so adding or rewording it never breaks the replay of older histories. Values that
come from Slurm or logs (job names, users, node names) are clipped and stripped of markdown's special
characters: the UI renders details as markdown.
"""

from __future__ import annotations

import re

from trainguard import contracts as c
from trainguard.models import JobSnapshot, OptIn, WorkloadId, WorkloadStatus

_MARKUP = re.compile(r"[`*\[\]<>#|\\\n\r]")

# activity name -> the verb an operator reads in the workflow's history
ACTION_VERBS = {
    c.REQUEUE_HOLD: "requeue-hold",
    c.SET_EXCLUDED: "exclude",
    c.RELEASE_JOB: "release",
    c.CANCEL_JOB: "cancel",
    c.DRAIN_NODE: "drain",
}


def plain(value: object, limit: int = 80) -> str:
    text = " ".join(_MARKUP.sub(" ", str(value)).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def static_summary(workload: WorkloadId, job: JobSnapshot | None, opt_in: OptIn) -> str:
    """One line for the workflow list: e.g. "job 28 on lab · llama-pretrain (alice) · action"."""
    name = f" · {plain(job.name, 60)}" if job is not None and job.name else ""
    user = f" ({plain(job.user, 40)})" if job is not None and job.user else ""
    return f"job {plain(workload.job_id)} on {plain(workload.cluster)}{name}{user} · {opt_in.mode.value}"


def static_details(workload: WorkloadId, job: JobSnapshot | None, opt_in: OptIn) -> str:
    lines = [
        f"**Job** {plain(workload.job_id)} on cluster **{plain(workload.cluster)}**",
        f"**Name** {plain(job.name, 200) if job is not None and job.name else '–'}",
        f"**User** {plain(job.user) if job is not None and job.user else '–'}",
        f"**Submitted** {workload.submit_time} (Slurm SubmitTime, epoch s)",
        f"**Opt-in** environment {plain(opt_in.environment)}, mode {opt_in.mode.value}",
        f"**Audit key** {plain(workload.key, 200)}",
    ]
    return "  \n".join(lines)


def current_details(status: WorkloadStatus, attempt: int) -> str:
    verdict = (
        f"{plain(status.last_category)} ({plain(status.last_attribution)})"
        if status.last_category
        else "none yet"
    )
    lines = [
        f"**Job** {plain(status.job_id)} · **attempt** {attempt} · **state** {status.state.value}"
        + (" (paused)" if status.paused else ""),
        f"**Mode** {status.mode.value} · **last verdict** {verdict}",
    ]
    if status.excluded_nodes:
        lines.append(f"**Excluded** {plain(', '.join(status.excluded_nodes), 200)}")
    if status.lost_s:
        lines.append(f"**Time lost** {status.lost_s:.0f} s")
    return "  \n".join(lines)


def watch_summary(job_id: str, attempt: int) -> str:
    return f"watch attempt {attempt} of job {plain(job_id)}"


def action_summary(name: str, job_id: str, nodes: tuple[str, ...] = ()) -> str:
    verb = ACTION_VERBS.get(name, name.replace("_", "-"))
    on = f" ({plain(','.join(nodes), 120)})" if nodes else ""
    return f"{verb} job {plain(job_id)}{on}"


def attribute_summary(job_id: str, attempt: int) -> str:
    return f"attribute failure of job {plain(job_id)}, attempt {attempt}"


def fleet_summary(job_id: str) -> str:
    return f"fleet context for job {plain(job_id)}"


def advice_summary(action: str, job_id: str, attempt: int) -> str:
    return f"record advice: {action} job {plain(job_id)}, attempt {attempt}"


def audit_summary(count: int, job_id: str) -> str:
    return f"audit {count} event(s) of job {plain(job_id)}"


def state_summary(job_id: str) -> str:
    return f"is job {plain(job_id)} still in Slurm (paused)"


def evidence_summary(job_id: str) -> str:
    """The read beside a hold's advice: what Slurm showed before the hold, should its step fail."""
    return f"read job {plain(job_id)} before its hold (fail-open evidence)"


def grant_summary(job_id: str, attempt: int) -> str:
    return f"ask ClusterWatch's limits for job {plain(job_id)}, attempt {attempt}"


def ended_summary(job_id: str) -> str:
    return f"give back job {plain(job_id)}'s excluded nodes to the cluster cap"

"""argv builders for Slurm commands. Job ids and node names are validated before they go anywhere.

Node names, job ids and reasons may come from untrusted text (log lines, comments, API calls);
a value that is not a plain Slurm identifier raises ValueError instead of reaching a command.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from trainguard.slurm.hostlist import compress_hostlist

_JOB_ID = re.compile(r"[1-9][0-9]{0,9}(?:_[0-9]{1,10})?")
_NODE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
MAX_REASON = 200

SCONTROL_ENV = ("env", "SLURM_TIME_FORMAT=%s")
"""scontrol prints times in the login node's local zone; `%s` makes them epoch seconds instead."""


def job_id(value: str) -> str:
    """A job id: digits, optionally `_<task>` for one array task."""
    if not isinstance(value, str) or not _JOB_ID.fullmatch(value):
        raise ValueError(f"invalid Slurm job id {str(value)[:40]!r}")
    return value


def node_name(value: str) -> str:
    if not isinstance(value, str) or not _NODE.fullmatch(value):
        raise ValueError(f"invalid Slurm node name {str(value)[:40]!r}")
    return value


def node_list(nodes: Sequence[str]) -> str:
    """A validated, compressed hostlist; empty -> "" (clears the list)."""
    if isinstance(nodes, str):
        raise ValueError("node_list takes a sequence of names, not one string")
    return compress_hostlist(node_name(n) for n in nodes)


def reason_text(value: str) -> str:
    """A drain reason: one printable line (Slurm stores it verbatim; `=` confuses `-o` output)."""
    cleaned = "".join(c if c.isprintable() and c != "=" else " " for c in value).strip()
    if not cleaned:
        raise ValueError("a drain reason is required")
    return cleaned[:MAX_REASON]


def squeue_json() -> list[str]:
    """All jobs, including finished ones still in slurmctld's memory (MinJobAge)."""
    return ["squeue", "--json", "-t", "all"]


def squeue_json_job(job: str) -> list[str]:
    """One job's records as JSON (22.05 ignores `-j` with --json and prints every job: filter after)."""
    return ["squeue", "--json", "-t", "all", "-j", job_id(job)]


def squeue_json_states() -> list[str]:
    """Every job's printed id and state only (23.02+; ~60 bytes a job instead of ~2.7 KB)."""
    return ["squeue", "--json", "--only-job-state", "-t", "all"]


def squeue_json_jobs(ids: Sequence[str]) -> list[str]:
    """Full records of these jobs only (honoured with --json since 24.05). Ids as squeue prints them."""
    checked = [job_id(i) for i in ids]
    if not checked:
        raise ValueError("squeue_json_jobs needs at least one job id")
    return ["squeue", "--json", "-t", "all", "-j", ",".join(checked)]


def sinfo_json() -> list[str]:
    """Per-node records on 22.05 only; 23.11+ prints node groups (use scontrol_show_nodes_json)."""
    return ["sinfo", "--json"]


def scontrol_show_nodes_json() -> list[str]:
    """Per-node records on 23.11+ (`state` is a list of base state + flags)."""
    return ["scontrol", "show", "node", "--json"]


def scontrol_version() -> list[str]:
    return ["scontrol", "--version"]


def scontrol_show_job(job: str) -> list[str]:
    return [*SCONTROL_ENV, "scontrol", "show", "job", "-d", "-o", job_id(job)]


def scontrol_show_nodes() -> list[str]:
    return [*SCONTROL_ENV, "scontrol", "show", "nodes", "-o"]


def scontrol_show_config() -> list[str]:
    return ["scontrol", "show", "config"]


SACCT_FIELDS = ("JobIDRaw", "State", "ExitCode", "Submit", "Start", "End", "NodeList", "Partition")


def sacct_job(job: str) -> list[str]:
    """The job's last allocation from slurmdbd (after MinJobAge slurmctld forgets it): `|`-separated
    fields that hold no user text, epoch times."""
    return [*SCONTROL_ENV, "sacct", "-X", "-n", "-P", "-j", job_id(job), f"--format={','.join(SACCT_FIELDS)}"]


def sstat_batch(job: str) -> list[str]:
    """Asks the slurmd of the node that runs the job's batch script (and srun) for the batch step's
    stats: a live slurmd answers at once, a dead one fails after MessageTimeout. A read, changes nothing."""
    return ["sstat", "-j", f"{job_id(job)}.batch", "--noheader", "-P", "-o", "JobID"]


def scontrol_requeuehold(job: str) -> list[str]:
    return ["scontrol", "requeuehold", job_id(job)]


def scontrol_hold(job: str) -> list[str]:
    return ["scontrol", "hold", job_id(job)]


def scontrol_release(job: str) -> list[str]:
    return ["scontrol", "release", job_id(job)]


def scontrol_set_excluded(job: str, nodes: Sequence[str]) -> list[str]:
    return ["scontrol", "update", f"JobId={job_id(job)}", f"ExcNodeList={node_list(nodes)}"]


def scontrol_drain(node: str, reason: str) -> list[str]:
    return [
        "scontrol",
        "update",
        f"NodeName={node_name(node)}",
        "State=DRAIN",
        f"Reason={reason_text(reason)}",
    ]


def scontrol_resume(node: str) -> list[str]:
    return ["scontrol", "update", f"NodeName={node_name(node)}", "State=RESUME"]


def sacct_state(job: str) -> list[str]:
    """The job's accounting state, e.g. `CANCELLED by 1000` (only where accounting storage is on)."""
    return ["sacct", "-j", job_id(job), "-X", "-n", "-P", "-o", "State"]


def scancel(job: str) -> list[str]:
    return ["scancel", job_id(job)]


def sbatch(args: Sequence[str], script: str) -> list[str]:
    """`sbatch --parsable <args> <script>`; args are passed as separate words, never through a shell."""
    return ["sbatch", "--parsable", *args, script]

"""Read only what is needed on Slurm 24.05+: every job's state cheaply, details only where they matter.

`squeue --json --only-job-state -t all` prints `{"job_id": "<printed id>", "state": [...]}` per job
record (~60 bytes against ~2.7 KB for a full record; measured on 24.11, where ids are printed as squeue
prints them: `1234`, `8_0` for an array task, `5_2` for each pending task, `7+1` for a het component) and `-j`
limits `squeue --json` (honoured since 24.05; 22.05 ignores it). So a snapshot keeps the previous full
records and re-reads details (`squeue --json -j <ids>`) only for new jobs, jobs whose state changed, and
jobs TrainGuard watches (any change there matters: hold, restarts). Every `full_every`-th snapshot is a
full read, so a comment updated to opt a running job in is seen within that many snapshots.
Pure planning here; the client runs the commands.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from trainguard.models import JobSnapshot
from trainguard.slurm import states
from trainguard.slurm.errors import SlurmFormatError
from trainguard.slurm.formats.common import entries

_RANGE = re.compile(r"(\d+)(?:-(\d+)(?::(\d+))?)?")
MAX_EXPANDED_TASKS = 100_000


def expand_tasks(expression: str) -> list[int] | None:
    """Task ids of an array expression such as "1-3%1", "0,4-10:2"; None when it cannot be read."""
    body = expression.split("%", 1)[0].strip().strip("[]")
    if not body:
        return None
    tasks: list[int] = []
    for part in body.split(","):
        match = _RANGE.fullmatch(part.strip())
        if match is None:
            return None
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) else first
        step = int(match.group(3)) if match.group(3) else 1
        if last < first or step < 1 or len(tasks) + (last - first) // step >= MAX_EXPANDED_TASKS:
            return None
        tasks.extend(range(first, last + 1, step))
    return tasks


def printed_ids(job: JobSnapshot) -> tuple[str, ...]:
    """The ids `squeue --only-job-state` prints for this record (several for an array's pending rest).

    Measured on 24.11: the record's own job id, then `_<task>` or `+<het offset>` (array task 0 of
    array 5 stored as job 8 prints "8_0"; het component 7 at offset 1 prints "7+1").
    """
    if job.het_job_id is not None:
        return (f"{job.job_id}+{job.het_job_offset if job.het_job_offset is not None else 0}",)
    if job.array_job_id and job.array_task_id:
        if job.array_task_id.isdigit():
            return (f"{job.job_id}_{job.array_task_id}",)
        tasks = expand_tasks(job.array_task_id)
        return tuple(f"{job.job_id}_{t}" for t in tasks) if tasks is not None else ()
    return (job.job_id,)


def query_id(printed: str) -> str:
    """The id to give `squeue -j` for a printed id: the record's own job id (for an array's pending
    rest that is the array's id, which brings every task of the array)."""
    return re.split(r"[_+]", printed, maxsplit=1)[0]


def parse_job_states(doc: Mapping[str, Any]) -> dict[str, str]:
    """Printed id -> the state word Slurm means, from `squeue --json --only-job-state`."""
    result: dict[str, str] = {}
    for item in entries(doc, "jobs", "squeue --only-job-state"):
        if not isinstance(item, Mapping):
            raise SlurmFormatError("squeue --only-job-state: an entry is not an object")
        raw_id, raw_state = item.get("job_id"), item.get("state", item.get("job_state"))
        if isinstance(raw_id, bool) or not isinstance(raw_id, (str, int)) or not str(raw_id):
            raise SlurmFormatError("squeue --only-job-state: an entry without a job id")
        words = [raw_state] if isinstance(raw_state, str) else raw_state
        if not isinstance(words, list) or not all(isinstance(w, str) for w in words):
            raise SlurmFormatError(f"squeue --only-job-state: job {str(raw_id)[:20]} has no state list")
        result[str(raw_id)] = states.job_state_from_list(words)[0]
    return result


@dataclass(frozen=True)
class Plan:
    keep: tuple[JobSnapshot, ...]
    """Previous records still current (same state, not watched)."""
    refresh: tuple[str, ...]
    """Ids to read in detail with `squeue --json -j` (sorted, deduplicated)."""


def plan(
    job_states: Mapping[str, str],
    previous: Iterable[JobSnapshot],
    watched: Callable[[JobSnapshot], bool],
) -> Plan:
    """Which previous records stay and which ids need a detail read. Records whose ids all left
    squeue are dropped; a record whose ids cannot be told is always re-read."""
    keep: list[JobSnapshot] = []
    covered: set[str] = set()
    refresh: set[str] = set()
    for job in previous:
        ids = printed_ids(job)
        present = [i for i in ids if i in job_states]
        if not present:
            continue  # left squeue (or unreadable ids: re-read below if it is still listed)
        covered.update(present)
        if watched(job) or any(job_states[i] != job.state for i in present):
            refresh.update(query_id(i) for i in present)
        else:
            keep.append(job)
    refresh.update(query_id(i) for i in job_states if i not in covered)
    # A record re-read for any of its ids is re-read whole: do not keep a stale copy beside it.
    keep = [j for j in keep if not ({query_id(i) for i in printed_ids(j)} & refresh)]
    return Plan(keep=tuple(keep), refresh=tuple(sorted(refresh, key=_id_order)))


def _id_order(value: str) -> tuple[int, str]:
    head = value.split("_", 1)[0]
    return (int(head) if head.isdigit() else 0, value)


def merge(keep: Iterable[JobSnapshot], details: Iterable[JobSnapshot]) -> list[JobSnapshot]:
    """Kept records plus freshly read ones; a fresh record replaces a kept one with the same identity."""
    fresh = list({(j.job_id, j.array_task_id): j for j in details}.values())  # -j ids can overlap
    fresh_keys = {(j.job_id, j.array_task_id) for j in fresh}
    return [j for j in keep if (j.job_id, j.array_task_id) not in fresh_keys] + fresh

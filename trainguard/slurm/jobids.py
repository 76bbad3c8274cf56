"""The forms in which Slurm prints a job id, recognised so that no form makes discovery fail.

- `1234`: a plain job (or one array task's own record id, or one heterogeneous component's own id).
- `1234_5`: array task 5 of array 1234; `1234_[5-9%2]` / `1234_*`: the pending remainder of an array.
- `1234+0`, `1234+1`: heterogeneous job 1234, component 0/1 (squeue/sacct text; JSON and scontrol carry
  het_job_id/het_job_offset next to each component's own job id).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum


class JobIdKind(StrEnum):
    PLAIN = "plain"
    ARRAY_TASK = "array_task"
    ARRAY_PENDING = "array_pending"
    HET_COMPONENT = "het_component"


@dataclass(frozen=True)
class JobId:
    kind: JobIdKind
    job: str
    """The leading number: the job, array master or het leader id."""
    part: str = ""
    """The task id, pending-task expression or het component offset."""

    @property
    def supported(self) -> bool:
        """TrainGuard follows and acts on plain jobs and single array tasks; not het jobs/array remainders."""
        return self.kind in (JobIdKind.PLAIN, JobIdKind.ARRAY_TASK)


_PLAIN = re.compile(r"[1-9][0-9]{0,9}")
_ARRAY_TASK = re.compile(r"([1-9][0-9]{0,9})_([0-9]{1,10})")
_ARRAY_PENDING = re.compile(r"([1-9][0-9]{0,9})_(\[[0-9,%\-\[\]]{1,200}\]|\*)")
_HET = re.compile(r"([1-9][0-9]{0,9})\+([0-9]{1,5})")


def parse_job_id(text: str) -> JobId:
    """Classify one id as Slurm prints it; ValueError for anything else (never a partial match)."""
    if not isinstance(text, str):
        raise ValueError("a job id is text")
    value = text.strip()
    if _PLAIN.fullmatch(value):
        return JobId(JobIdKind.PLAIN, value)
    if match := _ARRAY_TASK.fullmatch(value):
        return JobId(JobIdKind.ARRAY_TASK, match.group(1), match.group(2))
    if match := _ARRAY_PENDING.fullmatch(value):
        return JobId(JobIdKind.ARRAY_PENDING, match.group(1), match.group(2))
    if match := _HET.fullmatch(value):
        return JobId(JobIdKind.HET_COMPONENT, match.group(1), match.group(2))
    raise ValueError(f"not a Slurm job id: {value[:40]!r}")

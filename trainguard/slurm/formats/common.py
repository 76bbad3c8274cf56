"""Pieces every format adapter shares: typed field access on untrusted JSON, Slurm's number encodings,
output path expansion, and the one place a JobSnapshot is assembled from already-decoded values."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from trainguard.models import JobSnapshot
from trainguard.slurm import states
from trainguard.slurm.errors import SlurmFormatError
from trainguard.slurm.hostlist import expand_hostlist

NO_VAL = 0xFFFFFFFE
"""Slurm's NO_VAL/INFINITE sentinels (0xfffffffe, 0xffffffff) mean "not set" in 22.05's plain numbers."""


class Fields:
    """Typed reads of one JSON object. A wrong type is a SlurmFormatError naming the field; unknown
    keys are ignored, so fields a newer Slurm adds never disturb the ones read here."""

    def __init__(self, item: Any, what: str) -> None:
        if not isinstance(item, Mapping):
            raise SlurmFormatError(f"{what}: an entry is not an object")
        self.item = item
        self.what = what

    def error(self, key: str, message: str) -> SlurmFormatError:
        return SlurmFormatError(f"{self.what}: field {key!r}: {message}")

    def text(self, key: str, default: str = "") -> str:
        value = self.item.get(key)
        if value is None:
            return default
        if not isinstance(value, str):
            raise self.error(key, f"expected text, got {type(value).__name__}")
        return value

    def boolean(self, key: str, default: bool) -> bool:
        value = self.item.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.error(key, f"expected true/false, got {type(value).__name__}")
        return value

    def words(self, key: str) -> tuple[str, ...]:
        """A list of words, or one word (22.05 prints some lists as one string)."""
        value = self.item.get(key)
        if value is None:
            return ()
        if isinstance(value, str):
            return (value,) if value else ()
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return tuple(value)
        raise self.error(key, f"expected a list of words, got {type(value).__name__}")

    def number(self, key: str) -> int | None:
        """A plain integer (NO_VAL/INFINITE/negative -> None) or a 23.11+ `{"set","infinite","number"}`."""
        return decode_number(self.item.get(key), lambda msg: self.error(key, msg))

    def lenient_number(self, key: str) -> int | None:
        """Like `number`, but a value of an unexpected type is None: for fields that only refine
        (the task count maps ranks to nodes), never worth failing a whole snapshot for."""
        try:
            return self.number(key)
        except SlurmFormatError:
            return None

    def obj(self, key: str) -> Fields | None:
        value = self.item.get(key)
        if value is None:
            return None
        if not isinstance(value, Mapping):
            raise self.error(key, f"expected an object, got {type(value).__name__}")
        return Fields(value, f"{self.what}.{key}")


def decode_number(value: Any, error: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool):
        raise error("expected a number, got a boolean")
    if isinstance(value, int):
        return None if value < 0 or value >= NO_VAL else value
    if isinstance(value, float) and value.is_integer():
        return decode_number(int(value), error)
    if isinstance(value, Mapping):
        is_set, infinite, number = value.get("set"), value.get("infinite"), value.get("number")
        if not isinstance(is_set, bool) or (infinite is not None and not isinstance(infinite, bool)):
            raise error("a number object without a boolean 'set'")
        if not is_set or infinite:
            return None
        return decode_number(number, error)
    raise error(f"expected a number, got {type(value).__name__}")


def node_list(text: str, what: str) -> tuple[str, ...]:
    try:
        return tuple(expand_hostlist(text))
    except ValueError as err:
        raise SlurmFormatError(f"{what}: {err}") from None


_PATTERN = re.compile(r"%(\d*)([%AaJjNnstux])")


def expand_output_path(
    pattern: str,
    *,
    job_id: str,
    name: str,
    user: str,
    work_dir: str,
    array_job_id: str | None = None,
    array_task_id: str | None = None,
    first_node: str = "",
) -> str:
    """Expand sbatch filename patterns in one pass, as slurmctld does for `scontrol show job`.

    One pass matters: a `%x` inside the job name must stay literal after substitution.
    """
    array_master = array_job_id or job_id
    task = array_task_id if array_task_id and array_task_id.isdigit() else "4294967294"

    def substitute(match: re.Match[str]) -> str:
        width_text, code = match.group(1), match.group(2)
        if code == "%":
            return "%"
        width = min(int(width_text), 10) if width_text else 0
        values = {
            "A": array_master,
            "a": task,
            "J": job_id,
            "j": job_id,
            "N": first_node,
            "n": "0",
            "s": "batch",
            "t": "0",
            "u": user,
            "x": name,
        }
        value = values[code]
        return value.zfill(width) if value.isdigit() else value

    path = _PATTERN.sub(substitute, pattern)
    if path and not path.startswith("/") and work_dir:
        path = f"{work_dir.rstrip('/')}/{path}"
    return path


@dataclass(frozen=True)
class RawJob:
    """One job's values after a format adapter decoded its version's encodings (still unexpanded paths)."""

    job_id: str
    state: str
    name: str = ""
    user: str = ""
    reason: str = ""
    description: str = ""
    comment: str = ""
    nodes: tuple[str, ...] = ()
    excluded_nodes: tuple[str, ...] = ()
    restart_count: int = 0
    submit_time: int | None = None
    start_time: int | None = None
    end_time: int | None = None
    exit_code: int | None = None
    exit_signal: int | None = None
    priority: int | None = 1
    hold: bool = False
    requeue_allowed: bool = True
    stdout: str = ""
    stderr: str = ""
    stdout_expanded: str = ""
    stderr_expanded: str = ""
    work_dir: str = ""
    batch_host: str = ""
    array_job_id: int | None = None
    array_task_id: int | None = None
    array_task_string: str = ""
    node_count: int | None = None
    task_count: int | None = None  # the allocation's tasks (ranks under srun)
    partition: str = ""
    het_job_id: int | None = None
    het_job_offset: int | None = None


def build_job(raw: RawJob) -> JobSnapshot:
    """The project's JobSnapshot from decoded values: the same rules for every format."""
    array_job_id = str(raw.array_job_id) if raw.array_job_id else None
    array_task_id: str | None = None
    if array_job_id:
        array_task_id = (
            str(raw.array_task_id) if raw.array_task_id is not None else raw.array_task_string or None
        )
    reason = raw.reason
    if reason in ("", "None"):
        reason = raw.description or reason
    terminal = raw.state in states.TERMINAL_STATES
    pending = raw.state == states.PENDING
    batch_host = raw.batch_host or (raw.nodes[0] if raw.nodes else "")
    stdout_pattern = raw.stdout or ("slurm-%A_%a.out" if array_job_id else "slurm-%j.out")

    def expand(pattern: str) -> str:
        return expand_output_path(
            pattern,
            job_id=raw.job_id,
            name=raw.name,
            user=raw.user,
            work_dir=raw.work_dir,
            array_job_id=array_job_id,
            array_task_id=array_task_id,
            first_node=batch_host,
        )

    stdout_path = raw.stdout_expanded or expand(stdout_pattern)
    het = raw.het_job_id if raw.het_job_id else None
    return JobSnapshot(
        job_id=raw.job_id,
        name=raw.name,
        state=raw.state,
        reason=reason,
        comment=raw.comment,
        nodes=raw.nodes,
        excluded_nodes=raw.excluded_nodes,
        restart_count=max(0, raw.restart_count),
        submit_time=raw.submit_time or 0,
        # A pending job's start_time is Slurm's projection (a held job's is a year ahead): not a start.
        start_time=0 if pending else raw.start_time or 0,
        # A running or pending job's end_time is a projection (or junk): only an ended job has an end.
        end_time=(raw.end_time or 0) if terminal else 0,
        exit_code=raw.exit_code if terminal else None,
        exit_signal=raw.exit_signal if terminal else None,
        held=raw.hold or raw.priority == 0 or reason in states.HELD_REASONS,
        requeue_allowed=raw.requeue_allowed,
        stdout_path=stdout_path,
        stderr_path=raw.stderr_expanded or (expand(raw.stderr) if raw.stderr else stdout_path),
        work_dir=raw.work_dir,
        array_job_id=array_job_id,
        array_task_id=array_task_id,
        num_nodes=raw.node_count if raw.node_count is not None else len(raw.nodes),
        num_tasks=raw.task_count or 0,
        user=raw.user,
        partition=raw.partition,
        het_job_id=str(het) if het else None,
        het_job_offset=raw.het_job_offset if het else None,
    )


def meta_of(doc: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = doc.get("meta")
    return meta if isinstance(meta, Mapping) else {}


def check_errors(doc: Mapping[str, Any], what: str) -> None:
    """With slurmctld unreachable, squeue/sinfo --json exit 0 with an empty list plus errors: taking
    that list at face value would make every job look gone."""
    from trainguard.slurm.errors import SlurmReportedError

    errors = doc.get("errors")
    if errors:
        raise SlurmReportedError(f"{what}: Slurm reported errors: {str(errors)[:300]}")


def entries(doc: Mapping[str, Any], key: str, what: str) -> list[Any]:
    items = doc.get(key)
    if not isinstance(items, list):
        raise SlurmFormatError(f"{what}: no {key!r} list")
    return items

"""Pure parsers of real Slurm 22.05 output: `squeue --json`, `sinfo --json`, `scontrol show job/node -o`.

Everything here treats its input as untrusted: any malformed input raises SlurmParseError (a
ValueError), never another exception. Fixtures captured from a real cluster live in
tests/fixtures/slurm/.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from trainguard.models import JobSnapshot, NodeSnapshot
from trainguard.slurm.hostlist import expand_hostlist

NO_VAL = 0xFFFFFFFE
"""Slurm's NO_VAL/INFINITE sentinels (0xfffffffe, 0xffffffff) mean "not set"."""

TERMINAL_STATES = frozenset(
    {
        "BOOT_FAIL",
        "CANCELLED",
        "COMPLETED",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "TIMEOUT",
    }
)
HELD_REASONS = frozenset(
    {"JobHeldUser", "JobHeldAdmin", "job_requeued_in_held_state", "launch_failed_requeued_held"}
)


class SlurmParseError(ValueError):
    """Slurm output did not have the expected shape."""


class AmbiguousOutputError(SlurmParseError):
    """`scontrol -o` output whose user text (name, comment, paths) imitates `Key=value` fields.

    Callers should fall back to the JSON form, where every value is delimited.
    """


class SlurmReportedError(SlurmParseError):
    """JSON output whose `errors` list is not empty (e.g. slurmctld unreachable); retry later."""


# --- helpers ---------------------------------------------------------------------------------


def _get(doc: Mapping[str, Any], key: str, kind: type | tuple[type, ...], default: Any) -> Any:
    value = doc.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) and kind is int:
        raise SlurmParseError(f"field {key!r}: expected a number, got a boolean")
    if not isinstance(value, kind):
        raise SlurmParseError(f"field {key!r}: unexpected type {type(value).__name__}")
    return value


def _task_count(value: Any) -> int:
    """A task count as squeue (int, or {"set", "number"} in newer data_parser versions) or scontrol
    (text) gives it; 0 when unknown. Only used to map ranks to nodes, so it never fails a parse."""
    if isinstance(value, dict):
        value = value.get("number") if value.get("set", True) else None
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0 or value >= NO_VAL:
        return 0
    return value


def _time(value: int) -> int:
    return 0 if value < 0 or value >= NO_VAL else value


def _nodes(text: str, field: str) -> tuple[str, ...]:
    try:
        return tuple(expand_hostlist(text))
    except ValueError as err:
        raise SlurmParseError(f"field {field!r}: {err}") from None


def _wait_status(raw: int) -> tuple[int | None, int | None]:
    """squeue's exit_code is a wait(2) status: exit code in bits 8-15, signal in bits 0-6."""
    if raw < 0 or raw >= NO_VAL:
        return None, None
    return (raw >> 8) & 0xFF, raw & 0x7F


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


def _default_stdout(array_job_id: str | None) -> str:
    return "slurm-%A_%a.out" if array_job_id else "slurm-%j.out"


# --- squeue --json ---------------------------------------------------------------------------


def _load(text: str, what: str) -> dict[str, Any]:
    if not isinstance(text, str):
        raise SlurmParseError(f"{what}: expected text")
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as err:
        raise SlurmParseError(f"{what}: not valid JSON: {str(err)[:200]}") from None
    if not isinstance(doc, dict):
        raise SlurmParseError(f"{what}: expected a JSON object at the top level")
    errors = doc.get("errors")
    if errors:
        # With slurmctld unreachable, squeue/sinfo --json exit 0 with an empty list plus errors:
        # taking that list at face value would make every job look gone.
        raise SlurmReportedError(f"{what}: Slurm reported errors: {str(errors)[:300]}")
    return doc


def _job_from_json(item: Any) -> JobSnapshot:
    if not isinstance(item, dict):
        raise SlurmParseError("squeue --json: a job entry is not an object")
    raw_id = _get(item, "job_id", int, -1)
    if raw_id <= 0:
        raise SlurmParseError("squeue --json: job without a valid job_id")
    job_id = str(raw_id)
    state = _get(item, "job_state", str, "")
    name = _get(item, "name", str, "")
    user = _get(item, "user_name", str, "")
    work_dir = _get(item, "current_working_directory", str, "")
    array_raw = _get(item, "array_job_id", int, 0)
    array_job_id = str(array_raw) if array_raw else None
    array_task_id: str | None = None
    if array_job_id:
        task = _get(item, "array_task_id", int, -1)
        array_task_id = str(task) if 0 <= task < NO_VAL else _get(item, "array_task_string", str, "") or None
    nodes = _nodes(_get(item, "nodes", str, ""), "nodes")
    reason = _get(item, "state_reason", str, "")
    if reason in ("", "None"):
        reason = _get(item, "state_description", str, "") or reason
    priority = _get(item, "priority", int, 1)
    terminal = state in TERMINAL_STATES
    exit_code, exit_signal = _wait_status(_get(item, "exit_code", int, NO_VAL)) if terminal else (None, None)
    batch_host = _get(item, "batch_host", str, "") or (nodes[0] if nodes else "")
    stdout_pattern = _get(item, "standard_output", str, "") or _default_stdout(array_job_id)
    stderr_pattern = _get(item, "standard_error", str, "") or stdout_pattern
    expand = {
        "job_id": job_id,
        "name": name,
        "user": user,
        "work_dir": work_dir,
        "array_job_id": array_job_id,
        "array_task_id": array_task_id,
        "first_node": batch_host,
    }
    return JobSnapshot(
        job_id=job_id,
        name=name,
        state=state,
        reason=reason,
        comment=_get(item, "comment", str, ""),
        nodes=nodes,
        excluded_nodes=_nodes(_get(item, "excluded_nodes", str, ""), "excluded_nodes"),
        restart_count=max(0, _get(item, "restart_cnt", int, 0)),
        submit_time=_time(_get(item, "submit_time", int, 0)),
        start_time=_time(_get(item, "start_time", int, 0)),
        end_time=_time(_get(item, "end_time", int, 0)) if terminal else 0,
        exit_code=exit_code,
        exit_signal=exit_signal,
        held=priority == 0 or reason in HELD_REASONS,
        requeue_allowed=bool(_get(item, "requeue", bool, True)),
        stdout_path=expand_output_path(stdout_pattern, **expand),
        stderr_path=expand_output_path(stderr_pattern, **expand),
        work_dir=work_dir,
        array_job_id=array_job_id,
        array_task_id=array_task_id,
        num_nodes=max(0, _get(item, "node_count", int, len(nodes))),
        num_tasks=_task_count(item.get("tasks")),
        user=user,
        partition=_get(item, "partition", str, ""),
    )


def parse_squeue_json(text: str) -> list[JobSnapshot]:
    """Jobs from `squeue --json` (openapi v0.0.38). Output paths are expanded like scontrol does.

    For an array, `job_id` is the record's own id; the pending remainder record carries the pending
    task expression (e.g. "0,2-7%2") in `array_task_id`.
    """
    doc = _load(text, "squeue --json")
    jobs = doc.get("jobs")
    if not isinstance(jobs, list):
        raise SlurmParseError("squeue --json: no 'jobs' list")
    try:
        return [_job_from_json(item) for item in jobs]
    except SlurmParseError:
        raise
    except (ValueError, TypeError, OverflowError) as err:
        raise SlurmParseError(f"squeue --json: invalid job entry: {str(err)[:200]}") from None


# --- sinfo --json ----------------------------------------------------------------------------


def node_state(base: str, flags: tuple[str, ...]) -> str:
    """One lower-case state as operators say it: DRAIN on an idle/down node is `drained`."""
    state = base.lower()
    if "DRAIN" in flags:
        return "drained" if state in ("idle", "down") else "draining"
    return state


def _node_from_json(item: Any) -> NodeSnapshot:
    if not isinstance(item, dict):
        raise SlurmParseError("sinfo --json: a node entry is not an object")
    name = _get(item, "name", str, "")
    if not name:
        raise SlurmParseError("sinfo --json: node without a name")
    raw_flags = _get(item, "state_flags", list, [])
    if not all(isinstance(flag, str) for flag in raw_flags):
        raise SlurmParseError(f"sinfo --json: node {name!r} has non-text state flags")
    flags = tuple(raw_flags)
    return NodeSnapshot(
        name=name,
        state=node_state(_get(item, "state", str, ""), flags),
        flags=flags,
        reason=_get(item, "reason", str, ""),
    )


def parse_sinfo_json(text: str) -> list[NodeSnapshot]:
    doc = _load(text, "sinfo --json")
    nodes = doc.get("nodes")
    if not isinstance(nodes, list):
        raise SlurmParseError("sinfo --json: no 'nodes' list")
    seen: dict[str, NodeSnapshot] = {}
    for item in nodes:
        node = _node_from_json(item)
        seen.setdefault(node.name, node)  # a node in several partitions is listed once per partition
    return list(seen.values())


# --- scontrol show job/node -o ---------------------------------------------------------------

JOB_KEYS = frozenset(
    [
        "JobId",
        "ArrayJobId",
        "ArrayTaskId",
        "ArrayTaskThrottle",
        "HetJobId",
        "HetJobOffset",
        "HetJobIdSet",
        "JobName",
        "UserId",
        "GroupId",
        "MCS_label",
        "Priority",
        "Nice",
        "Account",
        "QOS",
        "WCKey",
        "JobState",
        "Reason",
        "FedOrigin",
        "ViableSiblings",
        "ActiveSiblings",
        "Dependency",
        "Requeue",
        "Restarts",
        "BatchFlag",
        "Reboot",
        "ExitCode",
        "DerivedExitCode",
        "RunTime",
        "TimeLimit",
        "TimeMin",
        "SubmitTime",
        "EligibleTime",
        "AccrueTime",
        "StartTime",
        "EndTime",
        "Deadline",
        "PreemptEligibleTime",
        "PreemptTime",
        "SuspendTime",
        "SecsPreSuspend",
        "LastSchedEval",
        "ResizeTime",
        "Scheduler",
        "Partition",
        "AllocNode:Sid",
        "ReqNodeList",
        "ExcNodeList",
        "NodeList",
        "SchedNodeList",
        "BatchHost",
        "NumNodes",
        "NumCPUs",
        "NumTasks",
        "CPUs/Task",
        "ReqB:S:C:T",
        "TRES",
        "Socks/Node",
        "NtasksPerN:B:S:C",
        "CoreSpec",
        "ThreadSpec",
        "JOB_GRES",
        "Nodes",
        "CPU_IDs",
        "Mem",
        "GRES",
        "MinCPUsNode",
        "MinMemoryNode",
        "MinMemoryCPU",
        "MinTmpDiskNode",
        "Features",
        "Prefer",
        "ClusterFeatures",
        "DelayBoot",
        "Reservation",
        "OverSubscribe",
        "Contiguous",
        "Licenses",
        "Network",
        "Command",
        "WorkDir",
        "AdminComment",
        "SystemComment",
        "Comment",
        "StdErr",
        "StdIn",
        "StdOut",
        "Power",
        "CpusPerTres",
        "MemPerTres",
        "TresBind",
        "TresFreq",
        "TresPerJob",
        "TresPerNode",
        "TresPerSocket",
        "TresPerTask",
        "MailUser",
        "MailType",
        "BurstBuffer",
        "BurstBufferState",
        "CpuFreqMin",
        "CpuFreqMax",
        "CpuFreqGov",
        "Container",
        "NtasksPerTRES",
        "Switches",
        "Wait-for-Switch",
        "Extra",
        "SelinuxContext",
        "KillOInInvalidDependent",
    ]
)
REPEATABLE_JOB_KEYS = frozenset({"Nodes", "CPU_IDs", "Mem", "GRES", "JOB_GRES"})
NODE_KEYS = frozenset(
    [
        "NodeName",
        "Arch",
        "CoresPerSocket",
        "CPUAlloc",
        "CPUEfctv",
        "CPUTot",
        "CPULoad",
        "AvailableFeatures",
        "ActiveFeatures",
        "Gres",
        "GresDrain",
        "GresUsed",
        "NodeAddr",
        "NodeHostName",
        "Port",
        "Version",
        "OS",
        "RealMemory",
        "AllocMem",
        "FreeMem",
        "Sockets",
        "Boards",
        "State",
        "ThreadsPerCore",
        "TmpDisk",
        "Weight",
        "Owner",
        "MCS_label",
        "Partitions",
        "BootTime",
        "SlurmdStartTime",
        "LastBusyTime",
        "ResumeAfterTime",
        "CfgTRES",
        "AllocTRES",
        "CapWatts",
        "CurrentWatts",
        "AveWatts",
        "ExtSensorsJoules",
        "ExtSensorsWatts",
        "ExtSensorsTemp",
        "Reason",
        "Comment",
        "Extra",
        "NextState",
        "InstanceId",
        "InstanceType",
    ]
)
_KEY_AT = re.compile(r"(?:^|(?<=\s))([A-Za-z_][A-Za-z0-9_:/-]*)=")


def _split_fields(line: str, known: frozenset[str], repeatable: frozenset[str]) -> dict[str, str]:
    """Split one `-o` line at known keys. A known key seen twice means user text imitates a field."""
    marks = [(m.start(), m.end(), m.group(1)) for m in _KEY_AT.finditer(line) if m.group(1) in known]
    if not marks or marks[0][0] != 0:
        raise SlurmParseError(f"unexpected scontrol output: {line[:120]!r}")
    fields: dict[str, str] = {}
    for index, (_, value_start, key) in enumerate(marks):
        value_end = marks[index + 1][0] if index + 1 < len(marks) else len(line)
        value = line[value_start:value_end]
        value = value[:-1] if value.endswith(" ") else value  # the single separator space
        if key in fields:
            if key in repeatable:
                continue
            raise AmbiguousOutputError(f"scontrol output repeats {key}=; user text imitates fields")
        fields[key] = value
    return fields


def _scontrol_time(value: str) -> int:
    value = value.strip()
    if not value or value in ("Unknown", "None", "N/A", "(null)"):
        return 0
    if value.isdigit():  # SLURM_TIME_FORMAT=%s
        return _time(int(value))
    try:
        # Slurm prints local time of the host that runs scontrol; see commands.SCONTROL_ENV.
        return int(datetime.fromisoformat(value).timestamp())
    except (ValueError, OverflowError, OSError):
        raise SlurmParseError(f"unexpected time value {value[:40]!r}") from None


def _scontrol_int(value: str, field: str) -> int:
    match = re.match(r"\d+", value.strip())
    if match is None:
        raise SlurmParseError(f"field {field!r}: expected a number, got {value[:40]!r}")
    return int(match.group(0))


def _null(value: str) -> str:
    return "" if value in ("(null)", "N/A") else value


def _job_from_scontrol(fields: dict[str, str]) -> JobSnapshot:
    job_id = fields.get("JobId", "")
    if not job_id.isdigit():
        raise SlurmParseError(f"scontrol show job: bad JobId {job_id[:40]!r}")
    state = fields.get("JobState", "").split("+")[0]
    reason = _null(fields.get("Reason", ""))
    priority = _scontrol_int(fields.get("Priority", "1"), "Priority")
    terminal = state in TERMINAL_STATES
    exit_code: int | None = None
    exit_signal: int | None = None
    if terminal and ":" in fields.get("ExitCode", ""):
        code, sig = fields["ExitCode"].split(":", 1)
        exit_code, exit_signal = _scontrol_int(code, "ExitCode"), _scontrol_int(sig, "ExitCode")
    array_job_id = fields.get("ArrayJobId") or None
    if array_job_id is not None and not array_job_id.isdigit():
        raise SlurmParseError(f"scontrol show job: bad ArrayJobId {array_job_id[:40]!r}")
    nodes = _nodes(_null(fields.get("NodeList", "")), "NodeList")
    user = fields.get("UserId", "").split("(")[0]
    num_nodes_text = fields.get("NumNodes", "")
    stdout = fields.get("StdOut", "")
    return JobSnapshot(
        job_id=job_id,
        name=fields.get("JobName", ""),
        state=state,
        reason=reason,
        comment=fields.get("Comment", "").rstrip(" "),
        nodes=nodes,
        excluded_nodes=_nodes(_null(fields.get("ExcNodeList", "")), "ExcNodeList"),
        restart_count=_scontrol_int(fields.get("Restarts", "0"), "Restarts"),
        submit_time=_scontrol_time(fields.get("SubmitTime", "")),
        start_time=_scontrol_time(fields.get("StartTime", "")),
        end_time=_scontrol_time(fields.get("EndTime", "")) if terminal else 0,
        exit_code=exit_code,
        exit_signal=exit_signal,
        held=priority == 0 or reason in HELD_REASONS,
        requeue_allowed=fields.get("Requeue", "1") != "0",
        stdout_path=stdout,
        stderr_path=fields.get("StdErr", "") or stdout,
        work_dir=fields.get("WorkDir", ""),
        array_job_id=array_job_id,
        array_task_id=fields.get("ArrayTaskId") or None,
        num_nodes=_scontrol_int(num_nodes_text, "NumNodes") if num_nodes_text else len(nodes),
        num_tasks=_task_count(fields.get("NumTasks")),
        user=user,
        partition=fields.get("Partition", ""),
    )


def parse_scontrol_jobs(text: str) -> list[JobSnapshot]:
    """Every record of `scontrol show job -d -o [id]` (an array id yields one line per task)."""
    if not isinstance(text, str):
        raise SlurmParseError("scontrol show job: expected text")
    lines = [line.rstrip("\n") for line in text.splitlines() if line.strip()]
    if not lines:
        raise SlurmParseError("scontrol show job: empty output")
    try:
        return [_job_from_scontrol(_split_fields(line, JOB_KEYS, REPEATABLE_JOB_KEYS)) for line in lines]
    except SlurmParseError:
        raise
    except (ValueError, TypeError, OverflowError) as err:
        raise SlurmParseError(f"scontrol show job: {str(err)[:200]}") from None


def parse_scontrol_job(text: str, job_id: str | None = None) -> JobSnapshot:
    """The record for `job_id` (plain id or `<array>_<task>`), or the only record when None."""
    jobs = parse_scontrol_jobs(text)
    if job_id is None:
        if len(jobs) != 1:
            raise SlurmParseError(f"scontrol show job: expected one job, got {len(jobs)}")
        return jobs[0]
    for job in jobs:
        if job.job_id == job_id or (job.array_job_id and f"{job.array_job_id}_{job.array_task_id}" == job_id):
            return job
    raise SlurmParseError(f"scontrol show job: no record for job {job_id!r}")


def parse_scontrol_nodes(text: str) -> list[NodeSnapshot]:
    """`scontrol show nodes -o`: State=DOWN+DRAIN+NOT_RESPONDING -> state 'drained', flags."""
    if not isinstance(text, str):
        raise SlurmParseError("scontrol show nodes: expected text")
    result: list[NodeSnapshot] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        fields = _split_fields(line.strip(), NODE_KEYS, frozenset())
        name = fields.get("NodeName", "")
        if not name:
            raise SlurmParseError(f"scontrol show nodes: record without NodeName: {line[:80]!r}")
        parts = fields.get("State", "").split("+")
        flags = tuple(p for p in parts[1:] if p)
        reason = re.sub(r"\s*\[[^\]]*@[^\]]*\]\s*$", "", _null(fields.get("Reason", "")).strip())
        result.append(NodeSnapshot(name=name, state=node_state(parts[0], flags), flags=flags, reason=reason))
    return result

"""`scontrol show job/node -o` text (every Slurm version): one record per line of `Key=value` fields.

Keys are found generically by the `Key=` token structure, so a key a newer Slurm adds (24.11's
`FailedNode=`, `ReqTRES=`, `AllocTRES=`) becomes its own field and is never swallowed into the previous
one. Only the free-text fields (names, comments, paths, a node's reason) may hold spaces and `=`; inside
those, key-like text that is not a known key cannot be told from user text, and the record is reported
as ambiguous (AmbiguousOutputError: callers read the JSON form, where every value is delimited).
"""

from __future__ import annotations

import re
from datetime import datetime

from trainguard.models import JobSnapshot, NodeSnapshot
from trainguard.slurm import states
from trainguard.slurm.errors import AmbiguousOutputError, SlurmParseError
from trainguard.slurm.formats.common import NO_VAL, node_list

FORMAT = "scontrol/text"

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
        # printed by 23.11-25.x
        "FailedNode",
        "ReqTRES",
        "AllocTRES",
        "ContainerID",
        "SegmentSize",
        "ResvPorts",
        "StepMgrEnabled",
        "OOMKillStep",
        "LicensesAlloc",
        "Tres",
        "CronJob",
        "CrontabSpec",
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
        # printed by 23.11-25.x
        "CPUSpecList",
        "MemSpecLimit",
        "ReservationName",
        "LastBusyTime",
        "ResumeAfterTime",
        "Topology",
        "TLS",
        "CertFlags",
        "GresDrain",
    ]
)
FREE_TEXT_JOB_KEYS = frozenset(
    {
        "JobName",
        "Comment",
        "AdminComment",
        "SystemComment",
        "Command",
        "WorkDir",
        "StdErr",
        "StdIn",
        "StdOut",
        "Extra",
        "MailUser",
    }
)
"""Values that may hold spaces and `=` (user-controlled or free text); every other value is a token run
that ends at the next `Key=`."""
FREE_TEXT_NODE_KEYS = frozenset({"Reason", "Comment", "Extra", "OS"})
_KEY_AT = re.compile(r"(?:^|(?<=\s))([A-Za-z_][A-Za-z0-9_:/-]*)=")


def split_fields(
    line: str, known: frozenset[str], repeatable: frozenset[str], free_text: frozenset[str], first: str
) -> dict[str, str]:
    """Split one `-o` line into fields at every `Key=` token (known or not).

    Inside a free-text value only a known key ends the value: unknown key-like text there is either
    user text or a new Slurm key, which cannot be told apart (AmbiguousOutputError). A known key seen
    twice means user text imitates a field (AmbiguousOutputError).
    """
    marks: list[tuple[int, int, str]] = []
    in_free_text = False
    for match in _KEY_AT.finditer(line):
        key = match.group(1)
        if marks and key not in known and in_free_text:
            raise AmbiguousOutputError(
                f"scontrol output has {key}= inside the free-text field {marks[-1][2]}=; cannot tell "
                "user text from a field"
            )
        marks.append((match.start(), match.end(), key))
        in_free_text = key in free_text
    if not marks or marks[0][0] != 0 or marks[0][2] != first:
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


def _time(value: int) -> int:
    return 0 if value < 0 or value >= NO_VAL else value


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
    words = [w for w in fields.get("JobState", "").split("+") if w]
    state = states.job_state_word(words[0], words[1:]) if words else ""
    reason = _null(fields.get("Reason", ""))
    priority = _scontrol_int(fields.get("Priority", "1"), "Priority")
    terminal = state in states.TERMINAL_STATES
    exit_code: int | None = None
    exit_signal: int | None = None
    if terminal and ":" in fields.get("ExitCode", ""):
        code, sig = fields["ExitCode"].split(":", 1)
        exit_code, exit_signal = _scontrol_int(code, "ExitCode"), _scontrol_int(sig, "ExitCode")
    array_job_id = fields.get("ArrayJobId") or None
    if array_job_id is not None and not array_job_id.isdigit():
        raise SlurmParseError(f"scontrol show job: bad ArrayJobId {array_job_id[:40]!r}")
    het_job_id = fields.get("HetJobId") or None
    if het_job_id is not None and not het_job_id.isdigit():
        raise SlurmParseError(f"scontrol show job: bad HetJobId {het_job_id[:40]!r}")
    het_offset = fields.get("HetJobOffset", "")
    nodes = node_list(_null(fields.get("NodeList", "")), "scontrol show job: NodeList")
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
        excluded_nodes=node_list(_null(fields.get("ExcNodeList", "")), "scontrol show job: ExcNodeList"),
        restart_count=_scontrol_int(fields.get("Restarts", "0"), "Restarts"),
        submit_time=_scontrol_time(fields.get("SubmitTime", "")),
        start_time=0 if state == states.PENDING else _scontrol_time(fields.get("StartTime", "")),
        end_time=_scontrol_time(fields.get("EndTime", "")) if terminal else 0,
        exit_code=exit_code,
        exit_signal=exit_signal,
        held=priority == 0 or reason in states.HELD_REASONS,
        requeue_allowed=fields.get("Requeue", "1") != "0",
        stdout_path=stdout,
        stderr_path=fields.get("StdErr", "") or stdout,
        work_dir=fields.get("WorkDir", ""),
        array_job_id=array_job_id,
        array_task_id=fields.get("ArrayTaskId") or None,
        num_nodes=_scontrol_int(num_nodes_text, "NumNodes") if num_nodes_text else len(nodes),
        num_tasks=int(tasks) if (tasks := fields.get("NumTasks", "")).isdigit() else 0,
        user=user,
        partition=fields.get("Partition", ""),
        het_job_id=het_job_id,
        het_job_offset=_scontrol_int(het_offset, "HetJobOffset") if het_job_id and het_offset else None,
    )


def parse_scontrol_jobs(text: str) -> list[JobSnapshot]:
    """Every record of `scontrol show job -d -o [id]` (an array id yields one line per task)."""
    if not isinstance(text, str):
        raise SlurmParseError("scontrol show job: expected text")
    lines = [line.rstrip("\n") for line in text.splitlines() if line.strip()]
    if not lines:
        raise SlurmParseError("scontrol show job: empty output")
    try:
        return [
            _job_from_scontrol(split_fields(line, JOB_KEYS, REPEATABLE_JOB_KEYS, FREE_TEXT_JOB_KEYS, "JobId"))
            for line in lines
        ]
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
        fields = split_fields(line.strip(), NODE_KEYS, frozenset(), FREE_TEXT_NODE_KEYS, "NodeName")
        name = fields.get("NodeName", "")
        if not name:
            raise SlurmParseError(f"scontrol show nodes: record without NodeName: {line[:80]!r}")
        parts = fields.get("State", "").split("+")
        flags = tuple(p for p in parts[1:] if p)
        reason = re.sub(r"\s*\[[^\]]*@[^\]]*\]\s*$", "", _null(fields.get("Reason", "")).strip())
        result.append(
            NodeSnapshot(name=name, state=states.node_state(parts[0], flags), flags=flags, reason=reason)
        )
    return result

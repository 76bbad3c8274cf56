"""Slurm 22.05 (openapi/v0.0.38): `squeue --json`, `sinfo --json`, slurmrestd /slurm/v0.0.38/jobs and /nodes.

Shape: plain numbers with NO_VAL sentinels, `job_state` one word (already what scontrol prints),
`exit_code` a wait(2) status, nodes listed one per partition with `state` + `state_flags`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainguard.models import JobSnapshot, NodeSnapshot
from trainguard.slurm import states
from trainguard.slurm.errors import SlurmFormatError
from trainguard.slurm.formats.common import Fields, RawJob, build_job, entries, node_list

FORMAT = "openapi/v0.0.38"


def _wait_status(raw: int | None) -> tuple[int | None, int | None]:
    """22.05's exit_code is a wait(2) status: exit code in bits 8-15, signal in bits 0-6."""
    if raw is None:
        return None, None
    return (raw >> 8) & 0xFF, raw & 0x7F


def job(item: Any) -> JobSnapshot:
    f = Fields(item, "squeue --json (v0.0.38)")
    raw_id = f.number("job_id")
    if not raw_id:
        raise SlurmFormatError("squeue --json (v0.0.38): job without a valid job_id")
    state_words = f.words("job_state")
    # 22.05 prints one word; a list here would be a newer Slurm mislabelled: still read it as Slurm means.
    state, _ = (
        states.job_state_from_list(state_words)
        if len(state_words) > 1
        else (
            (state_words[0].upper() if state_words else ""),
            (),
        )
    )
    array_task = f.number("array_task_id")
    exit_code, exit_signal = _wait_status(f.number("exit_code"))
    nodes = node_list(f.text("nodes"), "squeue --json: nodes")
    return build_job(
        RawJob(
            job_id=str(raw_id),
            state=state,
            name=f.text("name"),
            user=f.text("user_name"),
            reason=f.text("state_reason"),
            description=f.text("state_description"),
            comment=f.text("comment"),
            nodes=nodes,
            excluded_nodes=node_list(f.text("excluded_nodes"), "squeue --json: excluded_nodes"),
            restart_count=f.number("restart_cnt") or 0,
            submit_time=f.number("submit_time"),
            start_time=f.number("start_time"),
            end_time=f.number("end_time"),
            exit_code=exit_code,
            exit_signal=exit_signal,
            priority=f.number("priority") if "priority" in f.item else 1,
            requeue_allowed=f.boolean("requeue", True),
            stdout=f.text("standard_output"),
            stderr=f.text("standard_error"),
            work_dir=f.text("current_working_directory"),
            batch_host=f.text("batch_host"),
            array_job_id=f.number("array_job_id"),
            array_task_id=array_task,
            array_task_string=f.text("array_task_string"),
            node_count=f.number("node_count"),
            task_count=f.lenient_number("tasks"),
            partition=f.text("partition"),
            het_job_id=f.number("het_job_id"),
            het_job_offset=f.number("het_job_offset"),
        )
    )


def jobs(doc: Mapping[str, Any]) -> list[JobSnapshot]:
    return [job(item) for item in entries(doc, "jobs", "squeue --json (v0.0.38)")]


def node(item: Any) -> NodeSnapshot:
    f = Fields(item, "sinfo --json (v0.0.38)")
    name = f.text("name")
    if not name:
        raise SlurmFormatError("sinfo --json (v0.0.38): node without a name")
    flags = f.words("state_flags")
    base = f.words("state")
    if len(base) > 1:  # a list: base + flags
        state, more = states.node_state_from_list(base)
        flags = tuple(dict.fromkeys((*more, *flags)))
    else:
        state = states.node_state(base[0] if base else "", flags)
    return NodeSnapshot(name=name, state=state, flags=flags, reason=f.text("reason"))


def nodes(doc: Mapping[str, Any]) -> list[NodeSnapshot]:
    seen: dict[str, NodeSnapshot] = {}
    for item in entries(doc, "nodes", "sinfo --json (v0.0.38)"):
        parsed = node(item)
        seen.setdefault(parsed.name, parsed)  # a node in several partitions is listed once per partition
    return list(seen.values())

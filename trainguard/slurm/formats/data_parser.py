"""Slurm 23.11-25.x (data_parser/v0.0.40 and later): the shape those versions share.

Differences from 22.05's v0.0.38: `job_state` and node `state` are lists (base state + flags); numbers
are `{"set", "infinite", "number"}` objects; `exit_code` is `{"status", "return_code", "signal"}`;
a boolean `hold`; `sinfo --json` groups nodes (`sinfo: [...]`) and per-node data comes from
`scontrol show node --json` / slurmrestd /nodes (`nodes: [...]`). What differs between data_parser
versions for the fields read here is declared by each version's module (v0040.py ... v0043.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from trainguard.models import JobSnapshot, NodeSnapshot
from trainguard.slurm import states
from trainguard.slurm.errors import SlurmFormatError
from trainguard.slurm.formats.common import Fields, RawJob, build_job, entries, node_list


@dataclass(frozen=True)
class DataParserFormat:
    format: str
    expanded_fields: bool = False
    """v0.0.43: `standard_output`/`standard_error` are the raw patterns and Slurm's own expansion is in
    `stdout_expanded`/`stderr_expanded`. Before (v0.0.40-42) `standard_output`/`standard_error` are
    already expanded by Slurm (measured on 24.11: a job named "train %x" with `-o %x-%j.out` prints
    "train %x-1.out"): expanding them again would substitute inside the job name."""

    def _what(self, command: str) -> str:
        return f"{command} ({self.format})"

    def _exit(self, f: Fields) -> tuple[int | None, int | None]:
        value = f.item.get("exit_code")
        if value is None:
            return None, None
        if isinstance(value, int) and not isinstance(value, bool):  # a wait(2) status, as in v0.0.38
            number = f.number("exit_code")
            return (None, None) if number is None else ((number >> 8) & 0xFF, number & 0x7F)
        code = f.obj("exit_code")
        if code is None:
            return None, None
        signal = code.obj("signal")
        signal_id = (signal.number("id") if signal is not None else None) or None
        return_code = code.number("return_code")
        if return_code is None and signal_id is None:
            return None, None
        # scontrol prints ExitCode=<code>:<signal> with 0 for the part not set, as 22.05's JSON decoded.
        return return_code or 0, signal_id or 0

    def job(self, item: Any) -> JobSnapshot:
        what = self._what("squeue --json")
        f = Fields(item, what)
        raw_id = f.number("job_id")
        if not raw_id:
            raise SlurmFormatError(f"{what}: job without a valid job_id")
        state, _flags = states.job_state_from_list(f.words("job_state"))
        if not state:
            raise SlurmFormatError(f"{what}: job {raw_id} without a job_state")
        exit_code, exit_signal = self._exit(f)
        return build_job(
            RawJob(
                job_id=str(raw_id),
                state=state,
                name=f.text("name"),
                user=f.text("user_name"),
                reason=f.text("state_reason"),
                description=f.text("state_description"),
                comment=f.text("comment"),
                nodes=node_list(f.text("nodes"), f"{what}: nodes"),
                excluded_nodes=node_list(f.text("excluded_nodes"), f"{what}: excluded_nodes"),
                restart_count=f.number("restart_cnt") or 0,
                submit_time=f.number("submit_time"),
                start_time=f.number("start_time"),
                end_time=f.number("end_time"),
                exit_code=exit_code,
                exit_signal=exit_signal,
                priority=f.number("priority") if "priority" in f.item else 1,
                hold=f.boolean("hold", False),
                requeue_allowed=f.boolean("requeue", True),
                stdout=f.text("standard_output"),
                stderr=f.text("standard_error"),
                stdout_expanded=f.text("stdout_expanded" if self.expanded_fields else "standard_output"),
                stderr_expanded=f.text("stderr_expanded" if self.expanded_fields else "standard_error"),
                work_dir=f.text("current_working_directory"),
                batch_host=f.text("batch_host"),
                array_job_id=f.number("array_job_id"),
                array_task_id=f.number("array_task_id"),
                array_task_string=f.text("array_task_string"),
                node_count=f.number("node_count"),
                task_count=f.lenient_number("tasks"),
                partition=f.text("partition"),
                het_job_id=f.number("het_job_id"),
                het_job_offset=f.number("het_job_offset"),
            )
        )

    def jobs(self, doc: Mapping[str, Any]) -> list[JobSnapshot]:
        return [self.job(item) for item in entries(doc, "jobs", self._what("squeue --json"))]

    def node(self, item: Any) -> NodeSnapshot:
        what = self._what("scontrol show node --json")
        f = Fields(item, what)
        name = f.text("name")
        if not name:
            raise SlurmFormatError(f"{what}: node without a name")
        state, flags = states.node_state_from_list(f.words("state"))
        return NodeSnapshot(name=name, state=state, flags=flags, reason=f.text("reason"))

    def grouped_nodes(self, doc: Mapping[str, Any]) -> list[NodeSnapshot]:
        """`sinfo --json` of 23.11+: one entry per (partition, state, ...) group with its node names.

        Per-node reasons need `scontrol show node --json` (the client uses that); this reading keeps a
        group's state and reason for each of its nodes.
        """
        what = self._what("sinfo --json")
        seen: dict[str, NodeSnapshot] = {}
        for item in entries(doc, "sinfo", what):
            f = Fields(item, what)
            node_obj, nodes_obj, reason_obj = f.obj("node"), f.obj("nodes"), f.obj("reason")
            words = node_obj.words("state") if node_obj is not None else ()
            state, flags = states.node_state_from_list(words)
            reason = reason_obj.text("description") if reason_obj is not None else ""
            names = nodes_obj.words("nodes") if nodes_obj is not None else ()
            for expr in names:
                for name in node_list(expr, f"{what}: nodes"):
                    seen.setdefault(name, NodeSnapshot(name=name, state=state, flags=flags, reason=reason))
        return list(seen.values())

    def nodes(self, doc: Mapping[str, Any]) -> list[NodeSnapshot]:
        if "nodes" not in doc and "sinfo" in doc:
            return self.grouped_nodes(doc)
        seen: dict[str, NodeSnapshot] = {}
        for item in entries(doc, "nodes", self._what("scontrol show node --json")):
            parsed = self.node(item)
            seen.setdefault(parsed.name, parsed)
        return list(seen.values())

"""Text entry points for Slurm output: `squeue --json`, `sinfo --json`, `scontrol show node --json`,
`scontrol show job/node -o`. They load the text and hand it to the version-tolerant format layer
(trainguard.slurm.formats), which understands every Slurm from 22.05 to 25.x.

Everything here treats its input as untrusted: any malformed input raises SlurmParseError (a
ValueError), never another exception. Fixtures captured from real clusters live in
tests/fixtures/slurm/ (22.05 at the top level and in 22.05/, 24.11 in 24.11/).
"""

from __future__ import annotations

import json
from typing import Any

from trainguard.models import JobSnapshot, NodeSnapshot
from trainguard.slurm.errors import (
    AmbiguousOutputError,
    SlurmFormatError,
    SlurmParseError,
    SlurmReportedError,
)
from trainguard.slurm.formats import detect_format, parse_jobs, parse_nodes
from trainguard.slurm.formats.common import NO_VAL, expand_output_path
from trainguard.slurm.formats.scontrol_text import (
    parse_scontrol_job,
    parse_scontrol_jobs,
    parse_scontrol_nodes,
)
from trainguard.slurm.states import HELD_REASONS, TERMINAL_STATES, node_state

__all__ = [
    "HELD_REASONS",
    "NO_VAL",
    "TERMINAL_STATES",
    "AmbiguousOutputError",
    "SlurmFormatError",
    "SlurmParseError",
    "SlurmReportedError",
    "detect_format",
    "expand_output_path",
    "load_document",
    "node_state",
    "parse_jobs",
    "parse_nodes",
    "parse_scontrol_job",
    "parse_scontrol_jobs",
    "parse_scontrol_nodes",
    "parse_sinfo_json",
    "parse_squeue_json",
]


def load_document(text: str, what: str) -> dict[str, Any]:
    """One JSON object from Slurm's text; SlurmFormatError when it is not one."""
    if not isinstance(text, str):
        raise SlurmFormatError(f"{what}: expected text")
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as err:
        raise SlurmFormatError(f"{what}: not valid JSON: {str(err)[:200]}") from None
    if not isinstance(doc, dict):
        raise SlurmFormatError(f"{what}: expected a JSON object at the top level")
    return doc


def parse_squeue_json(text: str) -> list[JobSnapshot]:
    """Jobs from `squeue --json` (or slurmrestd /jobs) of any supported Slurm version.

    For an array, `job_id` is the record's own id; the pending remainder record carries the pending
    task expression (e.g. "0,2-7%2") in `array_task_id`. Output paths are expanded like scontrol does.
    """
    return parse_jobs(load_document(text, "squeue --json"))


def parse_sinfo_json(text: str) -> list[NodeSnapshot]:
    """Nodes from `sinfo --json` (22.05), `scontrol show node --json` or slurmrestd /nodes (any version)."""
    return parse_nodes(load_document(text, "nodes --json"))

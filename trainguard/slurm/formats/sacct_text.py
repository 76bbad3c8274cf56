"""`sacct -X -n -P --format=<SACCT_FIELDS>` lines and `scontrol show config`'s accounting setting.

After MinJobAge slurmctld forgets a finished job; when slurmdbd is configured (AccountingStorageType
is not none) sacct still knows its last allocation. Only fields without user text are asked for
(commands.SACCT_FIELDS), so `|` cannot occur inside a value. Times are epoch seconds
(SLURM_TIME_FORMAT=%s, see commands.SCONTROL_ENV).
"""

from __future__ import annotations

import re

from trainguard.models import JobSnapshot
from trainguard.slurm import states
from trainguard.slurm.commands import SACCT_FIELDS
from trainguard.slurm.errors import SlurmFormatError
from trainguard.slurm.formats.common import node_list

_CONFIG = re.compile(r"^\s*AccountingStorageType\s*=\s*(\S*)", re.MULTILINE)


def accounting_configured(config_text: str) -> bool:
    """Does `scontrol show config` say jobs are recorded in slurmdbd (or another storage)?"""
    match = _CONFIG.search(config_text)
    if match is None:
        return False
    value = match.group(1).strip().lower()
    return value not in ("", "(null)", "none", "accounting_storage/none")


def _epoch(value: str) -> int:
    value = value.strip()
    return int(value) if value.isdigit() else 0


def parse_sacct_job(text: str, job_id: str) -> JobSnapshot | None:
    """The record of `job_id` (plain id), or None when sacct has none."""
    for line in text.splitlines():
        fields = line.split("|")
        if len(fields) != len(SACCT_FIELDS):
            if line.strip():
                raise SlurmFormatError(f"sacct: expected {len(SACCT_FIELDS)} fields, got {line[:120]!r}")
            continue
        row = dict(zip(SACCT_FIELDS, fields, strict=True))
        if row["JobIDRaw"] != job_id:
            continue
        state = row["State"].split(" ", 1)[0].rstrip("+").upper()  # "CANCELLED by 0"
        code, _, signal = row["ExitCode"].partition(":")
        terminal = state in states.TERMINAL_STATES
        nodes_text = row["NodeList"] if row["NodeList"] not in ("None assigned", "(null)") else ""
        return JobSnapshot(
            job_id=job_id,
            state=state,
            nodes=node_list(nodes_text, "sacct: NodeList"),
            submit_time=_epoch(row["Submit"]),
            start_time=_epoch(row["Start"]),
            end_time=_epoch(row["End"]) if terminal else 0,
            exit_code=int(code) if terminal and code.isdigit() else None,
            exit_signal=int(signal) if terminal and signal.isdigit() else None,
            partition=row["Partition"],
        )
    return None

"""A Runner that answers Slurm commands with canned output and serves files from this host."""

from __future__ import annotations

import time
from collections.abc import Sequence

from trainguard.slurm.runner import CommandResult, LocalRunner


def scontrol_line(job_id: str, stdout: str, *, state: str = "RUNNING", submit: float | None = None) -> str:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(submit if submit is not None else time.time()))
    return (
        f"JobId={job_id} JobName=train UserId=root(0) JobState={state} SubmitTime={stamp} "
        f"StartTime={stamp} NodeList=node[1-2] NumNodes=2 StdErr={stdout} StdIn=/dev/null StdOut={stdout}\n"
    )


class CannedSlurmRunner(LocalRunner):
    def __init__(self, outputs: dict[str, str]) -> None:
        """`outputs` maps the Slurm command name (after any env prefix) to its stdout."""
        super().__init__()
        self.outputs = outputs
        self.calls: list[tuple[str, ...]] = []

    async def run(self, argv: Sequence[str], *, timeout: float = 30.0, check: bool = False) -> CommandResult:
        args = tuple(argv)
        self.calls.append(args)
        name = next((a for a in args if a in ("scontrol", "sinfo", "squeue")), args[0])
        if name not in self.outputs:
            return CommandResult(args, 1, "", f"{name}: error: not available in this fake")
        return CommandResult(args, 0, self.outputs[name], "")

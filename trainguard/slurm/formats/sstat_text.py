"""sstat's complaint about a node whose slurmd did not answer."""

from __future__ import annotations

import re

# 22.05 / 24.11: `sstat: error: slurm_job_step_stat: unknown return given from node1: 9001 rc = Communication
# connection failure` (exit status 0). Only a failure to reach the daemon counts, not a refusal or an
# unknown step: those are answers.
_NO_ANSWER = re.compile(
    r"given from (?P<node>[A-Za-z0-9][A-Za-z0-9._-]{0,127}): \d+ rc = "
    r"(?P<why>[^\n]*(?:Communication|timed out|Connection refused|No route to host|Unable to contact)[^\n]*)"
)


def node_not_answering(stderr: str) -> tuple[str, str] | None:
    """(node, what sstat said) for the first node whose slurmd sstat could not reach; None otherwise."""
    match = _NO_ANSWER.search(stderr)
    return (match.group("node"), match.group("why").strip()) if match else None

"""How much a piece of evidence may do: is the error a failure at all, and may it touch a RUNNING job?

The safety contract (docs/safety.md, clause 2): a running job is only touched when the evidence says it
is failing: the job stopped (Slurm state, exit), its progress stopped (hang), a straggler decision, or
hardware-grade evidence on one of its own nodes. Everything else is recorded and watched.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from trainguard.detection.normalize import match_node
from trainguard.models import Category, Finding, FindingSource, JobSnapshot

PRIORITY_PLATFORM = 3

# "retrying (1/5)", "Retrying in 5s", "will retry", "attempt 2 of 10", "3 retries left".
_RETRIED = re.compile(
    r"\b[Rr]etrying\b|\bwill (be )?retr(y|ied)\b|\b[Rr]etry(ing)? (in|after) \d|\bretries left\b|"
    r"\b[Rr]etry \d+ ?(/|of) ?\d+|\battempt \d+ ?(/|of) ?\d+"
)
_COUNTER = re.compile(r"\((?P<n>\d+)\s*/\s*(?P<m>\d+)\)|\battempt (?P<n2>\d+) ?(?:/|of) ?(?P<m2>\d+)")
_GAVE_UP = re.compile(r"[Gg]iving up|[Gg]ave up|[Mm]ax(imum)? retries (exceeded|reached)|[Nn]o more retries")
# Logged as a warning, caught or ignored: the program says it carries on.
_WARNED = re.compile(
    r"^(W\d{4} |WARN(ING)?\b|\[?W(ARN(ING)?)?\]|[A-Za-z_.]*[Ww]arning: )|\b(WARNING|Warning)\b[:\]]|"
    r"\b[Cc]aught\b|\b[Ii]gnor(ed|ing)\b|\b[Ff]alling back\b|\b[Ss]kipping\b|\b[Cc]ontinuing\b"
)
# PyTorch's ExceptionWrapper.reraise (pytorch torch/_utils.py): an exception from a DataLoader worker, a
# DataParallel replica or the pin-memory thread is raised again in the parent as `<Class>: Caught <Class>
# <where>.` then `Original Traceback (most recent call last):`. Its `Caught` says where the exception was
# taken to be raised again, not that a program handled it.
_RERAISED = re.compile(
    r"\bCaught [A-Za-z_][A-Za-z0-9_.]* in (?:DataLoader worker process|replica [0-9]+ on device|"
    r"pin memory thread|background)\b"
)
_SCHEDULER_OWN = {Category.SLURM_NODE_FAILURE}
# A launcher's verdict that a rank of the job died: srun's own report of a task killed or exited non-zero
# (`srun: error: node2: task 2: Killed`, `...: tasks 0-1: Exited with exit code 1`), torchrun's agent
# giving up on its workers (`torch.distributed.elastic...ChildFailedError`, raised only once its restarts
# are spent) and mpirun's `process rank N ... exited on signal`. A program's caught or retried error never
# prints these: the process is gone. Unlike a bare `Killed` or a traceback they are the launcher's word.
_LAUNCHER_VERDICT = re.compile(
    r"\bsrun: error: [A-Za-z0-9_.-]+: tasks? [0-9,-]+: "
    r"(Killed|Exited with exit code [1-9][0-9]*|Segmentation fault|Bus error|Aborted)"
    r"|torch\.distributed\.elastic\.multiprocessing\.errors\.ChildFailedError"
    r"|process rank [0-9]+ with PID [0-9]+ on node [A-Za-z0-9_.-]+ exited on signal [0-9]+"
)


def _final_attempt(text: str) -> bool:
    for m in _COUNTER.finditer(text):
        n, total = m.group("n") or m.group("n2"), m.group("m") or m.group("m2")
        if n and total and int(n) >= int(total):
            return True
    return False


def benign_occurrence(text: str, category: Category, priority: int) -> bool:
    """An error line the program itself handles: retried (not the last attempt), caught, ignored or
    logged as a warning. Platform verdicts (Xid, ECC, OOM killer, node failure) are never benign."""
    if priority >= PRIORITY_PLATFORM or _GAVE_UP.search(text):
        return False
    if (_RETRIED.search(text) or _COUNTER.search(text)) and not _final_attempt(text):
        return True
    return category == Category.PYTHON_EXCEPTION and bool(_WARNED.search(_RERAISED.sub("", text)))


def on_own_nodes(finding: Finding, job: JobSnapshot | None) -> bool:
    """Evidence without a host came from the job's own processes; a named host must be one of its nodes."""
    if not finding.nodes or job is None or not job.nodes:
        return True
    return any(match_node(n, job.nodes) for n in finding.nodes)


def hardware_grade(finding: Finding) -> bool:
    """A fatal Xid bucket, ECC DBE, a GPU fallen off the bus, a GPU metric (DCGM), a node Slurm lost."""
    if not finding.fatal:
        return False
    if finding.source == FindingSource.METRICS:
        return True
    if finding.category == Category.GPU_HARDWARE and finding.priority >= PRIORITY_PLATFORM:
        return True
    return finding.category in _SCHEDULER_OWN and finding.priority >= PRIORITY_PLATFORM


# The watch marks a launcher verdict after which training went on (a script retrying its step): it then
# shows nothing about the job.
SUPERSEDED = "superseded: training went on after this line"


def launcher_verdict(finding: Finding) -> bool:
    """A log line in which the job's launcher (srun, torchrun, mpirun) reports one of its ranks dead."""
    if not finding.fatal or finding.source != FindingSource.LOG or finding.detail == SUPERSEDED:
        return False
    return bool(_LAUNCHER_VERDICT.search(finding.line))


def shows_running_job_failing(finding: Finding, job: JobSnapshot | None) -> bool:
    if not finding.fatal or not on_own_nodes(finding, job):
        return False
    if finding.source == FindingSource.SCHEDULER:
        return True  # Slurm's own record: the job or one of its nodes stopped
    if finding.source == FindingSource.PROGRESS:
        return finding.category == Category.HANG  # the hang detector saw progress stop
    return hardware_grade(finding) or launcher_verdict(finding)


def job_is_running(job: JobSnapshot | None) -> bool:
    return job is not None and job.state.strip().split(" ", 1)[0].rstrip("+*").upper() == "RUNNING"


def split_by_allocation(
    findings: Sequence[Finding], job: JobSnapshot | None
) -> tuple[list[Finding], list[Finding]]:
    """(evidence from the job's own nodes or processes, evidence naming only hosts outside it)."""
    own: list[Finding] = []
    foreign: list[Finding] = []
    for f in findings:
        (own if on_own_nodes(f, job) else foreign).append(f)
    return own, foreign


def slurm_names(finding: Finding, job: JobSnapshot | None) -> Finding:
    """The finding with its hosts spelled as Slurm names them (FQDN or short name), foreign ones dropped."""
    if not finding.nodes or job is None or not job.nodes:
        return finding
    names: list[str] = []
    for n in finding.nodes:
        slurm = match_node(n, job.nodes)
        if slurm and slurm not in names:
            names.append(slurm)
    if tuple(names) == finding.nodes:
        return finding
    return finding.model_copy(update={"nodes": tuple(names)})

"""Where a log line comes from: the host and rank that launchers and libraries prefix it with."""

from __future__ import annotations

import re
from dataclasses import dataclass

from trainguard.detection.normalize import (
    Normalized,
    normalize,
    numeric_name,
    plausible_host,
    program_word,
)

# A host name as the printers below write it (gethostname(2), Slurm's node name): it may begin with a digit
# (`10-192-80-132`, a cloud instance named after its address); `valid_node_name` then asks for a letter or
# hyphen and turns numbers, addresses and dates away.
_NAME = r"[A-Za-z0-9][A-Za-z0-9_.-]*"
# NCCL and PyTorch's c10d: `host:pid:tid [gpu] NCCL ...`, possibly after a launcher label.
_NCCL_PREFIX = re.compile(rf"^(?:\S{{0,24}}?:\s*)?(?P<host>{_NAME}):(?P<pid>\d+):(?P<tid>\d+) \[\d+\]")
# NCCL's prefix after other stamps (Ray's `(pid=1)`, a logger's timestamp): anywhere after a space.
_NCCL_INLINE = re.compile(rf"(?:^|[\s\]])(?P<host>{_NAME}):(?P<pid>\d+):(?P<tid>\d+) \[\d+\] ")
# UCX and Open MPI: `[host:pid:thread:tid]`, `[host:pid :0]`.
_UCX = re.compile(rf"\[(?P<host>{_NAME}):\d+ ?:\d+(?::\d+)?\]")
# Open MPI's own output prefix `[host:pid] ` (opal/util/output.c, opal_output_init: `"[%s:%05d] "` with
# gethostname(); the same HOSTFORMAT in opal/util/stacktrace.c), before `*** An error occurred in ...`,
# `pml_ucx.c:424  Error: ...` and show_help's aggregation notes. Only a name that looks like a node's counts.
_OMPI_PREFIX = re.compile(rf"^\[(?P<host>{_NAME}):\d{{1,10}}\] ")
# srun's per-task verdicts name the node: `srun: error: node7: task 3: Segmentation fault`.
_SRUN_TASK = re.compile(rf"srun: error: (?P<host>{_NAME}): tasks? [0-9,-]+: ")
_RANK = re.compile(
    r"\[(?:PG \d+ )?[Rr]ank ?(?P<rank>\d+)\]|\bon rank:? (?P<rank2>\d+)|\[rank(?P<rank3>\d+)\]:"
)
_SRUN_LABEL = re.compile(r"^\s{0,4}(?P<rank>\d{1,6}): ")
_SYSLOG_HOST = re.compile(
    r"^(?:[A-Z][a-z]{2} +\d+ [\d:]{8}|\d{4}-\d\d-\d\dT[\d:.+-]+) (?P<host>[A-Za-z][A-Za-z0-9_.-]*) "
    r"(?:kernel|nvidia|slurmd|slurmstepd|systemd|dcgm|nv-hostengine)"
)
# pdsh/clush-style host prefix in front of kernel and driver messages (dmesg collected per node).
_HOST_PREFIX = re.compile(
    r"^(?P<host>[A-Za-z][A-Za-z0-9_.-]*): (?:\[\s*\d+\.\d+\] )?"
    r"(?:NVRM|kernel|nvidia|mlx5|Xid|pcieport)"
)
_VALID_HOST = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
# A Docker container's hostname defaults to its id's first 12 hex digits (docs.docker.com, "Networking
# overview": "the container's hostname defaults to be the container's ID"); the full id is 64. What
# gethostname() returns inside such a container names the container, not a node of the cluster.
_CONTAINER_ID = re.compile(r"^(?:[0-9a-f]{12}|[0-9a-f]{64})$")
# Loopback names are where a process ran, not which node: torchrun's root-cause block says
# `host: localhost` on every single-node run.
_LOOPBACK = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


@dataclass(frozen=True)
class Location:
    nodes: tuple[str, ...] = ()
    rank: int | None = None


def valid_node_name(name: str) -> bool:
    """A host name: letters, digits, `.`, `_`, `-`, at most 63 long; one that begins with a digit must carry
    a letter or a hyphen and be no number, address, version or date (`10-192-80-132` is a name, `10.0.0.1`,
    `2.14.3` and `2023-06-15` are not). Never a loopback name, a Docker container id or a program's name
    (`NVRM`, `kernel`, `python3`)."""
    if not _VALID_HOST.match(name) or name.lower() in _LOOPBACK or _CONTAINER_ID.match(name):
        return False
    if program_word(name):  # `NVRM: Xid ...` is the driver's own prefix, not a host's
        return False
    return not numeric_name(name)


def _first_host(pattern: re.Pattern[str], text: str) -> str | None:
    for m in pattern.finditer(text):
        if valid_node_name(m.group("host")):
            return m.group("host")
    return None


def locate(line: str, norm: Normalized | None = None) -> Location:
    """Host and rank of a line: from the collector/launcher prefixes first, then from the text."""
    norm = norm or normalize(line)
    nodes: list[str] = []
    if norm.host and valid_node_name(norm.host):
        nodes.append(norm.host)
    text = norm.text
    host = None
    for pattern in (_NCCL_PREFIX, _NCCL_INLINE, _UCX, _SRUN_TASK):
        host = _first_host(pattern, text)
        if host:
            break
    if host is None:
        o = _OMPI_PREFIX.match(text)
        if o and plausible_host(o.group("host")) and valid_node_name(o.group("host")):
            host = o.group("host")
    if host is None and not nodes:
        # A host prefix the normaliser did not trust (no digit or hyphen) still counts before a kernel tag.
        m = _SYSLOG_HOST.search(line) or _HOST_PREFIX.search(line)
        host = m.group("host") if m and valid_node_name(m.group("host")) else None
    if host and host not in nodes:
        nodes.append(host)
    rank = norm.rank
    if rank is None:
        r = _RANK.search(text)
        if r:
            rank = int(r.group("rank") or r.group("rank2") or r.group("rank3"))
        else:
            s = _SRUN_LABEL.match(line)
            if s:
                rank = int(s.group("rank"))
    return Location(tuple(nodes), rank)

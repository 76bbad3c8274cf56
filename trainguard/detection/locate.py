"""Where a log line comes from: the host and rank that launchers and libraries prefix it with."""

from __future__ import annotations

import re
from dataclasses import dataclass

# NCCL and PyTorch's c10d: `host:pid:tid [gpu] NCCL ...`, possibly after a launcher label.
_NCCL_PREFIX = re.compile(
    r"^(?:\S{0,24}?:\s*)?(?P<host>[A-Za-z][A-Za-z0-9_.-]*):(?P<pid>\d+):(?P<tid>\d+) \[\d+\]"
)
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
_VALID_HOST = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,62}$")


@dataclass(frozen=True)
class Location:
    nodes: tuple[str, ...] = ()
    rank: int | None = None


def valid_node_name(name: str) -> bool:
    return bool(_VALID_HOST.match(name))


def locate(line: str) -> Location:
    nodes: list[str] = []
    m = _NCCL_PREFIX.search(line) or _SYSLOG_HOST.search(line) or _HOST_PREFIX.search(line)
    if m and valid_node_name(m.group("host")):
        nodes.append(m.group("host"))
    rank: int | None = None
    r = _RANK.search(line)
    if r:
        rank = int(r.group("rank") or r.group("rank2") or r.group("rank3"))
    else:
        s = _SRUN_LABEL.match(line)
        if s:
            rank = int(s.group("rank"))
    return Location(tuple(nodes), rank)

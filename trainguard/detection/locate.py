"""Where a log line comes from: the host and rank that launchers and libraries prefix it with."""

from __future__ import annotations

import re
from dataclasses import dataclass

from trainguard.detection.normalize import Normalized, normalize

# NCCL and PyTorch's c10d: `host:pid:tid [gpu] NCCL ...`, possibly after a launcher label.
_NCCL_PREFIX = re.compile(
    r"^(?:\S{0,24}?:\s*)?(?P<host>[A-Za-z][A-Za-z0-9_.-]*):(?P<pid>\d+):(?P<tid>\d+) \[\d+\]"
)
# NCCL's prefix after other stamps (Ray's `(pid=1)`, a logger's timestamp): anywhere after a space.
_NCCL_INLINE = re.compile(r"(?:^|[\s\]])(?P<host>[A-Za-z][A-Za-z0-9_.-]*):(?P<pid>\d+):(?P<tid>\d+) \[\d+\] ")
# UCX and Open MPI: `[host:pid:thread:tid]`, `[host:pid :0]`.
_UCX = re.compile(r"\[(?P<host>[A-Za-z][A-Za-z0-9_.-]*):\d+ ?:\d+(?::\d+)?\]")
# srun's per-task verdicts name the node: `srun: error: node7: task 3: Segmentation fault`.
_SRUN_TASK = re.compile(r"srun: error: (?P<host>[A-Za-z][A-Za-z0-9_.-]*): tasks? [0-9,-]+: ")
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
# Loopback names are where a process ran, not which node: torchrun's root-cause block says
# `host: localhost` on every single-node run.
_LOOPBACK = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


@dataclass(frozen=True)
class Location:
    nodes: tuple[str, ...] = ()
    rank: int | None = None


def valid_node_name(name: str) -> bool:
    return bool(_VALID_HOST.match(name)) and name.lower() not in _LOOPBACK


def locate(line: str, norm: Normalized | None = None) -> Location:
    """Host and rank of a line: from the collector/launcher prefixes first, then from the text."""
    norm = norm or normalize(line)
    nodes: list[str] = []
    if norm.host and valid_node_name(norm.host):
        nodes.append(norm.host)
    text = norm.text
    m = _NCCL_PREFIX.search(text) or _NCCL_INLINE.search(text) or _UCX.search(text) or _SRUN_TASK.search(text)
    if m is None and not nodes:
        # A host prefix the normaliser did not trust (no digit or hyphen) still counts before a kernel tag.
        m = _SYSLOG_HOST.search(line) or _HOST_PREFIX.search(line)
    if m and valid_node_name(m.group("host")) and m.group("host") not in nodes:
        nodes.append(m.group("host"))
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

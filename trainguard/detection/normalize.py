"""Strip what launchers and log collectors put in front of a line, once, and keep it as evidence.

A line from a real cluster can carry several layers: a collector (pdsh/clush `host: `, syslog or
journald `Nov 30 12:00:00 host kernel: `, `dmesg -T` `[Mon Nov 30 12:00:00 2026] `), a launcher
(`srun -l` `15: `, torchrun `[default0]:` / `[rank3]:`, mpirun `[1,26]<stdout>:`, a multi-node launcher's
`[host:local_rank]:`) and ANSI colours.
Signatures match the text behind them; the host and rank the prefixes name are kept for attribution.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_LAYERS = 8  # a prefix stack deeper than this is not a launcher's doing

ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_HOST = r"[A-Za-z][A-Za-z0-9_.-]{0,62}"
_MONTH = r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
_DAY = r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)"
_ISO_STAMP = r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?"
# syslog / journald short, short-precise, short-iso, short-iso-precise: `<stamp> <host> <tag>[pid]: `. The
# host field is gethostname() (or the sender's address when a relay cannot resolve it), so it may begin with a
# digit (`10-192-80-132`); an address or a number there is stripped but kept as no host.
_SYSLOG = re.compile(
    rf"^(?:<\d{{1,3}}>)?(?:{_MONTH} +\d{{1,2}} \d\d:\d\d:\d\d(?:\.\d+)?|{_ISO_STAMP}) "
    rf"(?P<host>[A-Za-z0-9][A-Za-z0-9_.:-]{{0,62}}) (?P<tag>[A-Za-z0-9_./@-]{{1,64}})(?:\[\d+\])?: "
)
# A name that begins with a digit but is no host: a number, a dotted address or version, an IPv6 address, a
# date.
_NOT_A_NAME = re.compile(
    r"^[0-9]+(?:\.[0-9]+)*\.?$|^[0-9]{4}-[0-9]{2}-[0-9]{2}|^[0-9A-Fa-f]*:[0-9A-Fa-f:.]*$"
)
# dmesg (`[12345.678901] `), dmesg -T (`[Mon Nov 30 12:00:00 2026] `), and a bare ISO stamp.
_KERNEL_STAMP = re.compile(
    rf"^(?:\[\s*\d+\.\d+\]|\[{_DAY} {_MONTH} +\d{{1,2}} \d\d:\d\d:\d\d \d{{4}}\]|\[?{_ISO_STAMP}\]?:?) "
)
# Ray's driver echo of a worker's output: `(pid=123) `, `(RayTrainWorker pid=123, ip=10.0.0.1) `.
_RAY = re.compile(r"^\((?:[A-Za-z_][A-Za-z0-9_.:-]{0,64} )?pid=\d{1,10}(?:, ip=[0-9A-Fa-f.:]{1,45})?\) ")
_PDSH = re.compile(rf"^(?P<host>{_HOST}): ")
_SRUN_LABEL = re.compile(r"^\s{0,6}(?P<rank>\d{1,6}): ")
_TORCHRUN_RANK = re.compile(r"^\[(?:[Rr]ank ?)(?P<rank>\d{1,6})\]: ?")
_TORCHRUN_LOCAL = re.compile(r"^\[(?P<role>[A-Za-z_]{1,32})(?P<local>\d{1,4})\]: ?")
_MPIRUN = re.compile(r"^\[(?P<job>\d{1,6}),(?P<rank>\d{1,6})\]<(?:stdout|stderr|stddiag)>: ?")
# Multi-node launchers that tag a worker's line with its host and local rank: `[gpu187:1]:`.
_HOST_LOCAL = re.compile(rf"^\[(?P<host>{_HOST}):(?P<local>\d{{1,4}})\]: ?")

# Words that end in `: ` at the start of a line but are programs, levels or exceptions, not hosts.
_NOT_HOSTS = frozenset(
    {
        "srun",
        "sbatch",
        "salloc",
        "slurmstepd",
        "slurmd",
        "slurmctld",
        "mpirun",
        "torchrun",
        "error",
        "warning",
        "warn",
        "info",
        "debug",
        "fatal",
        "critical",
        "notice",
        "kernel",
        "nvrm",
        "traceback",
        "note",
        "hint",
        "localhost",
        # Hyphenated programs that print `prog: message` (err(3), warnx(3)) and would pass for node names:
        # NVIDIA's container CLI and enroot's helpers (bin/*.c), whose failures name the program.
        "nvidia-container-cli",
        "enroot-aufs2ovlfs",
        "enroot-mksquashovlfs",
        "enroot-mount",
        "enroot-nsenter",
        "enroot-switchroot",
    }
)
_EXCEPTION_SUFFIXES = ("error", "exception", "warning", "interrupt", "exit", "failure")
# The interpreter's name before glibc's assert message (`python3.10: file.c:57: f: Assertion ... failed.`,
# assert/assert.c prints `%s: ` with the program name): a program, though it carries a digit.
_INTERPRETER = re.compile(r"python[0-9.]*|pypy[0-9.]*")
# Library prefixes that come before the host a library names itself: rdma-core's mlx5 provider prints
# `mlx5: <hostname>: got completion with error:` (providers/mlx5/cq.c, PFX "mlx5: " then mctx->hostname).
# `mlx5` would pass for a node name (a digit); it is stripped so that the host after it is the one kept.
_LIBRARY_PREFIXES = frozenset({"mlx5"})


@dataclass(frozen=True)
class Normalized:
    text: str  # the line behind every recognised prefix
    host: str | None = None  # the host a collector prefix names (outermost wins)
    rank: int | None = None  # the global rank a launcher prefix names
    local_rank: int | None = None  # torchrun's `[default3]:` names the local rank only
    prefix: str = ""  # what was stripped, kept as evidence


def plausible_host(token: str) -> bool:
    """A `token: ` at the start of a line is a host prefix only if it looks like a node name.

    Node names carry a digit (`node2`, `gpu-a17`) or a hyphen (`host-b`); Python module paths
    (`torch.distributed.api`) and exception names (`RuntimeError`) do not qualify.
    """
    low = token.lower()
    if (
        low in _NOT_HOSTS
        or low.endswith(_EXCEPTION_SUFFIXES)
        or len(token) > 63
        or _INTERPRETER.fullmatch(low)
    ):
        return False
    if "_" in token and "." in token:
        return False
    return any(ch.isdigit() for ch in token) or ("-" in token and "_" not in token)


def numeric_name(token: str) -> bool:
    """`token` begins with a digit and is a number, an address or a date rather than a host name
    (`10.0.0.1`, `2.14.3`, `fe80::1`, `2023-06-15`); `10-192-80-132` is a name."""
    return bool(token) and (token[0].isdigit() or ":" in token) and bool(_NOT_A_NAME.match(token))


def program_word(token: str) -> bool:
    """A program, level or library name that prints `word: ` where a host prefix could stand (`NVRM: Xid`,
    `kernel: `, `python3: `): never a host, whatever pattern found it."""
    low = token.lower()
    return low in _NOT_HOSTS or low in _LIBRARY_PREFIXES or bool(_INTERPRETER.fullmatch(low))


def normalize(line: str) -> Normalized:
    clean = (ANSI.sub("", line) if "\x1b" in line else line).rstrip("\r")
    text = clean
    host: str | None = None
    rank: int | None = None
    local_rank: int | None = None
    for _ in range(MAX_LAYERS):
        m = _SYSLOG.match(text)
        if m and m.group("host").lower() not in _NOT_HOSTS:
            if not numeric_name(m.group("host")):
                host = host or m.group("host")
            text = text[m.end() :]
            continue
        m = _KERNEL_STAMP.match(text)
        if m:
            text = text[m.end() :]
            continue
        m = _RAY.match(text)
        if m:
            text = text[m.end() :]
            continue
        m = _MPIRUN.match(text)
        if m:
            rank = rank if rank is not None else int(m.group("rank"))
            text = text[m.end() :]
            continue
        m = _TORCHRUN_RANK.match(text)
        if m:
            rank = rank if rank is not None else int(m.group("rank"))
            text = text[m.end() :]
            continue
        m = _HOST_LOCAL.match(text)
        if m:
            if plausible_host(m.group("host")):
                host = host or m.group("host")
            local_rank = local_rank if local_rank is not None else int(m.group("local"))
            text = text[m.end() :]
            continue
        m = _TORCHRUN_LOCAL.match(text)
        if m and m.group("role").lower() not in ("rank", "pg"):
            local_rank = local_rank if local_rank is not None else int(m.group("local"))
            text = text[m.end() :]
            continue
        m = _SRUN_LABEL.match(text)
        if m:
            rank = rank if rank is not None else int(m.group("rank"))
            text = text[m.end() :]
            continue
        m = _PDSH.match(text)
        if m and m.group("host") in _LIBRARY_PREFIXES:
            text = text[m.end() :]
            continue
        if m and plausible_host(m.group("host")):
            host = host or m.group("host")
            text = text[m.end() :]
            continue
        break
    prefix = clean[: len(clean) - len(text)]
    return Normalized(text=text, host=host, rank=rank, local_rank=local_rank, prefix=prefix)


_IPV4 = re.compile(r"[0-9]{1,3}(?:\.[0-9]{1,3}){3}")


def short_name(node: str) -> str:
    """The host's first DNS label (`node2.cluster.local` -> `node2`); an IPv4 address is kept whole, as
    its first byte names no host."""
    low = node.lower()
    return low if _IPV4.fullmatch(low) else low.split(".", 1)[0]


def same_host(a: str, b: str) -> bool:
    """`a` and `b` name the same host: equal, or the same short name (FQDN vs short name)."""
    return a.lower() == b.lower() or short_name(a) == short_name(b)


def match_node(name: str, nodes: tuple[str, ...] | list[str]) -> str | None:
    """The Slurm node name `name` refers to: equal, or the same host as FQDN vs short name."""
    if name in nodes:
        return name
    short = short_name(name)
    for node in nodes:
        if short_name(node) == short:
            return node
    return None

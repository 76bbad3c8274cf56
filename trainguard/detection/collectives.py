"""Which rank a stuck collective waited for, and on which node that rank ran.

A NCCL watchdog timeout is printed by the ranks that waited, so by itself it names no culprit. Two kinds
of evidence decide it for one rank:
- PyTorch says so: the desync report (`ranks [3] are the lagging ranks that caused this timeout`,
  `[3] joined but didn't finish collective #12`), the flight-recorder analyser (`missing ranks: {3}`),
  gloo's monitored barrier (`Rank 3 failed to pass monitoredBarrier`);
- the timeouts themselves: every reporting rank of one process group timed out in the same collective
  (same sequence number and op) and the ranks of the world that did not report are few and on one node.

A rank becomes a node through what the log itself says (NCCL's `host:pid:tid [dev] ... rank 3 nranks 16`
init lines, a host prefix on a rank-labelled line), else through the job's allocation order.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

# Keywords the scanner must let through for the lines below (its prefilter).
KEYWORDS = (
    "lagging ranks",
    "joined but didn't finish collective",
    "but didn't join collective",
    "missing ranks",
    "Missing ranks",
    "failed to pass monitoredBarrier",
    "nranks",
    "world_size",
    "WORLD_SIZE",
    "world size",
)

_RANK_LIST = r"[0-9][0-9, ]*"
# A rank that finished one collective and did not join the next one is alive and went elsewhere: PyTorch
# calls such ranks "lagging/dead/mismatched", so the program may be the cause as much as the node.
_DIVERGED = re.compile(rf"\[(?P<ranks>{_RANK_LIST})\] finished collective #\d+, but didn't join collective")
_EXPLICIT = (
    # ProcessGroupNCCL's desync report (TORCH_NCCL_DESYNC_DEBUG).
    re.compile(rf"ranks \[(?P<ranks>{_RANK_LIST})\] are the lagging ranks"),
    re.compile(rf"\[(?P<ranks>{_RANK_LIST})\] joined but didn't finish collective #\d+"),
    # torch.distributed.flight_recorder (`torchfrtrace`): `missing ranks: {1}` / `Missing ranks are {1, 3}`.
    re.compile(rf"[Mm]issing ranks(?::| are) *\{{(?P<ranks>{_RANK_LIST})\}}"),
    # gloo's monitored barrier, reported by rank 0.
    re.compile(rf"Ranks? (?P<ranks>{_RANK_LIST}) failed to pass monitoredBarrier"),
)
_WORK = re.compile(r"SeqNum=(?P<seq>\d+), OpType=(?P<op>[A-Z_]+)")
_PG = re.compile(r"\[PG (?:ID )?(?P<pg>\d+)[^\]]*?Rank (?P<rank>\d+)\]")
_OLD_RANK = re.compile(r"\[Rank (?P<rank>\d+)\]")
# NCCL's init line names the host (prefix), the global rank and the world: `rank 3 nranks 16`.
_NCCL_RANK = re.compile(r"\brank (?P<rank>\d+) nranks (?P<world>\d+)\b")
_WORLD = re.compile(r"\b(?:world_size|WORLD_SIZE|[Ww]orld size)\s*[=:]\s*(?P<world>\d+)\b")
MAX_WORLD = 1_000_000


def _ranks(text: str) -> tuple[int, ...]:
    return tuple(sorted({int(x) for x in re.findall(r"\d+", text)}))


@dataclass(frozen=True)
class NamedRanks:
    ranks: tuple[int, ...]
    diverged: bool = False  # they finished the previous collective and went elsewhere


def explicit_missing_ranks(text: str) -> NamedRanks | None:
    """Ranks that PyTorch itself names as the ones a collective waited for (None when it names none)."""
    for pattern in _EXPLICIT:
        m = pattern.search(text)
        if m:
            return NamedRanks(_ranks(m.group("ranks")))
    d = _DIVERGED.search(text)
    if d:
        return NamedRanks(_ranks(d.group("ranks")), diverged=True)
    return None


def rank_and_world(text: str) -> tuple[int | None, int | None]:
    """(global rank, world size) a line states: NCCL's init lines and `world_size=N` settings."""
    m = _NCCL_RANK.search(text)
    if m:
        return int(m.group("rank")), int(m.group("world"))
    w = _WORLD.search(text)
    if w:
        return None, int(w.group("world"))
    return None, None


@dataclass(frozen=True)
class TimedOutWork:
    group: str  # process-group id, "?" when the line does not name it
    rank: int
    seq: int
    op: str


def timed_out_work(line: str, rank: int | None = None) -> TimedOutWork | None:
    """The collective a watchdog timeout line names, with the reporting rank."""
    work = _WORK.search(line)
    if work is None:
        return None
    where = _PG.search(line)
    reporter: int | None = rank
    if where:
        group, reporter = where.group("pg"), int(where.group("rank"))
    else:
        old = _OLD_RANK.search(line)
        group = "?"
        if old:
            reporter = int(old.group("rank"))
    if reporter is None:
        return None
    return TimedOutWork(group, reporter, int(work.group("seq")), work.group("op"))


def silent_ranks(works: Iterable[TimedOutWork], world_size: int | None) -> tuple[int, ...]:
    """Ranks absent from an otherwise aligned collective timeout: every rank that reported timed out in
    the same collective of one group, and the world's other ranks did not report. Empty when the reports
    disagree (that is the program's doing), when the world is unknown or when too many are silent."""
    if not world_size or world_size < 2 or world_size > MAX_WORLD:
        return ()
    by_group: dict[str, dict[int, tuple[int, str]]] = {}
    for w in works:
        by_group.setdefault(w.group, {}).setdefault(w.rank, (w.seq, w.op))
    if len(by_group) != 1:
        return ()
    reports = next(iter(by_group.values()))
    if len(set(reports.values())) != 1 or len(reports) < 2:
        return ()
    if any(r >= world_size for r in reports):
        return ()  # the reports name a rank outside the stated world: the world size is not this group's
    silent = tuple(r for r in range(world_size) if r not in reports)
    # Half the world silent is not "one rank missing": the reports may simply not all be in the log yet.
    if not silent or len(silent) * 2 > world_size:
        return ()
    return silent


def nodes_of_ranks(
    ranks: Sequence[int], node_of_rank: Callable[[int], str | None] | None, *, max_nodes: int = 1
) -> tuple[str, ...]:
    """The node(s) the ranks ran on; empty unless every rank maps and they fit on `max_nodes` nodes."""
    if node_of_rank is None or not ranks:
        return ()
    nodes: dict[str, None] = {}
    for r in ranks:
        node = node_of_rank(r)
        if not node:
            return ()
        nodes[node] = None
    return tuple(nodes) if len(nodes) <= max_nodes else ()


def allocation_layout(nodes: Sequence[str], num_tasks: int) -> Callable[[int], str | None]:
    """Slurm's default block distribution of `num_tasks` over the allocation's nodes, in order: the first
    nodes get one task more when the count does not divide."""
    tasks = num_tasks if num_tasks >= len(nodes) else len(nodes)
    bounds: list[int] = []
    if nodes:
        base, extra = divmod(tasks, len(nodes))
        total = 0
        for i in range(len(nodes)):
            total += base + (1 if i < extra else 0)
            bounds.append(total)

    def lookup(rank: int) -> str | None:
        if rank < 0:
            return None
        for node, end in zip(nodes, bounds, strict=True):
            if rank < end:
                return node
        return None

    return lookup

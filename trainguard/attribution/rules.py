"""Rule-based attribution: decide what happened from a bag of findings.

The first failure decides, not the loudest. Among the fatal findings:
1. cascades (NCCL watchdog timeouts, "taking the entire process down", launcher wrappers, srun
   teardown, SIGTERM) are set aside while anything initiating exists;
2. of the rest, the highest priority class wins: a platform verdict (Xid, ECC, node failure, time
   limit, OOM killer) explains the application-level errors it causes, and a specific error beats a
   generic traceback line;
3. inside that class the earliest finding (time, then byte offset in the log) decides.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from trainguard.models import Attribution, Category, Finding, JobSnapshot, Verdict, clip

MAX_EVIDENCE = 5

_CONFIDENCE = {3: 0.9, 2: 0.8, 1: 0.6}
_NODE_CATEGORIES = {
    Category.GPU_HARDWARE,
    Category.INTERCONNECT,
    Category.SLURM_NODE_FAILURE,
    Category.STORAGE_IO,
    Category.NCCL_ERROR,
    Category.STRAGGLER,
}


def order_key(f: Finding) -> tuple[float, float, int]:
    ts = f.timestamp if f.timestamp is not None else math.inf
    return (ts, float(f.offset) if f.offset is not None else math.inf, f.line_no or 0)


def block_layout(job: JobSnapshot, tasks_per_node: int) -> Callable[[int], str | None]:
    """Slurm's default block distribution: ranks 0..n-1 on the first node, and so on."""

    def node_of_rank(rank: int) -> str | None:
        if tasks_per_node <= 0 or rank < 0:
            return None
        index = rank // tasks_per_node
        return job.nodes[index] if index < len(job.nodes) else None

    return node_of_rank


def _nodes_of(f: Finding, node_of_rank: Callable[[int], str | None] | None) -> tuple[str, ...]:
    if f.nodes:
        return f.nodes
    if f.rank is not None and node_of_rank is not None:
        node = node_of_rank(f.rank)
        if node:
            return (node,)
    return ()


def _implicated(
    decider: Finding,
    fatal: Sequence[Finding],
    node_of_rank: Callable[[int], str | None] | None,
) -> tuple[str, ...]:
    if decider.attribution not in (Attribution.HARDWARE, Attribution.SYSTEM_SOFTWARE) and (
        decider.category not in _NODE_CATEGORIES
    ):
        return ()
    nodes: dict[str, None] = dict.fromkeys(_nodes_of(decider, node_of_rank))
    for f in sorted(fatal, key=order_key):
        if f.category == decider.category and not f.cascade:
            nodes.update(dict.fromkeys(_nodes_of(f, node_of_rank)))
    return tuple(nodes)


def _evidence(decider: Finding, others: Sequence[Finding]) -> tuple[str, ...]:
    lines: dict[str, None] = {}
    for f in (decider, *sorted(others, key=order_key)):
        text = f.line or f.detail
        if text:
            lines.setdefault(clip(text), None)
        if len(lines) >= MAX_EVIDENCE:
            break
    return tuple(lines)


def attribute(
    findings: Sequence[Finding],
    job: JobSnapshot | None = None,
    *,
    tasks_per_node: int | None = None,
    node_of_rank: Callable[[int], str | None] | None = None,
) -> Verdict:
    if node_of_rank is None and job is not None and tasks_per_node:
        node_of_rank = block_layout(job, tasks_per_node)
    fatal = [f for f in findings if f.fatal]
    if not fatal:
        slow = sorted((f for f in findings if f.category == Category.STRAGGLER), key=order_key)
        if slow:
            first = slow[0]
            return Verdict(
                category=Category.STRAGGLER,
                attribution=first.attribution,
                fatal=False,
                confidence=0.5,
                nodes=_implicated(first, slow, node_of_rank),
                evidence=_evidence(first, slow[1:]),
                summary=f"straggler: {first.detail}",
                pattern_ids=(first.pattern_id,),
            )
        return Verdict(category=Category.HEALTHY, attribution=Attribution.NONE, fatal=False, confidence=0.7)
    initiating = [f for f in fatal if not f.cascade]
    pool = initiating or fatal
    top = max(f.priority for f in pool)
    decider = min((f for f in pool if f.priority == top), key=order_key)
    confidence = _CONFIDENCE.get(top, 0.6) if initiating else 0.45
    if sum(1 for f in fatal if f.category == decider.category) > 1:
        confidence = min(0.95, confidence + 0.05)
    others = [f for f in fatal if f is not decider]
    cascades = sum(1 for f in fatal if f.cascade)
    where = f" line {decider.line_no}" if decider.line_no else ""
    summary = f"{decider.category.value} ({decider.attribution.value}) from {decider.pattern_id}{where}"
    if cascades and initiating:
        summary += f"; {cascades} cascade finding(s) set aside"
    return Verdict(
        category=decider.category,
        attribution=decider.attribution,
        fatal=True,
        confidence=round(confidence, 2),
        nodes=_implicated(decider, fatal, node_of_rank),
        evidence=_evidence(decider, others),
        summary=summary,
        pattern_ids=tuple(dict.fromkeys(f.pattern_id for f in (decider, *sorted(others, key=order_key)))),
    )

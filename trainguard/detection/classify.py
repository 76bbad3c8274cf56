"""Classify a whole, static log excerpt (the `trainguard classify` command, corpus evaluation).

A static excerpt has no wall clock, so a hang is only reported when the log says so: a signature
such as a kernel hung-task report or a py-spy dump, or the log's own timestamps showing that far
more time passed after the last progress line than the job's rhythm allows.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from trainguard.attribution.rules import attribute
from trainguard.detection.analyzer import LogAnalyzer
from trainguard.detection.catalog import Catalog
from trainguard.detection.progress import ProgressConfig, parse_progress
from trainguard.detection.ran_on import RAN_ON, log_clock
from trainguard.models import Attribution, Category, Finding, FindingSource, clip

STATIC_HANG_FLOOR_S = 1800.0
STATIC_TAIL_LINES = 2000
# Error-looking text that no signature explained: a "healthy" verdict over it is a weaker claim.
_ERRORISH = re.compile(
    r"Traceback \(most recent call last\)|\b(ERROR|Error|error|FATAL|Fatal|fatal|failed|FAILED|Killed|"
    r"[Aa]bort(ed|ing)?|[Ee]xception)\b"
)
UNEXPLAINED_HEALTHY_CONFIDENCE = 0.5
_FINISHED = re.compile(
    r"[Tt]raining (is )?(completed|finished|done)|[Ff]inished training|exiting program at iteration|"
    r"\bTRAINING DONE\b|[Tt]raining completed"
)


class ClassifyResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    fatal: bool
    category: str
    attribution: str
    nodes: list[str]
    evidence: list[str]
    confidence: float = 0.5
    pattern_ids: list[str] = []
    summary: str = ""


def static_hang(lines: Sequence[str], config: ProgressConfig, step_ms: float | None) -> Finding | None:
    """Hang when the log's own clock ran on long after the last progress line."""
    stamps: list[float] = []
    progress_at: int | None = None
    last_step_ms = step_ms
    for i in range(len(lines) - 1, max(-1, len(lines) - 1 - STATIC_TAIL_LINES), -1):
        line = lines[i]
        if _FINISHED.search(line):
            return None
        p = parse_progress(line, config) if any(k in line for k in config.keywords) else None
        if p is not None:
            progress_at = i
            last_step_ms = last_step_ms or p.step_ms
            ts = log_clock(line)
            if ts is not None:
                stamps.append(ts)
            break
        ts = log_clock(line)
        if ts is not None:
            stamps.append(ts)
    if progress_at is None or len(stamps) < 2:
        return None
    gap = max(stamps) - min(stamps)
    threshold = STATIC_HANG_FLOOR_S
    if last_step_ms:
        threshold = max(threshold, config.hang_factor * last_step_ms / 1000.0)
    if gap < threshold:
        return None
    return Finding(
        source=FindingSource.PROGRESS,
        pattern_id="static_hang",
        category=Category.HANG,
        attribution=Attribution.APPLICATION,
        fatal=True,
        line=clip(lines[progress_at].strip()),
        line_no=progress_at + 1,
        priority=1,
        detail=f"the log's clock ran {gap:.0f} s past the last progress line without progress",
    )


def classify_bytes(
    data: bytes, *, catalog: Catalog | None = None, config: ProgressConfig | None = None
) -> ClassifyResult:
    cfg = config or ProgressConfig()
    analyzer = LogAnalyzer(catalog=catalog, config=cfg, follow_ran_on=True)
    findings = analyzer.feed(data, now=0.0)
    findings += analyzer.flush(now=0.0)
    # A whole log: a finding the job trained on after is lowered (docs/detection.md, "An error the job
    # ran on").
    findings = analyzer.ran_on(findings)
    if not any(f.fatal for f in findings) and analyzer.progress_lines:
        state = analyzer.progress
        tail = data[-4 * 1024 * 1024 :].decode("utf-8", errors="replace").splitlines()
        hang = static_hang(tail, cfg, state.recent_step_ms or state.baseline_step_ms)
        if hang is not None:
            findings.append(hang)
    # The static excerpt has no job: ranks map to hosts only where the log itself says so.
    verdict = attribute(findings, node_of_rank=analyzer.rank_host, world_size=analyzer.world_size)
    category = verdict.category
    fatal = verdict.fatal
    confidence = verdict.confidence
    if not verdict.fatal and _ERRORISH.search(data[-4 * 1024 * 1024 :].decode("utf-8", errors="replace")):
        confidence = min(confidence, UNEXPLAINED_HEALTHY_CONFIDENCE)
    evidence = list(verdict.evidence)
    pattern_ids = list(verdict.pattern_ids)
    if not fatal:
        # What was lowered stays in sight: its line and why it no longer decides.
        ran_on = [f for f in findings if f.detail.startswith(RAN_ON)]
        evidence += [clip(f"{f.line} [{f.detail}]") for f in ran_on[:3]]
        pattern_ids += [f.pattern_id for f in ran_on[:3] if f.pattern_id not in pattern_ids]
    if category == Category.STRAGGLER:
        # A slowdown is worth a note, not a failure; the public summary has no straggler class.
        category, fatal = Category.HEALTHY, False
    return ClassifyResult(
        fatal=fatal,
        category=category.value,
        attribution=verdict.attribution.value if fatal else Attribution.NONE.value,
        nodes=list(verdict.nodes) if fatal else [],
        evidence=evidence,
        confidence=confidence,
        pattern_ids=pattern_ids,
        summary=verdict.summary,
    )


def classify_text(text: str) -> ClassifyResult:
    return classify_bytes(text.encode("utf-8", errors="replace"))

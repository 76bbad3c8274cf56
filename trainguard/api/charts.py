"""What the console's charts draw, computed from audit events: pure functions, no store, no I/O.

A *recovery* is one detection of a failure (a `detection` event); its outcome is what the audit says
happened next for that workload before its next detection. Latencies come from the values the workflow
recorded on its events (the same ones TrainGuard's Prometheus histograms are fed from).
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime

from pydantic import BaseModel, Field

from trainguard.audit.schemas import AuditEventOut
from trainguard.models import ActionStep, EventType, WorkloadState, WorkloadStatus, clip

MAX_VALUES = 5000  # latency samples returned per distribution (the newest)
MAX_EVIDENCE = 20  # evidence events listed per node
EVIDENCE_LINES = 5


class Outcome:
    RESUMED = "resumed"  # training made progress again after the restart
    COMPLETED = "completed"
    STOPPED = "stopped"
    WATCHDOG = "watchdog released"
    ACTION_FAILED = "action failed"
    WAITING = "waiting for operator"
    ADVICE_ONLY = "advice only"  # observe mode, or no action advised
    IN_PROGRESS = "in progress"


class Evidence(BaseModel):
    """One audit event, trimmed for a hover or a side panel."""

    id: int
    ts: float
    event_type: str
    workload_key: str
    attempt: int
    category: str = ""
    action: str = ""
    nodes: list[str] = Field(default_factory=list)
    message: str = ""
    evidence: list[str] = Field(default_factory=list)


class DayCount(BaseModel):
    day: str  # UTC date, YYYY-MM-DD
    category: str
    outcome: str
    count: int


class Distribution(BaseModel):
    count: int
    p50: float | None
    p95: float | None
    max: float | None
    values: list[float]


class WorkloadLoss(BaseModel):
    workload_key: str
    name: str
    state: str
    attempts: int
    lost_s: float
    goodput: float | None


class FleetSummary(BaseModel):
    since: float
    until: float
    recoveries: list[DayCount]
    latencies: dict[str, Distribution]  # detection, action, back_to_training
    goodput: list[WorkloadLoss]


class NodeRow(BaseModel):
    node: str
    incidents: int  # distinct (workload, attempt) failures that named the node
    exclusions: int  # exclusions TrainGuard set on Slurm
    advised_exclusions: int  # advice to exclude it (including observe mode)
    drains: int
    workloads: list[str]
    evidence: list[Evidence]


class NodeReport(BaseModel):
    since: float
    until: float
    days: int
    nodes: list[NodeRow]


class Span(BaseModel):
    start: float
    end: float
    label: str
    attempt: int
    nodes: list[str] = Field(default_factory=list)
    evidence_id: int | None = None


class Mark(BaseModel):
    ts: float
    label: str
    kind: str  # fault, advice, action, action_failed, watchdog, drain, mode, end, resumed
    evidence: Evidence


class WorkloadTimeline(BaseModel):
    workload_key: str
    now: float
    attempts: list[Span]
    lost: list[Span]
    faults: list[Mark]
    steps: list[Mark]
    lost_s: float
    temporal_url: str | None = None


def evidence_of(e: AuditEventOut) -> Evidence:
    return Evidence(
        id=e.id,
        ts=e.ts,
        event_type=e.event_type.value,
        workload_key=e.workload_key,
        attempt=e.attempt,
        category=e.category,
        action=e.action,
        nodes=list(e.nodes),
        message=clip(e.message, 500),
        evidence=[clip(line, 300) for line in e.evidence[:EVIDENCE_LINES]],
    )


def _num(data: Mapping[str, object], key: str) -> float | None:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100) of unsorted values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def distribution(values: Sequence[float]) -> Distribution:
    return Distribution(
        count=len(values),
        p50=percentile(values, 50),
        p95=percentile(values, 95),
        max=max(values) if values else None,
        values=[round(v, 3) for v in values[-MAX_VALUES:]],
    )


def _by_workload(events: Iterable[AuditEventOut]) -> dict[str, list[AuditEventOut]]:
    grouped: dict[str, list[AuditEventOut]] = defaultdict(list)
    for e in events:
        if e.workload_key:
            grouped[e.workload_key].append(e)
    for items in grouped.values():
        items.sort(key=lambda e: (e.ts, e.id))
    return grouped


def outcome_of(detection: AuditEventOut, after: Sequence[AuditEventOut]) -> str:
    """What followed one detection: `after` holds the workload's events after it, up to its next detection."""
    advice: AuditEventOut | None = None
    for e in after:
        t = e.event_type
        if t == EventType.WATCHDOG_FIRED:
            return Outcome.WATCHDOG
        if t == EventType.ACTION_FAILED:
            return Outcome.ACTION_FAILED
        if t == EventType.TRAINING_RESUMED and (
            e.attempt > detection.attempt or _num(e.data, "time_to_productive_s") is not None
        ):
            return Outcome.RESUMED
        if t == EventType.COMPLETED:
            return Outcome.COMPLETED
        if t == EventType.STOPPED:
            return Outcome.STOPPED
        containment = str(e.data.get("advice_id", "")).endswith("/hold")
        if t == EventType.ADVICE and advice is None and not containment:
            advice = e
    if advice is not None and advice.action == "wait":
        return Outcome.WAITING
    if advice is not None and not advice.data.get("execute"):
        return Outcome.ADVICE_ONLY
    return Outcome.IN_PROGRESS


def _day(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d")


def recoveries(events: Iterable[AuditEventOut], since: float) -> list[DayCount]:
    counts: dict[tuple[str, str, str], int] = defaultdict(int)
    for items in _by_workload(events).values():
        detections = [i for i, e in enumerate(items) if e.event_type == EventType.DETECTION]
        for n, i in enumerate(detections):
            d = items[i]
            if d.ts < since:
                continue
            end = detections[n + 1] if n + 1 < len(detections) else len(items)
            outcome = outcome_of(d, items[i + 1 : end])
            counts[(_day(d.ts), d.category or "unknown", outcome)] += 1
    return [
        DayCount(day=day, category=cat, outcome=out, count=n) for (day, cat, out), n in sorted(counts.items())
    ]


def latencies(events: Iterable[AuditEventOut], since: float) -> dict[str, Distribution]:
    found: dict[str, list[float]] = {"detection": [], "action": [], "back_to_training": []}
    for e in sorted(events, key=lambda e: (e.ts, e.id)):
        if e.ts < since:
            continue
        if e.event_type == EventType.DETECTION:
            value, kind = _num(e.data, "detection_latency_s"), "detection"
        elif e.event_type == EventType.ACTION:
            value, kind = _num(e.data, "action_latency_s"), "action"
        elif e.event_type == EventType.TRAINING_RESUMED:
            value, kind = _num(e.data, "time_to_productive_s"), "back_to_training"
        else:
            continue
        if value is not None:
            found[kind].append(max(0.0, value))
    return {kind: distribution(values) for kind, values in found.items()}


def goodput_lost(workloads: Iterable[WorkloadStatus], since: float, limit: int = 25) -> list[WorkloadLoss]:
    rows = [
        WorkloadLoss(
            workload_key=w.workload_key,
            name=w.name,
            state=w.state.value,
            attempts=w.attempts,
            lost_s=round(w.lost_s, 3),
            goodput=w.goodput,
        )
        for w in workloads
        if w.updated_at >= since and (w.lost_s > 0 or (w.goodput is not None and w.goodput < 1))
    ]
    rows.sort(key=lambda r: (-r.lost_s, r.workload_key))
    return rows[:limit]


def fleet_summary(
    events: Sequence[AuditEventOut], workloads: Iterable[WorkloadStatus], since: float, until: float
) -> FleetSummary:
    return FleetSummary(
        since=since,
        until=until,
        recoveries=recoveries(events, since),
        latencies=latencies(events, since),
        goodput=goodput_lost(workloads, since),
    )


def _implicated(e: AuditEventOut) -> set[str]:
    nodes = set(e.nodes) if e.event_type == EventType.DETECTION else set()
    if e.event_type == EventType.ADVICE:
        nodes |= {n for n in str(e.data.get("implicated", "")).split(",") if n}
    return nodes


def node_report(events: Iterable[AuditEventOut], since: float, until: float, days: int) -> NodeReport:
    incidents: dict[str, set[tuple[str, int]]] = defaultdict(set)
    exclusions: dict[str, int] = defaultdict(int)
    advised: dict[str, set[str]] = defaultdict(set)
    drains: dict[str, int] = defaultdict(int)
    workloads: dict[str, dict[str, None]] = defaultdict(dict)
    evidence: dict[str, list[AuditEventOut]] = defaultdict(list)
    for e in sorted(events, key=lambda e: (e.ts, e.id), reverse=True):
        if e.ts < since:
            continue
        touched: set[str] = set()
        for node in _implicated(e):
            incidents[node].add((e.workload_key, e.attempt))
            touched.add(node)
        if e.event_type == EventType.ADVICE and e.nodes:
            for node in e.nodes:
                advised[node].add(str(e.data.get("advice_id", e.id)))
                touched.add(node)
        elif e.event_type == EventType.ACTION and e.action == ActionStep.EXCLUDE and e.data.get("performed"):
            for node in e.nodes:
                exclusions[node] += 1
                touched.add(node)
        elif e.event_type == EventType.NODE_DRAINED:
            for node in e.nodes:
                drains[node] += 1
                touched.add(node)
        for node in touched:
            if e.workload_key:
                workloads[node][e.workload_key] = None
            if len(evidence[node]) < MAX_EVIDENCE:
                evidence[node].append(e)
    rows = [
        NodeRow(
            node=node,
            incidents=len(incidents[node]),
            exclusions=exclusions[node],
            advised_exclusions=len(advised[node]),
            drains=drains[node],
            workloads=list(workloads[node]),
            evidence=[evidence_of(e) for e in evidence[node]],
        )
        for node in evidence
    ]
    rows.sort(key=lambda r: (-r.incidents, -r.drains, -r.exclusions, r.node))
    return NodeReport(since=since, until=until, days=days, nodes=rows)


ENDED = {WorkloadState.COMPLETED, WorkloadState.STOPPED, WorkloadState.GONE, WorkloadState.FAILED}
STEP_KINDS: dict[EventType, str] = {
    EventType.ADVICE: "advice",
    EventType.ACTION: "action",
    EventType.ACTION_FAILED: "action_failed",
    EventType.WATCHDOG_FIRED: "watchdog",
    EventType.NODE_DRAINED: "drain",
    EventType.MODE_CHANGED: "mode",
    EventType.TRAINING_RESUMED: "resumed",
    EventType.COMPLETED: "end",
    EventType.STOPPED: "end",
    EventType.ALLOCATION_RESTARTED: "restart",
}


def _step_label(e: AuditEventOut) -> str:
    if e.event_type == EventType.ADVICE:
        return f"advice: {e.action or 'none'}"
    if e.event_type in (EventType.ACTION, EventType.ACTION_FAILED):
        suffix = " failed" if e.event_type == EventType.ACTION_FAILED else ""
        nodes = f" {','.join(e.nodes)}" if e.nodes else ""
        return f"{e.action or 'action'}{nodes}{suffix}"
    return e.event_type.value.replace("_", " ")


def workload_timeline(
    status: WorkloadStatus,
    events: Sequence[AuditEventOut],
    *,
    now: float | None = None,
    temporal_url: str | None = None,
) -> WorkloadTimeline:
    now = time.time() if now is None else now
    items = sorted(events, key=lambda e: (e.ts, e.id))
    ended = status.state in ENDED
    end_ts = items[-1].ts if ended and items else now
    starts: list[tuple[float, int, list[str], int | None]] = [
        (status.first_seen_at or (items[0].ts if items else now), 0, [], None)
    ]
    faults: list[Mark] = []
    steps: list[Mark] = []
    lost: list[Span] = []
    for e in items:
        if e.event_type == EventType.ALLOCATION_RESTARTED and e.attempt > starts[-1][1]:
            starts.append((e.ts, e.attempt, list(e.nodes), e.id))
        if e.event_type == EventType.DETECTION:
            faults.append(
                Mark(
                    ts=e.ts,
                    label=f"{e.category or 'failure'} ({e.attribution or '?'})",
                    kind="fault",
                    evidence=evidence_of(e),
                )
            )
            continue
        kind = STEP_KINDS.get(e.event_type)
        if kind is not None:
            steps.append(Mark(ts=e.ts, label=_step_label(e), kind=kind, evidence=evidence_of(e)))
        if e.event_type == EventType.TRAINING_RESUMED:
            spent = _num(e.data, "time_to_productive_s")
            if spent is not None and spent > 0:
                lost.append(
                    Span(
                        start=e.ts - spent,
                        end=e.ts,
                        label=f"{spent:.0f} s lost",
                        attempt=e.attempt,
                        evidence_id=e.id,
                    )
                )
    attempts = [
        Span(
            start=start,
            end=max(start, starts[i + 1][0] if i + 1 < len(starts) else end_ts),
            label=f"attempt {attempt}",
            attempt=attempt,
            nodes=nodes,
            evidence_id=evidence_id,
        )
        for i, (start, attempt, nodes, evidence_id) in enumerate(starts)
    ]
    return WorkloadTimeline(
        workload_key=status.workload_key,
        now=now,
        attempts=attempts,
        lost=lost,
        faults=faults,
        steps=steps,
        lost_s=round(status.lost_s, 3),
        temporal_url=temporal_url,
    )

"""An error the job ran on: a fatal-looking finding after which the log shows training advance.

A fatal signature is read where it is printed; whether the process survived it is often only visible later
(an interactive shell's ~/.bashrc error before the job, a dataloader or clean-up error, a lost peer that an
elastic job replaces, a background loop's connection reset). When, after the finding, the log's own progress
lines advance far enough that a crash cannot explain them, the finding is lowered: kept as a non-fatal
finding whose `detail` says so, never dropped (docs/detection.md, "An error the job ran on").

Why RAN_ON_MIN_ADVANCES lines: after one rank dies, the others finish the step in flight and block in the
next collective (the loss they print is read with `.item()`, which waits for it); a rank prints one step more,
two when its print precedes the blocking collective or a redraw of its bar lands late. Three advances on one
stream is more than that. Advances are counted per output stream (a launcher's rank or host prefix, kept by
normalize), never summed over ranks, so ranks each printing the step in flight cannot add up to it; the
finding's own stream decides when it printed progress after the finding. A repeated line (the same
iteration) is no advance, and a lower iteration (a restart from a checkpoint) starts the count again from it.
When the log carries its own clock, a progress line stamped before the finding does not count (a rank's
block-buffered stdout flushed at exit prints older steps after a newer traceback).
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from trainguard.detection.severity import PRIORITY_PLATFORM, hardware_grade, launcher_verdict
from trainguard.models import Category, Finding, FindingSource

RAN_ON_MIN_ADVANCES = 3
MAX_WATCHED = 64  # findings followed; later ones stay as read (bounded memory on a long log)
MAX_STREAMS = 256  # output streams followed per finding
RAN_ON = "ran on"  # the start of a lowered finding's detail
# Never lowered: the fatal Xid buckets, ECC and the GPU lost (gpu_hardware), a node the scheduler lost, the
# scheduler's or the job's own time limit and preemption, the kernel's OOM killer (the host is out of memory
# whatever the job printed after it), and a hang (the progress detector's own reading). Platform verdicts
# (priority 3) and a launcher's verdict that a rank died are kept too: they are the last word on a process,
# and a job that trains on after one is a new attempt, which the watch handles as such (severity.SUPERSEDED).
_KEPT_CATEGORIES = frozenset(
    {
        Category.GPU_HARDWARE,
        Category.SLURM_NODE_FAILURE,
        Category.PREEMPTION_OR_TIMELIMIT,
        Category.KILLED_OOM_HOST,
        Category.HANG,
    }
)
_EPOCH = re.compile(r"'epoch': (?P<epoch>[0-9]+(?:\.[0-9]+)?)")
_MONTHS = {m: i for i, m in enumerate(calendar.month_abbr) if m}
_ISO = re.compile(r"(\d{4})-(\d\d)-(\d\d)[ T_](\d\d):(\d\d):(\d\d)")
_CTIME = re.compile(r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (\w{3}) +(\d{1,2}) (\d\d):(\d\d):(\d\d) (\d{4})")
Stream = tuple[int | None, int | None, str | None]


def log_clock(line: str) -> float | None:
    """The log's own time on a line (ISO or ctime stamp), epoch seconds; None when it carries none."""
    m = _ISO.search(line)
    if m:
        y, mo, d, h, mi, s = (int(x) for x in m.groups())
        if 1 <= mo <= 12 and 1 <= d <= 31 and h < 24 and mi < 60 and s < 61:
            return float(calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0)))
        return None
    c = _CTIME.search(line)
    if c and c.group(1) in _MONTHS:
        mon = _MONTHS[c.group(1)]
        d, h, mi, s, y = (int(x) for x in c.groups()[1:])
        return float(calendar.timegm((y, mon, d, h, mi, s, 0, 0, 0)))
    return None


def progress_key(line: str, iteration: int | None) -> float | None:
    """How far a progress line says training is: its iteration, else a Trainer dict's epoch."""
    if iteration is not None:
        return float(iteration)
    m = _EPOCH.search(line)
    return float(m.group("epoch")) if m else None


def may_lower(finding: Finding) -> bool:
    """Whether later progress may lower this finding (see _KEPT_CATEGORIES for what never is)."""
    return (
        finding.fatal
        and finding.source == FindingSource.LOG
        and finding.priority < PRIORITY_PLATFORM
        and finding.category not in _KEPT_CATEGORIES
        and not hardware_grade(finding)
        and not launcher_verdict(finding)
    )


def _identity(f: Finding) -> tuple[str, int | None, int | None]:
    return (f.pattern_id, f.line_no, f.offset)


@dataclass
class _Watch:
    stream: Stream
    clock: float | None
    last: dict[Stream, float]  # per stream: the newest progress key, from before the finding on
    advances: dict[Stream, int] = field(default_factory=dict)
    newest: float | None = None

    def count(self) -> int:
        """The finding's own stream when it printed progress after it, else the best single other stream."""
        if self.stream in self.advances:
            return self.advances[self.stream]
        return max(self.advances.values(), default=0)


class RanOnTracker:
    """Follows findings that may be lowered and the progress printed after each."""

    def __init__(self) -> None:
        self._last: dict[Stream, float] = {}
        self._watched: dict[tuple[str, int | None, int | None], _Watch] = {}

    def on_finding(self, finding: Finding, stream: Stream, line: str) -> None:
        key = _identity(finding)
        if not may_lower(finding) or key in self._watched or len(self._watched) >= MAX_WATCHED:
            return
        self._watched[key] = _Watch(stream=stream, clock=log_clock(line), last=dict(self._last))

    def on_progress(self, stream: Stream, line: str, key: float | None) -> None:
        if key is None:
            return
        clock = log_clock(line) if self._watched else None
        for w in self._watched.values():
            if w.clock is not None and clock is not None and clock < w.clock:
                continue  # printed before the finding, flushed after it
            prev = w.last.get(stream)
            if prev is None and len(w.last) >= MAX_STREAMS:
                continue
            w.last[stream] = key
            if prev is not None and key > prev:
                w.advances[stream] = w.advances.get(stream, 0) + 1
                w.newest = key if w.newest is None else max(w.newest, key)
            else:
                w.advances.setdefault(stream, 0)  # progress seen on the stream, not (yet) advancing
        if stream in self._last or len(self._last) < MAX_STREAMS:
            self._last[stream] = key

    def lower(self, findings: Sequence[Finding]) -> list[Finding]:
        """The findings, those the job ran on lowered to non-fatal with a `detail` that says why."""
        out: list[Finding] = []
        for f in findings:
            w = self._watched.get(_identity(f)) if f.fatal else None
            n = w.count() if w is not None else 0
            if w is not None and n >= RAN_ON_MIN_ADVANCES:
                to = f", to {w.newest:g}" if w.newest is not None else ""
                why = f"{RAN_ON}: {n} advancing progress lines after it{to}; was fatal"
                f = f.model_copy(
                    update={"fatal": False, "detail": f"{why} ({f.detail})" if f.detail else why}
                )
            out.append(f)
        if any(f.fatal for f in out) and not any(f.fatal and not f.cascade for f in out):
            # What stays fatal is only cascades (a watchdog's timeout, a launcher's teardown): the job did
            # fail, and they name no cause of their own, so the error it seemed to run on stays the cause, as
            # it was (a rank that crashed while the others ran through micro-batches that need no collective).
            return list(findings)
        return out

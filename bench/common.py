"""Helpers every benchmark shares: percentiles, fixed-width tables, free loopback ports, process stats."""

from __future__ import annotations

import asyncio
import math
import os
import resource
import signal
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); NaN for no values, so a missing figure cannot look good."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100.0 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


@dataclass(frozen=True)
class Dist:
    n: int
    p50: float
    p95: float
    max: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Dist:
        return cls(
            len(values), percentile(values, 50), percentile(values, 95), max(values) if values else math.nan
        )


def fmt(value: float, digits: int = 1) -> str:
    return "-" if math.isnan(value) else f"{value:.{digits}f}"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    rule = "  ".join("-" * w for w in widths)
    body = [
        "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
        for r in rows
    ]
    return "\n".join([line, rule, *body])


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cpu_seconds() -> float:
    """User + system CPU time of this process so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def proc_cpu_seconds(pid: int) -> float | None:
    """utime + stime of another process (e.g. the Temporal dev server), from /proc."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rfind(")") + 2 :].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def proc_rss_mib(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        return None
    return None


def current_rss_mib(pid: int) -> float | None:
    """Resident memory now (VmRSS), not the peak: what a growth rate is computed from."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        return None
    return None


def cancel_on_signals() -> None:
    """Ctrl-C or SIGTERM cancels the running task, so that its cleanup stops the dev server too."""
    task = asyncio.current_task()
    if task is None:
        return
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, task.cancel)

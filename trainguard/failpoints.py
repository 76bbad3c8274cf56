"""Failpoints: crash the worker process at a named step, for the crash-safety tests.

Off unless TRAINGUARD_FAILPOINTS names the point (comma-separated); `name@suffix` arms it only for keys
that end with `suffix` (e.g. `fail_after_requeue_hold@/hold`: only containment holds, whose advice ids end
in /hold). Each point fires once per key (e.g. per advice id) — a marker file under
TRAINGUARD_FAILPOINT_DIR remembers it — so the restarted worker runs through. `hit` sends SIGKILL, not
an exception: nothing gets to clean up, as in a real crash. `fire` lets the caller fail there instead (a
step that took effect but reports a failure). `pause` holds the caller back for
TRAINGUARD_FAILPOINT_PAUSE_S seconds (default 10): a window in which a test changes Slurm from outside,
as a race would.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import signal
from pathlib import Path


def enabled(name: str, key: str = "") -> bool:
    points = os.environ.get("TRAINGUARD_FAILPOINTS", "")
    for point in (p.strip() for p in points.split(",")):
        named, at, suffix = point.partition("@")
        if named == name and (not at or key.endswith(suffix)):
            return True
    return False


def hit(name: str, key: str = "") -> None:
    if fire(name, key):
        os.kill(os.getpid(), signal.SIGKILL)


def fire(name: str, key: str = "") -> bool:
    """True the first time `name` is reached for `key` while enabled (the caller fails there)."""
    if not enabled(name, key):
        return False
    marker_dir = Path(os.environ.get("TRAINGUARD_FAILPOINT_DIR", "var/failpoints"))
    marker_dir.mkdir(parents=True, exist_ok=True)
    marker = marker_dir / f"{name}-{hashlib.sha256(key.encode()).hexdigest()[:16]}"
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    os.write(fd, key.encode()[:500])
    os.close(fd)
    return True


async def pause(name: str, key: str = "") -> None:
    """Sleep the first time `name` is reached for `key` while enabled (the caller keeps heartbeating)."""
    if fire(name, key):
        await asyncio.sleep(float(os.environ.get("TRAINGUARD_FAILPOINT_PAUSE_S", "10")))

"""Forward reading over a time-indexed backend (Loki, VictoriaLogs) with an exactly-once cursor.

The cursor's offset is the timestamp (ns) of the last line delivered and its identity how many
lines carried exactly that timestamp: queries start inclusively at that timestamp, several lines
can share one nanosecond, and so the first `count` lines at it are skipped.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import httpx

from trainguard.logsources.base import LogChunk
from trainguard.models import LogCursor

MAX_LINES_PER_QUERY = 5000  # Loki's default max_entries_limit_per_query

Fetch = Callable[[int, int, int], Awaitable[list["LogLine"]]]  # (start_ns, end_ns, limit) -> lines


@dataclass(frozen=True)
class LogLine:
    ts_ns: int
    line: str
    labels: tuple[tuple[str, str], ...] = ()


def _count(identity: str) -> int:
    try:
        return max(0, int(identity or 0))
    except ValueError:
        return 0


async def read_forward(
    fetch: Fetch,
    *,
    key: str,
    start_ns: int,
    now: float,
    page_lines: int,
    cursor: LogCursor,
    max_bytes: int,
) -> LogChunk:
    """`key` identifies the query; a cursor made for another query starts over with reset=True."""
    if max_bytes <= 0:
        raise ValueError("max_bytes must be > 0")
    reset = cursor.source not in ("", key)
    if reset or not cursor.source:
        since, skip = start_ns, 0
    else:
        since, skip = cursor.offset, _count(cursor.identity)
    # Ends are exclusive; one second ahead tolerates small clock skew between us and the backend.
    end_ns = int((now + 1) * 1e9)
    limit = max(1, min(page_lines, MAX_LINES_PER_QUERY))
    while True:
        lines = await fetch(since, end_ns, skip + limit)
        same = sum(1 for line in lines if line.ts_ns == since)  # sorted, so these come first
        fresh = lines[min(skip, same) :]
        if fresh or len(lines) < skip + limit or skip + limit >= MAX_LINES_PER_QUERY:
            break
        limit *= 2  # the whole page was already delivered (many lines in one ns): widen it
    last_ts, count = since, skip
    out: list[bytes] = []
    used = 0
    for line in fresh:
        encoded = line.line.encode("utf-8", errors="replace") + b"\n"
        if out and used + len(encoded) > max_bytes:
            break
        out.append(encoded)
        used += len(encoded)
        if line.ts_ns == last_ts:
            count += 1
        else:
            last_ts, count = line.ts_ns, 1
    return LogChunk(b"".join(out), LogCursor(source=key, offset=last_ts, identity=str(count)), reset)


class TimelineSource:
    """A log source over one HTTP backend query; subclasses say how to fetch a time window of lines."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        key: str,
        *,
        start_ns: int,
        page_lines: int = 1000,
        clock: Callable[[], float] = time.time,
        owns_client: bool = False,
    ) -> None:
        self._client = client
        self._key = key
        self._start_ns = start_ns
        self._page = max(1, min(page_lines, MAX_LINES_PER_QUERY))
        self._clock = clock
        self._owns_client = owns_client

    async def close(self) -> None:
        if self._owns_client:
            await self._client.aclose()

    async def fetch(self, start_ns: int, end_ns: int, limit: int) -> list[LogLine]:
        raise NotImplementedError

    async def read(self, cursor: LogCursor, max_bytes: int) -> LogChunk:
        return await read_forward(
            self.fetch,
            key=self._key,
            start_ns=self._start_ns,
            now=self._clock(),
            page_lines=self._page,
            cursor=cursor,
            max_bytes=max_bytes,
        )

"""What every log source returns, and the one method the watch activity calls."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Protocol

from trainguard.models import LogCursor


@dataclass(frozen=True)
class LogChunk:
    data: bytes
    cursor: LogCursor  # pass this back on the next read
    reset: bool  # the log was rotated/truncated (or its query changed): detectors restart their state
    pending: int = 0  # bytes of an unfinished last line left for the next read (whole-line reads)


class LogSource(Protocol):
    async def read(self, cursor: LogCursor, max_bytes: int) -> LogChunk: ...


async def close_source(source: LogSource) -> None:
    """Release what a source holds (HTTP connections); file sources hold nothing."""
    close = getattr(source, "close", None)
    if close is None:
        return
    result = close()
    if inspect.isawaitable(result):
        await result

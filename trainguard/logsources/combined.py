"""Several job output files (stdout and stderr) read as one stream of whole lines.

Lines from two files may only be concatenated at line boundaries, so each part's unfinished last
line is left for the next read. A last line that stays unfinished across two reads (a job killed
mid-write) is delivered with a newline added, so nothing is held back forever. The parts' cursors
travel inside the combined cursor's `identity` as compact JSON.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from trainguard.logsources.base import LogChunk
from trainguard.logsources.files import FileLogSource
from trainguard.models import LogCursor


def _decode_parts(cursor: LogCursor, count: int) -> list[tuple[LogCursor, int]]:
    """Each part's cursor plus the end offset of a tail it held back (-1 when none)."""
    blank = [(LogCursor(), -1) for _ in range(count)]
    if not cursor.identity:
        return blank
    try:
        doc = json.loads(cursor.identity)
        parts = [
            (LogCursor(source=str(p["s"]), offset=int(p["o"]), identity=str(p["i"])), int(p.get("h", -1)))
            for p in doc["parts"]
        ]
    except (ValueError, KeyError, TypeError):
        return blank  # a cursor from another kind of source: start over
    return parts if len(parts) == count else blank


def _encode_parts(parts: Sequence[tuple[LogCursor, int]]) -> str:
    return json.dumps(
        {"parts": [{"s": c.source, "o": c.offset, "i": c.identity, "h": held} for c, held in parts]},
        separators=(",", ":"),
    )


class CombinedLogSource:
    def __init__(self, parts: Sequence[FileLogSource]) -> None:
        if not parts:
            raise ValueError("CombinedLogSource needs at least one part")
        self.parts = tuple(parts)
        self.name = "+".join(p.path for p in self.parts)

    async def read(self, cursor: LogCursor, max_bytes: int) -> LogChunk:
        if max_bytes <= 0:
            raise ValueError("max_bytes must be > 0")
        states = _decode_parts(cursor, len(self.parts))
        if cursor.source not in ("", self.name):
            states = [(LogCursor(), -1) for _ in self.parts]
        # An even share per part, so a chatty stdout cannot starve stderr.
        budget = max(1, max_bytes // len(self.parts))
        out: list[bytes] = []
        reset = cursor.source not in ("", self.name)
        new_states: list[tuple[LogCursor, int]] = []
        for source, (part_cursor, held_end) in zip(self.parts, states, strict=True):
            chunk = await source.read_lines(part_cursor, budget, flush_at=held_end)
            reset = reset or chunk.reset
            out.append(chunk.data)
            new_states.append((chunk.cursor, chunk.cursor.offset + chunk.pending if chunk.pending else -1))
        total = sum(c.offset for c, _ in new_states)
        next_cursor = LogCursor(source=self.name, offset=total, identity=_encode_parts(new_states))
        return LogChunk(b"".join(out), next_cursor, reset)

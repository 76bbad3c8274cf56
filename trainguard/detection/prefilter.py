"""Find the few lines of a big chunk that hold any catalog keyword, without splitting the chunk.

Engines, fastest first: Hyperscan (SIMD multi-literal matching, GB/s), ahocorasick-rs (one DFA pass),
then plain `bytes.find` per keyword. All three give the same answers; only speed differs.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from typing import Any

_hs: Any
try:  # pragma: no cover - depends on the platform's wheels
    import hyperscan as _hs
except ImportError:  # pragma: no cover
    _hs = None

_ac: Any
try:  # pragma: no cover
    import ahocorasick_rs as _ac
except ImportError:  # pragma: no cover
    _ac = None

ENGINES = ("hyperscan", "ahocorasick", "python")


def _hs_pattern(keyword: bytes) -> bytes:
    # Hyperscan takes PCRE syntax; every non-alphanumeric byte is escaped to stay literal.
    return b"".join(bytes([c]) if chr(c).isalnum() else b"\\x%02x" % c for c in keyword)


class Prefilter:
    def __init__(self, keywords: Sequence[str], engine: str | None = None) -> None:
        self.keywords = tuple(dict.fromkeys(k.encode("utf-8") for k in keywords if k))
        if engine is not None and engine not in ENGINES:
            raise ValueError(f"unknown prefilter engine {engine!r}")
        self.engine = "python"
        self._hs_db: Any = None
        self._ac: Any = None
        self._ac_all: Any = None
        wanted = [engine] if engine else list(ENGINES)
        if not self.keywords:
            return
        if "hyperscan" in wanted and _hs is not None:
            db = _hs.Database(mode=_hs.HS_MODE_BLOCK)
            db.compile(
                expressions=[_hs_pattern(k) for k in self.keywords],
                ids=list(range(len(self.keywords))),
                elements=len(self.keywords),
                flags=[0] * len(self.keywords),
            )
            self._hs_db = db
            self._scratch = threading.local()  # a scan needs scratch space of its own per thread
            self.engine = "hyperscan"
        elif "ahocorasick" in wanted and _ac is not None:
            self._ac = _ac.BytesAhoCorasick(list(self.keywords), implementation=_ac.Implementation.DFA)
            # Overlapping search needs the standard match kind; only used on single lines.
            self._ac_all = _ac.BytesAhoCorasick(list(self.keywords), matchkind=_ac.MatchKind.Standard)
            self.engine = "ahocorasick"

    def _thread_scratch(self) -> Any:
        scratch = getattr(self._scratch, "scratch", None)
        if scratch is None:
            scratch = self._scratch.scratch = _hs.Scratch(self._hs_db)
        return scratch

    def present(self, line: bytes) -> set[int]:
        """Indices (into `keywords`) of every keyword that occurs in `line`."""
        if self._hs_db is not None:
            found: set[int] = set()

            def on_match(kw_id: int, _from: int, _to: int, _flags: int, _ctx: object) -> None:
                found.add(kw_id)

            self._hs_db.scan(line, match_event_handler=on_match, scratch=self._thread_scratch())
            return found
        if self._ac_all is not None:
            return {i for i, _, _ in self._ac_all.find_matches_as_indexes(line, overlapping=True)}
        return {i for i, kw in enumerate(self.keywords) if kw in line}

    def _hits(self, data: bytes) -> list[int]:
        """Ascending offsets that lie inside keyword occurrences (at least one per hit line)."""
        if self._hs_db is not None:
            ends: list[int] = []

            def on_match(_id: int, _from: int, to: int, _flags: int, _ctx: object) -> None:
                ends.append(to - 1)

            self._hs_db.scan(data, match_event_handler=on_match, scratch=self._thread_scratch())
            ends.sort()
            return ends
        if self._ac is not None:
            return [start for _, start, _ in self._ac.find_matches_as_indexes(data)]
        hits: list[int] = []
        for kw in self.keywords:
            pos = data.find(kw)
            while pos >= 0:
                hits.append(pos)
                nl = data.find(b"\n", pos)
                if nl < 0:
                    break
                pos = data.find(kw, nl + 1)
        hits.sort()
        return hits

    def lines(self, data: bytes) -> Iterator[tuple[int, int]]:
        """(start, end) of each distinct line holding a keyword, in order; `end` excludes the newline."""
        last_end = -1
        for pos in self._hits(data):
            if pos <= last_end:
                continue
            start = data.rfind(b"\n", 0, pos) + 1
            end = data.find(b"\n", pos)
            if end < 0:
                end = len(data)
            last_end = end
            yield start, end

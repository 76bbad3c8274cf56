"""Streaming, per-job log analyzer: failure signatures, progress, hangs and stragglers.

Memory is bounded whatever the input: a partial last line is kept up to MAX_LINE_BYTES (the rest of
an overlong line is dropped, not accumulated), findings are capped per signature and location, and
undecodable bytes are replaced rather than raised on.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from trainguard.detection.catalog import Catalog, Signature, load_catalog
from trainguard.detection.locate import locate, valid_node_name
from trainguard.detection.normalize import Normalized, normalize
from trainguard.detection.prefilter import Prefilter
from trainguard.detection.progress import (
    ProgressConfig,
    ProgressTracker,
    RankStragglers,
    checkpoint_event,
    parse_progress,
    training_finished,
)
from trainguard.detection.severity import benign_occurrence
from trainguard.models import Finding, FindingSource, ProgressState, clip

MAX_LINE_BYTES = 64 * 1024
TRACEBACK_WINDOW_LINES = 400  # an exception line this far after "Traceback" still belongs to it
ROOT_CAUSE_WINDOW_LINES = 12  # torchelastic's "Root Cause" block is about this long
MAX_FINDINGS_PER_KEY = 2  # per (signature, node/rank): the first ones order the failure
MAX_FINDING_KEYS = 2048
MAX_FINDINGS_PER_FEED = 500

_TRACEBACK = "Traceback (most recent call last)"
_ROOT_CAUSE = "Root Cause (first observed failure)"
_ANSI = "\x1b["  # a coloured line may split a keyword: such lines are matched after normalising
_EXTRA_KEYWORDS = (_TRACEBACK, _ROOT_CAUSE, _ANSI)
_ROOT_HOST = re.compile(r"^\s*(?:\[\d+\]:?\s*)?host\s*:\s*(?P<host>\S+)\s*$")
_ROOT_RANK = re.compile(r"^\s*rank\s*:\s*(?P<rank>\d+)")


class LogAnalyzer:
    def __init__(
        self,
        progress: ProgressState | None = None,
        *,
        catalog: Catalog | None = None,
        config: ProgressConfig | None = None,
        node_of_rank: Callable[[int], str | None] | None = None,
    ) -> None:
        self._catalog = catalog or load_catalog()
        self._config = config or ProgressConfig()
        self._tracker = ProgressTracker(self._config, progress)
        self._rank_stragglers = RankStragglers(self._config)
        self._node_of_rank = node_of_rank
        self._progress_keywords = self._config.all_keywords
        keywords = tuple(dict.fromkeys((*self._catalog.keywords, *self._progress_keywords, *_EXTRA_KEYWORDS)))
        self._prefilter = Prefilter(keywords)
        # keyword index -> signatures that list it, so a line is only tried against those.
        self._kw_sigs = [
            tuple(i for i, sig in enumerate(self._catalog.signatures) if kw in sig.keywords)
            for kw in keywords
        ]
        progress_set = set(self._progress_keywords)
        self._kw_progress = [kw in progress_set for kw in keywords]
        self._carry = bytearray()
        self._carry_offset = 0
        self._line_no = 0  # complete lines consumed so far
        self._progress_lines = 0
        self._last_progress_offset = -1
        self._last_traceback: int | None = None
        self._root_cause_until = -1
        self._root_cause_host: str | None = None
        self._root_cause_rank: int | None = None
        self._counts: dict[tuple[str, str], int] = {}
        self._emitted = 0

    @property
    def progress(self) -> ProgressState:
        state = self._tracker.state()
        gating = self._rank_stragglers.slowest_ms()
        if gating is not None and (state.recent_step_ms is None or gating > state.recent_step_ms):
            # Ranks that time their own share of the step (a job-wide median of their lines hides one
            # slow rank): the job's step is its slowest rank's, which the cost of staying depends on.
            state = state.model_copy(update={"recent_step_ms": gating})
        return state

    @property
    def progress_lines(self) -> int:
        return self._progress_lines

    @property
    def last_progress_offset(self) -> int:
        """Byte offset in the log of the newest progress line (-1: none yet)."""
        return self._last_progress_offset

    @property
    def lines_seen(self) -> int:
        return self._line_no

    def feed(self, data: bytes, *, now: float, base_offset: int = 0) -> list[Finding]:
        """Scan `data` (the log's bytes from `base_offset` on); returns fatal and notable findings."""
        self._emitted = 0
        out: list[Finding] = []
        if not data:
            return out
        start = 0
        if self._carry:
            nl = data.find(b"\n")
            if nl < 0:
                self._append_carry(data)
                return out
            self._append_carry(data[:nl])
            line = bytes(self._carry)
            self._carry.clear()
            self._line_no += 1
            if self._prefilter_hit(line):
                self._line(line, self._line_no, self._carry_offset, now, out)
            start = nl + 1
        last_nl = data.rfind(b"\n")
        if last_nl >= start:
            self._scan(data, start, last_nl + 1, now, base_offset, out)
        if last_nl + 1 < len(data):
            tail_start = max(last_nl + 1, start)
            self._carry_offset = base_offset + tail_start
            self._append_carry(data[tail_start:])
        return out

    def flush(self, *, now: float) -> list[Finding]:
        """Treat a buffered partial line as complete (end of a static input)."""
        if not self._carry:
            return []
        line = bytes(self._carry)
        self._carry.clear()
        self._line_no += 1
        out: list[Finding] = []
        if self._prefilter_hit(line):
            self._line(line, self._line_no, self._carry_offset, now, out)
        return out

    def check_hang(self, now: float) -> Finding | None:
        return self._tracker.check_hang(now)

    def credit_checkpoint(self, iteration: int) -> None:
        """A complete checkpoint seen elsewhere (the checkpoint directory): the newest one counts."""
        current = self._tracker.last_checkpoint_iteration
        if current is None or iteration > current:
            self._tracker.last_checkpoint_iteration = iteration

    # -- internals -------------------------------------------------------------------------------

    def _append_carry(self, chunk: bytes) -> None:
        room = MAX_LINE_BYTES - len(self._carry)
        if room > 0:
            self._carry += chunk[:room]

    def _prefilter_hit(self, line: bytes) -> bool:
        return any(kw in line for kw in self._prefilter.keywords)

    def _scan(self, data: bytes, begin: int, end: int, now: float, base: int, out: list[Finding]) -> None:
        body = data[begin:end] if begin or end != len(data) else data
        counted_pos = 0
        counted_lines = self._line_no
        hits = self._prefilter.lines(body)
        pending = next(hits, None)
        pos = 0
        line_no = -1
        while pos < len(body):
            if line_no >= 0 and self._root_cause_until > line_no:
                # Inside torchelastic's root-cause block every line counts, keywords or not.
                ls, le = pos, body.find(b"\n", pos)
            else:
                while pending is not None and pending[0] < pos:
                    pending = next(hits, None)
                if pending is None:
                    break
                ls, le = pending
                pending = next(hits, None)
            counted_lines += body.count(b"\n", counted_pos, ls)
            counted_pos = ls
            line_no = counted_lines + 1
            self._line(body[ls:le], line_no, base + begin + ls, now, out)
            pos = le + 1
        self._line_no += body.count(b"\n")

    def _line(self, raw: bytes, line_no: int, offset: int, now: float, out: list[Finding]) -> None:
        if len(raw) > MAX_LINE_BYTES:
            raw = raw[:MAX_LINE_BYTES]
        line = raw.decode("utf-8", errors="replace")
        norm = normalize(line)
        present = self._prefilter.present(norm.text.encode("utf-8") if _ANSI in line else raw)
        if _TRACEBACK in line:
            self._last_traceback = line_no
        if _ROOT_CAUSE in line:
            self._root_cause_until = line_no + ROOT_CAUSE_WINDOW_LINES
            self._root_cause_host = None
            self._root_cause_rank = None
        elif self._root_cause_until >= line_no:
            h = _ROOT_HOST.match(line)
            if h and valid_node_name(h.group("host")):
                self._root_cause_host = h.group("host")
            r = _ROOT_RANK.match(line)
            if r:
                self._root_cause_rank = int(r.group("rank"))
        candidates = sorted({i for k in present for i in self._kw_sigs[k]})
        m = self._catalog.match_line(norm.text, candidates) if candidates else None
        if m is not None:
            sig = m.signature
            tb = self._last_traceback
            recent_tb = tb is not None and line_no - tb <= TRACEBACK_WINDOW_LINES
            # A retried, caught or warned-about error is not a failure (the job carries on).
            benign = benign_occurrence(norm.text, sig.category, sig.priority)
            if sig.fatal and not benign and not (sig.requires_traceback and not recent_tb):
                self._finding(m.signature, line, norm, line_no, offset, now, m.groups, out)
            return
        if any(self._kw_progress[k] for k in present):
            before = self._progress_lines
            self._progress(line, now, out)
            if self._progress_lines > before:
                self._last_progress_offset = offset

    def _progress(self, line: str, now: float, out: list[Finding]) -> None:
        p = parse_progress(line, self._config)
        if p is not None:
            self._progress_lines += 1
            straggler = self._tracker.on_progress(p, now, line)
            if straggler is not None:
                out.append(straggler)
            rank = locate(line).rank if p.step_ms else None
            if rank is not None and p.step_ms:
                slow = self._rank_stragglers.observe(rank, p.step_ms, now, line)
                if slow is not None:
                    node = self._node_of_rank(rank) if self._node_of_rank is not None else None
                    out.append(slow.model_copy(update={"nodes": (node,)}) if node else slow)
            return
        event = checkpoint_event(line, self._config)
        if event is not None:
            self._tracker.on_checkpoint(event.starting, now, event.iteration)
        elif training_finished(line, self._config):
            self._tracker.finished = True

    def _finding(
        self,
        sig: Signature,
        line: str,
        norm: Normalized,
        line_no: int,
        offset: int,
        now: float,
        groups: dict[str, str],
        out: list[Finding],
    ) -> None:
        loc = locate(line, norm)
        nodes = list(loc.nodes)
        node = groups.get("node")
        if node and valid_node_name(node) and node not in nodes:
            nodes.insert(0, node)
        rank = loc.rank
        if self._root_cause_until >= line_no:
            if self._root_cause_host and self._root_cause_host not in nodes:
                nodes.append(self._root_cause_host)
            if rank is None:
                rank = self._root_cause_rank
        # A cascade line (a survivor reporting a lost peer, a watchdog timeout) is printed where the
        # symptom was seen: its rank's node is a survivor, not the cause, so it implicates no node.
        if rank is not None and not nodes and self._node_of_rank is not None and not sig.cascade:
            mapped = self._node_of_rank(rank)
            if mapped:
                nodes.append(mapped)
        key = (sig.id, ",".join(nodes) or (str(rank) if rank is not None else ""))
        seen = self._counts.get(key, 0)
        if seen >= MAX_FINDINGS_PER_KEY or self._emitted >= MAX_FINDINGS_PER_FEED:
            return
        if len(self._counts) < MAX_FINDING_KEYS or key in self._counts:
            self._counts[key] = seen + 1
        detail = " ".join(f"{k}={v}" for k, v in sorted(groups.items()) if k in ("xid", "pci"))
        self._emitted += 1
        out.append(
            Finding(
                source=FindingSource.LOG,
                pattern_id=sig.id,
                category=sig.category,
                attribution=sig.attribution,
                fatal=sig.fatal,
                cascade=sig.cascade,
                line=clip(line.strip()),
                line_no=line_no,
                offset=offset,
                timestamp=now,
                nodes=tuple(nodes),
                rank=rank,
                detail=detail,
                priority=sig.priority,
            )
        )

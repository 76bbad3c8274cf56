"""Streaming, per-job log analyzer: failure signatures, progress, hangs and stragglers.

Memory is bounded whatever the input: a partial last line is kept up to MAX_LINE_BYTES (the rest of
an overlong line is dropped, not accumulated), findings are capped per signature and location, and
undecodable bytes are replaced rather than raised on.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from trainguard.detection import collectives
from trainguard.detection.catalog import PRIORITY_GENERIC, Catalog, Signature, load_catalog
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
from trainguard.detection.ran_on import RanOnTracker, progress_key
from trainguard.detection.severity import benign_occurrence
from trainguard.models import Attribution, Category, Finding, FindingSource, ProgressState, clip

MAX_LINE_BYTES = 64 * 1024
TRACEBACK_WINDOW_LINES = 400  # an exception line this far after "Traceback" still belongs to it
ROOT_CAUSE_WINDOW_LINES = 12  # torchelastic's "Root Cause" block is about this long
CONFIRM_WINDOW_LINES = 50  # a worker's report counts when the parent's traceback follows this closely
MAX_FINDINGS_PER_KEY = 2  # per (signature, node/rank): the first ones order the failure
MAX_FINDING_KEYS = 2048
MAX_FINDINGS_PER_FEED = 500

_TRACEBACK = "Traceback (most recent call last)"
_ROOT_CAUSE = "Root Cause (first observed failure)"
_ANSI = "\x1b["  # a coloured line may split a keyword: such lines are matched after normalising
# The batch system's own record of the host a job runs on: a PBS/Torque mail's `Exec host:  gpu-2-17/5`,
# Slurm's `NodeList=c014` (slurmctld's `sched: Allocate`, `scontrol show job`), `kubectl describe pod`'s
# `Node:  <node>/<host IP>` (kubernetes/kubectl pkg/describe/describe.go, describePod:
# `w.Write(LEVEL_0, "Node:\t%s\n", pod.Spec.NodeName+"/"+pod.Status.HostIP)`). Only a single host counts.
_EXEC_HOST_KEYWORDS = ("Exec host:", "NodeList=", "Node:")
_EXEC_HOST = re.compile(
    r"^\s*Exec host:\s+(?P<host>[A-Za-z0-9_.-]+)(?:/[0-9]+)?\s*$"
    r"|\bNodeList=(?P<host2>[A-Za-z0-9_.-]+)(?:\s|$)"
    r"|^Node:\s+(?P<host3>[A-Za-z0-9_.-]+)/[0-9A-Fa-f.:]*\s*$"
)
MAX_EXEC_HOSTS = 2  # two different hosts: the record no longer names the job's one host
MISSING_RANK_PATTERN = "collective_missing_rank"
MAX_TRACEBACK_STREAMS = 1024
# Python's traceback grammar: a header, frames (indented, or `File "..."`; rich's boxed frames), then the
# exception line right after the last frame: a dotted class name, optionally `(Cause)` (Ray), then
# `: message` or nothing. Any name counts there, not only `...Error`: `torch._dynamo.exc.Unsupported`,
# `KeyboardInterrupt`, `queue.Empty`.
_FRAME_START = ('File "', "│", "╭", "╰", "^", "~", "+", "|")
# Other printers' frames (docs/detection.md, "Python exceptions in other printers' forms, from their
# sources"): loguru marks the frame that caught the exception with `> File "..."`
# (loguru/_better_exceptions.py, _format_locations: `pattern = ">" + pattern[1:]`); IPython's ultratb
# prints `Cell In[3], line 5` and `File ~/x.py:10, in f(x)` (IPython/core/tbtools.py), older IPython
# `<ipython-input-3-...> in <module>` and `/path/x.py in f(x)`, source lines after an arrow `----> 5`
# (PyColorize make_arrow: `-`*n + `>`, or the unicode themes' `───▶`) and `[... skipping hidden 1 frame]`
# (IPython/core/ultratb.py).
_OTHER_FRAME_START = ('> File "', "File ", "Cell In[", "<ipython-input-", "[... skipping hidden", "--", "─")
_IPYTHON_OLD_FRAME = re.compile(r"^\S+\.py in \S+\(.*\)\s*$")
# A log record's prefix repeated on every line of a traceback that was logged line by line: absl's
# `E1201 12:00:01.000000 140 logging.py:99] ` (absl/logging/__init__.py, get_absl_log_prefix:
# `%c%02d%02d %02d:%02d:%02d.%06d %5d %s:%d] `; glog's own LogMessage prints the same), or any prefix
# carrying a timestamp or a level name. Learned from the header line (what precedes `Traceback (most recent
# call last)` there) and stripped from the stream's next lines when they start with the same shape (digits and
# spacing may vary).
_RECORD_PREFIX_END = re.compile(r"(?:[\]|:\-]|\s)\s*$")
_PREFIX_PIECE = re.compile(r"[0-9]+|\s+|[^0-9\s]+")
# A record at a level below error (absl/glog `I`/`W`/`D`, Python logging's INFO, WARNING, DEBUG): the program
# logged the traceback and went on (logger.warning(..., exc_info=True)).
_LOW_LEVEL_PREFIX = re.compile(r"^[IWD][0-9]{4} |\b(?:INFO|WARNING|WARN|DEBUG)\b")
# A traceback under a consistent leading indentation (a log relay or a markdown quote shifts every line by
# the same amount; docs/detection.md, "Round 19b's tuning misses"): a header indented by spaces alone strips
# that indentation from the stream's next lines, as a record prefix is stripped. Without its header (a log cut
# above it), a frame indented by more than CPython's two spaces (Lib/traceback.py, StackSummary.format:
# `  File "{}", line {}, in {}`) opens the traceback with the extra indentation as its prefix; the exception
# line that closes such a headerless one must then name an ...Error or ...Exception class, as the catalog's
# python_exception_line asks of an unindented one.
_INDENTED_FRAME = re.compile(r'^(?P<indent> +)  File "[^"]+", line [0-9]+, in \S')
_FRAME_KEYWORD = 'File "'
# An exception group's margin (3.11+, Lib/traceback.py, _ExceptionPrintContext.emit): every line of a group's
# report, and of each sub-exception's, is printed behind `  ` per nesting level and `| ` (`+ ` on the top
# group's `Exception Group Traceback (most recent call last):` header; a launcher's `[default0]:` may take one
# of the spaces, normalize.py strips `]: ?`). Stripped as a record prefix is, the
# group's own `ExceptionGroup: <msg> (N sub-exceptions)` line closes its traceback; a sub-exception's
# `    | Traceback (most recent call last):` opens one behind its deeper margin.
_GROUP_MARGIN = re.compile(r"^(?P<indent> +)[+|] (?:Exception Group )?$")
_NAMED_EXCEPTION = re.compile(
    r"^(?:[A-Za-z_][A-Za-z0-9_]*\.)*[A-Z][A-Za-z0-9_]*(?:Error|Exception)(?:\([A-Za-z_][A-Za-z0-9_.]*\))?(?::\s|\s*$)"
)
_LEVEL_WORD = re.compile(r"\b(?:CRITICAL|FATAL|ERROR|WARNING|WARN|INFO|DEBUG)\b")
MAX_PREFIX_CHARS = 160
_EXCEPTION_LINE = re.compile(
    r"^(?:[A-Za-z_][A-Za-z0-9_]*\.)*(?:[A-Z][A-Za-z0-9_]*|[a-z_]*(?:error|exception|timeout))"
    r"(?:\([A-Za-z_][A-Za-z0-9_.]*\))?(?::(?:\s.*)?)?\s*$"
)
_CLEAN_EXIT = re.compile(r"^SystemExit(?::\s*(?:0|None|)\s*)?$")
# Tracebacks the interpreter prints and survives (CPython's own reporters): a thread that died
# (threading.excepthook: `Exception in thread <name>:`), an error nothing could raise to (sys.unraisablehook:
# `Exception ignored in: <obj>`, `Exception ignored in atexit callback: <fn>`), an atexit function that
# raised (`Error in atexit._run_exitfuncs:`), and multiprocessing's exit-time finalizers, whose errors
# `util._run_finalizers` catches and prints (traceback.print_exc). The process goes on (or is already
# exiting) with its own status: their exception line is not the program's failure.
_SURVIVED_HEADER = re.compile(
    r"^(?:Exception in thread .*:|Exception ignored in(?: atexit callback)?:.*|"
    r"Error in atexit\._run_exitfuncs:)\s*$"
)
_SURVIVED_FRAME = re.compile(r'multiprocessing[/\\]util\.py", line [0-9]+, in _run_finalizers\s*$')
# A chained traceback of the same report: survived when the one it chains to was.
_CHAINED = re.compile(
    r"^(?:During handling of the above exception, another exception occurred|"
    r"The above exception was the direct cause of the following exception):\s*$"
)
SURVIVED_HEADER_LINES = 2  # the header is printed right before "Traceback (most recent call last):"
_SURVIVAL_KEYWORDS = (
    "Exception in thread",
    "Exception ignored in",
    "Error in atexit",
    "During handling of the above exception",
    "The above exception was the direct cause",
)
_EXTRA_KEYWORDS = (
    _TRACEBACK,
    _ROOT_CAUSE,
    _ANSI,
    *_EXEC_HOST_KEYWORDS,
    *collectives.KEYWORDS,
    *_SURVIVAL_KEYWORDS,
    _FRAME_KEYWORD,
)
TRACEBACK_EXCEPTION = Signature(
    id="python_traceback_exception",
    pattern=_EXCEPTION_LINE.pattern,
    regex=_EXCEPTION_LINE,
    keywords=(_TRACEBACK,),
    category=Category.PYTHON_EXCEPTION,
    attribution=Attribution.APPLICATION,
    priority=PRIORITY_GENERIC,
)
MAX_RANK_HOSTS = 65536
_Stream = tuple[int | None, int | None, str | None]
_ROOT_HOST = re.compile(r"^\s*(?:\[\d+\]:?\s*)?host\s*:\s*(?P<host>\S+)\s*$")
_ROOT_RANK = re.compile(r"^\s*rank\s*:\s*(?P<rank>\d+)")


@dataclass(frozen=True)
class _KeywordIndex:
    prefilter: Prefilter
    kw_sigs: tuple[tuple[int, ...], ...]
    """keyword index -> signatures that list it, so a line is only tried against those"""
    kw_progress: tuple[bool, ...]


_INDEXES: OrderedDict[tuple[int, tuple[str, ...]], tuple[Catalog, _KeywordIndex]] = OrderedDict()


def _keyword_index(catalog: Catalog, progress_keywords: tuple[str, ...]) -> _KeywordIndex:
    """Shared by every analyzer of a process with the same catalog and progress keywords: building it
    (the prefilter's compile and the keyword -> signature table) cost ~35 ms of CPU per watch start."""
    key = (id(catalog), progress_keywords)
    hit = _INDEXES.get(key)
    if hit is not None and hit[0] is catalog:
        _INDEXES.move_to_end(key)
        return hit[1]
    keywords = tuple(dict.fromkeys((*catalog.keywords, *progress_keywords, *_EXTRA_KEYWORDS)))
    position = {kw: i for i, kw in enumerate(keywords)}
    sigs: list[list[int]] = [[] for _ in keywords]
    for i, sig in enumerate(catalog.signatures):
        for kw in dict.fromkeys(sig.keywords):
            if kw in position:
                sigs[position[kw]].append(i)
    progress_set = set(progress_keywords)
    index = _KeywordIndex(
        prefilter=Prefilter(keywords),
        kw_sigs=tuple(tuple(s) for s in sigs),
        kw_progress=tuple(kw in progress_set for kw in keywords),
    )
    _INDEXES[key] = (catalog, index)  # the catalog is kept with it, so its id is not reused meanwhile
    while len(_INDEXES) > 8:
        _INDEXES.popitem(last=False)
    return index


def _record_prefix(prefix: str) -> tuple[re.Pattern[str], bool] | None:
    """`prefix`, what precedes a traceback header, as a log-record prefix (see _RECORD_PREFIX_END): a pattern
    of its shape, and whether its level is below error; None when it is no such prefix (CPython's own header,
    IPython's `ValueError    Traceback`, rich's box)."""
    if (
        not prefix.strip()
        or len(prefix) > MAX_PREFIX_CHARS
        or not (any(c.isdigit() for c in prefix) or _LEVEL_WORD.search(prefix))
        or not _RECORD_PREFIX_END.search(prefix)
    ):
        return None
    parts = []
    pieces = _PREFIX_PIECE.findall(prefix)
    for i, piece in enumerate(pieces):
        if piece[0].isdigit():
            parts.append("[0-9]+")
        elif piece[0].isspace() and i < len(pieces) - 1:
            parts.append(r"\s+")  # padded fields (glog's `%5d` thread id)
        else:
            parts.append(re.escape(piece))  # the separator before the message is kept exact
    return re.compile("".join(parts)), bool(_LOW_LEVEL_PREFIX.search(prefix))


class LogAnalyzer:
    def __init__(
        self,
        progress: ProgressState | None = None,
        *,
        catalog: Catalog | None = None,
        config: ProgressConfig | None = None,
        node_of_rank: Callable[[int], str | None] | None = None,
        follow_ran_on: bool = False,
    ) -> None:
        self._catalog = catalog or load_catalog()
        self._config = config or ProgressConfig()
        self._tracker = ProgressTracker(self._config, progress)
        self._rank_stragglers = RankStragglers(self._config)
        self._node_of_rank = node_of_rank
        self._progress_keywords = self._config.all_keywords
        index = _keyword_index(self._catalog, self._progress_keywords)
        self._prefilter = index.prefilter
        self._kw_sigs = index.kw_sigs
        self._kw_progress = index.kw_progress
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
        # rank -> host as the log states it (NCCL init lines per communicator size, launcher prefixes).
        self._comm_hosts: dict[int, dict[int, str]] = {}
        self._launcher_hosts: dict[int, str] = {}
        self._world: int | None = None
        # Open tracebacks per output stream (launcher rank / host prefix): was the last line a frame?
        self._tracebacks: dict[_Stream, bool] = {}
        # Streams whose traceback was logged line by line: the shape of the record prefix to strip.
        self._tb_prefix: dict[_Stream, re.Pattern[str]] = {}
        # Streams whose open traceback began at an indented frame, its header not in the log.
        self._headerless: set[_Stream] = set()
        # Streams whose open traceback the interpreter survives (see _SURVIVED_HEADER), where such a header
        # or a chaining line was last seen, and whether a stream's last closed traceback was survived.
        self._survived: set[_Stream] = set()
        self._survival_marks: dict[_Stream, int] = {}
        self._last_survived: dict[_Stream, bool] = {}
        # Findings waiting for the main process's traceback (signatures with confirmed_by_traceback).
        self._unconfirmed: list[tuple[int, Finding]] = []
        self._traceback_until = -1
        # Hosts the batch system's job record names (see _EXEC_HOST).
        self._exec_hosts: list[str] = []
        # Findings the log then shows the job training on after (see ran_on.py): only for a whole log read
        # at once (`trainguard classify`); a live watch emits a finding before the progress after it exists,
        # so it does not pay for following progress against findings nothing will lower.
        self._ran_on = RanOnTracker() if follow_ran_on else None

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

    def ran_on(self, findings: Sequence[Finding]) -> list[Finding]:
        """`findings` (as this analyzer emitted them) with those the job trained on after lowered to non-fatal
        (docs/detection.md, "An error the job ran on"). For a whole log: a live watch emits a finding before
        the progress after it exists."""
        if self._ran_on is None:
            raise RuntimeError("LogAnalyzer(follow_ran_on=True) is needed to lower findings the job ran on")
        return self._ran_on.lower(findings)

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
            if self._prefilter_hit(line) or self._inside_block(self._line_no):
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
        if self._prefilter_hit(line) or self._inside_block(self._line_no):
            self._line(line, self._line_no, self._carry_offset, now, out)
        return out

    @property
    def world_size(self) -> int | None:
        """The largest world the log states (NCCL's `nranks`, `world_size=`), None when it states none."""
        return self._world

    def rank_host(self, rank: int) -> str | None:
        """The host the log itself places a global rank on (launcher prefix, or NCCL's init line of the
        largest communicator: smaller ones number their ranks from 0 again), None when it does not say."""
        if rank in self._launcher_hosts:
            return self._launcher_hosts[rank]
        if self._comm_hosts:
            return self._comm_hosts[max(self._comm_hosts)].get(rank)
        return None

    def _node_for_rank(self, rank: int) -> str | None:
        host = self.rank_host(rank)
        if host is None and self._node_of_rank is not None:
            host = self._node_of_rank(rank)
        return host

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

    def _inside_block(self, line_no: int) -> bool:
        """Inside a root-cause block or an open traceback every line counts, keywords or not."""
        return self._root_cause_until >= line_no or self._traceback_until > line_no

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
            if line_no >= 0 and (self._root_cause_until > line_no or self._traceback_until > line_no):
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
        stream: _Stream = (norm.rank, norm.local_rank, norm.host)
        self._survival_mark(norm.text, stream, line_no)
        survived = stream in self._survived  # the traceback this line may close is one Python survives
        message_at = self._traceback_step(line, norm, stream, line_no)
        exception_line = message_at is not None
        # On the line that closes a traceback, what follows the class is the exception's own message: its
        # words (`Caught ValueError in DataLoader worker process 3.`, `Retry after 30 seconds`) were raised
        # with it, not logged by a program that went on; only what precedes the class may say so.
        benign_text = norm.text if message_at is None else norm.text[:message_at]
        if _TRACEBACK in line and stream not in self._survived:
            self._last_traceback = line_no
            self._confirm(line_no, out)
        if _ROOT_CAUSE in line:
            self._root_cause_until = line_no + ROOT_CAUSE_WINDOW_LINES
            self._root_cause_host = None
            self._root_cause_rank = None
        elif self._root_cause_until >= line_no:
            # The block as printed, or behind a launcher's or collector's prefix (`[default0]:`, `node1: `).
            h = _ROOT_HOST.match(line) or _ROOT_HOST.match(norm.text)
            if h and valid_node_name(h.group("host")):
                self._root_cause_host = h.group("host")
            r = _ROOT_RANK.match(line) or _ROOT_RANK.match(norm.text)
            if r:
                self._root_cause_rank = int(r.group("rank"))
        self._exec_host_line(norm.text)
        if self._collective_line(line, norm, line_no, offset, now, out):
            return
        candidates = sorted({i for k in present for i in self._kw_sigs[k]})
        m = self._catalog.match_line(norm.text, candidates) if candidates else None
        if m is not None:
            sig = m.signature
            tb = self._last_traceback
            # The line that closes a traceback (headerless ones included) is within it.
            recent_tb = exception_line or (tb is not None and line_no - tb <= TRACEBACK_WINDOW_LINES)
            # A retried, caught or warned-about error is not a failure (the job carries on).
            benign = benign_occurrence(benign_text, sig.category, sig.priority) or (
                survived and sig.category == Category.PYTHON_EXCEPTION
            )
            if sig.fatal and not benign and not (sig.requires_traceback and not recent_tb):
                if sig.confirmed_by_traceback:
                    held: list[Finding] = []
                    self._finding(m.signature, line, norm, line_no, offset, now, m.groups, held)
                    self._unconfirmed.extend((line_no, f) for f in held[:1])
                    del self._unconfirmed[:-MAX_FINDINGS_PER_KEY]
                else:
                    self._finding(m.signature, line, norm, line_no, offset, now, m.groups, out)
            elif sig.evidence:
                # Recorded for the rules, never deciding (attribution.rules.native_crash_site).
                self._finding(m.signature, line, norm, line_no, offset, now, m.groups, out)
            return
        if (
            exception_line
            and not survived
            and not benign_occurrence(benign_text, Category.PYTHON_EXCEPTION, PRIORITY_GENERIC)
        ):
            self._finding(TRACEBACK_EXCEPTION, line, norm, line_no, offset, now, {}, out)
            return
        if any(self._kw_progress[k] for k in present):
            before = self._progress_lines
            self._progress(line, stream, now, out)
            if self._progress_lines > before:
                self._last_progress_offset = offset

    def _exec_host_line(self, text: str) -> None:
        if len(self._exec_hosts) >= MAX_EXEC_HOSTS or not any(k in text for k in _EXEC_HOST_KEYWORDS):
            return
        m = _EXEC_HOST.search(text)
        host = (m.group("host") or m.group("host2") or m.group("host3")) if m else None
        if host and valid_node_name(host) and host not in self._exec_hosts:
            self._exec_hosts.append(host)

    @property
    def job_host(self) -> str | None:
        """The one host the batch system's record says the job ran on, None when it names none or several."""
        return self._exec_hosts[0] if len(self._exec_hosts) == 1 else None

    def _confirm(self, line_no: int, out: list[Finding]) -> None:
        """A traceback arrived: the waiting worker reports just before it were the job's failure."""
        for seen_at, f in self._unconfirmed:
            if line_no - seen_at <= CONFIRM_WINDOW_LINES:
                out.append(f)
        self._unconfirmed.clear()

    def _survival_mark(self, text: str, stream: _Stream, line_no: int) -> None:
        """Note a header of a traceback Python survives, or a chaining line after one it survived."""
        if not any(k in text for k in _SURVIVAL_KEYWORDS):
            return
        header = _SURVIVED_HEADER.match(text)
        if not header and not (_CHAINED.match(text) and self._last_survived.get(stream)):
            return
        if stream in self._survival_marks or len(self._survival_marks) < MAX_TRACEBACK_STREAMS:
            self._survival_marks[stream] = line_no

    def _traceback_step(self, line: str, norm: Normalized, stream: _Stream, line_no: int) -> int | None:
        """Follow Python tracebacks stream by stream; on the exception line that ends one, where its message
        begins in `norm.text` (after `Class:`; the line's end for a bare class), else None."""
        if _TRACEBACK in line:
            if stream in self._tracebacks or len(self._tracebacks) < MAX_TRACEBACK_STREAMS:
                self._tracebacks[stream] = False
                mark = self._survival_marks.pop(stream, None)
                self._headerless.discard(stream)
                at = norm.text.find(_TRACEBACK)
                prefix = _record_prefix(norm.text[:at])
                indent = norm.text[:at] if at > 0 else ""
                margin = _GROUP_MARGIN.match(indent)
                if prefix is not None:
                    self._tb_prefix[stream] = prefix[0]
                elif margin is not None:
                    self._tb_prefix[stream] = re.compile(re.escape(margin.group("indent")) + r"[|+] ")
                elif indent and not indent.strip(" "):
                    self._tb_prefix[stream] = re.compile(re.escape(indent))
                else:
                    self._tb_prefix.pop(stream, None)
                if (mark is not None and line_no - mark <= SURVIVED_HEADER_LINES) or (
                    prefix is not None and prefix[1]
                ):
                    self._survived.add(stream)
                else:
                    self._survived.discard(stream)
            self._traceback_until = line_no + TRACEBACK_WINDOW_LINES
            return None
        if stream not in self._tracebacks:
            self._open_headerless(norm.text, stream, line_no)
            return None
        if line_no >= self._traceback_until:
            self._tracebacks.clear()
            self._survived.clear()
            self._tb_prefix.clear()
            self._headerless.clear()
            return None
        text = norm.text
        shape = self._tb_prefix.get(stream)
        if shape is not None:
            p = shape.match(text)
            if p:
                text = text[p.end() :]
        if not text.strip():
            return None
        if (
            text[0].isspace()
            or text.startswith(_FRAME_START)
            or (text.startswith(_OTHER_FRAME_START) and not _EXCEPTION_LINE.match(text))
            or _IPYTHON_OLD_FRAME.match(text)
        ):
            if not self._tracebacks[stream] and _SURVIVED_FRAME.search(text):
                self._survived.add(stream)  # the first frame: multiprocessing's finalizers print it
            self._tracebacks[stream] = True
            return None
        after_frame = self._tracebacks.pop(stream)
        self._tb_prefix.pop(stream, None)
        headerless = stream in self._headerless
        self._headerless.discard(stream)
        if len(self._last_survived) < MAX_TRACEBACK_STREAMS or stream in self._last_survived:
            self._last_survived[stream] = stream in self._survived
        self._survived.discard(stream)
        if not self._tracebacks:
            self._traceback_until = -1
        if (
            not after_frame
            or not _EXCEPTION_LINE.match(text)
            or _CLEAN_EXIT.match(text)
            or (headerless and not _NAMED_EXCEPTION.match(text))
        ):
            return None
        colon = text.find(":")
        return len(norm.text) - len(text) + (colon + 1 if colon >= 0 else len(text))

    def _open_headerless(self, text: str, stream: _Stream, line_no: int) -> None:
        """An indented frame with no traceback open on its stream: a traceback whose header the log lacks."""
        if _FRAME_KEYWORD not in text or len(self._tracebacks) >= MAX_TRACEBACK_STREAMS:
            return
        m = _INDENTED_FRAME.match(text)
        if m is None:
            return
        self._tracebacks[stream] = True
        self._tb_prefix[stream] = re.compile(re.escape(m.group("indent")))
        self._headerless.add(stream)
        self._survived.discard(stream)
        self._traceback_until = max(self._traceback_until, line_no + TRACEBACK_WINDOW_LINES)

    def _collective_line(
        self, line: str, norm: Normalized, line_no: int, offset: int, now: float, out: list[Finding]
    ) -> bool:
        """Learn rank -> host and the world size; emit PyTorch's own naming of the ranks a collective waited
        for. True when the line was such a statement (nothing else to match on it)."""
        text = norm.text
        rank, world = collectives.rank_and_world(text)
        if world is not None and 1 < world <= collectives.MAX_WORLD:
            self._world = max(self._world or 0, world)
        loc = None
        if rank is not None and world is not None:
            loc = locate(line, norm)
            hosts = self._comm_hosts.setdefault(world, {})
            if loc.nodes and len(hosts) < MAX_RANK_HOSTS:
                hosts.setdefault(rank, loc.nodes[0])
        elif (
            norm.rank is not None
            and norm.host
            and valid_node_name(norm.host)
            and len(self._launcher_hosts) < MAX_RANK_HOSTS
        ):
            self._launcher_hosts.setdefault(norm.rank, norm.host)
        named = collectives.explicit_missing_ranks(text)
        if named is None or not named.ranks:
            return False
        missing = named.ranks
        nodes = collectives.nodes_of_ranks(missing, self._node_for_rank, max_nodes=2)
        key = (MISSING_RANK_PATTERN, ",".join(map(str, missing)))
        if self._counts.get(key, 0) >= MAX_FINDINGS_PER_KEY or self._emitted >= MAX_FINDINGS_PER_FEED:
            return True
        self._counts[key] = self._counts.get(key, 0) + 1
        self._emitted += 1
        out.append(
            Finding(
                source=FindingSource.LOG,
                pattern_id=MISSING_RANK_PATTERN,
                category=Category.NCCL_TIMEOUT,
                # Never arrived: that rank's node. Went elsewhere: the timeout's usual reading stands.
                attribution=Attribution.SYSTEM_SOFTWARE if named.diverged else Attribution.HARDWARE,
                fatal=True,
                cascade=True,  # decides only when no initiating error exists (a crash on that rank wins)
                line=clip(line.strip()),
                line_no=line_no,
                offset=offset,
                timestamp=now,
                nodes=nodes,
                rank=missing[0] if len(missing) == 1 else None,
                detail="missing ranks " + ",".join(map(str, missing)),
                priority=2,
            )
        )
        return True

    def _progress(self, line: str, stream: _Stream, now: float, out: list[Finding]) -> None:
        p = parse_progress(line, self._config)
        if p is not None:
            self._progress_lines += 1
            if self._ran_on is not None:
                self._ran_on.on_progress(stream, line, progress_key(line, p.iteration))
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
        # A node failure the scheduler reports without a host (`job preempted (node failure)`) is the
        # failure of the host its own record says the job ran on.
        if not nodes and sig.category == Category.SLURM_NODE_FAILURE and self.job_host is not None:
            nodes.append(self.job_host)
        key = (sig.id, ",".join(nodes) or (str(rank) if rank is not None else ""))
        seen = self._counts.get(key, 0)
        if seen >= MAX_FINDINGS_PER_KEY or self._emitted >= MAX_FINDINGS_PER_FEED:
            return
        if len(self._counts) < MAX_FINDING_KEYS or key in self._counts:
            self._counts[key] = seen + 1
        detail = " ".join(f"{k}={v}" for k, v in sorted(groups.items()) if k in ("xid", "pci"))
        self._emitted += 1
        finding = Finding(
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
            tears_down=sig.tears_down(norm.text),
        )
        if self._ran_on is not None:
            self._ran_on.on_finding(finding, (norm.rank, norm.local_rank, norm.host), line)
        out.append(finding)

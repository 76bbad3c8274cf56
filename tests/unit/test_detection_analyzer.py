from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from hypothesis import given, settings
from hypothesis import strategies as st

from trainguard.detection.analyzer import MAX_FINDINGS_PER_KEY, MAX_LINE_BYTES, LogAnalyzer
from trainguard.detection.catalog import parse_catalog
from trainguard.models import Category

WATCHDOG = (
    b"[rank3]:[E ProcessGroupNCCL.cpp:607] [Rank 3] Watchdog caught collective operation timeout: "
    b"WorkNCCL(SeqNum=5, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600013 milliseconds "
    b"before timing out.\n"
)


def test_partial_lines_are_buffered_and_offsets_stay_exact() -> None:
    a = LogAnalyzer()
    prefix = b"hello\nworld\n"
    line = b"RuntimeError: CUDA error: an illegal memory access was encountered\n"
    data = prefix + line
    cut = len(prefix) + 20
    assert a.feed(data[:cut], now=1.0) == []
    found = a.feed(data[cut:], now=2.0, base_offset=cut)
    assert len(found) == 1
    f = found[0]
    assert f.category == Category.CUDA_ILLEGAL_ACCESS
    assert f.offset == len(prefix)
    assert f.line_no == 3
    assert a.lines_seen == 3


def test_findings_name_the_node_and_map_ranks() -> None:
    a = LogAnalyzer(node_of_rank=lambda r: f"gpu-{r // 8:02d}")
    out = a.feed(
        b"gpu-07:5776:5902 [0] transport/net_ib.cc:1296 NCCL WARN NET/IB : Got completion from peer "
        b"10.0.0.2<33092> with error 12, opcode 0, len 0, vendor err 129 (Recv)\n" + WATCHDOG,
        now=5.0,
    )
    assert [f.category for f in out] == [Category.INTERCONNECT, Category.NCCL_TIMEOUT]
    assert out[0].nodes == ("gpu-07",)
    # a cascade line is printed by a survivor: its rank's node is not the cause, so it names none
    assert out[1].rank == 3 and out[1].nodes == () and out[1].cascade


def test_benign_noise_and_catch_all_without_traceback_are_quiet() -> None:
    a = LogAnalyzer()
    noise = (
        b"host:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read\n"
        b"host:1:2 [0] NCCL WARN NCCL_IB_TIMEOUT set by environment to 18.\n"
        b"Namespace(timeout=1800)\n"
        b"Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to 16384.0\n"
        b"eval error_rate: 0.02\n"
        b"Found something; raising KeyError later\n"
    )
    assert a.feed(noise * 50, now=0.0) == []


def test_findings_are_capped_per_signature_and_location() -> None:
    a = LogAnalyzer()
    out = a.feed(WATCHDOG * 1000, now=0.0)
    assert len(out) == MAX_FINDINGS_PER_KEY


def test_huge_single_line_is_truncated_not_accumulated() -> None:
    a = LogAnalyzer()
    chunk = b"x" * (1024 * 1024)
    for _ in range(10):  # a 10 MB line arriving in pieces
        assert a.feed(chunk, now=0.0) == []
    assert len(a._carry) <= MAX_LINE_BYTES
    out = a.feed(b" tail\n" + WATCHDOG, now=1.0)
    assert [f.pattern_id for f in out] == ["nccl_watchdog_timeout"]
    assert a.lines_seen == 2


@settings(max_examples=60, deadline=None)
@given(st.lists(st.binary(max_size=4096), max_size=8))
def test_arbitrary_bytes_never_raise(chunks: list[bytes]) -> None:
    a = LogAnalyzer()
    offset = 0
    for c in chunks:
        a.feed(c, now=1.0, base_offset=offset)
        offset += len(c)
    a.flush(now=2.0)
    a.check_hang(3.0)


def test_torchelastic_root_cause_block_names_the_host() -> None:
    block = (
        b"Root Cause (first observed failure):\n[0]:\n  time      : 2024-03-05_07:01:51\n"
        b"  host      : node-17\n  rank      : 5 (local_rank: 5)\n  exitcode  : -9 (pid: 14750)\n"
        b"  error_file: <N/A>\n  traceback : Signal 9 (SIGKILL) received by PID 14750\n"
    )
    out = LogAnalyzer().feed(block, now=0.0)
    assert out and all(f.nodes == ("node-17",) for f in out)
    assert out[0].category == Category.SIGNAL_KILL and out[0].rank == 5


def test_progress_state_resumes_across_analyzers() -> None:
    line = b" iteration      %d/  1000 | elapsed time per iteration (ms): 1000.0 | lm loss: 2.0 |\n"
    a = LogAnalyzer()
    for i in range(1, 4):
        a.feed(line % i, now=float(i))
    assert a.progress_lines == 3
    b = LogAnalyzer(a.progress)
    assert b.progress.last_iteration == 3 and b.progress_lines == 0
    assert b.check_hang(4.0) is None
    assert b.check_hang(3.0 + 10_000) is not None


XID_LINE = b"node2: NVRM: Xid (PCI:0000:3b:00): 79, pid=7, name=python3, GPU has fallen off the bus.\n"


def test_analyzers_share_one_compiled_index_per_catalog() -> None:
    """Every watch start builds an analyzer: the compiled keyword index is built once per process and
    catalog (it cost ~35 ms of CPU each, seconds at a takeover of thousands of watches)."""
    first, second = LogAnalyzer(), LogAnalyzer()
    assert first._prefilter is second._prefilter and first._kw_sigs is second._kw_sigs
    own = parse_catalog(
        "signatures:\n"
        " - {id: only_mine, regex: 'zzz fatal', keywords: [zzz], category: hang, attribution: none}\n"
    )
    mine = LogAnalyzer(catalog=own)
    assert mine._prefilter is not first._prefilter
    assert [f.pattern_id for f in mine.feed(b"zzz fatal\n", now=0.0)] == ["only_mine"]
    assert not mine.feed(XID_LINE, now=0.0)  # the built-in catalog's keywords are not in its index
    assert LogAnalyzer().feed(XID_LINE, now=0.0)  # ... and the built-in index still has them


def test_a_shared_index_scans_from_many_threads_at_once() -> None:
    """The index is shared, so its matcher must be safe to use from several threads (hyperscan scratch
    space is per thread)."""
    expected = [f.pattern_id for f in LogAnalyzer().feed(XID_LINE * 3, now=0.0)]

    def scan(_: int) -> bool:
        return all(
            [f.pattern_id for f in LogAnalyzer().feed(XID_LINE * 3, now=0.0)] == expected for _ in range(50)
        )

    with ThreadPoolExecutor(max_workers=8) as pool:
        agreed = list(pool.map(scan, range(16)))
    assert expected and all(agreed)

"""The live watch keeps the evidence that says whose code crashed (a native crash's frames, a logged machine
check) beside the fatal findings it hands its workflow, so a watched job's crash is attributed as
`trainguard classify` attributes its log (docs/detection.md, "Native crash attribution: whose code crashed").
Before this, the watch dropped every non-fatal finding and a crash in the user's own code read as the node's
software, which implicates the node."""

from __future__ import annotations

from activities.watch import EVIDENCE_KEPT, MAX_FINDINGS, JobWatcher, _Progress
from trainguard.attribution.rules import NATIVE_CRASH_EVIDENCE, attribute
from trainguard.detection.analyzer import LogAnalyzer
from trainguard.detection.classify import classify_text
from trainguard.models import Attribution, Category, LogCursor

USER_CRASH = (
    "step 10 loss 2.31\n"
    "Segmentation fault (core dumped)\n"
    "/lib/x86_64-linux-gnu/libc.so.6(+0x42520) [0x7f4b8e442520]\n"
    "/home/alice/proj/build/libmyops.so(_Z6kernelPf+0x2c) [0x7f00aa00102c]\n"
)
FRAMES_ONLY = (
    "/lib/x86_64-linux-gnu/libc.so.6(+0x42520) [0x7f4b8e442520]\n"
    "/home/alice/proj/build/libmyops.so(_Z6kernelPf+0x2c) [0x7f00aa00102c]\n"
)


def _watch(*chunks: str) -> _Progress:
    analyzer = LogAnalyzer()
    state = _Progress(cursor=LogCursor())
    offset = 0
    for i, text in enumerate(chunks):
        data = text.encode()
        JobWatcher._collect(state, analyzer.feed(data, now=float(i), base_offset=offset), float(i), 5.0)
        offset += len(data)
    return state


def test_a_watched_crash_in_the_users_code_is_attributed_as_classify_does() -> None:
    state = _watch(USER_CRASH)
    assert any(f.pattern_id in NATIVE_CRASH_EVIDENCE and not f.fatal for f in state.findings)
    verdict = attribute(state.findings)
    assert (verdict.category, verdict.attribution) == (Category.SEGFAULT, Attribution.APPLICATION)
    assert not verdict.nodes
    static = classify_text(USER_CRASH)
    assert (static.category, static.attribution) == (verdict.category, verdict.attribution)


def test_frames_arriving_after_the_crash_line_are_kept() -> None:
    state = _watch("Segmentation fault (core dumped)\n", FRAMES_ONLY)
    assert attribute(state.findings).attribution == Attribution.APPLICATION


def test_frames_alone_start_nothing() -> None:
    state = _watch(FRAMES_ONLY)
    assert state.findings == []
    assert state.first_signal_at is None and state.settle_until is None


def test_evidence_is_bounded_and_leaves_room_for_failures() -> None:
    many = "".join(f"/home/alice/proj/build/libop{i}.so(f+0x{i:x}) [0x7f00aa00{i:04x}]\n" for i in range(40))
    state = _watch("Segmentation fault (core dumped)\n", many, many)
    kept = [f for f in state.findings if f.pattern_id in NATIVE_CRASH_EVIDENCE]
    assert 0 < len(kept) <= EVIDENCE_KEPT
    assert len(state.findings) < MAX_FINDINGS

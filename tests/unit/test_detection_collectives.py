"""A collective timeout decided for the one rank it waited for, and that rank's node (issue 12 section 1)."""

from __future__ import annotations

import pytest

from trainguard.attribution.rules import attribute
from trainguard.detection.analyzer import LogAnalyzer
from trainguard.detection.classify import classify_text
from trainguard.detection.collectives import (
    TimedOutWork,
    allocation_layout,
    explicit_missing_ranks,
    nodes_of_ranks,
    rank_and_world,
    silent_ranks,
    timed_out_work,
)
from trainguard.models import Attribution, Category, Finding, JobSnapshot

# NCCL's init line for global rank r of 8, printed with its host prefix: ranks 0-3 on gpu-a1, 4-7 on gpu-b2.
INIT = (
    "{host}:{pid}:{pid} [{dev}] NCCL INFO comm 0x5581 rank {rank} nranks 8 cudaDev {dev} busId 1b000 "
    "- Init COMPLETE"
)


def _init_lines() -> str:
    return "".join(
        INIT.format(host="gpu-a1" if r < 4 else "gpu-b2", pid=1000 + r, dev=r % 4, rank=r) + "\n"
        for r in range(8)
    )


def _timeout(rank: int, seq: int = 4711, op: str = "ALLREDUCE") -> str:
    return (
        f"[rank{rank}]:[E1130 10:00:00.000000 123 ProcessGroupNCCL.cpp:632] [PG ID 0 PG GUID 0(default_pg) "
        f"Rank {rank}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType={op}, "
        f"NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600013 milliseconds before timing out.\n"
    )


@pytest.mark.parametrize(
    ("line", "ranks", "diverged"),
    [
        (
            "\t - To our best knowledge, ranks [3] are the lagging ranks that caused this timeout. "
            "They never joined",
            (3,),
            False,
        ),
        ("\t   - [2, 5] joined but didn't finish collective #7 (count from 1)", (2, 5), False),
        ("\t     [1] finished collective #2, but didn't join collective #3 (count from 1)", (1,), True),
        ("missing ranks: {1}", (1,), False),
        (
            "Not all ranks joining collective for group 0:default_pg collective nccl:all_reduce "
            "Missing ranks are {1, 3}",
            (1, 3),
            False,
        ),
        ("RuntimeError: [Rank 0]: Rank 1 failed to pass monitoredBarrier in 2000 ms", (1,), False),
        ("[Rank 0]: Ranks 1, 2 failed to pass monitoredBarrier in 30000 ms", (1, 2), False),
    ],
)
def test_pytorch_naming_the_ranks_a_collective_waited_for(
    line: str, ranks: tuple[int, ...], diverged: bool
) -> None:
    named = explicit_missing_ranks(line)
    assert named is not None and named.ranks == ranks and named.diverged == diverged


def test_lines_that_name_no_missing_rank() -> None:
    assert explicit_missing_ranks("all ranks have joined the collective") is None
    assert explicit_missing_ranks(_timeout(3)) is None


def test_rank_world_and_the_collective_a_timeout_names() -> None:
    assert rank_and_world(INIT.format(host="h1", pid=1, dev=0, rank=5)) == (5, 8)
    assert rank_and_world("Initializing process group: world_size=16, rank=3") == (None, 16)
    assert timed_out_work(_timeout(6)) == TimedOutWork("0", 6, 4711, "ALLREDUCE")
    old = (
        "[E ProcessGroupNCCL.cpp:821] [Rank 2] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=9, OpType=BROADCAST, Timeout(ms)=1800000)"
    )
    assert timed_out_work(old) == TimedOutWork("?", 2, 9, "BROADCAST")
    assert timed_out_work("ran for 1806789 milliseconds before timing out") is None


def _works(ranks: list[int], seq: int = 10, op: str = "ALLREDUCE") -> list[TimedOutWork]:
    return [TimedOutWork("0", r, seq, op) for r in ranks]


def test_silent_rank_of_an_aligned_timeout() -> None:
    assert silent_ranks(_works([0, 1, 2, 4, 5, 6, 7]), 8) == (3,)
    assert silent_ranks(_works([0, 1, 2, 3]), 8) == (4, 5, 6, 7)  # one whole node of four ranks


@pytest.mark.parametrize(
    ("works", "world"),
    [
        (_works([0, 1, 2]), None),  # world unknown: nothing decides
        (_works([0, 1, 2, 3]), 4),  # nobody missing
        ([*_works([0, 1]), *_works([2], seq=11)], 4),  # different collectives: the program's doing
        (_works([0, 1]), 8),  # most ranks silent: their reports may simply not be in the log yet
        (_works([0, 9]), 8),  # a rank beyond the stated world: that world is not this group's
        (_works([0]), 2),  # one report alone aligns with nothing
        ([*_works([0, 1]), TimedOutWork("1", 2, 10, "ALLREDUCE")], 4),  # two groups
    ],
)
def test_silent_ranks_decide_nothing_when_the_evidence_does_not(
    works: list[TimedOutWork], world: int | None
) -> None:
    assert silent_ranks(works, world) == ()


def test_ranks_to_nodes_only_when_they_fit_one_node() -> None:
    layout = allocation_layout(("n1", "n2", "n3"), 7)  # Slurm block: 3, 2, 2
    assert [layout(r) for r in range(8)] == ["n1", "n1", "n1", "n2", "n2", "n3", "n3", None]
    assert nodes_of_ranks((3, 4), layout) == ("n2",)
    assert nodes_of_ranks((2, 3), layout) == ()
    assert nodes_of_ranks((2, 3), layout, max_nodes=2) == ("n1", "n2")
    assert nodes_of_ranks((9,), layout) == ()
    assert nodes_of_ranks((1,), None) == ()


def test_classify_names_the_silent_ranks_node_from_the_logs_own_init_lines() -> None:
    text = _init_lines() + "".join(_timeout(r) for r in (0, 1, 2, 3, 4, 6, 7))
    r = classify_text(text)
    assert (r.fatal, r.category, r.attribution) == (True, "nccl_timeout", "hardware")
    assert r.nodes == ["gpu-b2"]  # rank 5 ran there
    assert 0.5 < r.confidence < 0.7  # inferred: advice, not enough to exclude the node
    assert "never reported" in r.summary


def test_pytorch_naming_the_lagging_rank_decides_for_its_node() -> None:
    text = (
        _init_lines()
        + _timeout(0)
        + " - [0] Timeout at collective: ALLREDUCE, #4711\n"
        + " - To our best knowledge, ranks [2] are the lagging ranks that caused this timeout. "
        "They never joined any collectives\n"
    )
    r = classify_text(text)
    assert (r.category, r.attribution, r.nodes) == ("nccl_timeout", "hardware", ["gpu-a1"])
    assert r.confidence == 0.7


def test_a_rank_that_went_elsewhere_names_its_node_without_blaming_the_hardware() -> None:
    text = (
        _init_lines() + _timeout(0) + "     [6] finished collective #4710, but didn't join collective #4711\n"
    )
    r = classify_text(text)
    assert (r.category, r.attribution, r.nodes) == ("nccl_timeout", "system_software", ["gpu-b2"])
    assert r.confidence < 0.7


def test_nothing_decides_a_bare_timeout() -> None:
    r = classify_text(_timeout(0) + _timeout(1))
    assert (r.category, r.attribution, r.nodes) == ("nccl_timeout", "system_software", [])
    assert r.confidence < 0.6  # a cascade alone (0.45), corroborated once


def test_a_crash_on_the_missing_rank_is_the_cause() -> None:
    text = (
        _init_lines()
        + "[rank5]: ValueError: batch has no labels\n"
        + "".join(_timeout(r) for r in (0, 1, 2, 3, 4, 6, 7))
        + " - To our best knowledge, ranks [5] are the lagging ranks that caused this timeout.\n"
    )
    r = classify_text(text)
    assert (r.category, r.attribution, r.nodes) == ("python_exception", "application", [])


def test_the_survivors_nodes_are_never_blamed_for_their_own_timeout() -> None:
    r = classify_text(_init_lines() + _timeout(1) + _timeout(2))
    assert r.nodes == []


def _finding_lines(text: str) -> list[Finding]:
    a = LogAnalyzer()
    return a.feed(text.encode(), now=1.0) + a.flush(now=1.0)


def test_attribute_maps_the_silent_rank_through_the_jobs_allocation_order() -> None:
    job = JobSnapshot(job_id="5", state="FAILED", nodes=("node1", "node2", "node3", "node4"), num_tasks=16)
    findings = _finding_lines("".join(_timeout(r).replace("]:[E", "]:[E", 1) for r in range(16) if r != 9))
    v = attribute(findings, job)
    assert (v.category, v.attribution, v.nodes) == (Category.NCCL_TIMEOUT, Attribution.HARDWARE, ("node3",))
    # the same reports while Slurm says RUNNING: recorded and watched, nothing touched
    running = job.model_copy(update={"state": "RUNNING"})
    assert not attribute(findings, running).fatal


def test_the_analyzer_resolves_a_named_rank_through_the_job_layout() -> None:
    layout = allocation_layout(("node1", "node2"), 4)
    a = LogAnalyzer(node_of_rank=layout)
    out = a.feed(b"[Rank 0]: Ranks 3 failed to pass monitoredBarrier in 30000 ms\n", now=1.0)
    assert [(f.pattern_id, f.nodes, f.rank) for f in out] == [("collective_missing_rank", ("node2",), 3)]

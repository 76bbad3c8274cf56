"""Sixteenth corpus round (issue 12 section 1): generalised from the round's tuning misses only.

Round 16 added 35 excerpts (pub700-pub734), a random draw over ML-framework trackers and their
training-at-scale users (not chosen by the held-out part's kinds), split by the stored rule and committed
before the classifier ran on them. Of its three tuning misses, one is generalised, from the program that
prints the text, not from the excerpt:
- a collective timeout whose line is cut inside the watchdog's message (pub734, LLaMA-Factory, read
  healthy: a progress bar runs into `[rank5]:[E602 ...ProcessGroupNCCL.cpp:632] [Rank 5] Watchdog caught
  collective operati`). ProcessGroupNCCL's WorkNCCL::checkTimeout builds its message as logPrefix()
  (`[Rank N] `, `[PG N Rank N] `, `[PG ID N PG GUID G Rank N] `) followed by "Watchdog caught collective
  operation timeout: ", and no other message of ProcessGroupNCCL.cpp starts "Watchdog caught": the rank
  prefix then "Watchdog caught" is the timeout however early the line is cut.
The other two rest on the thread's diagnosis, not on the text (see docs/detection.md, round 16).
Every positive case below fails on the round-15 code (the look-alikes and guards pass on both).
"""

from __future__ import annotations

import pytest

from tests.unit.classify_verdict import verdict
from trainguard.detection.classify import classify_text


@pytest.mark.parametrize(
    "text",
    [
        "[rank5]:[E602 11:17:52.185053341 ProcessGroupNCCL.cpp:632] [Rank 5]"
        " Watchdog caught collective operati\n",
        "[rank3]:[E0101 00:00:00.000000000 ProcessGroupNCCL.cpp:632] [PG ID 0 PG GUID 0(default_pg) Rank 3]"
        " Watchdog caught coll\n",
        "[E ProcessGroupNCCL.cpp:1414] [PG 0 Rank 3] Watchdog caught\n",
        "  what():  [Rank 7] Watchdog caught collec\n",
    ],
)
def test_a_watchdog_timeout_cut_inside_its_message_is_still_the_timeout(text: str) -> None:
    assert verdict(text) == (True, "nccl_timeout", "system_software"), text
    assert "nccl_watchdog_timeout" in classify_text(text).pattern_ids


@pytest.mark.parametrize(
    "text",
    [
        "[rank0]:[I1225 12:58:32.7 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog thread started\n",
        "Watchdog caught nothing: all collectives completed\n",
        "[Rank 0] watchdog caught up with the queue\n",
        "TORCH_NCCL_ENABLE_MONITORING=1 (heartbeat monitor for the watchdog)\n",
    ],
)
def test_watchdog_look_alikes_are_not_a_timeout(text: str) -> None:
    r = classify_text(text)
    assert "nccl_watchdog_timeout" not in r.pattern_ids, text
    assert not r.fatal, text


def test_the_full_watchdog_message_still_reads_as_before() -> None:
    text = (
        "[E ProcessGroupNCCL.cpp:821] [Rank 3] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=4178, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1803391 milliseconds "
        "before timing out.\n"
    )
    assert verdict(text) == (True, "nccl_timeout", "system_software")

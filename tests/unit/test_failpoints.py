"""Failpoints fire once per key, only when named, and `fire` lets the caller fail instead of dying."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from trainguard import failpoints


def test_fire_once_per_key_only_when_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINGUARD_FAILPOINT_DIR", str(tmp_path))
    monkeypatch.setenv("TRAINGUARD_FAILPOINTS", " fail_after_requeue_hold , other")
    assert failpoints.fire("fail_after_requeue_hold", "advice-1")
    assert not failpoints.fire("fail_after_requeue_hold", "advice-1")  # remembered: the retry runs through
    assert failpoints.fire("fail_after_requeue_hold", "advice-2")
    assert not failpoints.fire("after_requeue_hold", "advice-1")  # not named
    monkeypatch.setenv("TRAINGUARD_FAILPOINTS", "")
    assert not failpoints.fire("fail_after_requeue_hold", "advice-3")
    failpoints.hit("after_requeue_hold", "advice-3")  # disabled: returns, does not kill this process


def test_a_suffix_arms_a_point_for_matching_keys_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRAINGUARD_FAILPOINT_DIR", str(tmp_path))
    monkeypatch.setenv("TRAINGUARD_FAILPOINTS", "fail_after_requeue_hold@/hold")
    assert not failpoints.fire("fail_after_requeue_hold", "c/1/42-1000/a0/p1")  # the decision's requeue
    assert failpoints.fire("fail_after_requeue_hold", "c/1/42-1000/a0/hold")  # the containment hold
    assert not failpoints.fire("fail_after_requeue_hold", "c/1/42-1000/a0/hold")  # once per key
    assert not failpoints.fire("after_requeue_hold", "c/1/42-1000/a1/hold")  # another point


async def test_pause_holds_the_caller_once_per_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINGUARD_FAILPOINT_DIR", str(tmp_path))
    monkeypatch.setenv("TRAINGUARD_FAILPOINTS", "pause_before_requeue_hold")
    monkeypatch.setenv("TRAINGUARD_FAILPOINT_PAUSE_S", "0.3")
    loop = asyncio.get_running_loop()
    started = loop.time()
    await failpoints.pause("pause_before_requeue_hold", "advice-1")
    assert loop.time() - started >= 0.3
    started = loop.time()
    await failpoints.pause("pause_before_requeue_hold", "advice-1")  # once per key: the retry runs through
    await failpoints.pause("pause_before_release", "advice-1")  # not named
    assert loop.time() - started < 0.2

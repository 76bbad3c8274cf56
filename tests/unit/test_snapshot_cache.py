"""One scheduler snapshot per interval, however many watchers ask."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools

from activities.snapshot_cache import SnapshotCache
from trainguard.models import ClusterSnapshot, JobSnapshot


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def test_concurrent_callers_share_one_fetch_and_the_cache_expires() -> None:
    clock = Clock()
    calls = 0

    async def fetch() -> ClusterSnapshot:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0.05)
        return ClusterSnapshot(
            cluster="lab",
            taken_at=clock(),
            jobs=(JobSnapshot(job_id="1"), JobSnapshot(job_id="1", submit_time=5)),
        )

    cache = SnapshotCache(fetch, max_age_s=2.0, clock=clock)
    await asyncio.gather(*(cache.get() for _ in range(500)))
    assert calls == 1
    assert len(cache.jobs("1")) == 2 and cache.jobs("2") == []
    clock.now += 1.0
    await cache.get()
    assert calls == 1
    clock.now += 1.5
    await cache.get()
    assert calls == 2


async def test_a_cancelled_caller_does_not_cancel_the_shared_fetch() -> None:
    clock = Clock()

    async def fetch() -> ClusterSnapshot:
        await asyncio.sleep(0.1)
        return ClusterSnapshot(cluster="lab", taken_at=clock())

    cache = SnapshotCache(fetch, max_age_s=1.0, clock=clock)
    first = asyncio.create_task(cache.get())
    second = asyncio.create_task(cache.get())
    await asyncio.sleep(0.01)
    first.cancel()
    snap = await second
    assert snap.cluster == "lab"


async def test_the_interval_grows_with_the_measured_cost() -> None:
    """A snapshot that cost 3 s is served for 4 x 3 s, not the configured 2 s."""
    clock = Clock()
    calls = 0

    async def fetch() -> ClusterSnapshot:
        nonlocal calls
        calls += 1
        taken = clock()
        clock.now += 3.0  # the fetch's cost, on the cache's own clock
        return ClusterSnapshot(cluster="lab", taken_at=taken)

    cache = SnapshotCache(fetch, max_age_s=2.0, clock=clock, monotonic=clock)
    await cache.get()
    assert cache.cost_s == 3.0 and cache.interval_s() == 12.0
    clock.now += 5.0  # 8 s after it was taken: older than 2 s, younger than 12 s
    await cache.get()
    assert calls == 1
    clock.now += 5.0
    await cache.get()
    assert calls == 2


async def test_fetches_never_run_back_to_back_even_after_a_failure() -> None:
    loop = asyncio.get_running_loop()
    spans: list[tuple[float, float]] = []

    async def fetch() -> ClusterSnapshot:
        start = loop.time()
        await asyncio.sleep(0.05)
        spans.append((start, loop.time()))
        raise RuntimeError("slurmctld slow and failing")

    cache = SnapshotCache(fetch, max_age_s=0.0)
    for _ in range(3):
        with contextlib.suppress(RuntimeError):
            await cache.get()
    gaps = [nxt[0] - prev[1] for prev, nxt in itertools.pairwise(spans)]
    assert len(spans) == 3 and all(gap >= 0.1 for gap in gaps)  # >= (4 - 1) x 0.05 s of rest


async def test_a_fetch_that_fails_after_its_callers_left_logs_no_orphan_traceback() -> None:
    """Issue 14 walk: at each worker restart in SSH mode the closing connection failed the in-flight
    fetch after shutdown had cancelled its callers: asyncio logged "Task exception was never retrieved"."""
    clock = Clock()
    unretrieved: list[object] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _loop, ctx: unretrieved.append(ctx.get("message")))
    try:

        async def fetch() -> ClusterSnapshot:
            await asyncio.sleep(0.05)
            raise OSError("connection lost")

        cache = SnapshotCache(fetch, max_age_s=1.0, clock=clock)
        caller = asyncio.create_task(cache.get())
        await asyncio.sleep(0.01)
        caller.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await caller
        await asyncio.sleep(0.1)
        cache._inflight = None  # drop the last reference: an unretrieved exception is reported on GC
        gc.collect()
        assert unretrieved == []
    finally:
        loop.set_exception_handler(None)

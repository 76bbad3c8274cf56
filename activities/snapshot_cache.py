"""One scheduler snapshot per cluster per interval, shared by every activity in the worker.

Thousands of watch activities ask for the job they follow; at most one snapshot fetch runs at a time,
and callers within the interval of the last one get the cached result (submitit's batched watcher).

The interval adapts to what a snapshot costs: a fetch that took `cost` seconds is not repeated before
`cost_factor * cost` seconds have passed since it started, so Slurm and this worker spend at most
1/cost_factor of their time on snapshots and fetches never run back to back, however slow they get
(at 10,000 jobs one `squeue --json` is ~27 MB). A fetch that fails is not retried sooner either.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from trainguard.models import ClusterSnapshot, JobSnapshot, NodeSnapshot

Fetch = Callable[[], Awaitable[ClusterSnapshot]]
COST_FACTOR = 4.0


class SnapshotCache:
    def __init__(
        self,
        fetch: Fetch,
        *,
        max_age_s: float,
        clock: Callable[[], float] = time.time,
        cost_factor: float = COST_FACTOR,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if cost_factor < 1.0:
            raise ValueError("cost_factor below 1 would let fetches overlap")
        self._fetch = fetch
        self._max_age_s = max_age_s
        self._clock = clock
        self._monotonic = monotonic
        self._cost_factor = cost_factor
        self._snapshot: ClusterSnapshot | None = None
        self._jobs: dict[str, list[JobSnapshot]] = {}
        self._nodes: dict[str, NodeSnapshot] = {}
        self._inflight: asyncio.Task[ClusterSnapshot] | None = None
        self._not_before = float("-inf")
        self.cost_s = 0.0
        """Wall seconds the last fetch took (commands + parsing)."""
        self.fetches = 0

    def interval_s(self, requested: float | None = None) -> float:
        """The age up to which a snapshot is served: the requested age, stretched by the measured cost."""
        limit = self._max_age_s if requested is None else requested
        return max(limit, self.cost_s * self._cost_factor)

    async def get(self, *, max_age_s: float | None = None) -> ClusterSnapshot:
        limit = self.interval_s(max_age_s)
        snap = self._snapshot
        if snap is not None and self._clock() - snap.taken_at <= limit:
            return snap
        if self._inflight is None or self._inflight.done():
            self._inflight = asyncio.ensure_future(self._refresh())
            # Its waiters may all be gone (cancelled at worker shutdown while SSH closes): the failure is
            # theirs to see, not an "exception was never retrieved" traceback in the log.
            self._inflight.add_done_callback(_retrieve)
        # shield: one caller's cancellation must not cancel the fetch the others wait for
        return await asyncio.shield(self._inflight)

    async def _refresh(self) -> ClusterSnapshot:
        rest = self._not_before - self._monotonic()
        if rest > 0:  # the last fetch (or failure) was recent and costly: never run back to back
            await asyncio.sleep(rest)
        started = self._monotonic()
        try:
            snap = await self._fetch()
        finally:
            self.cost_s = max(0.0, self._monotonic() - started)
            self._not_before = started + self.cost_s * self._cost_factor
        self.fetches += 1
        jobs: dict[str, list[JobSnapshot]] = {}
        for job in snap.jobs:
            jobs.setdefault(job.job_id, []).append(job)
        self._jobs = jobs
        self._nodes = {n.name: n for n in snap.nodes}
        self._snapshot = snap
        return snap

    def jobs(self, job_id: str) -> list[JobSnapshot]:
        """Jobs with this id in the last snapshot (a reused id can appear with two submit times)."""
        return self._jobs.get(job_id, [])

    @property
    def nodes(self) -> dict[str, NodeSnapshot]:
        return self._nodes


def _retrieve(task: asyncio.Task[ClusterSnapshot]) -> None:
    if not task.cancelled():
        task.exception()

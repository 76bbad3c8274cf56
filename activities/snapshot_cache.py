"""One scheduler snapshot per cluster per interval, shared by every activity in the worker.

Thousands of watch activities ask for the job they follow; at most one `squeue`+`sinfo` pair runs at a
time, and callers within `max_age_s` of the last one get the cached result (submitit's batched watcher).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from trainguard.models import ClusterSnapshot, JobSnapshot, NodeSnapshot

Fetch = Callable[[], Awaitable[ClusterSnapshot]]


class SnapshotCache:
    def __init__(self, fetch: Fetch, *, max_age_s: float, clock: Callable[[], float] = time.time) -> None:
        self._fetch = fetch
        self._max_age_s = max_age_s
        self._clock = clock
        self._snapshot: ClusterSnapshot | None = None
        self._jobs: dict[str, list[JobSnapshot]] = {}
        self._nodes: dict[str, NodeSnapshot] = {}
        self._inflight: asyncio.Task[ClusterSnapshot] | None = None
        self.fetches = 0

    async def get(self, *, max_age_s: float | None = None) -> ClusterSnapshot:
        limit = self._max_age_s if max_age_s is None else max_age_s
        snap = self._snapshot
        if snap is not None and self._clock() - snap.taken_at <= limit:
            return snap
        if self._inflight is None or self._inflight.done():
            self._inflight = asyncio.ensure_future(self._refresh())
        # shield: one caller's cancellation must not cancel the fetch the others wait for
        return await asyncio.shield(self._inflight)

    async def _refresh(self) -> ClusterSnapshot:
        snap = await self._fetch()
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

"""Parse large Slurm documents in a helper process, so the worker's event loop keeps running.

A thread is not enough: `json.loads` holds the GIL for the whole document (measured: a 10,000-job
24.11 `squeue --json` of 89 MB stalled the event loop for seconds with asyncio.to_thread). In a helper
process the parent only pickles the text out and unpickles the snapshots back (~0.16 s of the ~2.2 s
at 10,000 jobs). Small documents are parsed in a thread: a process round trip would cost more.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import threading
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")
PROCESS_THRESHOLD_BYTES = 2_000_000
_pool: ProcessPoolExecutor | None = None
_lock = threading.Lock()


def _get_pool() -> ProcessPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            # spawn, not fork: the worker process runs threads (Temporal's core) that fork must not copy.
            _pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
        return _pool


def _drop_pool() -> None:
    global _pool
    with _lock:
        pool, _pool = _pool, None
    if pool is not None:
        pool.shutdown(wait=False, cancel_futures=True)


async def parse(fn: Callable[..., T], *texts: str) -> T:
    """`fn(*texts)` in a helper process when the texts are large, else in a thread.

    `fn` must be a module-level function (it is pickled by name). A helper process that died is
    replaced, and that one call is parsed in a thread instead.
    """
    if sum(len(t) for t in texts) < PROCESS_THRESHOLD_BYTES:
        return await asyncio.to_thread(fn, *texts)
    loop = asyncio.get_running_loop()
    try:
        return await loop.run_in_executor(_get_pool(), fn, *texts)
    except BrokenProcessPool:
        log.warning("the Slurm parsing process died; parsing this document in a thread")
        _drop_pool()
        return await asyncio.to_thread(fn, *texts)

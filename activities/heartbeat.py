"""Heartbeat while a short activity runs, so a killed worker's step is retried after the heartbeat
timeout (seconds) instead of its start-to-close timeout (tens of seconds)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import ParamSpec, TypeVar

from temporalio import activity


@contextlib.asynccontextmanager
async def heartbeating() -> AsyncIterator[None]:
    """No-op when the activity was scheduled without a heartbeat timeout (or is called as a plain method)."""
    timeout = activity.info().heartbeat_timeout if activity.in_activity() else None
    if not timeout:
        yield
        return
    period = max(0.2, timeout.total_seconds() / 3)

    async def beat() -> None:
        while True:
            activity.heartbeat()
            await asyncio.sleep(period)

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


P = ParamSpec("P")
R = TypeVar("R")


def heartbeats(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """The whole activity runs inside `heartbeating()` (put it under `@activity.defn`)."""

    @functools.wraps(fn)
    async def run(*args: P.args, **kwargs: P.kwargs) -> R:
        async with heartbeating():
            return await fn(*args, **kwargs)

    return run

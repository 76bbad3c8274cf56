"""The dev server's floor for a worker-loss takeover, with no TrainGuard code in the way.

bench.scale measures TrainGuard's takeover: noticing the lost worker (presence), listing and describing
the cluster's workflows, failing each lost watch by id, and the survivor starting it again. At 10,000
workloads on this 2-core machine the lost share (~5,000 watches) took 33-78 s to move (bench/README.md).
This benchmark asks how much of that the Temporal dev server itself needs, whatever the worker does:

* N workflows each run one long activity (heartbeat once, then sleep: a watch's shape) on a *holder*
  worker process; a *taker* worker process polls the same queue;
* the holder is SIGKILLed; the client then fails every activity by id at once (RespondActivityTaskFailedById,
  the takeover's only write; no listing, no describe: the ids are known here), `--concurrency` in flight;
* the server retries each after its 1 s retry interval and the taker starts it (its log of starts, with the
  attempt number, times the resumption from the kill).

What remains is the server's own work per lost watch (the fail, the retry timer, the dispatch, the
started record, the first heartbeat) and the two worker processes' polls, on the same two cores. If that
alone takes longer than the target minus the presence timeout, no takeover built on failing the activity
can meet the target on this host.

    .venv/bin/python -m bench.takeover_floor --lost 5000
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.common import RetryPolicy
from temporalio.worker import PollerBehaviorAutoscaling, Worker

from bench.common import Dist, fmt, free_port, proc_cpu_seconds, table
from trainguard.localstack.temporal import LocalTemporal

QUEUE = "takeover-floor"
ACTIVITY_ID = "hold"
BASE = Path("/tmp/tg-bench/takeover-floor")


@activity.defn(name="floor_hold")
async def floor_hold() -> None:
    """A watch's shape: record the start, heartbeat once (as a watch does when it starts), then wait."""
    info = activity.info()
    log = Path(os.environ["FLOOR_STARTS"])
    with log.open("a") as out:
        out.write(f"{time.time():.3f} {info.workflow_id} {info.attempt}\n")
    activity.heartbeat()
    while True:
        await asyncio.sleep(240)
        activity.heartbeat()


@workflow.defn(name="FloorHold", sandboxed=False)
class FloorHold:
    @workflow.run
    async def run(self) -> None:
        await workflow.execute_activity(
            "floor_hold",
            activity_id=ACTIVITY_ID,
            start_to_close_timeout=timedelta(hours=4),
            heartbeat_timeout=timedelta(seconds=300),
            retry_policy=RetryPolicy(
                initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=10)
            ),
        )


async def serve(address: str, slots: int) -> None:
    """One worker process: the workflow and the activity, with autoscaled activity pollers (as TrainGuard's
    cluster worker has)."""
    client = await Client.connect(address)
    worker = Worker(
        client,
        task_queue=QUEUE,
        workflows=[FloorHold],
        activities=[floor_hold],
        max_concurrent_activities=slots,
        activity_task_poller_behavior=PollerBehaviorAutoscaling(),
    )
    await worker.run()


def spawn(address: str, slots: int, starts: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "FLOOR_STARTS": str(starts)}
    argv = [sys.executable, "-m", "bench.takeover_floor", "--serve", address, "--slots", str(slots)]
    return subprocess.Popen(argv, env=env, start_new_session=True)


def read_starts(path: Path) -> list[tuple[float, str, int]]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        ts, wid, attempt = line.split()
        rows.append((float(ts), wid, int(attempt)))
    return rows


async def wait_for(what: str, cond: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout:.0f} s")
        await asyncio.sleep(0.5)


async def bounded(n: int, limit: int, make: Callable[[int], Awaitable[object]]) -> list[BaseException | None]:
    sem = asyncio.Semaphore(limit)
    errors: list[BaseException | None] = []

    async def one(i: int) -> None:
        async with sem:
            try:
                await make(i)
                errors.append(None)
            except Exception as err:  # counted, not fatal: the figure says how many
                errors.append(err)

    await asyncio.gather(*(one(i) for i in range(n)))
    return errors


@dataclass
class Result:
    lost: int
    concurrency: int
    started_s: float
    fails_s: float
    fail_errors: int
    resumed: Dist
    not_resumed: int
    server_cpu: float

    def render(self) -> str:
        rows = [
            ["lost watches (workflows whose activity the holder ran)", f"{self.lost:,}"],
            ["start-up: every activity running after", f"{self.started_s:.1f} s"],
            [f"fails by id ({self.concurrency} in flight), all answered after", f"{self.fails_s:.1f} s"],
            ["fail rate", f"{self.lost / self.fails_s:.0f}/s" if self.fails_s else "-"],
            ["fails refused", str(self.fail_errors)],
            [
                "resumed on the taker after the kill p50 / p95 / max",
                f"{fmt(self.resumed.p50)} / {fmt(self.resumed.p95)} / {fmt(self.resumed.max)} s",
            ],
            ["not resumed within the wait", str(self.not_resumed)],
            ["dev server CPU from the kill to the last fail answered", f"{self.server_cpu:.2f} cores"],
        ]
        return table(["", "measured"], rows)


async def run(args: argparse.Namespace) -> Result:
    base = Path(args.base_dir)
    base.mkdir(parents=True, exist_ok=True)
    holder_log, taker_log = base / "holder.log", base / "taker.log"
    for log in (holder_log, taker_log):
        log.unlink(missing_ok=True)
    server = LocalTemporal(
        base,
        port=free_port(),
        ui_port=None,
        dynamic_config={"history.cacheMaxSize": str(2 * args.lost + 1000)},
    )
    server.start()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        client = await Client.connect(server.address)
        holder = spawn(server.address, args.lost + 100, holder_log)
        procs.append(holder)
        t0 = time.time()
        ids = [f"floor-{i}" for i in range(args.lost)]
        await bounded(
            args.lost,
            64,
            lambda i: client.start_workflow(FloorHold.run, id=ids[i], task_queue=QUEUE),
        )
        await wait_for(
            "every activity started", lambda: len(read_starts(holder_log)) >= args.lost, args.timeout
        )
        started_s = time.time() - t0
        taker = spawn(server.address, args.lost + 100, taker_log)
        procs.append(taker)
        await asyncio.sleep(args.settle)  # the taker's pollers are open before the kill, as a survivor's are
        pid = server.pid()
        server_cpu0 = proc_cpu_seconds(pid) if pid else None
        os.killpg(holder.pid, signal.SIGKILL)
        killed = time.time()

        async def fail(i: int) -> None:
            handle = client.get_async_activity_handle(
                workflow_id=ids[i], run_id=None, activity_id=ACTIVITY_ID
            )
            await handle.fail(RuntimeError("holder lost (takeover floor)"))

        errors = await bounded(args.lost, args.concurrency, fail)
        fails_s = time.time() - killed
        server_cpu1 = proc_cpu_seconds(pid) if pid else None

        def resumed() -> dict[str, float]:
            return {w: ts - killed for ts, w, attempt in read_starts(taker_log) if attempt >= 2}

        with contextlib.suppress(TimeoutError):
            await wait_for("every activity resumed", lambda: len(resumed()) >= args.lost, args.timeout)
        done = resumed()
        cpu = (server_cpu1 - server_cpu0) / fails_s if server_cpu0 is not None and server_cpu1 else 0.0
        return Result(
            lost=args.lost,
            concurrency=args.concurrency,
            started_s=started_s,
            fails_s=fails_s,
            fail_errors=sum(1 for e in errors if e is not None),
            resumed=Dist.of(list(done.values())),
            not_resumed=args.lost - len(done),
            server_cpu=cpu,
        )
    finally:
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        server.stop()


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0] if __doc__ else None)
    parser.add_argument("--lost", type=int, default=5000, help="activities on the worker that is killed")
    parser.add_argument("--concurrency", type=int, default=64, help="fails in flight (TrainGuard uses 64)")
    parser.add_argument("--settle", type=float, default=5.0, help="seconds the taker polls before the kill")
    parser.add_argument(
        "--timeout", type=float, default=900.0, help="the wait for start-up, and for resumption"
    )
    parser.add_argument(
        "--base-dir", default=str(BASE), help="the dev server's files and the workers' start logs"
    )
    parser.add_argument("--serve", metavar="ADDRESS", help=argparse.SUPPRESS)
    parser.add_argument("--slots", type=int, default=1000, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.serve:
        asyncio.run(serve(args.serve, args.slots))
        return 0
    result = asyncio.run(run(args))
    print(result.render())
    return 0 if result.not_resumed == 0 and result.fail_errors == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())

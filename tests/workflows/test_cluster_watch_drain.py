"""ClusterWatch stores every audit event before it continues as new (issue 15 §3): events that handlers
enqueue while its last flush runs (a malformed comment, a stuck hold's release) are flushed again first,
never dropped with the old run. A chain of signals keeps one event in flight at every moment, across a
real continue-as-new (a dev server that suggests it early); each event sent is recorded exactly once."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field

from temporalio import activity
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer, Worker

from trainguard import contracts as c
from trainguard.localstack.temporal import LocalTemporal
from trainguard.models import Actor, AuditEventIn, EventType, Mode
from trainguard.policy import PolicyConfig
from workflows.cluster_watch import ClusterWatchWorkflow

CHAIN = 30  # events in the chain: their flushes alone pass the 60 events that suggest continue-as-new


@dataclass
class Chain:
    client: Client
    workflow_id: str
    sent: list[str] = field(default_factory=list)
    recorded: list[str] = field(default_factory=list)
    chaining: bool = True
    slices: int = 0

    async def send(self) -> None:
        event_id = f"chain/{len(self.sent)}"
        self.sent.append(event_id)
        event = AuditEventIn(event_id=event_id, event_type=EventType.WATCHDOG_FIRED, actor=Actor.WATCHDOG)
        await self.client.get_workflow_handle(self.workflow_id).signal(
            ClusterWatchWorkflow.record_event, event
        )

    @activity.defn(name=c.DISCOVER_JOBS)
    async def discover_jobs(self, inp: c.DiscoverInput) -> c.DiscoverResult:
        self.slices += 1  # each slice ends at once: the history grows towards continue-as-new
        return c.DiscoverResult()

    @activity.defn(name=c.RECORD_EVENTS)
    async def record_events(self, inp: c.RecordEventsInput) -> int:
        if self.chaining and len(self.sent) < CHAIN:
            await self.send()  # the next event lands while this flush runs
        self.recorded += [e.event_id for e in inp.events]
        return len(inp.events)


async def test_events_signalled_during_the_last_flush_survive_continue_as_new(
    small_history_server: LocalTemporal,
) -> None:
    client = await Client.connect(small_history_server.address, data_converter=pydantic_data_converter)
    queue = f"q-{uuid.uuid4()}"
    workflow_id = f"cw-{uuid.uuid4()}"
    chain = Chain(client, workflow_id)
    inp = c.ClusterWatchInput(
        cluster="lab",
        cluster_queue=queue,
        mode=Mode.OBSERVE,
        recovery=c.RecoveryConfig(
            cluster_queue=queue, control_queue=queue, policy=PolicyConfig(), search_attributes=False
        ),
        discover_slice_s=1.0,
    )
    async with Worker(
        client,
        task_queue=queue,
        workflows=[ClusterWatchWorkflow],
        activities=[chain.discover_jobs, chain.record_events],
    ):
        handle = await client.start_workflow(ClusterWatchWorkflow.run, inp, id=workflow_id, task_queue=queue)
        first_run = handle.result_run_id
        await chain.send()
        for _ in range(1200):
            if (await client.get_workflow_handle(workflow_id).describe()).run_id != first_run:
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError(f"no continue-as-new after {chain.slices} slices")
        chain.chaining = False
        for _ in range(200):
            if set(chain.recorded) == set(chain.sent):
                break
            await asyncio.sleep(0.05)
        old_history = await client.get_workflow_handle(workflow_id, run_id=first_run).fetch_history()
        await client.get_workflow_handle(workflow_id).signal(ClusterWatchWorkflow.stop)
        await client.get_workflow_handle(workflow_id).result()
    assert sorted(chain.recorded) == sorted(chain.sent), set(chain.sent) ^ set(chain.recorded)
    assert len(chain.sent) > 10, chain.sent
    await Replayer(workflows=[ClusterWatchWorkflow], data_converter=client.data_converter).replay_workflow(
        old_history
    )

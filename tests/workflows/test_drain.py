"""Audit events enqueued by a handler while the final flush runs are stored before the workflow completes
(issue 15 §3): the run loop waits for all handlers, flushes, and flushes again if anything arrived."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field

from temporalio import activity
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer, Worker

from tests.workflows.fakes import FakeActivities, job, obs
from tests.workflows.test_job_recovery import make_input
from trainguard import contracts as c
from trainguard.models import EventType, Mode, ModeChange, ObservationKind
from workflows.job_recovery import JobRecoveryWorkflow


@dataclass
class SlowFlushes(FakeActivities):
    """record_events holds each flush that carries COMPLETED or MODE_CHANGED until the test releases it."""

    entered: asyncio.Queue[EventType] = field(default_factory=asyncio.Queue)
    release: asyncio.Queue[None] = field(default_factory=asyncio.Queue)

    @activity.defn(name=c.RECORD_EVENTS)
    async def record_events(self, inp: c.RecordEventsInput) -> int:
        held = [
            e.event_type for e in inp.events if e.event_type in (EventType.COMPLETED, EventType.MODE_CHANGED)
        ]
        if held:
            await self.entered.put(held[-1])
            await self.release.get()
        return await super().record_events(inp)


async def test_a_signal_during_the_final_flush_is_audited_before_completion(env: WorkflowEnvironment) -> None:
    """The window: the job completed (flush 1 in flight) and a first signal lands, so the terminal branch
    has one more flush to run (flush 2); a second signal landing during flush 2 used to be dropped."""
    queue = f"q-{uuid.uuid4()}"
    fakes = SlowFlushes(script=[obs(ObservationKind.COMPLETED, job("COMPLETED"))])
    inp = make_input(queue, mode=Mode.ACTION)
    async with Worker(env.client, task_queue=queue, workflows=[JobRecoveryWorkflow], activities=fakes.all()):
        handle = await env.client.start_workflow(
            JobRecoveryWorkflow.run, inp, id=f"wf-{uuid.uuid4()}", task_queue=queue
        )
        assert await asyncio.wait_for(fakes.entered.get(), 30) == EventType.COMPLETED
        await handle.signal(JobRecoveryWorkflow.set_cluster_mode, ModeChange(mode=Mode.OBSERVE, who="first"))
        await asyncio.sleep(0.5)  # the signal's workflow task runs while flush 1 is in flight
        await fakes.release.put(None)
        assert await asyncio.wait_for(fakes.entered.get(), 30) == EventType.MODE_CHANGED  # flush 2
        await handle.signal(JobRecoveryWorkflow.set_cluster_mode, ModeChange(mode=Mode.ACTION, who="second"))
        await asyncio.sleep(0.5)
        await fakes.release.put(None)
        await fakes.release.put(None)  # a third flush, if the workflow runs one, is not held back
        await fakes.release.put(None)
        await handle.result()
        history = await handle.fetch_history()
    assert fakes.events.count(EventType.MODE_CHANGED) == 2, fakes.events
    assert fakes.events[-3:] == [EventType.COMPLETED, EventType.MODE_CHANGED, EventType.MODE_CHANGED]
    await Replayer(workflows=[JobRecoveryWorkflow], data_converter=env.client.data_converter).replay_workflow(
        history
    )

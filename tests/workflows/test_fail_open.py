"""Fail-open on every path (issue 15 §3), workflow side: a job TrainGuard holds is released unchanged when
a step fails after Slurm applied it, when the audit store is down while the job is held, and when the
workload is paused mid-recovery; a paused workload still ends when Slurm forgets its job. Each new path
is behind its own `workflow.patched` id, and each history replays."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from temporalio import activity
from temporalio.client import WorkflowHistory
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer, Worker

from tests.workflows.fakes import NODE_FAIL, XID, FakeActivities, job, obs
from tests.workflows.test_job_recovery import make_input
from trainguard import contracts as c
from trainguard.models import (
    ActionResult,
    EventType,
    FindingSource,
    Mode,
    ObservationKind,
    PauseRequest,
    WorkloadState,
    WorkloadStatus,
)
from workflows.job_recovery import REQUEUE_HELD_REASON, JobRecoveryWorkflow

K = ObservationKind


async def replays(env: WorkflowEnvironment, history: WorkflowHistory) -> None:
    await Replayer(workflows=[JobRecoveryWorkflow], data_converter=env.client.data_converter).replay_workflow(
        history
    )


@dataclass
class Scripted(FakeActivities):
    requeue_fails: bool = False
    advice_store_down: bool = False  # record_advice of the requeue decision never succeeds
    in_requeue: asyncio.Event = field(default_factory=asyncio.Event)
    requeue_gate: asyncio.Event | None = None
    messages: list[str] = field(default_factory=list)

    @activity.defn(name=c.REQUEUE_HOLD)
    async def requeue_hold(self, inp: c.JobActionInput) -> ActionResult:
        self.in_requeue.set()
        if self.requeue_gate is not None:
            await self.requeue_gate.wait()
        result = await super().requeue_hold(inp)
        if self.requeue_fails:  # Slurm applied it; the step still reports failure
            raise ApplicationError("slurmctld stopped answering after the requeue", non_retryable=True)
        return result

    @activity.defn(name=c.RECORD_ADVICE)
    async def record_advice(self, inp: c.RecordAdviceInput) -> bool:
        if self.advice_store_down and inp.advice.action.value == "requeue":
            self.calls.append("advice:store-down")
            raise ApplicationError("audit store unreachable")
        return await super().record_advice(inp)

    @activity.defn(name=c.RECORD_EVENTS)
    async def record_events(self, inp: c.RecordEventsInput) -> int:
        self.messages += [f"{e.event_type.value}/{e.action}: {e.message}" for e in inp.events]
        return await super().record_events(inp)


async def start(env: WorkflowEnvironment, fakes: FakeActivities, inp: c.JobRecoveryInput) -> object:
    return await env.client.start_workflow(
        JobRecoveryWorkflow.run, inp, id=f"wf-{uuid.uuid4()}", task_queue=inp.config.cluster_queue
    )


async def run_to_end(
    env: WorkflowEnvironment, fakes: FakeActivities, inp: c.JobRecoveryInput
) -> WorkflowHistory:
    """Run one workload to its end on a worker of its own queue; its history, for the replay check."""
    queue = inp.config.cluster_queue
    async with Worker(env.client, task_queue=queue, workflows=[JobRecoveryWorkflow], activities=fakes.all()):
        handle = await start(env, fakes, inp)
        await handle.result()  # type: ignore[attr-defined]
        return await handle.fetch_history()  # type: ignore[attr-defined]


async def test_requeue_hold_that_failed_after_slurm_applied_it_is_released(env: WorkflowEnvironment) -> None:
    queue = f"q-{uuid.uuid4()}"
    fakes = Scripted(
        script=[obs(K.FAILURE, job("FAILED"), XID), obs(K.GONE, job("PENDING", restarts=1))],
        requeue_fails=True,
    )
    history = await run_to_end(env, fakes, make_input(queue, mode=Mode.ACTION))
    assert fakes.scheduler_calls == ["requeue_hold", "release"], fakes.scheduler_calls
    # only a requeue-hold's own Reason is lifted: a user's or an admin's hold stays
    assert fakes.action_inputs["release"][0].our_hold == REQUEUE_HELD_REASON
    assert "exclude" not in fakes.calls
    assert EventType.ACTION_FAILED in fakes.events
    await replays(env, history)


async def test_the_requeue_that_failed_after_taking_effect_is_not_recovered_a_second_time(
    env: WorkflowEnvironment,
) -> None:
    """Seen in CI under load: the released requeue's attempt was first seen PENDING (restarts=1) with
    Slurm's exit of the old attempt, taken for a failure Slurm had requeued, contained (held again) and
    recovered a second time, the second hold left in place. The requeue was ours: its attempt is watched."""
    queue = f"q-{uuid.uuid4()}"
    exited = XID.model_copy(
        update={"source": FindingSource.SCHEDULER, "pattern_id": "slurm_job_failed", "nodes": ()}
    )
    fakes = Scripted(
        script=[
            obs(K.FAILURE, job("FAILED"), XID),
            obs(K.FAILURE, job("PENDING", restarts=1), exited),
            obs(K.STATE_CHANGE, job("RUNNING", restarts=1)),
            obs(K.PROGRESS, job("RUNNING", restarts=1), iteration=15),
            obs(K.COMPLETED, job("COMPLETED", restarts=1)),
        ],
        requeue_fails=True,
    )
    history = await run_to_end(env, fakes, make_input(queue, mode=Mode.ACTION))
    assert fakes.scheduler_calls == ["requeue_hold", "release"], fakes.scheduler_calls
    assert [a.advice.action.value for a in fakes.advice] == ["requeue"], fakes.advice
    assert EventType.ALLOCATION_RESTARTED in fakes.events and EventType.COMPLETED in fakes.events
    await replays(env, history)


async def test_audit_store_down_while_held_releases_within_the_decision_budget(
    env: WorkflowEnvironment,
) -> None:
    """Containment hold placed, then the store refuses the decision's advice: the job is released
    unchanged once the decision budget is spent, and none of the advice's steps run."""
    queue = f"q-{uuid.uuid4()}"
    fakes = Scripted(
        script=[
            obs(K.FAILURE, job("PENDING", restarts=1), NODE_FAIL),
            obs(K.GONE, job("PENDING", restarts=1)),
        ],
        advice_store_down=True,
    )
    inp = make_input(queue, mode=Mode.ACTION, decision_timeout_s=5.0)
    async with Worker(env.client, task_queue=queue, workflows=[JobRecoveryWorkflow], activities=fakes.all()):
        handle = await start(env, fakes, inp)
        # the advice write is retried for ever (the store comes back some day): the release must not wait
        # the watchdog's audit row is flushed right after its release step: wait for both
        await _wait_for(
            lambda: "release" in fakes.calls and any("did not take the advice" in m for m in fakes.messages),
            "the watchdog release and its audit row",
        )
        history = await handle.fetch_history()  # type: ignore[attr-defined]
        await handle.terminate()  # type: ignore[attr-defined]
    assert fakes.scheduler_calls == ["requeue_hold", "release"], fakes.scheduler_calls
    assert fakes.action_inputs["release"][0].advice_id.endswith("/watchdog")
    assert fakes.action_inputs["release"][0].our_hold == "job_requeued_in_held_state"
    assert any("audit store did not take the advice" in m for m in fakes.messages), fakes.messages
    fired = [e for e in history.events if e.HasField("timer_started_event_attributes")]
    budget = fired[-1].timer_started_event_attributes.start_to_fire_timeout.ToTimedelta().total_seconds()
    assert 0 < budget <= 5.0, budget
    await replays(env, history)


async def test_pause_mid_recovery_stops_the_steps_and_releases_our_hold(env: WorkflowEnvironment) -> None:
    queue = f"q-{uuid.uuid4()}"
    fakes = Scripted(
        script=[obs(K.FAILURE, job("FAILED"), XID), obs(K.GONE, job("PENDING", restarts=1))],
        requeue_gate=asyncio.Event(),
        slurm_job=None,
    )
    inp = make_input(queue, mode=Mode.ACTION)
    async with Worker(env.client, task_queue=queue, workflows=[JobRecoveryWorkflow], activities=fakes.all()):
        handle = await start(env, fakes, inp)
        await asyncio.wait_for(fakes.in_requeue.wait(), 30)
        await handle.signal(JobRecoveryWorkflow.set_paused, PauseRequest(paused=True, who="op"))  # type: ignore[attr-defined]
        # the pause lands while requeue_hold is in flight (a fixed sleep lost that race under load)
        await _wait_for_status(handle, lambda s: s.paused, "the pause handled")
        assert fakes.requeue_gate is not None
        fakes.requeue_gate.set()
        status = await handle.result()  # type: ignore[attr-defined]
        history = await handle.fetch_history()  # type: ignore[attr-defined]
    assert fakes.scheduler_calls == ["requeue_hold", "release"], fakes.scheduler_calls
    assert fakes.action_inputs["release"][0].our_hold == "job_requeued_in_held_state"
    assert any("monitoring paused mid-recovery" in m for m in fakes.messages), fakes.messages
    # paused afterwards, and its job gone from Slurm: the workload still ends
    assert status.state == WorkloadState.GONE and status.paused, status
    await replays(env, history)


async def test_a_paused_workload_ends_when_its_job_is_gone(env: WorkflowEnvironment) -> None:
    queue = f"q-{uuid.uuid4()}"
    fakes = Scripted(script=[], slurm_job=None)
    inp = make_input(queue, mode=Mode.OBSERVE)
    async with Worker(env.client, task_queue=queue, workflows=[JobRecoveryWorkflow], activities=fakes.all()):
        # paused from its first task (signal-with-start), and the job leaves Slurm: nothing watches it
        handle = await env.client.start_workflow(
            JobRecoveryWorkflow.run,
            inp,
            id=f"wf-{uuid.uuid4()}",
            task_queue=queue,
            start_signal="set_paused",
            start_signal_args=[PauseRequest(paused=True, who="op")],
        )
        status = await handle.result()  # time skips to the paused check (one watch slice)
        history = await handle.fetch_history()
    assert status.state == WorkloadState.GONE and status.paused, status
    assert fakes.scheduler_calls == []
    assert any("paused monitoring ends" in m for m in fakes.messages), fakes.messages
    await replays(env, history)


async def _wait_for(predicate: object, what: str) -> None:
    for _ in range(300):
        if predicate():  # type: ignore[operator]
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


async def _wait_for_status(handle: object, predicate: Callable[[WorkloadStatus], bool], what: str) -> None:
    for _ in range(300):
        if predicate(await handle.query(JobRecoveryWorkflow.status)):  # type: ignore[attr-defined]
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")

"""Settings reaching a running JobRecovery (signal `apply_settings`, sent by ClusterWatch's fan-out) and the
watchdog.* settings, on the time-skipping server with scripted activities."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field

from temporalio import activity
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer, Worker

from tests.workflows.fakes import XID, FakeActivities, job, obs
from tests.workflows.test_job_recovery import make_input
from trainguard import contracts as c
from trainguard.models import ActionResult, EventType, Mode, ObservationKind, WorkloadState
from workflows.job_recovery import JobRecoveryWorkflow

K = ObservationKind


@dataclass
class GatedActivities(FakeActivities):
    """The first watch blocks until `gate` is set, so a test can change settings mid-watch."""

    gate: asyncio.Event = field(default_factory=asyncio.Event)
    messages: list[str] = field(default_factory=list)

    @activity.defn(name=c.WATCH_JOB)
    async def watch_job(self, inp: c.WatchInput) -> c.WatchResult:
        if len(self.watch_inputs) == 0:
            await self.gate.wait()
        return await super().watch_job(inp)

    @activity.defn(name=c.RECORD_EVENTS)
    async def record_events(self, inp: c.RecordEventsInput) -> int:
        self.messages += [f"{e.event_type.value}: {e.message}" for e in inp.events]
        return await super().record_events(inp)


async def wait_for(predicate: object, what: str) -> None:
    for _ in range(100):
        if predicate():  # type: ignore[operator]
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


async def test_rollback_to_observe_reaches_a_running_workload(env: WorkflowEnvironment) -> None:
    """The runbook's rollback, workflow side: a workload started in action mode gets the cluster's new
    mode while it watches; the fault after it is advised only, and the change is audited with its source."""
    queue = f"q-{uuid.uuid4()}"
    fakes = GatedActivities(script=[obs(K.FAILURE, job("FAILED"), XID), obs(K.GONE, job("FAILED"))])
    inp = make_input(queue, mode=Mode.ACTION)
    async with Worker(env.client, task_queue=queue, workflows=[JobRecoveryWorkflow], activities=fakes.all()):
        handle = await env.client.start_workflow(
            JobRecoveryWorkflow.run, inp, id=f"wf-{uuid.uuid4()}", task_queue=queue
        )
        await wait_for(lambda: EventType.WORKLOAD_DISCOVERED in fakes.events, "discovery")
        update = c.WorkloadSettings(
            config=inp.config, cluster_mode=Mode.OBSERVE, source="worker restart", who="ops@host"
        )
        await handle.signal(JobRecoveryWorkflow.apply_settings, update)
        await wait_for(lambda: EventType.SETTINGS_CHANGED in fakes.events, "settings_changed")
        assert (await handle.query(JobRecoveryWorkflow.status)).mode == Mode.OBSERVE
        fakes.gate.set()
        status = await handle.result()
        history = await handle.fetch_history()
    assert fakes.scheduler_calls == []
    assert fakes.advice[0].advice.execute is False and fakes.advice[0].advice.mode == Mode.OBSERVE
    changed = [m for m in fakes.messages if m.startswith("settings_changed")]
    assert changed == [
        "settings_changed: settings changed by worker restart: cluster_mode action → observe; "
        "effective mode action → observe"
    ], changed
    assert status.state == WorkloadState.GONE
    # the new path replays (and its patch marker is in the history)
    await Replayer(workflows=[JobRecoveryWorkflow], data_converter=env.client.data_converter).replay_workflow(
        history
    )
    assert "EVENT_TYPE_MARKER_RECORDED" in history.to_json()  # the patch marker


async def test_withdrawn_acknowledgement_and_new_policy_reach_a_running_workload(
    env: WorkflowEnvironment,
) -> None:
    queue = f"q-{uuid.uuid4()}"
    fakes = GatedActivities(script=[obs(K.FAILURE, job("FAILED"), XID), obs(K.GONE, job("FAILED"))])
    inp = make_input(queue, mode=Mode.ACTION)
    new_policy = inp.config.policy.model_copy(update={"retry_budget": 2})
    new_config = inp.config.model_copy(update={"acknowledged": False, "policy": new_policy})
    async with Worker(env.client, task_queue=queue, workflows=[JobRecoveryWorkflow], activities=fakes.all()):
        handle = await env.client.start_workflow(
            JobRecoveryWorkflow.run, inp, id=f"wf-{uuid.uuid4()}", task_queue=queue
        )
        await wait_for(lambda: EventType.WORKLOAD_DISCOVERED in fakes.events, "discovery")
        await handle.signal(
            JobRecoveryWorkflow.apply_settings, c.WorkloadSettings(config=new_config, source="config reload")
        )
        await wait_for(lambda: EventType.SETTINGS_CHANGED in fakes.events, "settings_changed")
        fakes.gate.set()
        await handle.result()
    assert fakes.scheduler_calls == []  # action mode, but no longer acknowledged
    assert fakes.advice[0].advice.execute is False and fakes.advice[0].advice.mode == Mode.ACTION
    changed = next(m for m in fakes.messages if m.startswith("settings_changed"))
    assert "config reload" in changed
    assert "acknowledged True → False" in changed and "policy.retry_budget 5 → 2" in changed, changed


async def test_same_settings_again_are_not_a_change(env: WorkflowEnvironment) -> None:
    queue = f"q-{uuid.uuid4()}"
    fakes = GatedActivities(script=[obs(K.GONE, job("FAILED"))])
    inp = make_input(queue, mode=Mode.ACTION)
    async with Worker(env.client, task_queue=queue, workflows=[JobRecoveryWorkflow], activities=fakes.all()):
        handle = await env.client.start_workflow(
            JobRecoveryWorkflow.run, inp, id=f"wf-{uuid.uuid4()}", task_queue=queue
        )
        await wait_for(lambda: EventType.WORKLOAD_DISCOVERED in fakes.events, "discovery")
        same = c.WorkloadSettings(config=inp.config, cluster_mode=Mode.ACTION, source="worker restart")
        await handle.signal(JobRecoveryWorkflow.apply_settings, same)
        await asyncio.sleep(0.5)
        fakes.gate.set()
        await handle.result()
    assert EventType.SETTINGS_CHANGED not in fakes.events


async def test_observing_watchdog_means_no_containment_hold(env: WorkflowEnvironment) -> None:
    """watchdog.mode=observe (or unacknowledged): nothing could release a hold, so none is placed."""
    queue = f"q-{uuid.uuid4()}"
    fakes = FakeActivities(
        script=[obs(K.FAILURE, job("PENDING", restarts=1), XID), obs(K.GONE, job("RUNNING", restarts=1))],
        attribute_blocks=True,
    )
    inp = make_input(queue, mode=Mode.ACTION, decision_timeout_s=3.0)
    inp = inp.model_copy(update={"config": inp.config.model_copy(update={"watchdog_release": False})})
    async with Worker(env.client, task_queue=queue, workflows=[JobRecoveryWorkflow], activities=fakes.all()):
        handle = await env.client.start_workflow(
            JobRecoveryWorkflow.run, inp, id=f"wf-{uuid.uuid4()}", task_queue=queue
        )
        await handle.result()
    assert fakes.scheduler_calls == []
    assert EventType.WATCHDOG_FIRED in fakes.events  # the decision was still time-boxed


async def test_watchdog_environment_pattern_scopes_the_watchdog(env: WorkflowEnvironment) -> None:
    """A workload outside watchdog.environment_pattern is neither time-boxed nor contained."""
    queue = f"q-{uuid.uuid4()}"
    fakes = FakeActivities(
        script=[obs(K.FAILURE, job("PENDING", restarts=1), XID), obs(K.GONE, job("RUNNING", restarts=1))]
    )
    inp = make_input(queue, mode=Mode.ACTION, decision_timeout_s=3.0)
    inp = inp.model_copy(
        update={"config": inp.config.model_copy(update={"watchdog_environment_pattern": "prod-.*"})}
    )
    async with Worker(env.client, task_queue=queue, workflows=[JobRecoveryWorkflow], activities=fakes.all()):
        handle = await env.client.start_workflow(
            JobRecoveryWorkflow.run, inp, id=f"wf-{uuid.uuid4()}", task_queue=queue
        )
        await handle.result()
    assert "advice:hold" not in fakes.calls
    # no containment hold: the requeue advice requeues itself (requeue_hold, exclude, release)
    assert fakes.scheduler_calls == ["requeue_hold", "exclude", "release"]


@dataclass
class SlowRequeue(GatedActivities):
    """requeue_hold holds until the test switches the workload's mode, then completes (job held)."""

    in_requeue: asyncio.Event = field(default_factory=asyncio.Event)
    requeue_gate: asyncio.Event = field(default_factory=asyncio.Event)

    @activity.defn(name=c.REQUEUE_HOLD)
    async def requeue_hold(self, inp: c.JobActionInput) -> ActionResult:
        self.in_requeue.set()
        await self.requeue_gate.wait()
        return await super().requeue_hold(inp)


async def test_switch_to_observe_mid_recovery_stops_the_steps_and_releases_our_hold(
    env: WorkflowEnvironment,
) -> None:
    """The rollback lands between requeue-hold and the exclusion: no exclusion, the job TrainGuard holds
    is released unchanged, and the stop is audited."""
    queue = f"q-{uuid.uuid4()}"
    fakes = SlowRequeue(script=[obs(K.FAILURE, job("FAILED"), XID), obs(K.GONE, job("PENDING", restarts=1))])
    fakes.gate.set()  # the watch reports the failure at once
    inp = make_input(queue, mode=Mode.ACTION)
    async with Worker(env.client, task_queue=queue, workflows=[JobRecoveryWorkflow], activities=fakes.all()):
        handle = await env.client.start_workflow(
            JobRecoveryWorkflow.run, inp, id=f"wf-{uuid.uuid4()}", task_queue=queue
        )
        await asyncio.wait_for(fakes.in_requeue.wait(), 30)
        update = c.WorkloadSettings(config=inp.config, cluster_mode=Mode.OBSERVE, source="config reload")
        await handle.signal(JobRecoveryWorkflow.apply_settings, update)
        await asyncio.sleep(0.5)  # the signal is delivered while requeue_hold is in flight
        fakes.requeue_gate.set()
        await handle.result()
        history = await handle.fetch_history()
    assert fakes.scheduler_calls == ["requeue_hold", "release"], fakes.scheduler_calls
    assert any("recovery_stopped" in m or "mid-recovery" in m for m in fakes.messages), fakes.messages
    assert EventType.SETTINGS_CHANGED in fakes.events
    await Replayer(workflows=[JobRecoveryWorkflow], data_converter=env.client.data_converter).replay_workflow(
        history
    )

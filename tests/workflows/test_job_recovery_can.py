"""JobRecovery continues as new in the middle of a recovery, with signals and updates arriving while it
drains (issue 15 §5), on a real dev server that suggests continue-as-new after a few dozen events.

The run that held, excluded and released the job is the one the server asks to continue as new: its
last flushes are held back while an operator pauses, changes the cluster mode, reloads settings and
overrides the mode (an update). The next run must start with all of it: no audit event lost or stored
twice, the recovery not run again, the new attempt's allocation and resumption recorded once.

Found here: a settings reload signalled while the run drained was dropped at continue-as-new (patch
`settings-applied-before-continue-as-new`), and a paused workload never continued as new at all
(`paused-workload-continues-as-new`).
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from temporalio import activity
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle, WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer, Worker

from tests.workflows.fakes import NODE_FAIL, FakeActivities, job, obs
from tests.workflows.test_job_recovery import make_input
from trainguard import contracts as c
from trainguard.localstack.temporal import LocalTemporal
from trainguard.models import (
    AuditEventIn,
    EventType,
    Mode,
    ModeChange,
    ObservationKind,
    PauseRequest,
    WorkloadStatus,
)
from workflows.job_recovery import JobRecoveryWorkflow

K = ObservationKind
HISTORIES = os.path.join(os.path.dirname(__file__), "histories")


@dataclass
class GatedFlushes(FakeActivities):
    """Holds the flush that stores the recovery's last step (the run's last flush before the server's
    suggestion is acted on), and the flush after it (the drain's), until the test lets each go."""

    stored: list[AuditEventIn] = field(default_factory=list)
    entered: asyncio.Queue[str] = field(default_factory=asyncio.Queue)
    release: asyncio.Queue[None] = field(default_factory=asyncio.Queue)
    gates: list[str] = field(default_factory=list)

    @activity.defn(name=c.RECORD_EVENTS)
    async def record_events(self, inp: c.RecordEventsInput) -> int:
        gate = ""
        if any(e.action == "recovery_requested" for e in inp.events):
            gate = "last-step"
        elif self.gates == ["last-step"]:
            gate = "drain"
        if gate:
            self.gates.append(gate)
            await self.entered.put(gate)
            await self.release.get()
        self.stored += inp.events
        return await super().record_events(inp)


async def _start(
    client: Client, inp: c.JobRecoveryInput, queue: str
) -> tuple[
    WorkflowHandle[JobRecoveryWorkflow, object], str, WorkflowHandle[JobRecoveryWorkflow, WorkloadStatus]
]:
    """The first run's handle and id, and a handle that follows continue-as-new to the latest run."""
    handle: WorkflowHandle[JobRecoveryWorkflow, object] = await client.start_workflow(
        JobRecoveryWorkflow.run, inp, id=f"wf-{uuid.uuid4()}", task_queue=queue
    )
    first_run = handle.result_run_id
    assert first_run is not None
    return handle, first_run, client.get_workflow_handle_for(JobRecoveryWorkflow.run, handle.id)


async def _until_status(
    handle: WorkflowHandle[JobRecoveryWorkflow, object],
    predicate: Callable[[WorkloadStatus], bool],
    what: str,
) -> None:
    for _ in range(600):
        if predicate(await handle.query(JobRecoveryWorkflow.status)):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


async def _run_ids(client: Client, workflow_id: str, first: str) -> list[str]:
    """The chain of runs from the first one, following continue-as-new."""
    runs = [first]
    while True:
        desc = await client.get_workflow_handle(workflow_id, run_id=runs[-1]).describe()
        if desc.status != WorkflowExecutionStatus.CONTINUED_AS_NEW:
            return runs
        history = await client.get_workflow_handle(workflow_id, run_id=runs[-1]).fetch_history()
        last = history.events[-1].workflow_execution_continued_as_new_event_attributes
        runs.append(last.new_execution_run_id)


async def test_continue_as_new_mid_recovery_keeps_every_signal_update_and_event(
    small_history_server: LocalTemporal,
) -> None:
    client = await Client.connect(small_history_server.address, data_converter=pydantic_data_converter)
    queue = f"q-{uuid.uuid4()}"
    fakes = GatedFlushes(
        script=[
            # Slurm requeued the job after NODE_FAIL: TrainGuard holds it while the failure is attributed
            obs(K.FAILURE, job("PENDING", restarts=1), NODE_FAIL),
            obs(K.STATE_CHANGE, job("RUNNING", restarts=1, nodes=("node1", "node3"))),
            obs(K.PROGRESS, job("RUNNING", restarts=1, nodes=("node1", "node3")), iteration=120),
            obs(K.COMPLETED, job("COMPLETED", restarts=1, nodes=("node1", "node3"))),
        ]
    )
    inp = make_input(queue, mode=Mode.ACTION)
    reloaded = inp.config.model_copy(update={"watch_slice_s": 900.0})
    async with Worker(client, task_queue=queue, workflows=[JobRecoveryWorkflow], activities=fakes.all()):
        handle, first_run, latest = await _start(client, inp, queue)

        # Held, excluded, released: the flush of the last step is in flight.
        assert await asyncio.wait_for(fakes.entered.get(), 60) == "last-step"
        assert fakes.scheduler_calls == ["requeue_hold", "exclude", "release"], fakes.scheduler_calls
        await handle.signal(
            JobRecoveryWorkflow.set_cluster_mode, ModeChange(mode=Mode.OBSERVE, who="cluster-admin")
        )
        await _until_status(handle, lambda s: s.mode == Mode.OBSERVE, "the cluster mode signal handled")
        await fakes.release.put(None)

        # The run acts on the server's suggestion: it drains; the drain's flush is in flight.
        assert await asyncio.wait_for(fakes.entered.get(), 60) == "drain"
        pause = PauseRequest(paused=True, who="op", reason="look")
        await handle.signal(JobRecoveryWorkflow.set_paused, pause)
        await handle.signal(
            JobRecoveryWorkflow.apply_settings,
            c.WorkloadSettings(config=reloaded, cluster_mode=Mode.ACTION, source="config reload", who="op"),
        )
        during = await handle.execute_update(
            JobRecoveryWorkflow.set_mode, ModeChange(mode=Mode.ACTION, who="operator")
        )
        assert during.paused and during.mode == Mode.ACTION, during
        await fakes.release.put(None)

        for _ in range(1200):
            if (await latest.describe()).run_id != first_run:
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("no continue-as-new")
        carried = await latest.query(JobRecoveryWorkflow.status)
        await handle.signal(JobRecoveryWorkflow.set_paused, PauseRequest(paused=False, who="op"))
        result = await latest.result()
        runs = await _run_ids(client, handle.id, first_run)
        histories = [await client.get_workflow_handle(handle.id, run_id=r).fetch_history() for r in runs]

    # The state the next run started with: paused, the operator's mode, the attempt, the reloaded settings.
    assert carried.paused, carried
    assert carried.mode == Mode.ACTION and carried.excluded_nodes == ("node2",), carried
    assert [w.slice_s for w in fakes.watch_inputs] == [inp.config.watch_slice_s, 900.0, 900.0, 900.0]
    # The next run waits for the allocation of the requeue this recovery asked for (not a new failure).
    waiting = fakes.watch_inputs[1].phase
    assert waiting.failure_handled and waiting.restart_requested_at is not None, waiting
    # The recovery ran once: one hold, one exclusion, one release; the new attempt recorded once.
    assert fakes.scheduler_calls == ["requeue_hold", "exclude", "release"], fakes.scheduler_calls
    assert [a.advice.action.value for a in fakes.advice] == ["hold", "requeue"]
    assert [w.phase.attempt_restarts for w in fakes.watch_inputs] == [0, 0, 1, 1]
    assert result.attempts == 1, result
    kinds = [e.event_type for e in fakes.stored]
    for once in (
        EventType.DETECTION,
        EventType.ALLOCATION_RESTARTED,
        EventType.TRAINING_RESUMED,
        EventType.COMPLETED,
        EventType.MONITORING_PAUSED,
        EventType.MONITORING_RESUMED,
        EventType.SETTINGS_CHANGED,
    ):
        assert kinds.count(once) == 1, (once, kinds)
    assert kinds.count(EventType.MODE_CHANGED) == 2, kinds  # the cluster's signal and the update
    # Nothing stored twice: the event numbering carried over too (ids are the store's idempotency key).
    ids = [e.event_id for e in fakes.stored]
    assert len(ids) == len(set(ids)), ids
    assert result.state.value == "completed", result
    assert len(runs) >= 2, runs
    # The server's suggestion was acted on right after the recovery: its run watched once, then drained.
    scheduled = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in histories[0].events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    assert scheduled.count(c.WATCH_JOB) == 1 and scheduled[-1] == c.RECORD_EVENTS, scheduled
    assert histories[0].events[-1].HasField("workflow_execution_continued_as_new_event_attributes")
    replayer = Replayer(workflows=[JobRecoveryWorkflow], data_converter=client.data_converter)
    for history in histories:
        await replayer.replay_workflow(history)
    save_history(histories[0], "can_drain_mid_recovery")


async def test_a_paused_workload_continues_as_new(small_history_server: LocalTemporal) -> None:
    """Paused, nothing is watched, but signals (and a check of Slurm every watch slice) still grow the
    history: a workload paused for weeks must continue as new too, still paused, in its mode."""
    client = await Client.connect(small_history_server.address, data_converter=pydantic_data_converter)
    queue = f"q-{uuid.uuid4()}"
    fakes = GatedFlushes(script=[])  # the first watch never ends on its own
    inp = make_input(queue, mode=Mode.ACTION)
    async with Worker(client, task_queue=queue, workflows=[JobRecoveryWorkflow], activities=fakes.all()):
        handle, first_run, latest = await _start(client, inp, queue)
        await _until_status(handle, lambda s: s.state.value == "watching", "watching")
        await handle.signal(JobRecoveryWorkflow.set_paused, PauseRequest(paused=True, who="op"))
        await _until_status(handle, lambda s: s.paused, "paused")
        toggles = 0
        while (await latest.describe()).run_id == first_run:
            assert toggles < 40, "a paused workload never continued as new"
            mode = Mode.OBSERVE if toggles % 2 == 0 else Mode.ACTION
            await latest.signal(JobRecoveryWorkflow.set_cluster_mode, ModeChange(mode=mode, who="admin"))
            toggles += 1
            await _mode_recorded(latest, fakes, mode, toggles)
        carried = await latest.query(JobRecoveryWorkflow.status)
        fakes.script.append(obs(K.COMPLETED, job("COMPLETED")))
        await latest.signal(JobRecoveryWorkflow.set_paused, PauseRequest(paused=False, who="op"))
        result = await latest.result()
        runs = await _run_ids(client, handle.id, first_run)
        histories = [await client.get_workflow_handle(handle.id, run_id=r).fetch_history() for r in runs]
    assert carried.paused, carried
    assert carried.mode == (Mode.OBSERVE if toggles % 2 else Mode.ACTION), (toggles, carried)
    assert len(runs) >= 2 and result.state.value == "completed", (runs, result)
    assert fakes.events.count(EventType.MODE_CHANGED) == toggles, fakes.events
    assert fakes.events.count(EventType.MONITORING_PAUSED) == 1, fakes.events
    assert fakes.events.count(EventType.MONITORING_RESUMED) == 1, fakes.events
    assert fakes.scheduler_calls == [], fakes.scheduler_calls
    ids = [e.event_id for e in fakes.stored]
    assert len(ids) == len(set(ids)), ids
    # the first watch (cancelled by the pause, perhaps before a worker took it) and the one after the
    # resume: none while paused
    assert 1 <= len(fakes.watch_inputs) <= 2, fakes.watch_inputs
    replayer = Replayer(workflows=[JobRecoveryWorkflow], data_converter=client.data_converter)
    for history in histories:
        await replayer.replay_workflow(history)
    save_history(histories[0], "can_paused_workload")


async def _mode_recorded(
    handle: WorkflowHandle[JobRecoveryWorkflow, object], fakes: FakeActivities, mode: Mode, changes: int
) -> None:
    """The run handled the mode change and stored its audit row (one flush per change)."""
    await _until_status(handle, lambda s: s.mode == mode, "the mode change")
    for _ in range(600):
        if fakes.events.count(EventType.MODE_CHANGED) == changes:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"mode change {changes} not stored")


def save_history(history: WorkflowHistory, name: str) -> None:
    """The first run's history, for the replay suite, when TRAINGUARD_RECORD_HISTORIES=1."""
    if os.environ.get("TRAINGUARD_RECORD_HISTORIES") == "1":
        with open(os.path.join(HISTORIES, f"{name}.json"), "w") as out:
            out.write(history.to_json())

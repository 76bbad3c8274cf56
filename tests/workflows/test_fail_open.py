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
    ActionStep,
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
    keys: list[str] = field(default_factory=list)

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
        self.keys += [e.event_id for e in inp.events]
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


@dataclass
class FailingHolds(Scripted):
    """Every REQUEUE_HOLD whose advice id ends with one of `failing` reports a failure after Slurm applied
    it; `slurm_job` is what the workflow's own read just before a hold finds."""

    failing: tuple[str, ...] = ("/hold",)
    slow_reads: bool = False  # the workflow's own read of the job never answers (until cancelled)

    @activity.defn(name=c.REQUEUE_HOLD)
    async def requeue_hold(self, inp: c.JobActionInput) -> ActionResult:
        result = await FakeActivities.requeue_hold(self, inp)
        if inp.advice_id.endswith(self.failing):
            raise ApplicationError("slurmctld stopped answering after the hold", non_retryable=True)
        return result

    @activity.defn(name=c.JOB_STATE)
    async def job_state(self, inp: c.JobActionInput) -> c.JobStateResult:
        if self.slow_reads:
            self.calls.append("job_state")
            while True:
                activity.heartbeat()
                await asyncio.sleep(0.2)
        return await FakeActivities.job_state(self, inp)


def requeued_by_slurm() -> list[c.WatchResult]:
    """A node failed under the job and Slurm requeued it itself: pending, not held, restarts=1."""
    return [obs(K.FAILURE, job("PENDING", restarts=1), NODE_FAIL), obs(K.GONE, job("PENDING", restarts=1))]


async def test_a_containment_hold_that_failed_after_slurm_applied_it_is_released(
    env: WorkflowEnvironment,
) -> None:
    """Slurm requeued the job; TrainGuard read it pending and not held, audited the containment advice and
    held it; the hold step failed, but Slurm had applied it (Reason=JobHeldAdmin, as an admin's hold
    reads). The workflow takes that hold for its own on this evidence and releases it at once, bound to
    the attempt it read; the recovery then goes on as for a job that was never contained."""
    queue = f"q-{uuid.uuid4()}"
    fakes = FailingHolds(script=requeued_by_slurm(), slurm_job=job("PENDING", restarts=1))
    history = await run_to_end(env, fakes, make_input(queue, mode=Mode.ACTION))
    assert fakes.scheduler_calls == ["requeue_hold", "release", "requeue_hold", "exclude", "release"], (
        fakes.scheduler_calls
    )
    fail_open, recovery = fakes.action_inputs["release"]
    assert fail_open.advice_id.endswith("/hold") and fail_open.our_hold == "JobHeldAdmin"
    assert fail_open.held_restarts == 1
    assert recovery.held_restarts is None
    calls = fakes.calls
    # Slurm read (beside the intent's audit write), then the hold: the read is the evidence the hold was ours
    assert calls.index("job_state") < calls.index("requeue_hold")
    assert calls.index("advice:hold") < calls.index("requeue_hold")
    why = [m for m in fakes.messages if m.startswith("watchdog_fired/release:")]
    assert len(why) == 1 and "taken as TrainGuard's own" in why[0] and "JobHeldAdmin" in why[0], why
    assert EventType.ACTION_FAILED in fakes.events
    await replays(env, history)


async def test_a_hold_of_a_job_slurm_requeued_never_waits_for_the_evidence_read(
    env: WorkflowEnvironment,
) -> None:
    """The read that would be the fail-open's evidence runs beside the advice's audit write, not in the
    hold's path: a Slurm requeue starts the job again within seconds, and a hold that waited for one more
    round trip came too late under load (the job ran on the dead node's neighbours, unexcluded). Here that
    read never answers: every hold still runs, the recovery completes, and each unneeded read is
    cancelled rather than left behind."""
    queue = f"q-{uuid.uuid4()}"
    fakes = FailingHolds(
        script=requeued_by_slurm(), slurm_job=job("PENDING", restarts=1), failing=(), slow_reads=True
    )
    history = await asyncio.wait_for(run_to_end(env, fakes, make_input(queue, mode=Mode.ACTION)), 60)
    assert fakes.scheduler_calls == ["requeue_hold", "exclude", "release"], fakes.scheduler_calls
    assert fakes.calls.count("job_state") == 1, fakes.calls  # the containment's; the decision holds nothing
    kinds = [e.WhichOneof("attributes") for e in history.events]
    assert kinds.count("activity_task_cancel_requested_event_attributes") == 1, kinds
    await replays(env, history)


async def test_a_failed_hold_of_a_job_slurm_requeued_is_released_and_not_recovered_twice(
    env: WorkflowEnvironment,
) -> None:
    """The containment hold fails after taking effect, and so does the decision's hold of the same pending
    job (slurmctld keeps failing): both are released, the job runs as Slurm requeued it, and the failure
    stays handled (not contained and recovered a second time)."""
    queue = f"q-{uuid.uuid4()}"
    fakes = FailingHolds(
        script=requeued_by_slurm(), slurm_job=job("PENDING", restarts=1), failing=("/hold", "/s1")
    )
    history = await run_to_end(env, fakes, make_input(queue, mode=Mode.ACTION))
    assert fakes.scheduler_calls == ["requeue_hold", "release", "requeue_hold", "release"], (
        fakes.scheduler_calls
    )
    releases = fakes.action_inputs["release"]
    assert all(r.our_hold == "JobHeldAdmin" and r.held_restarts == 1 for r in releases), releases
    assert [a.advice.action.value for a in fakes.advice] == ["hold", "requeue"], fakes.advice
    assert fakes.watch_inputs[-1].phase.failure_handled is True
    assert "exclude" not in fakes.calls
    await replays(env, history)


async def test_a_failed_hold_never_lifts_a_hold_that_was_there_before_it(env: WorkflowEnvironment) -> None:
    """The watch saw the job pending and not held, but an administrator held it before TrainGuard's step
    (the workflow's read right before the hold finds it held). The step fails: that JobHeldAdmin hold is
    not TrainGuard's and is never released as if it were."""
    queue = f"q-{uuid.uuid4()}"
    fakes = FailingHolds(
        script=requeued_by_slurm(),
        slurm_job=job("PENDING", restarts=1, held=True),
        failing=("/hold", "/s1"),
    )
    history = await run_to_end(env, fakes, make_input(queue, mode=Mode.ACTION))
    lifted = [r for r in fakes.action_inputs.get("release", []) if r.our_hold != REQUEUE_HELD_REASON]
    assert lifted == [], lifted  # only the requeue-hold's own Reason may be lifted, never JobHeldAdmin
    assert not any(m.startswith("watchdog_fired/") for m in fakes.messages), fakes.messages
    await replays(env, history)


@dataclass
class RacedHold(Scripted):
    """Slurm requeues the job itself after the decision's snapshot; the requeue-hold step finds it pending,
    holds it (`scontrol hold`: Reason=JobHeldAdmin) and reports failure. A release of a requeue-hold finds
    that JobHeldAdmin hold, not its own Reason, and lifts nothing."""

    @activity.defn(name=c.RELEASE_JOB)
    async def release_job(self, inp: c.JobActionInput) -> ActionResult:
        if inp.our_hold == REQUEUE_HELD_REASON:
            return self._act(ActionStep.RELEASE, inp, held=True, performed=False, reason="JobHeldAdmin")
        return await FakeActivities.release_job(self, inp)


async def test_a_hold_raced_by_slurms_own_requeue_is_released_when_its_step_fails(
    env: WorkflowEnvironment,
) -> None:
    """The snapshot race: the decision saw the attempt failed, not requeued; Slurm requeued it itself before
    the step, which then held the pending job (JobHeldAdmin) and failed. The workflow's read beside the
    advice's audit write saw the attempt unheld and not yet requeued: the JobHeldAdmin hold on the next
    attempt is taken as TrainGuard's own, released, bound to that attempt, audited with why; Slurm's
    requeue then runs unchanged and is not recovered a second time."""
    queue = f"q-{uuid.uuid4()}"
    fakes = RacedHold(
        script=[
            obs(K.FAILURE, job("FAILED"), XID),
            obs(K.STATE_CHANGE, job("RUNNING", restarts=1)),
            obs(K.PROGRESS, job("RUNNING", restarts=1), iteration=15),
            obs(K.COMPLETED, job("COMPLETED", restarts=1)),
        ],
        slurm_job=job("FAILED"),
        requeue_fails=True,
    )
    history = await run_to_end(env, fakes, make_input(queue, mode=Mode.ACTION))
    assert fakes.scheduler_calls == ["requeue_hold", "release", "release"], fakes.scheduler_calls
    requeue_hold, raced = fakes.action_inputs["release"]
    assert requeue_hold.our_hold == REQUEUE_HELD_REASON and requeue_hold.held_restarts is None
    assert raced.our_hold == "JobHeldAdmin" and raced.held_restarts == 1, raced
    calls = fakes.calls
    assert calls.index("job_state") < calls.index("requeue_hold")  # the read is the evidence
    why = [m for m in fakes.messages if m.startswith("watchdog_fired/release:")]
    assert len(why) == 1 and "requeued it itself meanwhile" in why[0] and "restarts=1" in why[0], why
    assert [a.advice.action.value for a in fakes.advice] == ["requeue"], fakes.advice
    assert EventType.ALLOCATION_RESTARTED in fakes.events and EventType.COMPLETED in fakes.events
    assert "exclude" not in fakes.calls
    assert len(set(fakes.keys)) == len(fakes.keys), fakes.keys  # the audit keeps one row per key
    assert sum(k.endswith("/release/raced") for k in fakes.keys) == 1, fakes.keys
    await replays(env, history)


async def test_a_raced_hold_is_never_taken_for_ours_when_the_read_found_the_job_held(
    env: WorkflowEnvironment,
) -> None:
    """The same race, but the read beside the advice's write already found the job held (an
    administrator's hold): no evidence the hold is TrainGuard's, so JobHeldAdmin is never lifted."""
    queue = f"q-{uuid.uuid4()}"
    fakes = RacedHold(
        script=[obs(K.FAILURE, job("FAILED"), XID), obs(K.GONE, job("PENDING", restarts=1, held=True))],
        slurm_job=job("PENDING", restarts=1, held=True),
        requeue_fails=True,
    )
    history = await run_to_end(env, fakes, make_input(queue, mode=Mode.ACTION))
    lifted = [r for r in fakes.action_inputs.get("release", []) if r.our_hold != REQUEUE_HELD_REASON]
    assert lifted == [], lifted
    assert not any(m.startswith("watchdog_fired/") for m in fakes.messages), fakes.messages
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

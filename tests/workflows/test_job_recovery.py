"""JobRecovery on the time-skipping server with scripted activities: ordering, modes, watchdog, replay."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

from temporalio import activity
from temporalio.client import WorkflowHistory
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer, Worker

from tests.workflows.fakes import APP, XID, FakeActivities, job, obs
from trainguard import contracts as c
from trainguard.attribution.rules import attribute as rule_attribute
from trainguard.models import (
    ActionKind,
    EventType,
    Mode,
    ModeChange,
    ObservationKind,
    OptIn,
    Verdict,
    WorkloadId,
    WorkloadState,
)
from trainguard.policy import PolicyConfig
from trainguard.policy.limits import GrantResult
from workflows.job_recovery import JobRecoveryWorkflow

K = ObservationKind


def make_input(
    queue: str, *, mode: Mode, acknowledged: bool = True, decision_timeout_s: float = 60.0
) -> c.JobRecoveryInput:
    return c.JobRecoveryInput(
        workload=WorkloadId(cluster="lab", job_id="42", submit_time=1000),
        opt_in=OptIn(environment="test", mode=mode),
        cluster_mode=mode,
        config=c.RecoveryConfig(
            cluster_queue=queue,
            control_queue=queue,
            acknowledged=acknowledged,
            decision_timeout_s=decision_timeout_s,
            policy=PolicyConfig(),
            search_attributes=False,
        ),
    )


async def run(
    env: WorkflowEnvironment, fakes: FakeActivities, inp: c.JobRecoveryInput
) -> tuple[object, WorkflowHistory]:
    queue = inp.config.cluster_queue
    async with Worker(env.client, task_queue=queue, workflows=[JobRecoveryWorkflow], activities=fakes.all()):
        handle = await env.client.start_workflow(
            JobRecoveryWorkflow.run, inp, id=f"wf-{uuid.uuid4()}", task_queue=queue
        )
        result = await handle.result()
        history = await handle.fetch_history()
    return result, history


async def test_action_mode_requeues_excluding_the_failed_node_in_order(env: WorkflowEnvironment) -> None:
    queue = f"q-{uuid.uuid4()}"
    fakes = FakeActivities(
        script=[
            obs(K.FAILURE, job("FAILED"), XID),
            # the old allocation tearing down under the new restart count is not the new allocation
            obs(K.STATE_CHANGE, job("COMPLETING", restarts=1, held=True)),
            obs(K.STATE_CHANGE, job("RUNNING", restarts=1, nodes=("node1", "node3"))),
            obs(K.PROGRESS, job("RUNNING", restarts=1, nodes=("node1", "node3")), iteration=120),
            obs(K.COMPLETED, job("COMPLETED", restarts=1)),
        ]
    )
    status, history = await run(env, fakes, make_input(queue, mode=Mode.ACTION))
    assert status.state == WorkloadState.COMPLETED  # type: ignore[attr-defined]
    assert status.excluded_nodes == ("node2",)  # type: ignore[attr-defined]
    assert status.lost_s == 1.0  # type: ignore[attr-defined]  # fault (1999) -> resumed (2000)
    assert status.goodput is not None and 0.0 <= status.goodput <= 1.0  # type: ignore[attr-defined]
    # the advice is recorded before any of its steps; a failed job needs no containment hold
    calls = fakes.calls
    assert "advice:hold" not in calls
    assert calls.index("advice:requeue") < calls.index("requeue_hold") < calls.index("exclude")
    assert calls.index("exclude") < calls.index("release")
    assert fakes.scheduler_calls == ["requeue_hold", "exclude", "release"]
    assert fakes.action_inputs["exclude"][0].nodes == ("node2",)
    order = [
        e
        for e in fakes.events
        if e
        in {
            EventType.DETECTION,
            EventType.ACTION,
            EventType.ALLOCATION_RESTARTED,
            EventType.TRAINING_RESUMED,
            EventType.COMPLETED,
        }
    ]
    assert order.index(EventType.DETECTION) < order.index(EventType.ACTION)
    assert order.index(EventType.ACTION) < order.index(EventType.ALLOCATION_RESTARTED)
    assert order.index(EventType.ALLOCATION_RESTARTED) < order.index(EventType.TRAINING_RESUMED)
    assert order[-1] == EventType.COMPLETED
    # the second attempt is watched with the new restart count
    assert fakes.watch_inputs[-1].phase.attempt_restarts == 1
    assert fakes.events.count(EventType.ALLOCATION_RESTARTED) == 1
    await Replayer(workflows=[JobRecoveryWorkflow], data_converter=env.client.data_converter).replay_workflow(
        history
    )


async def test_observe_mode_never_touches_the_scheduler(env: WorkflowEnvironment) -> None:
    queue = f"q-{uuid.uuid4()}"
    fakes = FakeActivities(script=[obs(K.FAILURE, job("FAILED"), XID), obs(K.GONE, job("FAILED"))])
    status, _ = await run(env, fakes, make_input(queue, mode=Mode.OBSERVE))
    assert fakes.scheduler_calls == []
    assert len(fakes.advice) == 1
    advice = fakes.advice[0].advice
    assert advice.execute is False and advice.mode == Mode.OBSERVE
    assert advice.exclude_nodes == ("node2",)  # the recommendation is still published
    assert status.state == WorkloadState.GONE  # type: ignore[attr-defined]


async def test_action_mode_without_acknowledgement_only_advises(env: WorkflowEnvironment) -> None:
    queue = f"q-{uuid.uuid4()}"
    fakes = FakeActivities(script=[obs(K.FAILURE, job("FAILED"), XID), obs(K.GONE, job("FAILED"))])
    await run(env, fakes, make_input(queue, mode=Mode.ACTION, acknowledged=False))
    assert fakes.scheduler_calls == []
    assert fakes.advice[0].advice.execute is False


async def test_cascade_lines_after_handling_are_not_a_second_failure(env: WorkflowEnvironment) -> None:
    queue = f"q-{uuid.uuid4()}"
    fakes = FakeActivities(
        script=[
            obs(K.FAILURE, job("RUNNING"), XID),
            obs(K.STATE_CHANGE, job("PENDING", held=False)),
            obs(K.COMPLETED, job("COMPLETED", restarts=1)),
        ]
    )
    await run(env, fakes, make_input(queue, mode=Mode.ACTION))
    assert fakes.watch_inputs[1].phase.failure_handled is True
    assert fakes.scheduler_calls.count("requeue_hold") == 1


async def test_slurm_requeued_job_is_contained_then_recovered(env: WorkflowEnvironment) -> None:
    queue = f"q-{uuid.uuid4()}"
    node_fail = XID.model_copy(update={"pattern_id": "slurm.node_fail", "line": "node node2 DOWN"})
    fakes = FakeActivities(
        script=[
            obs(K.FAILURE, job("PENDING", restarts=1), node_fail),
            obs(K.GONE, job("PENDING", restarts=1)),
        ]
    )
    await run(env, fakes, make_input(queue, mode=Mode.ACTION))
    calls = fakes.calls
    assert calls.index("advice:hold") < calls.index("requeue_hold") < calls.index("advice:requeue")
    # already held by the containment step: no second requeue
    assert fakes.scheduler_calls == ["requeue_hold", "exclude", "release"]


async def test_observe_mode_never_contains_a_requeued_job(env: WorkflowEnvironment) -> None:
    queue = f"q-{uuid.uuid4()}"
    fakes = FakeActivities(
        script=[obs(K.FAILURE, job("PENDING", restarts=1), XID), obs(K.GONE, job("PENDING"))]
    )
    await run(env, fakes, make_input(queue, mode=Mode.OBSERVE))
    assert fakes.scheduler_calls == []


async def test_watchdog_releases_a_held_job_when_attribution_hangs(env: WorkflowEnvironment) -> None:
    queue = f"q-{uuid.uuid4()}"
    fakes = FakeActivities(
        script=[obs(K.FAILURE, job("PENDING", restarts=1), XID), obs(K.GONE, job("RUNNING", restarts=1))],
        attribute_blocks=True,
    )
    await run(env, fakes, make_input(queue, mode=Mode.ACTION, decision_timeout_s=3.0))
    assert fakes.scheduler_calls == ["requeue_hold", "release"]
    assert fakes.action_inputs["release"][0].advice_id.endswith("/watchdog")
    assert EventType.WATCHDOG_FIRED in fakes.events
    assert "exclude" not in fakes.calls


async def test_same_application_error_twice_stops_retries(env: WorkflowEnvironment) -> None:
    queue = f"q-{uuid.uuid4()}"
    fakes = FakeActivities(
        script=[
            obs(K.FAILURE, job("FAILED"), APP),
            obs(K.STATE_CHANGE, job("RUNNING", restarts=1)),
            obs(K.FAILURE, job("FAILED", restarts=1), APP),
        ]
    )
    status, _ = await run(env, fakes, make_input(queue, mode=Mode.ACTION))
    assert status.state == WorkloadState.STOPPED  # type: ignore[attr-defined]
    assert fakes.scheduler_calls[-1] == "cancel"
    assert fakes.advice[-1].advice.reason  # every stop explains itself
    assert EventType.STOPPED in fakes.events


async def test_operator_switches_mode_through_an_update(env: WorkflowEnvironment) -> None:
    queue = f"q-{uuid.uuid4()}"
    fakes = FakeActivities(script=[])  # the watch never returns: the workload just runs
    inp = make_input(queue, mode=Mode.ACTION)
    async with Worker(env.client, task_queue=queue, workflows=[JobRecoveryWorkflow], activities=fakes.all()):
        handle = await env.client.start_workflow(
            JobRecoveryWorkflow.run, inp, id=f"wf-{uuid.uuid4()}", task_queue=queue
        )
        # the Java time-skipping server lacks updates: signal + query cover the same state path here
        await handle.signal(JobRecoveryWorkflow.set_cluster_mode, ModeChange(mode=Mode.OBSERVE, who="ops"))
        status = await handle.query(JobRecoveryWorkflow.status)
        assert status.mode == Mode.OBSERVE
        for _ in range(50):  # the handler only enqueues; the run loop flushes the audit row
            if EventType.MODE_CHANGED in fakes.events:
                break
            await asyncio.sleep(0.1)
        await handle.terminate()
    assert EventType.MODE_CHANGED in fakes.events


async def test_an_attempt_that_fails_before_we_see_it_running_is_still_handled(
    env: WorkflowEnvironment,
) -> None:
    queue = f"q-{uuid.uuid4()}"
    fakes = FakeActivities(
        script=[
            obs(K.FAILURE, job("FAILED"), XID),
            obs(K.STATE_CHANGE, job("FAILED", restarts=1, nodes=("node1", "node3"))),  # crashed at once
            obs(K.FAILURE, job("FAILED", restarts=1, nodes=("node1", "node3")), APP),
            obs(K.GONE, job("FAILED", restarts=1)),
        ]
    )
    await run(env, fakes, make_input(queue, mode=Mode.ACTION))
    assert fakes.events.count(EventType.ALLOCATION_RESTARTED) == 1
    assert fakes.watch_inputs[2].phase.failure_handled is False
    assert fakes.events.count(EventType.DETECTION) == 2


# ---- safety contract ------------------------------------------------------------------------------------


async def test_a_job_slurm_reports_cancelled_stays_cancelled(env: WorkflowEnvironment) -> None:
    """Clause 1: findings in the same observation do not matter; the workload stops, audited."""
    queue = f"q-{uuid.uuid4()}"
    cancelled = job("CANCELLED").model_copy(update={"cancelled_by": "1000"})
    fakes = FakeActivities(script=[obs(K.FAILURE, cancelled, XID)])
    status, history = await run(env, fakes, make_input(queue, mode=Mode.ACTION))
    assert status.state == WorkloadState.STOPPED  # type: ignore[attr-defined]
    assert fakes.scheduler_calls == [] and fakes.advice == []
    assert EventType.STOPPED in fakes.events and EventType.DETECTION not in fakes.events
    await Replayer(workflows=[JobRecoveryWorkflow], data_converter=env.client.data_converter).replay_workflow(
        history
    )


async def test_a_cancel_during_recovery_ends_the_workload(env: WorkflowEnvironment) -> None:
    queue = f"q-{uuid.uuid4()}"
    fakes = FakeActivities(
        script=[
            obs(K.FAILURE, job("FAILED"), XID),
            obs(K.STATE_CHANGE, job("CANCELLED", restarts=1, held=True)),
        ]
    )
    status, _ = await run(env, fakes, make_input(queue, mode=Mode.ACTION))
    assert status.state == WorkloadState.STOPPED  # type: ignore[attr-defined]
    assert fakes.scheduler_calls == ["requeue_hold", "exclude", "release"]


async def test_release_names_the_hold_trainguard_placed(env: WorkflowEnvironment) -> None:
    """Clause 4: the release step learns which hold is ours; a hold found in place is nobody's to lift."""
    queue = f"q-{uuid.uuid4()}"
    fakes = FakeActivities(
        script=[obs(K.FAILURE, job("FAILED"), XID), obs(K.GONE, job("PENDING", restarts=1))]
    )
    await run(env, fakes, make_input(queue, mode=Mode.ACTION))
    assert fakes.action_inputs["release"][0].our_hold == "job_requeued_in_held_state"

    theirs = FakeActivities(
        script=[obs(K.FAILURE, job("FAILED"), XID), obs(K.GONE, job("PENDING", restarts=1))],
        held_by_someone_else=True,
    )
    await run(env, theirs, make_input(f"q-{uuid.uuid4()}", mode=Mode.ACTION))
    assert theirs.action_inputs["release"][0].our_hold == ""


async def test_a_kernel_line_about_a_foreign_host_touches_nothing(env: WorkflowEnvironment) -> None:
    """Clause 3: a job on node1,node4 whose log names node3 is neither excluded from node3 nor requeued."""
    queue = f"q-{uuid.uuid4()}"
    foreign = XID.model_copy(update={"nodes": ("node3",), "line": "node3 kernel: NVRM: Xid 79"})
    on_1_4 = job("RUNNING", nodes=("node1", "node4"))
    fakes = FakeActivities(script=[obs(K.FAILURE, on_1_4, foreign), obs(K.COMPLETED, job("COMPLETED"))])
    await run(env, fakes, make_input(queue, mode=Mode.ACTION))
    assert fakes.scheduler_calls == []
    assert fakes.advice[0].advice.action.value == "none" and fakes.advice[0].advice.exclude_nodes == ()


async def test_a_slurm_requeued_job_is_excluded_only_from_its_failed_allocation(
    env: WorkflowEnvironment,
) -> None:
    queue = f"q-{uuid.uuid4()}"
    node_fail = XID.model_copy(update={"pattern_id": "slurm_job_node_fail", "nodes": ("node2", "node7")})
    fakes = FakeActivities(
        script=[
            obs(K.STATE_CHANGE, job("RUNNING", nodes=("node1", "node2"))),
            obs(K.FAILURE, job("PENDING", restarts=1, nodes=()), node_fail),  # requeued: no nodes now
            obs(K.GONE, job("PENDING", restarts=1, nodes=())),
        ]
    )
    await run(env, fakes, make_input(queue, mode=Mode.ACTION))
    assert fakes.action_inputs["exclude"][0].nodes == ("node2",)


class RuleAttribution(FakeActivities):
    """The scripted activities, but attribution by the real rules (they know the job's Slurm state)."""

    @activity.defn(name=c.ATTRIBUTE)
    async def attribute(self, inp: c.AttributeInput) -> Verdict:
        self.calls.append("attribute")
        return rule_attribute(inp.findings, inp.job)


async def test_evidence_on_a_running_job_is_recorded_watched_and_kept_for_a_later_stop(
    env: WorkflowEnvironment,
) -> None:
    """Safety clause 2: an application error while Slurm says RUNNING is recorded and watched (no scheduler
    action, the attempt stays watched); when the attempt then stops, the watch gets that evidence back."""
    queue = f"q-{uuid.uuid4()}"
    fakes = RuleAttribution(
        script=[
            obs(K.FAILURE, job("RUNNING"), APP),
            obs(K.FAILURE, job("FAILED"), XID),
            obs(K.STATE_CHANGE, job("RUNNING", restarts=1, nodes=("node1", "node3"))),
            obs(K.COMPLETED, job("COMPLETED", restarts=1)),
        ]
    )
    status, _ = await run(env, fakes, make_input(queue, mode=Mode.ACTION))
    assert status.state == WorkloadState.COMPLETED  # type: ignore[attr-defined]
    first, second = fakes.advice[0].advice, fakes.advice[1].advice
    assert first.action == ActionKind.NONE and not first.verdict.fatal
    assert second.action == ActionKind.REQUEUE and second.exclude_nodes == ("node2",)
    assert fakes.scheduler_calls == ["requeue_hold", "exclude", "release"]
    # the second watch still collected failures, and carried the watched evidence as context
    assert not fakes.watch_inputs[1].phase.failure_handled
    assert APP in fakes.watch_inputs[1].context
    assert fakes.watch_inputs[2].context == ()  # a fatal verdict consumed it


class StatusRecorder(FakeActivities):
    """Also keeps the workload state of every audit write (what the console and `audit workloads` show)."""

    def __init__(self, script: list[c.WatchResult]) -> None:
        super().__init__(script=script)
        self.states: list[WorkloadState] = []

    def all(self) -> list[Callable[..., Any]]:
        return [self.record_status if f == self.record_events else f for f in super().all()]

    @activity.defn(name=c.RECORD_EVENTS)
    async def record_status(self, inp: c.RecordEventsInput) -> int:
        self.states.append(inp.status.state)
        return await self.record_events(inp)


async def test_an_advised_failure_is_failed_as_soon_as_slurm_ends_the_job(env: WorkflowEnvironment) -> None:
    """Issue 14: in observe mode a failure decided while Slurm still said RUNNING left the workload
    `watching` until slurmctld forgot the job (MinJobAge, 5 min and more). Slurm's FAILED ends it."""
    queue = f"q-{uuid.uuid4()}"
    fakes = StatusRecorder(
        script=[
            obs(K.FAILURE, job("RUNNING"), XID),
            obs(K.STATE_CHANGE, job("COMPLETING")),
            obs(K.STATE_CHANGE, job("FAILED")),
            obs(K.SLICE_END, job("FAILED")),
            obs(K.GONE, job("FAILED")),
        ]
    )
    status, history = await run(env, fakes, make_input(queue, mode=Mode.OBSERVE))
    assert fakes.scheduler_calls == [] and len(fakes.advice) == 1
    assert fakes.advice[0].advice.verdict.fatal and not fakes.advice[0].advice.execute
    # watching while Slurm says RUNNING / COMPLETING, failed from Slurm's FAILED on, gone at the end
    states = [s for i, s in enumerate(fakes.states) if i == 0 or s != fakes.states[i - 1]]
    assert states[-3:] == [WorkloadState.WATCHING, WorkloadState.FAILED, WorkloadState.GONE], fakes.states
    assert status.state == WorkloadState.GONE  # type: ignore[attr-defined]
    await Replayer(workflows=[JobRecoveryWorkflow], data_converter=env.client.data_converter).replay_workflow(
        history
    )


async def test_a_requeue_by_slurm_after_an_advised_failure_is_followed(env: WorkflowEnvironment) -> None:
    """`failed` is not the end: Slurm (or a person) may requeue the job, and the new attempt is watched."""
    queue = f"q-{uuid.uuid4()}"
    fakes = StatusRecorder(
        script=[
            obs(K.FAILURE, job("RUNNING"), XID),
            obs(K.STATE_CHANGE, job("NODE_FAIL")),
            obs(K.STATE_CHANGE, job("RUNNING", restarts=1, nodes=("node1", "node3"))),
            obs(K.COMPLETED, job("COMPLETED", restarts=1)),
        ]
    )
    status, _ = await run(env, fakes, make_input(queue, mode=Mode.OBSERVE))
    assert WorkloadState.FAILED in fakes.states and fakes.scheduler_calls == []
    assert status.state == WorkloadState.COMPLETED  # type: ignore[attr-defined]
    assert fakes.events.count(EventType.ALLOCATION_RESTARTED) == 1


async def test_a_refused_grant_records_advice_only_and_touches_nothing(env: WorkflowEnvironment) -> None:
    """Cluster-wide limits: ClusterWatch refuses (budget spent) -> the advice is recorded as advice only,
    with the limit first in its reason, and no scheduler step runs."""
    queue = f"q-{uuid.uuid4()}"
    text = "Advice only: cluster limit exclusions_per_hour=1 reached (1 nodes excluded in the last hour)"
    fakes = FakeActivities(
        script=[obs(K.FAILURE, job("FAILED"), XID), obs(K.COMPLETED, job("COMPLETED"))],
        grant=GrantResult(requeue=False, exclude=False, limit=text),
    )
    await run(env, fakes, make_input(queue, mode=Mode.ACTION))
    (asked,) = fakes.grants
    assert asked.request.requeue and asked.request.exclude == ("node2",)
    assert asked.request.failure is not None and asked.request.failure.nodes == ("node2",)
    (advice,) = [a.advice for a in fakes.advice]
    assert not advice.execute and advice.reason.startswith(text)
    assert fakes.scheduler_calls == []
    assert fakes.ended == []  # nothing excluded, nothing to give back


async def test_a_storm_requeues_without_the_exclusion_and_a_finished_workload_frees_its_share(
    env: WorkflowEnvironment,
) -> None:
    queue = f"q-{uuid.uuid4()}"
    storm = "Storm: 6 jobs failed within 10 minutes → shared infrastructure suspected (limits.storm_jobs=5)"
    fakes = FakeActivities(
        script=[
            obs(K.FAILURE, job("FAILED"), XID),
            obs(K.STATE_CHANGE, job("RUNNING", restarts=1, nodes=("node1", "node2"))),
            obs(K.COMPLETED, job("COMPLETED", restarts=1)),
        ],
        grant=GrantResult(exclude=False, drain=False, storm=storm),
    )
    status, _ = await run(env, fakes, make_input(queue, mode=Mode.ACTION))
    assert status.excluded_nodes == ()  # type: ignore[attr-defined]
    (advice,) = [a.advice for a in fakes.advice]
    assert advice.execute and advice.action == ActionKind.REQUEUE and advice.exclude_nodes == ()
    assert "exclude" not in fakes.scheduler_calls and "requeue_hold" in fakes.scheduler_calls
    assert fakes.ended == []


async def test_a_workload_that_excluded_nodes_tells_cluster_watch_when_it_ends(
    env: WorkflowEnvironment,
) -> None:
    queue = f"q-{uuid.uuid4()}"
    fakes = FakeActivities(
        script=[
            obs(K.FAILURE, job("FAILED"), XID),
            obs(K.STATE_CHANGE, job("RUNNING", restarts=1, nodes=("node1", "node3"))),
            obs(K.COMPLETED, job("COMPLETED", restarts=1)),
        ]
    )
    await run(env, fakes, make_input(queue, mode=Mode.ACTION))
    assert fakes.ended == ["lab/42/1000"]

"""The workflow's history reads as a story in the Temporal UI: static summary and details given at
start (job, cluster, user), current details kept up to date (job, attempt, state, last verdict) and a
summary on each activity. Checked on the time-skipping server through describe(), the workflow's
metadata query (what the UI calls) and the recorded history; the history replays."""

from __future__ import annotations

import uuid

from temporalio.api.enums.v1 import EventType as HistoryEventType
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer, Worker

from tests.workflows.fakes import XID, FakeActivities, job, obs
from tests.workflows.test_job_recovery import make_input
from trainguard.models import (
    JobSnapshot,
    Mode,
    ObservationKind,
    OptIn,
    WorkloadId,
    WorkloadState,
    WorkloadStatus,
)
from workflows import story
from workflows.job_recovery import JobRecoveryWorkflow

K = ObservationKind


async def test_history_summaries_and_details(env: WorkflowEnvironment) -> None:
    queue = f"q-{uuid.uuid4()}"
    fakes = FakeActivities(
        script=[
            obs(K.FAILURE, job("FAILED"), XID),
            obs(K.STATE_CHANGE, job("RUNNING", restarts=1, nodes=("node1", "node3"))),
            obs(K.PROGRESS, job("RUNNING", restarts=1, nodes=("node1", "node3")), iteration=120),
            obs(K.COMPLETED, job("COMPLETED", restarts=1)),
        ]
    )
    inp = make_input(queue, mode=Mode.ACTION)
    submitted = job("PENDING").model_copy(update={"name": "llama *pretrain*", "user": "alice"})
    converter = env.client.data_converter
    async with Worker(env.client, task_queue=queue, workflows=[JobRecoveryWorkflow], activities=fakes.all()):
        handle = await env.client.start_workflow(
            JobRecoveryWorkflow.run,
            inp,
            id=f"wf-{uuid.uuid4()}",
            task_queue=queue,
            # as ClusterWatch's discovery starts it (activities/cluster.py)
            static_summary=story.static_summary(inp.workload, submitted, inp.opt_in),
            static_details=story.static_details(inp.workload, submitted, inp.opt_in),
        )
        status = await handle.result()
        meta = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
        history = await handle.fetch_history()
        desc = await handle.describe()
    assert status.state == WorkloadState.COMPLETED

    assert await desc.static_summary() == "job 42 on lab · llama pretrain (alice) · action"
    details = await desc.static_details() or ""
    assert "**Job** 42 on cluster **lab**" in details and "**User** alice" in details

    # The workflow's own, current details: the last state it reported.
    assert meta.current_details.splitlines() == [
        "**Job** 42 · **attempt** 1 · **state** completed  ",
        "**Mode** action · **last verdict** gpu_hardware (hardware)  ",
        "**Excluded** node2  ",
        "**Time lost** 1 s",
    ]

    summaries = [
        converter.payload_converter.from_payload(e.user_metadata.summary, str)
        for e in history.events
        if e.event_type == HistoryEventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
    assert len(summaries) == sum(
        e.event_type == HistoryEventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED for e in history.events
    )
    assert summaries[:2] == ["audit 1 event(s) of job 42", "watch attempt 0 of job 42"]  # discovered, watch
    story_line = [s for s in summaries if not s.startswith(("audit ", "watch "))]
    assert story_line == [
        "attribute failure of job 42, attempt 0",
        "ask ClusterWatch's limits for job 42, attempt 0",
        "read job 42 before its hold (fail-open evidence)",  # cancelled once the hold succeeds
        "record advice: requeue job 42, attempt 0",
        "requeue-hold job 42",
        "exclude job 42 (node2)",
        "release job 42",
        "give back job 42's excluded nodes to the cluster cap",
    ]
    assert "watch attempt 1 of job 42" in summaries
    assert any(s.startswith("audit ") and s.endswith(" event(s) of job 42") for s in summaries)
    await Replayer(workflows=[JobRecoveryWorkflow], data_converter=converter).replay_workflow(history)


def test_story_text_is_plain_and_bounded() -> None:
    w = WorkloadId(cluster="lab", job_id="28", submit_time=5)
    hostile = JobSnapshot(job_id="28", name="[x](javascript:alert(1)) `rm` <b>", user="eve\n# big")
    summary = story.static_summary(w, hostile, OptIn(environment="prod", mode=Mode.OBSERVE))
    assert not set(summary) & set("[]`<>#\n")
    assert summary.startswith("job 28 on lab · ") and summary.endswith(" · observe")
    assert story.action_summary("requeue_hold", "28") == "requeue-hold job 28"
    assert (
        story.action_summary("set_excluded", "28", ("gpu-03", "gpu-04")) == "exclude job 28 (gpu-03,gpu-04)"
    )
    assert story.watch_summary("28", 1) == "watch attempt 1 of job 28"
    assert len(story.plain("n" * 500)) == 80
    waiting = WorkloadStatus(workload_key=w.key, cluster="lab", job_id="28", submit_time=5, paused=True)
    assert story.current_details(waiting, 0).startswith(
        "**Job** 28 · **attempt** 0 · **state** watching (paused)"
    )

"""Scripted replacements for TrainGuard's activities, registered under the real activity names."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from temporalio import activity

from trainguard import contracts as c
from trainguard.models import (
    ActionResult,
    ActionStep,
    Attribution,
    Category,
    EventType,
    Finding,
    FindingSource,
    JobSnapshot,
    LogCursor,
    Observation,
    ObservationKind,
    ProgressState,
    Verdict,
)
from trainguard.policy.limits import GrantResult


def job(
    state: str = "RUNNING", restarts: int = 0, held: bool = False, nodes: tuple[str, ...] = ("node1", "node2")
) -> JobSnapshot:
    return JobSnapshot(
        job_id="42",
        name="demo",
        state=state,
        restart_count=restarts,
        held=held,
        nodes=nodes,
        submit_time=1000,
        num_nodes=len(nodes),
    )


XID = Finding(
    source=FindingSource.LOG,
    pattern_id="gpu.xid.79",
    category=Category.GPU_HARDWARE,
    attribution=Attribution.HARDWARE,
    fatal=True,
    line="node2: NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.",
    nodes=("node2",),
)
APP = Finding(
    source=FindingSource.LOG,
    pattern_id="python.exception",
    category=Category.PYTHON_EXCEPTION,
    attribution=Attribution.APPLICATION,
    fatal=True,
    line="KeyError: 'input_ids'",
)
NODE_FAIL = XID.model_copy(update={"pattern_id": "slurm.node_fail", "line": "node node2 DOWN"})


def obs(
    kind: ObservationKind, j: JobSnapshot | None, *findings: Finding, iteration: int | None = None
) -> c.WatchResult:
    return c.WatchResult(
        observation=Observation(
            kind=kind,
            job=j,
            findings=findings,
            progress=ProgressState(last_iteration=iteration),
            observed_at=2000.0,
            first_signal_at=1999.0 if findings else None,
        ),
        cursor=LogCursor(offset=100),
        stdout_path="/tmp/demo.out",
    )


@dataclass
class FakeActivities:
    script: list[c.WatchResult]
    calls: list[str] = field(default_factory=list)
    events: list[EventType] = field(default_factory=list)
    advice: list[c.RecordAdviceInput] = field(default_factory=list)
    action_inputs: dict[str, list[c.JobActionInput]] = field(default_factory=dict)
    attribute_blocks: bool = False
    watch_inputs: list[c.WatchInput] = field(default_factory=list)
    held_by_someone_else: bool = False  # requeue_hold finds the job already held (a user's hold)
    slurm_job: JobSnapshot | None = field(default_factory=job)  # what job_state reads (None: gone)
    # ClusterWatch's answer to every grant request (the real one is tested in test_cluster_limits.py).
    grant: GrantResult = field(default_factory=GrantResult)
    grants: list[c.GrantInput] = field(default_factory=list)
    ended: list[str] = field(default_factory=list)

    def all(self) -> list[Callable[..., Any]]:
        return [
            self.watch_job,
            self.attribute,
            self.record_events,
            self.record_advice,
            self.requeue_hold,
            self.set_excluded,
            self.release_job,
            self.cancel_job,
            self.job_state,
            self.grant_actions,
            self.workload_ended,
        ]

    @activity.defn(name=c.JOB_STATE)
    async def job_state(self, inp: c.JobActionInput) -> c.JobStateResult:
        self.calls.append("job_state")
        return c.JobStateResult(job=self.slurm_job)

    @activity.defn(name=c.GRANT_ACTIONS)
    async def grant_actions(self, inp: c.GrantInput) -> GrantResult:
        self.grants.append(inp)
        return self.grant

    @activity.defn(name=c.WORKLOAD_ENDED)
    async def workload_ended(self, inp: c.WorkloadEnded) -> bool:
        self.ended.append(inp.workload_key)
        return True

    @activity.defn(name=c.WATCH_JOB)
    async def watch_job(self, inp: c.WatchInput) -> c.WatchResult:
        self.calls.append("watch")
        self.watch_inputs.append(inp)
        if not self.script:
            await asyncio.sleep(3600)
        return self.script.pop(0)

    @activity.defn(name=c.ATTRIBUTE)
    async def attribute(self, inp: c.AttributeInput) -> Verdict:
        self.calls.append("attribute")
        if self.attribute_blocks:
            while True:  # an external attribution service that never answers
                activity.heartbeat()
                await asyncio.sleep(0.5)
        top = inp.findings[0]
        return Verdict(
            category=top.category,
            attribution=top.attribution,
            fatal=top.fatal,
            confidence=0.9,
            nodes=top.nodes,
            evidence=(top.line,),
            pattern_ids=(top.pattern_id,),
        )

    @activity.defn(name=c.RECORD_EVENTS)
    async def record_events(self, inp: c.RecordEventsInput) -> int:
        for e in inp.events:
            self.events.append(e.event_type)
            self.calls.append(f"event:{e.event_type.value}")
        return len(inp.events)

    @activity.defn(name=c.RECORD_ADVICE)
    async def record_advice(self, inp: c.RecordAdviceInput) -> bool:
        self.advice.append(inp)
        self.calls.append(f"advice:{inp.advice.action.value}")
        return True

    def _act(
        self, step: ActionStep, inp: c.JobActionInput, held: bool, performed: bool = True, reason: str = ""
    ) -> ActionResult:
        self.calls.append(step.value)
        self.action_inputs.setdefault(step.value, []).append(inp)
        return ActionResult(
            step=step, performed=performed, confirmed_at=2001.0, held=held, job_state="PENDING", reason=reason
        )

    @activity.defn(name=c.REQUEUE_HOLD)
    async def requeue_hold(self, inp: c.JobActionInput) -> ActionResult:
        if self.held_by_someone_else:
            result = self._act(ActionStep.REQUEUE_HOLD, inp, held=True, performed=False, reason="JobHeldUser")
            return result.model_copy(update={"own_hold": ""})
        result = self._act(ActionStep.REQUEUE_HOLD, inp, held=True, reason="job_requeued_in_held_state")
        return result.model_copy(update={"own_hold": "job_requeued_in_held_state"})

    @activity.defn(name=c.SET_EXCLUDED)
    async def set_excluded(self, inp: c.JobActionInput) -> ActionResult:
        return self._act(ActionStep.EXCLUDE, inp, held=True)

    @activity.defn(name=c.RELEASE_JOB)
    async def release_job(self, inp: c.JobActionInput) -> ActionResult:
        return self._act(ActionStep.RELEASE, inp, held=False)

    @activity.defn(name=c.CANCEL_JOB)
    async def cancel_job(self, inp: c.JobActionInput) -> ActionResult:
        return self._act(ActionStep.CANCEL, inp, held=False)

    @property
    def scheduler_calls(self) -> list[str]:
        steps = {s.value for s in ActionStep}
        return [call for call in self.calls if call in steps]

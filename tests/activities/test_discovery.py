"""Discovery's pass over a snapshot: each opted-in job is started once, and a decided job costs nothing on
the passes after (every pass sees every job: 10,000 at scale, every few seconds)."""

from __future__ import annotations

import re
from typing import Any

from temporalio.testing import ActivityEnvironment

from activities.cluster import ClusterActivities
from trainguard import contracts as c
from trainguard.models import JobSnapshot, Mode

OPTED_IN = '{"trainguard": {"mode": "observe"}}'


class Temporal:
    def __init__(self) -> None:
        self.started: list[str] = []

    async def start_workflow(self, workflow: str, arg: Any, *, id: str, **kw: Any) -> None:
        self.started.append(id)


def job(job_id: str, comment: str = OPTED_IN) -> JobSnapshot:
    return JobSnapshot(job_id=job_id, submit_time=100, state="RUNNING", nodes=("n1",), comment=comment)


def activities(temporal: Temporal) -> ClusterActivities:
    return ClusterActivities("lab", None, None, None, temporal, search_attributes=False)  # type: ignore[arg-type]


INP = c.DiscoverInput(cluster="lab", mode=Mode.OBSERVE, recovery=c.RecoveryConfig(cluster_queue="q"))


async def test_a_decided_job_is_not_considered_again_on_later_passes() -> None:
    temporal = Temporal()
    acts = activities(temporal)
    considered: list[str] = []
    real = acts._consider

    async def counting(j: JobSnapshot, inp: c.DiscoverInput, env_re: re.Pattern[str]) -> str | None:
        considered.append(j.job_id)
        return await real(j, inp, env_re)

    acts._consider = counting  # type: ignore[method-assign,assignment]
    jobs = [job("1"), job("2"), job("3", comment="not opted in")]
    env = ActivityEnvironment()
    first = await env.run(acts._consider_all, jobs, INP, re.compile(".*"))
    assert temporal.started == ["trainguard-job-lab-1-100", "trainguard-job-lab-2-100"]
    assert first["started"] == 2
    considered.clear()

    again = await env.run(acts._consider_all, [*jobs, job("4")], INP, re.compile(".*"))
    assert temporal.started[2:] == ["trainguard-job-lab-4-100"]
    assert again["started"] == 1
    # the started jobs are decided; the job that did not opt in is looked at again (its comment may change)
    assert sorted(considered) == ["3", "4"]

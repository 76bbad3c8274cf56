"""Cluster-wide safety limits on the real stack (real Slurm 22.05, the Temporal dev server, TrainGuard's
worker in action mode), checked against what Slurm itself reports.

- A storm: six jobs on several nodes lose a GPU at the same moment (one trigger file, as a fabric or power
  event would hit them); no node is excluded or drained (`scontrol show job`: ExcNodeList empty; sinfo: no
  drain), every advice says "Storm: ... shared infrastructure suspected", and the jobs are requeued
  without exclusions (limits.storm_action=requeue).
- The hour's exclusion budget (limits.exclusions_per_hour=1): of two faulty jobs only the first is
  excluded; the second gets advice only with the limit's reason and the alert's metric.
- Drains (safety clause 3): one job's evidence never drains; evidence from two jobs of two users drains
  the node; with the hour's drain budget spent, the next node is not drained and the audit says why.

Each test runs its own worker and ClusterWatch (fresh budget) on the session's Slurm cluster; its jobs use
a "solo-..." opt-in environment, which the shared workers leave alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from prometheus_client import REGISTRY

from tests.e2e.crash_stack import save_history
from tests.e2e.stack import PORT_OFFSET, REPO, SBATCH, Stack, SubmittedJob, make_settings
from trainguard.api.temporal_control import cluster_workflow_id
from trainguard.audit.store import AuditStore
from trainguard.localstack.slurm import LocalSlurmCluster
from trainguard.localstack.temporal import LocalTemporal
from trainguard.models import AuditEventIn, EventType, WorkloadId
from trainguard.settings import LimitsSettings, PolicySettings
from workers.worker import build_workers, connect, ensure_cluster_watch

SOLO_DIR = REPO / "var" / f"e2e-solo-{PORT_OFFSET}"
OTHER_USER = "cloudsdk"  # an ordinary account on these machines: jobs of a second user (sbatch --uid as root)


@contextlib.asynccontextmanager
async def own_stack(
    cluster: LocalSlurmCluster,
    temporal: LocalTemporal,
    tag: str,
    *,
    limits: dict[str, Any],
    policy: dict[str, Any] | None = None,
) -> AsyncIterator[Stack]:
    name = f"solo-{tag}-{uuid.uuid4().hex[:6]}"
    workdir = SOLO_DIR / name
    workdir.mkdir(parents=True)
    os.chmod(workdir, 0o777)  # jobs of a second user write their output here
    audit_url = f"sqlite:///{SOLO_DIR / f'audit-{name}.db'}"
    settings = make_settings(
        temporal_address=temporal.address,
        cluster=cluster,
        audit_url=audit_url,
        name=name,
        environment_pattern=re.escape(name),
        limits=LimitsSettings(**limits),
        policy=PolicySettings(**(policy or {})),
    )
    client = await connect(settings)
    runtime = build_workers(client, settings)
    runtime.start()
    await ensure_cluster_watch(client, settings)
    store = AuditStore.from_url(audit_url)
    stack = Stack(cluster=cluster, client=client, store=store, settings=settings, workdir=workdir)
    try:
        yield stack
    finally:
        for job in stack.jobs:
            with contextlib.suppress(Exception):
                cluster._run(["scancel", job.job_id], check=False)
        await runtime.shutdown()
        store.close()


def submit(
    stack: Stack, *, env: dict[str, str], node: str | None = None, user: str | None = None, iters: int = 300
) -> SubmittedJob:
    """One single-node trainsim job in the stack's own opt-in environment, action mode."""
    workdir = stack.workdir / f"job-{len(stack.jobs)}-{uuid.uuid4().hex[:6]}"
    workdir.mkdir()
    os.chmod(workdir, 0o777)
    comment = json.dumps({"trainguard": {"environment": stack.settings.cluster.name, "mode": "action"}})
    argv = [
        f"--chdir={workdir}",
        "--job-name=trainsim",
        "--nodes=1",
        f"--output={workdir}/trainsim-%j.out",
        f"--comment={comment}",
        "--requeue",
        "--open-mode=append",
    ]
    argv += [f"--nodelist={node}"] if node else []
    argv += [f"--uid={user}"] if user else []
    job_env = {
        "TRAINSIM_PY": str(REPO / "examples" / "trainsim.py"),
        "TRAINSIM_ITERS": str(iters),
        "TRAINSIM_STEP_S": "0.1",
        "TRAINSIM_CKPT_EVERY": "5",
        "TRAINSIM_CKPT_DIR": str(workdir / "ckpt"),
        "TRAINSIM_NCCL_DELAY_S": "1",
        # the fault fires in the first attempt only, as a bad GPU would before it is excluded
        "TRAINSIM_FAULT_ONCE": str(workdir / "fault.fired"),
    }
    job_id = stack.cluster.sbatch([*argv, str(SBATCH)], env={**job_env, **env})
    job = SubmittedJob(job_id=job_id, workdir=workdir, cluster=stack.cluster)
    stack.jobs.append(job)
    return job


def advice_of(stack: Stack, job: SubmittedJob) -> AuditEventIn:
    return next(e for e in stack.events(job.job_id) if e.event_type == EventType.ADVICE)


def advice_count(cluster: str, reason: str) -> float:
    total = 0.0
    for metric in REGISTRY.collect():
        if metric.name != "trainguard_advice":
            continue
        for sample in metric.samples:
            labels = sample.labels
            if (
                sample.name.endswith("_total")
                and labels.get("cluster") == cluster
                and labels["reason"] == reason
            ):
                total += sample.value
    return total


def drained(cluster: LocalSlurmCluster) -> set[str]:
    return {node for node, state in cluster.node_states().items() if "drain" in state}


def resume(cluster: LocalSlurmCluster, nodes: set[str]) -> None:
    for node in nodes:
        cluster._run(["scontrol", "update", f"NodeName={node}", "State=RESUME"], check=False)


async def wait_running(stack: Stack, jobs: list[SubmittedJob], timeout: float = 180.0) -> None:
    await asyncio.gather(*(stack.wait_job_state(j, {"RUNNING"}, timeout) for j in jobs))
    for job in jobs:  # watched, and past startup: the trigger must find every job training
        await stack.wait_for_event(job.job_id, EventType.WORKLOAD_DISCOVERED, timeout)
        await stack.wait_until(
            lambda j=job: j.output.exists() and "iteration" in j.output.read_text(errors="replace"),
            f"job {job.job_id} training",
            timeout,
            job.job_id,
        )


async def test_a_storm_across_jobs_excludes_and_drains_no_node(
    slurm_cluster: LocalSlurmCluster, temporal_server: LocalTemporal
) -> None:
    # Drains would be allowed on one user's evidence here: only the storm rule can keep nodes in service.
    limits = {"storm_jobs": 3, "storm_settle_s": 15, "storm_settle_alone": True}  # not even the first
    policy = {"drain_enabled": True, "drain_users_threshold": 1}
    started = time.monotonic()
    before = drained(slurm_cluster)
    async with own_stack(slurm_cluster, temporal_server, "storm", limits=limits, policy=policy) as stack:
        trigger = stack.workdir / "fabric.trigger"
        jobs = [submit(stack, env={"TRAINSIM_TRIGGER": str(trigger)}, iters=600) for _ in range(6)]
        await wait_running(stack, jobs)
        nodes = {j.show()["NodeList"] for j in jobs}
        assert len(nodes) >= 3, nodes  # different nodes: what one bad node cannot explain
        trigger.write_text("xid\n")  # every job loses a GPU now

        for job in jobs:
            await stack.wait_for_event(job.job_id, EventType.ADVICE, timeout=180)
        for job in jobs:
            advice = advice_of(stack, job)
            assert advice.message.startswith("Storm: "), advice.message
            assert "shared infrastructure suspected" in advice.message, advice.message
            assert advice.action == "requeue" and advice.nodes == (), advice
        # Requeued without exclusions (limits.storm_action=requeue): Slurm's own record shows it.
        for job in jobs:
            await stack.wait_until(
                lambda j=job: int(j.show().get("Restarts", "0")) >= 1,
                f"job {job.job_id} requeued",
                120,
                job.job_id,
            )
        await asyncio.sleep(3)  # a wrongly acting worker's exclusion or drain would land by now
        for job in jobs:
            record = job.show()
            assert record["ExcNodeList"] == "(null)", record
        assert drained(slurm_cluster) == before
        name = stack.settings.cluster.name
        assert advice_count(name, "infra_storm") == 6
        assert not any(e.event_type == EventType.NODE_DRAINED for j in jobs for e in stack.events(j.job_id))
        # The replay tests' histories of this path (TRAINGUARD_RECORD_HISTORIES=1): a workload granted a
        # storm requeue, and the ClusterWatch that answered six grant updates after settling.
        first = advice_of(stack, jobs[0])
        workload = WorkloadId(cluster=name, job_id=first.job_id, submit_time=first.submit_time)
        await save_history(stack.client.get_workflow_handle(workload.workflow_id), "storm_requeue_job")
        await save_history(stack.client.get_workflow_handle(cluster_workflow_id(name)), "storm_cluster_watch")
    print(f"storm e2e: {time.monotonic() - started:.0f}s")


async def test_exclusions_beyond_the_hourly_budget_give_advice_only(
    slurm_cluster: LocalSlurmCluster, temporal_server: LocalTemporal
) -> None:
    limits = {"exclusions_per_hour": 1, "storm_settle_s": 0}
    async with own_stack(slurm_cluster, temporal_server, "budget", limits=limits) as stack:
        fault = {"TRAINSIM_FAULT": "xid", "TRAINSIM_FAULT_AT": "12"}
        first = submit(stack, env=fault, iters=60)
        await stack.wait_for_event(first.job_id, EventType.ADVICE, timeout=180)
        first_node = advice_of(stack, first).nodes
        assert len(first_node) == 1, advice_of(stack, first)
        await stack.wait_until(
            lambda: first.show().get("ExcNodeList") == first_node[0], "the first exclusion", 120, first.job_id
        )

        second = submit(stack, env=fault, iters=60)
        await stack.wait_for_event(second.job_id, EventType.ADVICE, timeout=180)
        advice = advice_of(stack, second)
        assert advice.message.startswith("Advice only: cluster limit exclusions_per_hour=1 reached"), (
            advice.message
        )
        assert advice.data["execute"] is False
        await stack.wait_job_state(second, {"FAILED"}, timeout=60)
        await asyncio.sleep(3)  # a wrongly acting worker would have requeued it by now
        record = second.show()
        assert record["JobState"] == "FAILED" and record["Restarts"] == "0", record
        assert record["ExcNodeList"] == "(null)", record
        assert advice_count(stack.settings.cluster.name, "cluster_exclusion_limit") == 1
        assert first.show()["ExcNodeList"] == first_node[0]


async def test_drains_need_two_jobs_of_two_users_and_respect_the_drain_budget(
    slurm_cluster: LocalSlurmCluster, temporal_server: LocalTemporal
) -> None:
    limits = {"drains_per_hour": 1, "storm_jobs": 100, "storm_nodes": 100, "storm_settle_s": 0}
    before = drained(slurm_cluster)
    fault = {"TRAINSIM_FAULT": "xid", "TRAINSIM_FAULT_AT": "12"}
    targets = ("node2", "node3")
    try:
        async with own_stack(
            slurm_cluster, temporal_server, "drain", limits=limits, policy={"drain_enabled": True}
        ) as stack:
            # One job per node, of one user: its evidence alone never drains the node.
            mine = [submit(stack, env=fault, node=n, iters=60) for n in targets]
            for job in mine:
                await stack.wait_for_event(job.job_id, EventType.ADVICE, timeout=180)
            for job, node in zip(mine, targets, strict=True):
                advice = advice_of(stack, job)
                assert advice.nodes == (node,) and "Drain" not in advice.message, advice.message
            assert drained(slurm_cluster) == before

            # A second user's jobs fail on the same nodes: two jobs of two users implicate each node.
            theirs = [submit(stack, env=fault, node=n, user=OTHER_USER, iters=60) for n in targets]
            for job in theirs:
                await stack.wait_for_event(job.job_id, EventType.ADVICE, timeout=180)
            texts = [advice_of(stack, job).message for job in theirs]
            drains = [t for t in texts if " Drain " in t and not t.startswith("Not drained")]
            refused = [
                t for t in texts if t.startswith("Not drained: cluster limit drains_per_hour=1 reached")
            ]
            assert len(drains) == 1 and len(refused) == 1, texts
            await stack.wait_until(
                lambda: len(drained(slurm_cluster) - before) == 1, "one node drained", 60, theirs[0].job_id
            )
            await asyncio.sleep(3)
            new = drained(slurm_cluster) - before
            assert len(new) == 1 and new <= set(targets), new
            assert advice_count(stack.settings.cluster.name, "cluster_drain_limit") == 1
            events = [
                e for j in theirs for e in stack.events(j.job_id) if e.event_type == EventType.NODE_DRAINED
            ]
            assert [e.nodes for e in events] == [tuple(new)], events
    finally:
        resume(slurm_cluster, drained(slurm_cluster) - before)

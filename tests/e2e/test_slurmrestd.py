"""TrainGuard's slurmrestd client against the real slurmrestd of Slurm 22.05 (API v0.0.36-v0.0.38, the
host's Debian 12 packages) and Slurm 24.11 (v0.0.40-v0.0.42, Debian 13 packages in a root filesystem made
by the lab tooling), each on its own 3-node cluster with auth/jwt.

What Slurm itself did is checked with `scontrol` (the CLI, not the REST answers under test). Both
versions lack a REST requeue, and 22.05 lacks node updates: those steps must fail with
UnsupportedOperationError *without* touching Slurm. A missing Slurm, rootfs or slurmrestd fails these
tests; nothing is skipped.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from pydantic import SecretStr

from tests.e2e.stack import PORT_OFFSET, Stack, make_settings
from trainguard.audit.store import AuditStore
from trainguard.localstack.slurm import LocalSlurmCluster, RestEndpoint
from trainguard.localstack.temporal import LocalTemporal
from trainguard.models import EventType, JobSnapshot
from trainguard.settings import ClusterSettings, Settings
from trainguard.signals.check import CheckRequest, run_checks
from trainguard.signals.report import Status
from trainguard.slurm.hostlist import expand_hostlist
from trainguard.slurm.restd import SlurmRestClient
from trainguard.slurm.restd_api import NoSupportedVersionError, SlurmRestAuthError, UnsupportedOperationError
from trainguard.slurm.restd_token import TokenSource
from trainguard.slurm.runner import LocalRunner
from workers.worker import build_workers, connect, ensure_cluster_watch

pytestmark = pytest.mark.e2e

BASE = Path(os.environ.get("TG_E2E_RESTD_DIR", f"/tmp/tg-restd-{PORT_OFFSET}"))
PORTS = {"22.05": 19217 + PORT_OFFSET, "24.11": 19417 + PORT_OFFSET}  # ctld; nodes +100.., rest +50
SERVED = {"22.05": ["v0.0.36", "v0.0.37", "v0.0.38"], "24.11": ["v0.0.40", "v0.0.41", "v0.0.42"]}
CHOSEN = {"22.05": "v0.0.38", "24.11": "v0.0.42"}
NOT_SERVED = {"22.05": "v0.0.42", "24.11": "v0.0.38"}
COMMENT = '{"trainguard":{"environment":"prod","mode":"action"}}'
JOB = """#!/bin/bash
echo "attempt restarts=${SLURM_RESTART_COUNT:-0} on $SLURM_JOB_NODELIST"
sleep 600
"""


@pytest.fixture(scope="module", params=["22.05", "24.11"])
def lab(request: pytest.FixtureRequest) -> Iterator[tuple[LocalSlurmCluster, RestEndpoint]]:
    version: str = request.param
    port = PORTS[version]
    base = BASE / version
    cluster = LocalSlurmCluster(
        base, cluster=f"rest{version.replace('.', '')}", nodes=3, ctld_port=port,
        node_port_base=port + 100, version=version, rest_port=port + 50,
    )  # fmt: skip
    cluster.stop()  # leftovers of an interrupted run
    shutil.rmtree(base, ignore_errors=True)
    cluster.start(timeout=90)  # tolerant: 2 shared cores
    try:
        yield cluster, cluster.start_rest()
    finally:
        cluster.stop()


@pytest_asyncio.fixture
async def rest(lab: tuple[LocalSlurmCluster, RestEndpoint]) -> AsyncIterator[SlurmRestClient]:
    _, ep = lab
    client = SlurmRestClient(ep.url, ep.user, TokenSource(token=SecretStr(ep.token)), "lab")
    try:
        yield client
    finally:
        await client.close()


def scontrol(cluster: LocalSlurmCluster, job_id: str) -> dict[str, str]:
    """Slurm's own view of a job (key=value fields of `scontrol show job -o`; values without spaces)."""
    fields: dict[str, str] = {}
    for word in cluster.scontrol_job(job_id).split():
        key, sep, value = word.partition("=")
        if sep:
            fields.setdefault(key, value)
    return fields


async def wait_for(
    probe: Callable[[], Awaitable[JobSnapshot | None]], ok: Callable[[JobSnapshot], bool], timeout: float
) -> JobSnapshot:
    deadline = time.monotonic() + timeout
    last: JobSnapshot | None = None
    while time.monotonic() < deadline:
        last = await probe()
        if last is not None and ok(last):
            return last
        await asyncio.sleep(0.5)
    raise AssertionError(f"condition not met within {timeout} s; last: {last}")


def submit(cluster: LocalSlurmCluster, tmp_path: Path, *extra: str) -> str:
    script = tmp_path / "train.sh"
    script.write_text(JOB)
    return cluster.sbatch(["-N", "1", "--comment", COMMENT, "-o", f"{tmp_path}/%j.out", *extra, str(script)])


async def test_discovery_picks_newest_served_version(
    lab: tuple[LocalSlurmCluster, RestEndpoint], rest: SlurmRestClient
) -> None:
    cluster, _ = lab
    version = await rest.start()
    assert rest.served == SERVED[cluster.version]
    assert version.name == CHOSEN[cluster.version]


async def test_job_and_node_reads(
    lab: tuple[LocalSlurmCluster, RestEndpoint], rest: SlurmRestClient, tmp_path: Path
) -> None:
    cluster, _ = lab
    job_id = submit(cluster, tmp_path, "-J", "train; $(id)")
    running = await wait_for(lambda: rest.job(job_id), lambda j: j.state == "RUNNING", 20)
    slurm = scontrol(cluster, job_id)
    assert running.nodes == (slurm["NodeList"],) and running.name == "train; $(id)"
    assert running.comment == COMMENT and running.restart_count == 0 and not running.held
    snap = await rest.snapshot()
    assert job_id in {j.job_id for j in snap.jobs}
    assert sorted(n.name for n in snap.nodes) == ["node1", "node2", "node3"]
    node = await rest.node(slurm["NodeList"])
    assert node is not None and node.name == slurm["NodeList"] and node.state in ("allocated", "mixed")
    assert await rest.job("999999") is None
    assert await rest.node("node99") is None
    assert (await rest.cancel(job_id)).performed
    await wait_for(lambda: rest.job(job_id), lambda j: j.state == "CANCELLED", 20)
    assert scontrol(cluster, job_id)["JobState"] == "CANCELLED"
    assert not (await rest.cancel(job_id)).performed


async def test_hold_exclude_release_after_slurm_requeued(
    lab: tuple[LocalSlurmCluster, RestEndpoint], rest: SlurmRestClient, tmp_path: Path
) -> None:
    """No REST version can requeue: a running job is refused untouched. After a node failure Slurm
    requeues a --requeue job itself, and the rest of the recovery (hold, exclude, release) runs over REST."""
    cluster, _ = lab
    job_id = submit(cluster, tmp_path, "--requeue")
    running = await wait_for(lambda: rest.job(job_id), lambda j: j.state == "RUNNING", 20)
    bad = running.nodes[0]

    with pytest.raises(UnsupportedOperationError, match="no requeue"):
        await rest.requeue_hold(job_id, expected_restarts=0)
    untouched = scontrol(cluster, job_id)
    assert untouched["JobState"] == "RUNNING" and untouched["Restarts"] == "0"

    cluster.kill_node(bad)
    try:
        await wait_for(lambda: rest.job(job_id), lambda j: j.restart_count == 1, 40)
        held = await rest.requeue_hold(job_id, expected_restarts=0)
        assert held.performed and held.held and held.restart_count == 1
        assert not (await rest.requeue_hold(job_id, expected_restarts=0)).performed
        assert scontrol(cluster, job_id)["Priority"] == "0"

        excluded = await rest.set_excluded(job_id, [bad])
        assert excluded.performed
        assert not (await rest.set_excluded(job_id, [bad])).performed
        slurm = scontrol(cluster, job_id)
        assert slurm["ExcNodeList"] == bad and slurm["Restarts"] == "1"

        assert (await rest.release(job_id)).performed
        assert not (await rest.release(job_id)).performed
        rerun = await wait_for(lambda: rest.job(job_id), lambda j: j.state == "RUNNING", 40)
        assert bad not in rerun.nodes and rerun.excluded_nodes == (bad,)
        slurm = scontrol(cluster, job_id)
        assert slurm["JobState"] == "RUNNING" and slurm["ExcNodeList"] == bad and slurm["NodeList"] != bad
    finally:
        await rest.cancel(job_id)
        cluster.restart_node(bad)


async def test_drain_and_resume(lab: tuple[LocalSlurmCluster, RestEndpoint], rest: SlurmRestClient) -> None:
    cluster, _ = lab
    if cluster.version == "22.05":
        with pytest.raises(UnsupportedOperationError, match="no node update"):
            await rest.drain("node3", "gpu xid 79")
        assert "DRAIN" not in cluster._run(["scontrol", "show", "node", "node3"])
        return
    drained = await rest.drain("node3", "gpu xid 79 (trainguard)")
    assert drained.performed
    assert cluster.wait_node_state("node3", ["drained", "draining"]) in ("drained", "draining")
    node = await rest.node("node3")
    assert node is not None and "DRAIN" in node.flags and node.reason == "gpu xid 79 (trainguard)"
    assert not (await rest.drain("node3", "again")).performed
    assert (await rest.resume_node("node3")).performed
    cluster.wait_node_state("node3", ["idle"])
    node = await rest.node("node3")
    assert node is not None and "DRAIN" not in node.flags
    assert "DRAIN" not in cluster._run(["scontrol", "show", "node", "node3"])
    assert not (await rest.resume_node("node3")).performed


async def test_wrong_token_is_a_clear_error(lab: tuple[LocalSlurmCluster, RestEndpoint]) -> None:
    _, ep = lab
    head, payload, signature = ep.token.split(".")
    forged = f"{head}.{payload}.{signature[::-1]}"  # same claims, a signature slurmctld rejects
    client = SlurmRestClient(ep.url, ep.user, TokenSource(token=SecretStr(forged)), "lab")
    try:
        with pytest.raises(SlurmRestAuthError) as caught:
            await client.start()
        assert forged not in str(caught.value) and signature not in str(caught.value)
        assert not caught.value.retryable
    finally:
        await client.close()


async def test_token_file_is_reread_when_rotated(
    lab: tuple[LocalSlurmCluster, RestEndpoint], tmp_path: Path
) -> None:
    cluster, ep = lab
    token_file = tmp_path / "token"
    token_file.write_text("SLURM_JWT=not.a-valid.token\n")
    client = SlurmRestClient(ep.url, ep.user, TokenSource(token_file=token_file), "lab")
    try:
        with pytest.raises(SlurmRestAuthError) as caught:
            await client.start()
        assert caught.value.retryable  # a rotated file may fix it
        token_file.write_text(f"SLURM_JWT={cluster.rest_token(ep.user, 600)}\n")
        assert (await client.start()).name == CHOSEN[cluster.version]
        assert len((await client.snapshot()).nodes) == 3
    finally:
        await client.close()


async def test_version_not_served_is_a_clear_error(lab: tuple[LocalSlurmCluster, RestEndpoint]) -> None:
    cluster, ep = lab
    pinned = NOT_SERVED[cluster.version]
    client = SlurmRestClient(
        ep.url, ep.user, TokenSource(token=SecretStr(ep.token)), "lab", api_version=pinned
    )
    try:
        with pytest.raises(NoSupportedVersionError) as caught:
            await client.snapshot()
        assert caught.value.served == tuple(SERVED[cluster.version])
        assert pinned in str(caught.value) and not caught.value.retryable
    finally:
        await client.close()


# --- the worker in slurmrestd mode (cluster.access: slurmrestd), on the real stack --------------------


@pytest_asyncio.fixture
async def rest_stack(
    lab: tuple[LocalSlurmCluster, RestEndpoint], temporal_server: LocalTemporal, tmp_path: Path
) -> AsyncIterator[Stack]:
    cluster, ep = lab
    name = f"rest-{cluster.version.replace('.', '')}"
    token_file = tmp_path / "slurm.jwt"
    token_file.write_text(f"SLURM_JWT={ep.token}\n")
    base = make_settings(
        temporal_address=temporal_server.address,
        cluster=cluster,
        audit_url=f"sqlite:///{tmp_path / 'audit.db'}",
        name=name,
    )
    rest = {"url": ep.url, "user": ep.user, "token_file": str(token_file)}
    cluster_settings = ClusterSettings(
        **{**base.cluster.model_dump(), "access": "slurmrestd", "slurmrestd": rest}
    )
    # A killed node stops the job's output: the hang detector would fire before Slurm declares the node
    # down (~12 s), and a hang needs a requeue, which slurmrestd cannot do. Give Slurm the first move.
    watch = base.watch.model_copy(update={"hang_floor_s": 60.0})
    settings = base.model_copy(update={"cluster": cluster_settings, "watch": watch})
    client = await connect(settings)
    runtime = build_workers(client, settings)
    assert isinstance(runtime.slurm, SlurmRestClient)  # the settings chose the client
    await runtime.slurm.start()
    runtime.start()
    await ensure_cluster_watch(client, settings)
    store = AuditStore.from_url(settings.audit.url)
    workdir = tmp_path / "jobs"
    workdir.mkdir()
    try:
        yield Stack(cluster=cluster, client=client, store=store, settings=settings, workdir=workdir)
    finally:
        for job in cluster.active_job_ids():
            cluster._run(["scancel", job], check=False)
        await runtime.shutdown()
        store.close()


async def test_worker_over_slurmrestd_discovers_advises_and_reports_the_missing_requeue(
    rest_stack: Stack,
) -> None:
    """The worker sees the job only through slurmrestd, detects the Xid from its output file, advises,
    and its requeue step fails with the typed reason (no REST requeue): audited, Slurm untouched."""
    job = rest_stack.submit(
        comment=json.dumps({"trainguard": {"environment": "e2e", "mode": "action"}}),
        env={"TRAINSIM_FAULT": "xid", "TRAINSIM_FAULT_AT": "8"},  # rank 0 fails, wherever it runs
    )
    await rest_stack.wait_for_event(job.job_id, EventType.ACTION_FAILED, timeout=120)
    events = rest_stack.events(job.job_id)
    kinds = [e.event_type for e in events]
    assert EventType.WORKLOAD_DISCOVERED in kinds and EventType.ADVICE in kinds
    failed = next(e for e in events if e.event_type == EventType.ACTION_FAILED)
    assert failed.action == "requeue_hold" and "cannot requeuehold" in failed.message
    deadline = time.monotonic() + 60
    record = job.show()
    while record["JobState"] != "FAILED" and record["Restarts"] == "0" and time.monotonic() < deadline:
        await asyncio.sleep(0.5)
        record = job.show()
    if record["Restarts"] == "0":
        assert record["JobState"] == "FAILED" and record.get("ExcNodeList") in ("(null)", None)
        done = [e for e in rest_stack.events(job.job_id) if e.event_type == EventType.ACTION]
        assert not [e for e in done if e.data.get("performed")], done
    else:
        # Only Slurm itself may have requeued it: a slurmd that missed SlurmdTimeout on this loaded
        # machine is a node failure, and the job asked for --requeue. TrainGuard sent no requeue.
        log = (rest_stack.cluster.log_dir / "slurmctld.log").read_text(errors="replace")
        assert f"JobId={job.job_id} due to failure of node" in log, record


async def test_signals_check_reads_slurm_through_slurmrestd(
    lab: tuple[LocalSlurmCluster, RestEndpoint], tmp_path: Path
) -> None:
    """`trainguard signals check` in slurmrestd mode: job and node names come from slurmrestd."""
    cluster, ep = lab
    job_id = submit(cluster, tmp_path)

    def settings(token: str) -> Settings:
        rest = {"url": ep.url, "user": ep.user, "token": token}
        return Settings(cluster=ClusterSettings(access="slurmrestd", slurmrestd=rest))

    try:
        report = await run_checks(settings(ep.token), LocalRunner(), CheckRequest(job_id=job_id))
        found = {c.name: c for c in report.checks}
        assert found["slurm.job"].status is Status.PASS and job_id in found["slurm.job"].detail
        assert found["slurm.nodes"].status is Status.PASS and "3 node(s)" in found["slurm.nodes"].detail
        head, payload, signature = ep.token.split(".")
        forged = f"{head}.{payload}.{signature[::-1]}"
        refused = await run_checks(settings(forged), LocalRunner(), CheckRequest(job_id=job_id))
        found = {c.name: c for c in refused.checks}
        assert found["slurm.nodes"].status is Status.FAIL and "cluster.slurmrestd" in found["slurm.nodes"].fix
        assert forged not in refused.to_json()
    finally:
        cluster._run(["scancel", job_id], check=False)


async def test_worker_over_slurmrestd_recovers_a_node_failure(rest_stack: Stack) -> None:
    """A node dies under a --requeue job: Slurm requeues it itself, and TrainGuard - reaching Slurm only
    through slurmrestd - holds it, excludes the dead node and releases it; it resumes and completes.

    On this loaded 2-core machine a slurmd may also miss SlurmdTimeout by itself: any node Slurm failed
    may then be excluded too, so the assertions are about the node killed here plus what Slurm reports."""
    cluster = rest_stack.cluster
    job = rest_stack.submit(
        comment=json.dumps({"trainguard": {"environment": "e2e", "mode": "action"}}),
        env={"TRAINSIM_ITERS": "150", "TRAINSIM_STEP_S": "0.1"},
        nodes=1,
    )
    record = await rest_stack.wait_job_state(job, {"RUNNING"}, timeout=30)
    await asyncio.sleep(3)  # some iterations and a checkpoint
    record = job.show()
    victim = record["NodeList"]
    assert victim in cluster.node_names and record["Restarts"] == "0", record
    cluster.kill_node(victim)
    try:
        await rest_stack.wait_for_event(job.job_id, EventType.COMPLETED, timeout=150)
    finally:
        cluster.restart_node(victim)
    record = job.show()
    assert record["JobState"] == "COMPLETED" and int(record["Restarts"]) >= 1, record
    assert victim in expand_hostlist(record["ExcNodeList"]) and record["NodeList"] != victim, record
    actions = [e for e in rest_stack.events(job.job_id) if e.event_type == EventType.ACTION]
    steps = [e.action for e in actions if e.data.get("performed")]
    assert {"requeue_hold", "exclude", "release"} <= set(steps), steps

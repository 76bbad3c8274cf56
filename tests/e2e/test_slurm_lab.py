"""The lab clusters of both Slurm versions, and the Slurm layer against them (munged + slurmctld + 4 slurmd).

22.05 comes from the host's packages, 24.11 from the root filesystem scripts/bootstrap.sh makes; a
missing Slurm fails these tests (LabError), it never skips them. Ports 20017/20201.. (22.05) and
20057/20241.. (24.11) and /tmp/tg-h1/ keep these clusters apart from the quick-start one.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import shutil
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from tests.e2e.stack import PORT_OFFSET
from trainguard.localstack.slurm import LocalSlurmCluster
from trainguard.localstack.slurm_rootfs import write_wrappers
from trainguard.models import JobSnapshot
from trainguard.optin import parse_opt_in
from trainguard.slurm.client import SlurmClient
from trainguard.slurm.runner import CommandError, LocalRunner

pytestmark = [pytest.mark.e2e]

# Per port offset: checkouts running at once must not share pid files and state.
BASE = Path(os.environ.get("TG_E2E_SLURM_DIR", f"/tmp/tg-h1/e2e-slurm-{PORT_OFFSET}"))
CTLD_PORT = int(os.environ.get("TG_E2E_SLURM_PORT", "20017")) + PORT_OFFSET
VERSIONS = ("22.05", "24.11")
PORTS = {"22.05": CTLD_PORT, "24.11": CTLD_PORT + 40}
REST_APIS = {"22.05": ("v0.0.38",), "24.11": ("v0.0.40", "v0.0.41", "v0.0.42")}
COMMENT = '{"trainguard":{"environment":"prod","mode":"action"}}'
JOB = """#!/bin/bash
echo "attempt restarts=${SLURM_RESTART_COUNT:-0} on $SLURM_JOB_NODELIST"
srun -l sleep 300
"""


@pytest.fixture(scope="module", params=VERSIONS)
def cluster(request: pytest.FixtureRequest) -> Iterator[LocalSlurmCluster]:
    version = str(request.param)
    port = PORTS[version]
    base = BASE / version
    lab = LocalSlurmCluster(
        base, ctld_port=port, node_port_base=port + 184, version=version, rest_port=port + 30
    )
    lab.stop()  # leftovers of an interrupted run, by their pid files (before those are removed)
    shutil.rmtree(base, ignore_errors=True)  # a fresh state dir: job ids start at 1, no leftovers
    try:
        lab.start()  # inside try: a start that fails half way must not leave daemons behind
        yield lab
    finally:
        lab.stop()


def job_state(cluster: LocalSlurmCluster, job_id: str) -> str:
    return cluster.run(["squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T"], check=False).strip()


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} within {timeout} s")
        time.sleep(0.3)


def test_lab_runs_the_version_asked_for_and_survives_a_node_crash(
    cluster: LocalSlurmCluster, tmp_path: Path
) -> None:
    """Only Slurm's own commands here (no TrainGuard parser), so this holds on every version."""
    assert f"slurm-wlm {cluster.version}." in cluster.run(["sinfo", "--version"])
    assert cluster.node_states() == {n: "idle" for n in cluster.node_names}
    script = tmp_path / "job.sh"
    script.write_text(JOB)
    job_id = cluster.sbatch(["-N", "2", "-o", f"{tmp_path}/%j.out", "--chdir", str(tmp_path), str(script)])
    wait_until(lambda: job_state(cluster, job_id) == "RUNNING", 20, "job did not run")
    output = tmp_path / f"{job_id}.out"
    # Written by slurmstepd (inside the rootfs for 24.11), read here at the same path.
    wait_until(lambda: output.exists() and "restarts=0" in output.read_text(), 10, "no job output")
    nodes = cluster.run(["squeue", "-h", "-j", job_id, "-o", "%N"]).strip()
    victim = "node" + nodes.removeprefix("node[").split("-")[0].split(",")[0].rstrip("]")
    assert victim in cluster.node_names, nodes
    killed = cluster.kill_node(victim)
    assert killed, "kill_node found no process of the node"
    assert cluster.wait_node_state(victim, ["down"], 30).startswith("down")
    wait_until(lambda: "Restarts=1" in cluster.scontrol_job(job_id), 30, "Slurm did not requeue the job")
    cluster.restart_node(victim)
    cluster.run(["scancel", job_id])
    wait_until(lambda: job_state(cluster, job_id) == "CANCELLED", 20, "job not cancelled")
    cluster.wait_idle(30)


def test_slurmrestd_serves_its_versions_api(cluster: LocalSlurmCluster, tmp_path: Path) -> None:
    endpoint = cluster.start_rest()
    assert endpoint.version == cluster.version
    job_id = cluster.sbatch(["-H", "-o", f"{tmp_path}/%j.out", "--wrap", "true"])
    headers = {"X-SLURM-USER-NAME": endpoint.user, "X-SLURM-USER-TOKEN": endpoint.token}
    for api in REST_APIS[cluster.version]:
        request = urllib.request.Request(f"{endpoint.url}/slurm/{api}/jobs", headers=headers)
        with urllib.request.urlopen(request, timeout=30) as response:
            jobs = json.loads(response.read())["jobs"]
        assert job_id in {str(j["job_id"]) for j in jobs}, api
    other = "v0.0.40" if cluster.version == "22.05" else "v0.0.38"
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(
            urllib.request.Request(f"{endpoint.url}/slurm/{other}/jobs", headers=headers), timeout=30
        )
    assert missing.value.code == 404
    with pytest.raises(urllib.error.HTTPError) as anonymous:
        urllib.request.urlopen(f"{endpoint.url}/slurm/{REST_APIS[cluster.version][0]}/jobs", timeout=30)
    assert anonymous.value.code == 401
    cluster.run(["scancel", job_id])
    cluster.stop_rest()


def test_both_versions_run_at_once() -> None:
    base = BASE / "both"  # short: pytest-xdist's tmp_path is too deep for slurmstepd's sockets
    shutil.rmtree(base, ignore_errors=True)
    labs = [
        LocalSlurmCluster(
            base / version,
            cluster=f"both{version.replace('.', '')}",
            nodes=1,
            ctld_port=PORTS[version] + 10,
            node_port_base=PORTS[version] + 20,
            version=version,
        )
        for version in VERSIONS
    ]
    try:
        for lab in labs:
            lab.start()
        assert labs[0].munge_socket != labs[1].munge_socket
        submitted = {}
        for lab in labs:
            assert lab.is_running()
            assert f"slurm-wlm {lab.version}." in lab.run(["sinfo", "--version"])
            out = f"{base}/{lab.version}-%j.out"
            submitted[lab.version] = lab.sbatch(["-o", out, "--wrap", "echo $SLURM_CLUSTER_NAME"])
        for lab in labs:
            job_id = submitted[lab.version]
            done = functools.partial(lambda c, j: job_state(c, j) == "COMPLETED", lab, job_id)
            wait_until(done, 60, f"{lab.version} job did not finish")  # 2 cores, both clusters busy
            assert (base / f"{lab.version}-{job_id}.out").read_text().strip() == lab.cluster
    finally:
        for lab in labs:
            lab.stop()
    assert not any(lab.is_running() for lab in labs)


@pytest.fixture
def client(cluster: LocalSlurmCluster) -> SlurmClient:
    return SlurmClient(LocalRunner(cluster.env), "lab")


async def wait_for(
    probe: Callable[[], Awaitable[JobSnapshot | None]], ok: Callable[[JobSnapshot], bool], timeout: float
) -> JobSnapshot:
    deadline = time.monotonic() + timeout
    last: JobSnapshot | None = None
    while time.monotonic() < deadline:
        last = await probe()
        if last is not None and ok(last):
            return last
        await asyncio.sleep(0.3)
    raise AssertionError(f"condition not met within {timeout} s; last: {last}")


async def test_recovery_cycle_on_real_job(
    cluster: LocalSlurmCluster, client: SlurmClient, tmp_path: Path
) -> None:
    script = tmp_path / "train.sh"
    script.write_text(JOB)
    job_id = cluster.sbatch(
        ["-N", "2", "-J", "train; $(id)", "--comment", COMMENT, "-o", f"{tmp_path}/%x-%j.out", str(script)]
    )

    async def from_snapshot() -> JobSnapshot | None:
        snap = await client.snapshot()
        return next((j for j in snap.jobs if j.job_id == job_id), None)

    running = await wait_for(from_snapshot, lambda j: j.state == "RUNNING", 15)
    assert len(running.nodes) == 2 and running.num_nodes == 2
    assert parse_opt_in(running.comment) is not None and running.name == "train; $(id)"
    assert running.stdout_path == f"{tmp_path}/train; $(id)-{job_id}.out"
    assert (await client.job(job_id)) is not None
    assert (await client.job(job_id)).stdout_path == running.stdout_path  # type: ignore[union-attr]

    first = await client.requeue_hold(job_id, expected_restarts=0)
    assert first.performed and first.held and first.restart_count == 1
    again = await client.requeue_hold(job_id, expected_restarts=0)
    assert not again.performed

    bad = running.nodes[0]
    excluded = await client.set_excluded(job_id, [bad])
    assert excluded.performed
    assert not (await client.set_excluded(job_id, [bad])).performed
    raw = cluster.scontrol_job(job_id)
    assert "Restarts=1" in raw and f"ExcNodeList={bad}" in raw

    assert (await client.release(job_id)).performed
    assert not (await client.release(job_id)).performed
    rerun = await wait_for(lambda: client.job(job_id), lambda j: j.state == "RUNNING", 25)
    assert bad not in rerun.nodes and rerun.restart_count == 1 and rerun.excluded_nodes == (bad,)

    with pytest.raises(CommandError, match="not pending"):
        await client.set_excluded(job_id, [])

    victim = rerun.nodes[0]
    started = time.monotonic()
    cluster.kill_node(victim)

    async def node_state() -> JobSnapshot | None:
        snap = await client.snapshot()
        node = next(n for n in snap.nodes if n.name == victim)
        return running if node.state == "down" else None

    await wait_for(node_state, lambda _j: True, 25)
    down_after = time.monotonic() - started
    # Requeueable job: Slurm requeues it by itself after NODE_FAIL; our requeue_hold then only holds.
    requeued = await wait_for(lambda: client.job(job_id), lambda j: j.restart_count == 2, 20)
    result = await client.requeue_hold(job_id, expected_restarts=1)
    assert not result.performed or "held it" in result.detail
    held = await client.job(job_id)
    assert held is not None and held.held and held.state in ("PENDING", "COMPLETING")
    print(f"node down after {down_after:.1f} s; job requeued state {requeued.state}")
    assert (await client.cancel(job_id)).performed
    await wait_for(lambda: client.job(job_id), lambda j: j.state == "CANCELLED", 20)
    assert not (await client.cancel(job_id)).performed
    cluster.restart_node(victim)


async def test_unreachable_controller_is_retryable(cluster: LocalSlurmCluster, tmp_path: Path) -> None:
    ghost = LocalSlurmCluster(
        tmp_path / "ghost",
        ctld_port=CTLD_PORT + 9,
        node_port_base=CTLD_PORT + 300,
        version=cluster.version,
        rootfs=cluster.rootfs,
    )
    ghost.conf.parent.mkdir(parents=True)
    ghost.conf.write_text(ghost.render_config().replace(str(ghost.munge_socket), str(cluster.munge_socket)))
    if ghost.rootfs is not None:
        write_wrappers(ghost.bin_dir, ghost.rootfs, ghost.shared_paths)
    client = SlurmClient(LocalRunner(ghost.env), "ghost")
    # squeue --json exits 0 with an empty list here; it must not read as "no jobs".
    with pytest.raises(CommandError) as info:
        await client.snapshot()
    assert info.value.retryable
    with pytest.raises(CommandError) as job_info:
        await client.job("1")
    assert job_info.value.retryable and "Unable to contact slurm controller" in job_info.value.stderr

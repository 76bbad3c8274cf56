"""The Slurm layer against a real local multi-node Slurm (munged + slurmctld + 4 slurmd).

Ports 26817/27001.. and /tmp/tg-h1/ keep this cluster apart from the quick-start one.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from tests.e2e.stack import PORT_OFFSET
from trainguard.localstack.slurm import LocalSlurmCluster
from trainguard.models import JobSnapshot
from trainguard.optin import parse_opt_in
from trainguard.slurm.client import SlurmClient
from trainguard.slurm.runner import CommandError, LocalRunner

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(shutil.which("slurmctld") is None, reason="no Slurm")]

BASE = Path(os.environ.get("TG_E2E_SLURM_DIR", "/tmp/tg-h1/e2e-slurm"))
CTLD_PORT = int(os.environ.get("TG_E2E_SLURM_PORT", "26817")) + PORT_OFFSET
COMMENT = '{"trainguard":{"environment":"prod","mode":"action"}}'
JOB = """#!/bin/bash
echo "attempt restarts=${SLURM_RESTART_COUNT:-0} on $SLURM_JOB_NODELIST"
srun -l sleep 300
"""


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalSlurmCluster]:
    lab = LocalSlurmCluster(BASE, ctld_port=CTLD_PORT, node_port_base=CTLD_PORT + 184)
    if not lab.is_running() and BASE.exists():
        shutil.rmtree(BASE)  # a fresh state dir: job ids start at 1, no leftovers
    lab.start()
    try:
        yield lab
    finally:
        lab.stop()


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
    ghost = LocalSlurmCluster(tmp_path / "ghost", ctld_port=CTLD_PORT + 9, node_port_base=CTLD_PORT + 300)
    ghost.conf.parent.mkdir(parents=True)
    ghost.conf.write_text(ghost.render_config().replace(str(ghost.munge_socket), str(cluster.munge_socket)))
    client = SlurmClient(LocalRunner(ghost.env), "ghost")
    # squeue --json exits 0 with an empty list here; it must not read as "no jobs".
    with pytest.raises(CommandError) as info:
        await client.snapshot()
    assert info.value.retryable
    with pytest.raises(CommandError) as job_info:
        await client.job("1")
    assert job_info.value.retryable and "Unable to contact slurm controller" in job_info.value.stderr

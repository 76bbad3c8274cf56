"""Session fixtures for the end-to-end tests on the real stack (Slurm + Temporal dev server + worker)."""

from __future__ import annotations

import contextlib
import shutil
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio

from tests.e2e.stack import PORT_OFFSET, REPO, Stack, free_port, make_settings
from trainguard.audit.store import AuditStore
from trainguard.localstack.slurm import LocalSlurmCluster
from trainguard.localstack.temporal import LocalTemporal
from workers.worker import build_workers, connect, ensure_cluster_watch

E2E_DIR = REPO / "var" / "e2e"


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[LocalSlurmCluster]:
    cluster = LocalSlurmCluster(
        E2E_DIR / "slurm",
        cluster="e2e",
        nodes=4,
        ctld_port=18817 + PORT_OFFSET,
        node_port_base=19001 + PORT_OFFSET,
    )
    cluster.stop()  # leftovers of an interrupted run
    shutil.rmtree(cluster.state_dir, ignore_errors=True)  # jobs of an earlier session are not this one's
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def temporal_server() -> Iterator[LocalTemporal]:
    server = LocalTemporal(E2E_DIR / "temporal", port=free_port(), ui_port=None, db_file=None)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest_asyncio.fixture(scope="session")
async def stack(slurm_cluster: LocalSlurmCluster, temporal_server: LocalTemporal) -> AsyncIterator[Stack]:
    workdir = E2E_DIR / "jobs"
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    audit_url = f"sqlite:///{E2E_DIR / ('audit-' + uuid.uuid4().hex[:8] + '.db')}"
    settings = make_settings(
        temporal_address=temporal_server.address, cluster=slurm_cluster, audit_url=audit_url
    )
    client = await connect(settings)
    runtime = build_workers(client, settings)
    runtime.start()
    await ensure_cluster_watch(client, settings)
    store = AuditStore.from_url(audit_url)
    try:
        yield Stack(cluster=slurm_cluster, client=client, store=store, settings=settings, workdir=workdir)
    finally:
        for job in slurm_cluster.active_job_ids():
            with contextlib.suppress(Exception):
                slurm_cluster._run(["scancel", job], check=False)
        await runtime.shutdown()
        store.close()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if Path(str(item.fspath)).is_relative_to(Path(__file__).parent):
            item.add_marker(pytest.mark.e2e)

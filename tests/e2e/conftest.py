"""Session fixtures for the end-to-end tests on the real stack (Slurm + Temporal dev server + worker).

Slurm versions: a test marked `@pytest.mark.slurm_versions("22.05", "24.11")` runs once per listed
version; unmarked tests run on 22.05. `slurm_version` is a session-scoped, indirectly parametrized
fixture, so pytest groups the tests by version and starts one cluster (and one worker) per version.
24.11 runs from the root filesystem that scripts/bootstrap.sh makes; if it is missing, those tests fail.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from temporalio.client import Client
from temporalio.service import RPCError

from tests.e2e.crash_stack import MariaDBAudit
from tests.e2e.stack import PORT_OFFSET, REPO, Stack, free_port, make_settings
from trainguard.api.temporal_control import cluster_workflow_id
from trainguard.audit.store import AuditStore
from trainguard.localstack.slurm import LocalSlurmCluster
from trainguard.localstack.slurm_rootfs import SUPPORTED_VERSIONS
from trainguard.localstack.sshd import LocalSSHD
from trainguard.localstack.temporal import LocalTemporal
from workers.worker import build_workers, connect, ensure_cluster_watch

# Per offset, so two runs in one checkout never stop or wipe each other's cluster.
E2E_DIR = REPO / "var" / ("e2e" if PORT_OFFSET == 0 else f"e2e-{PORT_OFFSET}")


DEFAULT_SLURM = "22.05"
# ctld port, first slurmd port (before TG_TEST_PORT_OFFSET); each version its own, so both can run at once.
SLURM_PORTS = {"22.05": (18817, 19001), "24.11": (18917, 19101)}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "slurm_version" not in metafunc.fixturenames:
        return
    marker = metafunc.definition.get_closest_marker("slurm_versions")
    versions = list(marker.args) if marker else [DEFAULT_SLURM]
    unknown = [v for v in versions if v not in SUPPORTED_VERSIONS]
    if unknown or not versions:
        raise pytest.UsageError(f"{metafunc.definition.nodeid}: slurm_versions{tuple(versions)}: unknown")
    metafunc.parametrize("slurm_version", versions, indirect=True, scope="session")


@pytest.fixture(scope="session")
def slurm_version(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def cluster_name(version: str) -> str:
    """e2e for 22.05 (as before), e2e-2411 etc.: own Temporal task queue and cluster watch per version."""
    return "e2e" if version == DEFAULT_SLURM else f"e2e-{version.replace('.', '')}"


@pytest.fixture(scope="session")
def slurm_cluster(slurm_version: str) -> Iterator[LocalSlurmCluster]:
    ctld_port, node_port_base = SLURM_PORTS[slurm_version]
    cluster = LocalSlurmCluster(
        E2E_DIR / ("slurm" if slurm_version == DEFAULT_SLURM else f"slurm-{slurm_version}"),
        cluster=cluster_name(slurm_version),
        nodes=4,
        ctld_port=ctld_port + PORT_OFFSET,
        node_port_base=node_port_base + PORT_OFFSET,
        version=slurm_version,
    )
    cluster.stop()  # leftovers of an interrupted run
    shutil.rmtree(cluster.state_dir, ignore_errors=True)  # jobs of an earlier session are not this one's
    try:
        cluster.start()  # inside try: a start that fails half way must not leave daemons behind
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
async def stack(
    slurm_cluster: LocalSlurmCluster, temporal_server: LocalTemporal, slurm_version: str
) -> AsyncIterator[Stack]:
    workdir = E2E_DIR / ("jobs" if slurm_version == DEFAULT_SLURM else f"jobs-{slurm_version}")
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    audit_url = f"sqlite:///{E2E_DIR / ('audit-' + uuid.uuid4().hex[:8] + '.db')}"
    settings = make_settings(
        temporal_address=temporal_server.address,
        cluster=slurm_cluster,
        audit_url=audit_url,
        name=cluster_name(slurm_version),
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
        await end_workflows(client, settings.cluster.name)
        await runtime.shutdown()
        store.close()


async def end_workflows(client: Client, cluster: str) -> None:
    """The Temporal server outlives this stack, and a later stack of the same cluster name (pytest-xdist
    runs a file's tests of both Slurm versions, then another file's) starts Slurm afresh, with job ids
    from 1 again: a workflow left running here would watch the new job of its id and write to its audit."""
    query = f'TrainGuardCluster = "{cluster}" AND ExecutionStatus = "Running"'
    handles = [client.get_workflow_handle(w.id, run_id=w.run_id) async for w in client.list_workflows(query)]
    handles.append(client.get_workflow_handle(cluster_workflow_id(cluster)))
    for handle in handles:
        with contextlib.suppress(RPCError):
            await handle.terminate(reason="e2e stack torn down")


# SSH mode: a login node (sshd on 127.0.0.1) in front of a Slurm of its own, shared by the SSH runner
# tests and the operator-guide walk. Per port offset: checkouts running at once must not share them.
SSH_DIR = Path(os.environ.get("TG_E2E_SSH_DIR", f"/tmp/tg-h1/e2e-ssh-{PORT_OFFSET}"))
SSH_PORT = int(os.environ.get("TG_E2E_SSH_PORT", "20417")) + PORT_OFFSET
SSH_SLURM_PORT = int(os.environ.get("TG_E2E_SSH_SLURM_PORT", "20437")) + PORT_OFFSET


@pytest_asyncio.fixture(scope="module")
async def mariadb() -> AsyncIterator[MariaDBAudit]:
    """A database and user of their own on the development MariaDB (the crash stacks' audit store, which a
    test can make refuse the worker)."""
    db = MariaDBAudit()
    db.create()
    try:
        yield db
    finally:
        db.drop()


@pytest.fixture(scope="session")
def ssh_slurm() -> Iterator[LocalSlurmCluster]:
    lab = LocalSlurmCluster(
        SSH_DIR / "slurm", nodes=2, ctld_port=SSH_SLURM_PORT, node_port_base=SSH_SLURM_PORT + 264
    )
    lab.stop()  # leftovers of an interrupted run
    shutil.rmtree(lab.state_dir, ignore_errors=True)
    try:
        lab.start()
        yield lab
    finally:
        lab.stop()


@pytest.fixture(scope="session")
def login_sshd() -> Iterator[LocalSSHD]:
    server = LocalSSHD(SSH_DIR / "sshd", SSH_PORT)
    server.stop()
    try:
        server.start()
        yield server
    finally:
        server.stop()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if Path(str(item.fspath)).is_relative_to(Path(__file__).parent):
            item.add_marker(pytest.mark.e2e)

"""SSH mode: SSHRunner against a private sshd on 127.0.0.1 that fronts a real local Slurm."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.e2e import conftest
from trainguard.localstack.slurm import LocalSlurmCluster
from trainguard.localstack.sshd import LocalSSHD
from trainguard.slurm.client import SlurmClient
from trainguard.slurm.parsers import parse_squeue_json
from trainguard.slurm.runner import CommandError, LocalRunner, SSHRunner

pytestmark = [
    pytest.mark.e2e,
]

# The sshd and its Slurm are session fixtures in conftest (shared with the operator-guide walk); their
# ports stay readable here for tests/unit/test_e2e_ports.py.
SSH_PORT, CTLD_PORT = conftest.SSH_PORT, conftest.SSH_SLURM_PORT


@pytest.fixture
def cluster(ssh_slurm: LocalSlurmCluster) -> LocalSlurmCluster:
    return ssh_slurm


@pytest.fixture
def sshd(login_sshd: LocalSSHD) -> LocalSSHD:
    return login_sshd


@pytest.fixture
async def runner(sshd: LocalSSHD, cluster: LocalSlurmCluster) -> AsyncIterator[SSHRunner]:
    ssh = SSHRunner(sshd.settings(cluster.env, pool_size=2))
    try:
        yield ssh
    finally:
        await ssh.close()


async def test_squeue_over_ssh(runner: SSHRunner, cluster: LocalSlurmCluster) -> None:
    job_id = cluster.sbatch(["-N", "1", "-J", "ssh probe", "--comment", 'x\' "y" $(z)', "--wrap", "sleep 30"])
    result = await runner.run(["squeue", "--json", "-t", "all"], check=True)
    job = next(j for j in parse_squeue_json(result.stdout) if j.job_id == job_id)
    assert job.name == "ssh probe" and job.comment == 'x\' "y" $(z)'
    snap = await SlurmClient(runner, "lab").snapshot()
    assert {n.name for n in snap.nodes} == {"node1", "node2"}
    assert (await SlurmClient(runner, "lab").cancel(job_id)).performed


async def test_file_range_over_sftp(runner: SSHRunner, tmp_path: Path) -> None:
    path = tmp_path / "train.log"
    path.write_bytes(b"line one\nline two \xff\nline three\n")
    assert await runner.read_file(str(path), 9, 10) == b"line two \xff"
    remote = await runner.stat(str(path))
    assert remote == await LocalRunner().stat(str(path))  # same host: same size and dev:inode
    assert await runner.stat(str(tmp_path / "missing.log")) is None
    with pytest.raises(FileNotFoundError):
        await runner.read_file(str(tmp_path / "missing.log"), 0, 10)


async def test_unknown_host_key_is_refused(sshd: LocalSSHD, tmp_path: Path) -> None:
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    kind, key = Path(f"{other}.pub").read_text().split()[:2]
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{sshd.port} {kind} {key}\n")
    ssh = SSHRunner(sshd.settings(known_hosts=str(known)))
    try:
        with pytest.raises(CommandError) as info:
            await ssh.run(["true"])
        assert not info.value.retryable and "host key" in info.value.stderr
    finally:
        await ssh.close()


async def test_survives_sshd_restart(runner: SSHRunner, sshd: LocalSSHD) -> None:
    for _ in range(2):  # both pooled connections are open before the restart
        assert (await runner.run(["true"])).returncode == 0
    sshd.stop()  # also drops the established sessions, as a reboot of the login node would
    started = time.monotonic()
    with pytest.raises(CommandError) as info:
        await runner.run(["true"])
    assert info.value.retryable and time.monotonic() - started < 10  # bounded backoff, then give up
    sshd.start()
    for _ in range(3):
        assert (await runner.run(["echo", "back"])).stdout == "back\n"


async def test_timeout_kills_remote_command(runner: SSHRunner) -> None:
    marker = f"tg-marker-{uuid.uuid4().hex}"
    with pytest.raises(CommandError) as info:
        await runner.run(["python3", "-c", "import time; time.sleep(60)", marker], timeout=1.0)
    assert info.value.retryable
    deadline = time.monotonic() + 8
    while time.monotonic() < deadline:
        alive = [p for p in os.listdir("/proc") if p.isdigit() and _cmdline_has(p, marker)]
        if not alive:
            return
        await asyncio.sleep(0.2)
    pytest.fail("remote command outlived its timeout")


def _cmdline_has(pid: str, marker: str) -> bool:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return marker.encode() in raw and state != "Z" and b"timeout" not in raw.split(b"\0")[0]

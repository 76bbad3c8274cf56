from __future__ import annotations

import os
import shlex
import sys
import time
from pathlib import Path

import pytest

from trainguard.settings import ClusterSettings, SSHSettings
from trainguard.slurm.runner import CommandError, LocalRunner, SSHRunner, make_runner


async def test_local_runner_passes_argv_verbatim_and_env() -> None:
    runner = LocalRunner({"TG_TEST_VALUE": "x"})
    hostile = "$(touch /tmp/tg-should-not-exist); `id` 'q' \"d\""
    code = "import os,sys; print(sys.argv[1]); print(os.environ['TG_TEST_VALUE'])"
    result = await runner.run([sys.executable, "-c", code, hostile])
    assert result.returncode == 0
    assert result.stdout.splitlines() == [hostile, "x"]
    assert not Path("/tmp/tg-should-not-exist").exists()


async def test_local_runner_decodes_invalid_utf8() -> None:
    code = "import sys; sys.stdout.buffer.write(b'ok \\xff\\xfe end'); sys.stderr.buffer.write(b'\\xc3')"
    result = await LocalRunner().run([sys.executable, "-c", code])
    assert result.stdout == "ok \ufffd\ufffd end" and result.stderr == "\ufffd"


async def test_local_runner_check_and_missing_command() -> None:
    with pytest.raises(CommandError) as info:
        await LocalRunner().run([sys.executable, "-c", "import sys; sys.exit('nope')"], check=True)
    assert info.value.returncode == 1 and "nope" in info.value.stderr and not info.value.retryable
    with pytest.raises(CommandError) as missing:
        await LocalRunner().run(["/nonexistent/tg-command"])
    assert missing.value.returncode == 127


async def test_local_runner_timeout_kills_process_group(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    # The child spawns a grandchild; both must die when the command times out.
    code = (
        "import subprocess,sys,time;"
        f"p=subprocess.Popen([sys.executable,'-c','import time; time.sleep(60)']);"
        f"open({str(pid_file)!r},'w').write(str(p.pid));time.sleep(60)"
    )
    started = time.monotonic()
    with pytest.raises(CommandError) as info:
        await LocalRunner().run([sys.executable, "-c", code], timeout=1.0)
    assert info.value.retryable and time.monotonic() - started < 8
    grandchild = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{grandchild}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            break
        if state == "Z":
            break
        time.sleep(0.05)
    else:
        pytest.fail("grandchild survived the timeout")


async def test_local_stat_and_read_range(tmp_path: Path) -> None:
    path = tmp_path / "log.txt"
    path.write_bytes(b"0123456789")
    runner = LocalRunner()
    first = await runner.stat(str(path))
    assert first is not None and first.size == 10
    assert await runner.read_file(str(path), 3, 4) == b"3456"
    assert await runner.read_file(str(path), 20, 4) == b""
    assert await runner.stat(str(tmp_path / "missing")) is None
    path.unlink()
    path.write_bytes(b"new")
    second = await runner.stat(str(path))
    assert second is not None and second.size == 3
    st = os.stat(path)
    assert second.identity == f"{st.st_dev}:{st.st_ino}"


def test_ssh_remote_command_quotes_every_word() -> None:
    runner = SSHRunner(SSHSettings(slurm_env={"SLURM_CONF": "/etc/slurm conf/slurm.conf"}))
    command = runner.remote_command(["scontrol", "update", "Comment=a b; rm -rf / $(id)"], timeout=10)
    assert shlex.split(command) == [
        "timeout",
        "-s",
        "KILL",
        "11",
        "env",
        "SLURM_CONF=/etc/slurm conf/slurm.conf",
        "scontrol",
        "update",
        "Comment=a b; rm -rf / $(id)",
    ]


def test_ssh_rejects_bad_env_names_and_make_runner() -> None:
    with pytest.raises(ValueError):
        SSHRunner(SSHSettings(slurm_env={"A;B": "x"}))
    assert isinstance(make_runner(ClusterSettings(runner="ssh")), SSHRunner)
    assert isinstance(make_runner(ClusterSettings()), LocalRunner)

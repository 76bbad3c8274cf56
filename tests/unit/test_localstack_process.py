"""A local-stack daemon that exits without logging why says how it ended (the 24.11 slurmrestd once exited
with an empty log in a CI run; the error then named nothing but the empty log)."""

from __future__ import annotations

import time
from pathlib import Path

from trainguard.localstack.process import BackgroundProcess


def _ended(proc: BackgroundProcess) -> str:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if status := proc.exit_status():
            return status
        time.sleep(0.05)
    raise AssertionError("the process did not end")


def test_a_signalled_daemon_names_its_signal(tmp_path: Path) -> None:
    proc = BackgroundProcess("victim", tmp_path, ["/bin/sh", "-c", "kill -KILL $$"], marker="kill")
    proc.start()
    assert _ended(proc) == "killed by SIGKILL"
    assert proc.pid() is None


def test_a_daemon_that_exits_names_its_status(tmp_path: Path) -> None:
    proc = BackgroundProcess("quitter", tmp_path, ["/bin/sh", "-c", "exit 3"], marker="exit")
    proc.start()
    assert _ended(proc) == "exit status 3"


def test_a_running_daemon_has_no_exit_status(tmp_path: Path) -> None:
    proc = BackgroundProcess("sleeper", tmp_path, ["/bin/sleep", "30"], marker="sleep")
    proc.start()
    deadline = time.monotonic() + 10
    while proc.pid() is None and time.monotonic() < deadline:  # until the child has exec'd sleep
        time.sleep(0.05)
    try:
        assert proc.exit_status() == ""
    finally:
        proc.stop()
    assert _ended(proc) == "killed by SIGTERM"

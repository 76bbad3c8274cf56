"""bench.latency's derived figures for the real-PyTorch rows: the failing rank's exit (pt_exception) and the
full checkpoint filesystem (pt_enospc). Pure: no cluster."""

from __future__ import annotations

import os
import subprocess

from bench.latency import Result, detail, verdicts
from trainguard.localstack.slurm import is_alive


def test_detection_is_read_from_the_traceback_and_from_the_ranks_exit() -> None:
    r = Result(kind="pt_exception", job_id="7", fault_at=100.0, detected_at=104.5, rank_exit_at=103.0)
    assert r.detection_s == 4.5
    assert r.rank_exit_s == 3.0
    assert r.detection_after_exit_s == 1.5
    lines = verdicts([r], 0.2)
    assert any("from the failing rank's process exit: detection p50 1.5 s" in line for line in lines), lines
    assert "3.0" in detail([r]) and "1.5" in detail([r])


def test_no_exit_figure_without_the_exit() -> None:
    r = Result(kind="pt_exception", job_id="7", fault_at=100.0, detected_at=104.5)
    assert r.rank_exit_s is None and r.detection_after_exit_s is None
    assert not any("process exit" in line for line in verdicts([r], 0.2))


def test_a_full_filesystem_has_its_own_line() -> None:
    r = Result(kind="pt_enospc", job_id="8", fault_at=10.0, detected_at=12.0)
    assert any("checkpoint filesystem full: detection p50 2.0 s" in line for line in verdicts([r], 0.2))


def test_a_reaped_process_is_gone_and_a_zombie_counts_as_exited() -> None:
    assert is_alive(os.getpid())
    done = subprocess.Popen(["true"])
    done.wait()
    assert not is_alive(done.pid)
    zombie = subprocess.Popen(["true"])
    try:
        os.waitid(os.P_PID, zombie.pid, os.WEXITED | os.WNOWAIT)  # exited, not yet reaped
        assert not is_alive(zombie.pid)
    finally:
        zombie.wait()

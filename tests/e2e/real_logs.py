"""What the real-log tests share (test_healthy_real_logs, test_real_torch_faults, test_real_mpi_logs,
test_pytorch_recovery): torch must be there, and a real log is read the way the watch reads a growing file."""

from __future__ import annotations

import os
import signal
import subprocess

from trainguard.attribution.rules import attribute
from trainguard.detection.analyzer import LogAnalyzer
from trainguard.models import Finding, Verdict

CHUNK = 4096


def require_torch() -> None:
    """A missing torch fails the test that needs it, never skips it."""
    try:
        import torch  # noqa: F401
    except ImportError as err:
        raise AssertionError(
            "torch is not installed: pip install -e '.[torch]' (scripts/bootstrap.sh with "
            "TRAINGUARD_EXTRAS=dev,torch, as scripts/test.sh does)"
        ) from err


def finish(proc: subprocess.Popen[bytes], timeout: float, what: str, head: bytes = b"") -> tuple[int, str]:
    """(exit status, output) of a run started in its own session; one that outlives `timeout` is killed with
    its whole process group and fails the test with what it printed (`head`: output already read from it)."""
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        text = (head + out).decode(errors="replace")
        raise AssertionError(f"{what} did not end in {timeout:.0f} s:\n{text[-3000:]}") from None
    return proc.returncode, (head + out).decode("utf-8", errors="replace")


def stream(text: str) -> tuple[list[Finding], Verdict]:
    """The LogAnalyzer fed 4 KiB chunks, as the watch reads a growing file: its findings and their verdict."""
    analyzer = LogAnalyzer()
    data = text.encode("utf-8", errors="replace")
    findings: list[Finding] = []
    for i in range(0, len(data), CHUNK):
        findings += analyzer.feed(data[i : i + CHUNK], now=float(i // CHUNK))
    findings += analyzer.flush(now=float(len(data) // CHUNK + 1))
    verdict = attribute(findings, node_of_rank=analyzer.rank_host, world_size=analyzer.world_size)
    return findings, verdict

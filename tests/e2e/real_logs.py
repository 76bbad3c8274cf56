"""What the real-log tests share (test_healthy_real_logs, test_real_torch_faults, test_real_mpi_logs,
test_pytorch_recovery): torch must be there, and a real log is read the way the watch reads a growing file."""

from __future__ import annotations

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

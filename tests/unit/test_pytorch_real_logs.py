"""Attribution of real PyTorch DDP failures (examples/ddp_train.py, 2 nodes x 2 ranks on the local
cluster; logs captured in tests/fixtures/pytorch/, nobody here wrote their error lines)."""

from __future__ import annotations

from pathlib import Path

from trainguard.attribution.rules import attribute
from trainguard.detection.analyzer import LogAnalyzer
from trainguard.detection.classify import classify_bytes
from trainguard.models import Category

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "pytorch"


def _read(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def test_outside_sigkill_under_srun_is_a_signal_kill_from_srun_not_the_gloo_cascade() -> None:
    # The survivors' "Connection closed by peer" tracebacks come first in the log; srun's line names
    # the rank that really failed.
    result = classify_bytes(_read("srun_sigkill_rank2.out"))
    assert result.category == Category.SIGNAL_KILL.value
    assert result.pattern_ids[0] == "sigkill"
    assert "gloo_peer_lost" in result.pattern_ids
    assert any("task 2: Killed" in e for e in result.evidence)


def test_outside_sigkill_under_torchrun_does_not_name_localhost() -> None:
    result = classify_bytes(_read("torchrun_sigkill_rank2.out"))
    assert result.category == Category.SIGNAL_KILL.value
    assert "localhost" not in result.nodes


def test_a_peer_loss_cascade_alone_names_no_node_and_is_not_an_application_error() -> None:
    data = _read("srun_node2_killed.out")
    cascade = data[: data.index(b"srun: error: Node failure")]
    # as the watch activity runs it: 2 ranks per node, so ranks 0-1 are node1's (the survivors)
    analyzer = LogAnalyzer(node_of_rank=lambda r: ("node1", "node1", "node2", "node2")[r])
    findings = analyzer.feed(cascade, now=1.0)
    verdict = attribute(findings)
    assert verdict.category == Category.NCCL_ERROR and verdict.attribution.value == "infrastructure"
    assert verdict.nodes == ()  # the survivors' node is not the cause
    assert all(f.cascade for f in findings if f.fatal)


def test_slurms_node_failure_line_decides_over_the_peer_loss_cascade() -> None:
    result = classify_bytes(_read("srun_node2_killed.out"))
    assert result.category == Category.SLURM_NODE_FAILURE.value
    assert result.nodes == ["node2"]


def test_gloo_timeouts_of_the_waiting_ranks_are_cascades_of_the_stopped_one() -> None:
    # SIGSTOP of rank 2 with a 60 s gloo timeout: ranks 0, 1 and 3 print "Timed out waiting 60000ms",
    # the stopped rank prints nothing. Without the hang detector's finding nothing here initiates.
    data = _read("srun_sigstop_rank2_gloo_timeout.out")
    analyzer = LogAnalyzer(node_of_rank=lambda r: ("node1", "node1", "node2", "node2")[r])
    findings = [f for f in analyzer.feed(data, now=1.0) if f.fatal]
    timeouts = [f for f in findings if f.pattern_id == "gloo_timeout"]
    assert {f.rank for f in timeouts} == {0, 1, 3}
    assert all(f.cascade and f.category == Category.NCCL_TIMEOUT and f.nodes == () for f in timeouts)
    assert not [f for f in findings if f.category == Category.PYTHON_EXCEPTION and not f.cascade]

from __future__ import annotations

from pathlib import Path

import pytest

from trainguard.cli import build_parser, main
from trainguard.localstack.slurm import LabError, LocalSlurmCluster


def test_every_lab_command_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    for action in ("up", "down", "status", "kill-node", "restart-node"):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["lab", action, "--help"])
        out = capsys.readouterr().out
        assert "--dir" in out and len(out.splitlines()) > 5


def test_status_of_absent_cluster(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lab", "status", "--dir", str(tmp_path / "none")]) == 1
    assert "not running" in capsys.readouterr().out


def test_unknown_node_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lab", "kill-node", "node9", "--dir", str(tmp_path)]) == 1
    assert "unknown node 'node9'" in capsys.readouterr().err


def test_rendered_config_uses_ports_and_paths(tmp_path: Path) -> None:
    lab = LocalSlurmCluster(tmp_path, cluster="t1", nodes=3, ctld_port=30000, node_port_base=31000)
    text = lab.render_config()
    assert "ClusterName=t1" in text and "SlurmctldPort=30000" in text
    assert "NodeName=node[1-3]" in text and "Port=31000-31002" in text
    assert f"StateSaveLocation={tmp_path.resolve()}/state" in text
    for required in (
        "cred_expire=5",
        "sched_interval=2",
        "MinJobAge=600",
        "ProctrackType=proctrack/pgid",
        "TaskPlugin=task/none",
        "ReturnToService=1",
    ):
        assert required in text
    assert "$" not in text  # every placeholder was filled
    with pytest.raises(ValueError):
        LocalSlurmCluster(tmp_path, nodes=0)


def test_a_base_too_deep_for_slurms_sockets_is_refused_by_name(tmp_path: Path) -> None:
    """slurmstepd's socket in a node's spool must fit a unix socket path (107 bytes): past it jobs never
    finish and Slurm says nothing (seen under pytest-xdist's longer temporary directories)."""
    deep = tmp_path / ("d" * (120 - len(str(tmp_path))))
    with pytest.raises(LabError, match="too deep for Slurm's unix sockets"):
        LocalSlurmCluster(deep, nodes=1).start()
    assert not (deep / "spool").exists()  # refused before anything was made
    LocalSlurmCluster(Path("/tmp/tg-x"), nodes=1)._check_socket_paths()  # a short base passes

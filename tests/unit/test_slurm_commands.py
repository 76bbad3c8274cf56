from __future__ import annotations

import pytest

from trainguard.slurm import commands


@pytest.mark.parametrize("value", ["1", "123456", "12_3", "4294967_0"])
def test_job_ids_accepted(value: str) -> None:
    assert commands.job_id(value) == value


@pytest.mark.parametrize(
    "value", ["", "0", "01", "-1", "1 2", "1;ls", "1_", "_1", "1_a", "$(id)", "1\n2", "1" * 11]
)
def test_job_ids_rejected(value: str) -> None:
    with pytest.raises(ValueError, match="invalid Slurm job id"):
        commands.job_id(value)


@pytest.mark.parametrize(
    "value", ["node1", "gpu-01.rack2", "a_b", "-rf", "node[1-2]", "n 1", "n,1", "", "x" * 200]
)
def test_node_names(value: str) -> None:
    ok = value in ("node1", "gpu-01.rack2", "a_b")
    if ok:
        assert commands.node_name(value) == value
    else:
        with pytest.raises(ValueError):
            commands.node_name(value)


def test_argv_builders() -> None:
    assert commands.scontrol_requeuehold("7") == ["scontrol", "requeuehold", "7"]
    assert commands.scontrol_set_excluded("7", ["node3", "node2"]) == [
        "scontrol",
        "update",
        "JobId=7",
        "ExcNodeList=node[2-3]",
    ]
    assert commands.scontrol_set_excluded("7", []) == ["scontrol", "update", "JobId=7", "ExcNodeList="]
    assert commands.scontrol_show_job("7_1")[2:] == ["scontrol", "show", "job", "-d", "-o", "7_1"]
    assert commands.scontrol_show_job("7_1")[:2] == ["env", "SLURM_TIME_FORMAT=%s"]
    assert commands.scontrol_show_job("7_1")[-1] == "7_1"
    assert commands.squeue_json() == ["squeue", "--json", "-t", "all"]
    assert commands.scancel("9") == ["scancel", "9"]
    assert commands.sbatch(["-N", "2", "--comment", "a b; c"], "job.sh") == [
        "sbatch",
        "--parsable",
        "-N",
        "2",
        "--comment",
        "a b; c",
        "job.sh",
    ]


def test_drain_reason_is_one_clean_line() -> None:
    argv = commands.scontrol_drain("node2", "xid 79\nState=RESUME")
    assert argv[:4] == ["scontrol", "update", "NodeName=node2", "State=DRAIN"]
    assert argv[4] == "Reason=xid 79 State RESUME"
    with pytest.raises(ValueError):
        commands.scontrol_drain("node2", " \n ")
    with pytest.raises(ValueError):
        commands.scontrol_set_excluded("1", "node1")  # a bare string is not a list of names

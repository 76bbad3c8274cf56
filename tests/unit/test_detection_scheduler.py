from __future__ import annotations

from trainguard.attribution.rules import attribute
from trainguard.detection.scheduler import scheduler_findings
from trainguard.models import Attribution, Category, JobSnapshot, NodeSnapshot

NODES = ("gpu-01", "gpu-02", "gpu-03")


def job(**kw: object) -> JobSnapshot:
    return JobSnapshot(job_id="42", nodes=NODES, **kw)


def test_job_states_map_to_categories() -> None:
    cases = {
        "TIMEOUT": Category.PREEMPTION_OR_TIMELIMIT,
        "PREEMPTED": Category.PREEMPTION_OR_TIMELIMIT,
        "NODE_FAIL": Category.SLURM_NODE_FAILURE,
        "BOOT_FAIL": Category.SLURM_NODE_FAILURE,
        "OUT_OF_MEMORY": Category.KILLED_OOM_HOST,
    }
    for state, category in cases.items():
        (f,) = scheduler_findings(job(state=state), {})
        assert f.category == category and f.fatal, state
    assert scheduler_findings(job(state="RUNNING"), {}) == []
    assert scheduler_findings(job(state="COMPLETED", exit_code=0), {}) == []


def test_failed_exit_signals() -> None:
    (kill,) = scheduler_findings(job(state="FAILED", exit_code=0, exit_signal=9), {})
    # A SIGKILL is a signal kill, not an OOM, unless Slurm says OUT_OF_MEMORY (issue 10, clause 5).
    assert kill.category == Category.SIGNAL_KILL and "SIGKILL" in kill.line
    assert kill.attribution == Attribution.UNKNOWN
    (by_code,) = scheduler_findings(job(state="FAILED", exit_code=137), {})
    assert by_code.category == Category.SIGNAL_KILL
    (oom,) = scheduler_findings(job(state="OUT_OF_MEMORY", exit_code=0, exit_signal=9), {})
    assert oom.category == Category.KILLED_OOM_HOST
    (segv,) = scheduler_findings(job(state="FAILED", exit_code=0, exit_signal=11), {})
    assert segv.category == Category.SEGFAULT
    (plain,) = scheduler_findings(job(state="FAILED", exit_code=1), {})
    assert plain.cascade and plain.category == Category.PYTHON_EXCEPTION


def test_bad_nodes_of_the_job_are_named() -> None:
    nodes = {
        "gpu-01": NodeSnapshot(name="gpu-01", state="allocated"),
        "gpu-02": NodeSnapshot(name="gpu-02", state="down", reason="Not responding"),
        "gpu-03": NodeSnapshot(name="gpu-03", state="mixed", flags=("DRAIN",), reason="gpu xid"),
        "gpu-99": NodeSnapshot(name="gpu-99", state="down"),
    }
    found = scheduler_findings(job(state="NODE_FAIL"), nodes)
    by_id = {f.pattern_id: f for f in found}
    assert by_id["slurm_job_node_fail"].nodes == ("gpu-02",)
    assert by_id["slurm_node_down"].nodes == ("gpu-02",) and by_id["slurm_node_down"].fatal
    assert not by_id["slurm_node_drain"].fatal and by_id["slurm_node_drain"].nodes == ("gpu-03",)
    assert all("gpu-99" not in f.nodes for f in found)
    verdict = attribute(found)
    assert verdict.category == Category.SLURM_NODE_FAILURE and verdict.attribution == Attribution.HARDWARE
    assert verdict.nodes == ("gpu-02",)


def test_unchanged_state_is_not_reported_again() -> None:
    prev = job(state="TIMEOUT")
    assert scheduler_findings(job(state="TIMEOUT"), {}, previous=prev) == []
    nodes = {"gpu-01": NodeSnapshot(name="gpu-01", state="idle", flags=("NOT_RESPONDING",))}
    (f,) = scheduler_findings(job(state="RUNNING"), nodes, previous=job(state="RUNNING"))
    assert f.pattern_id == "slurm_node_not_responding" and f.nodes == ("gpu-01",)

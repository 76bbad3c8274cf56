"""Workload identity across requeues (Slurm rewrites SubmitTime) and job-id reuse after a reset."""

from __future__ import annotations

from trainguard.identity import matches_workload, workload_of
from trainguard.models import JobSnapshot, WorkloadId

W = WorkloadId(cluster="lab", job_id="7", submit_time=1000)


def job(submit: int, restarts: int, job_id: str = "7") -> JobSnapshot:
    return JobSnapshot(job_id=job_id, submit_time=submit, restart_count=restarts)


def test_same_submission_matches() -> None:
    assert matches_workload(W, job(1000, 0))


def test_requeue_moves_submit_time_but_keeps_the_workload() -> None:
    assert matches_workload(W, job(1100, 1), known_restarts=0)
    assert matches_workload(W, job(1200, 2), known_restarts=1)


def test_reused_job_id_after_reset_is_a_new_workload() -> None:
    assert not matches_workload(W, job(5000, 0))


def test_an_older_submission_or_fewer_restarts_is_not_ours() -> None:
    assert not matches_workload(W, job(900, 1))
    assert not matches_workload(W, job(1300, 1), known_restarts=2)
    assert not matches_workload(W, job(1000, 0, job_id="8"))


def test_workload_key_and_workflow_id_include_the_submit_time() -> None:
    w = workload_of("lab", job(1234, 0))
    assert w.key == "lab/7/1234"
    assert w.workflow_id == "trainguard-job-lab-7-1234"

"""Workload identity: cluster + job id + submit time, so a job id reused after a cluster reset is new."""

from __future__ import annotations

from trainguard.models import JobSnapshot, WorkloadId


def workload_of(cluster: str, job: JobSnapshot) -> WorkloadId:
    return WorkloadId(cluster=cluster, job_id=job.job_id, submit_time=job.submit_time)


def matches_workload(workload: WorkloadId, job: JobSnapshot, known_restarts: int = 0) -> bool:
    """Is `job` (as Slurm reports it now) the workload we follow?

    Slurm rewrites SubmitTime when it requeues a job, so a later submit time with a restart count at
    least as high as the one we know is the same workload; a fresh job under a reused id starts at 0.
    """
    if job.job_id != workload.job_id:
        return False
    if job.submit_time == workload.submit_time:
        return True
    return (
        job.submit_time > workload.submit_time
        and job.restart_count > 0
        and job.restart_count >= known_restarts
    )

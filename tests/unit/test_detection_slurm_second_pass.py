"""Slurm node failures, second pass (docs/detection.md): what a job's output carries when Slurm's own software
or the node's container stack fails the job, and what explains a node Slurm could not reach.

Positive cases were read wrong on main (healthy, or the node's hardware blamed); look-alikes from jobs
that ran must stay non-fatal or out of slurm_node_failure.
"""

from __future__ import annotations

import pytest

from trainguard.detection.classify import classify_text

SITE = ("slurm_node_failure", "system_software")

POSITIVE = [
    # SLURM_UNKNOWN_FORWARD_ADDR (src/common/slurm_errno.c) as srun's launch reports it
    ("srun: error: Application launch failed: Can't find an address, check slurm.conf", SITE),
    (
        "srun: error: Task launch for StepId=42.0 failed on node gpu-07: "
        "Can't find an address, check slurm.conf",
        SITE,
    ),
    # the forwarder's own line (src/common/forward.c) behind srun's prefix
    ("srun: error: fwd_tree_thread: can't find address for host gpu-07, check slurm.conf", SITE),
    # a launch slurmd never answered, explained by the cluster's address set-up later in the same log
    (
        "srun: error: Task launch for 5.0 failed on node gpu-01: Communication connection failure\n"
        "srun: error: Application launch failed: Communication connection failure\n"
        "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.\n"
        "srun: error: fwd_tree_thread: can't find address for host gpu-02, check slurm.conf\n"
        "srun: error: Task launch for 6.0 failed on node gpu-02: Can't find an address, check slurm.conf\n",
        SITE,
    ),
    # a node failure whose node slurmctld cannot resolve
    (
        "srun: error: Node failure on gpu-07\n"
        '[2024-01-01T10:00:00.000] error: slurm_set_addr: Unable to resolve "gpu-07"\n',
        SITE,
    ),
    # Singularity/Apptainer cannot exec their own action script: the container never starts
    (
        "$ singularity shell --nv docker://centos:7\n"
        "FATAL:   exec /.singularity.d/actions/shell failed: no such file or directory",
        SITE,
    ),
    ("FATAL:   exec /.singularity.d/actions/exec failed: permission denied", SITE),
]


@pytest.mark.parametrize(("text", "expected"), POSITIVE)
def test_slurm_and_container_set_up_failures_are_read(text: str, expected: tuple[str, str]) -> None:
    r = classify_text(text)
    assert r.fatal
    assert (r.category, r.attribution) == expected, r.summary


def test_a_bare_launch_communication_failure_stays_the_node_s() -> None:
    r = classify_text(
        "srun: error: Task launch for StepId=1234.0 failed on node gpu-12: Communication connection failure"
    )
    assert (r.category, r.attribution) == ("slurm_node_failure", "hardware")


HEALTHY = [
    # srun retried step creation and the step was created (src/srun/launch.c)
    "srun: Job 1234 step creation temporarily disabled, retrying (Requested nodes are busy)\n"
    "srun: Job 1234 step creation still disabled, retrying (Requested nodes are busy)\n"
    "srun: Step created for StepId=1234.1\n",
    "srun: Warning: can't honor --ntasks-per-node set to 8 which doesn't match the requested tasks 4 "
    "with the "
    "number of requested nodes 1. Ignoring --ntasks-per-node.",
]


@pytest.mark.parametrize("text", HEALTHY)
def test_srun_notes_of_jobs_that_ran_are_not_failures(text: str) -> None:
    assert not classify_text(text).fatal


@pytest.mark.parametrize(
    "text",
    [
        "slurmstepd: error: *** JOB 1234 ON gpu-01 CANCELLED AT 2024-01-01T00:00:00 ***",
        "slurmstepd: error: *** STEP 1234.0 ON gpu-01 CANCELLED AT 2024-01-01T00:00:00 ***\n"
        "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.",
        # the user's own command failing to exec in the container is the image's, not the container stack's
        "FATAL:   exec /opt/conda/bin/python failed: a shared library is likely missing in the image",
        "FATAL:   exec /.singularity.d/actions/run failed: a shared library is likely missing in the image",
    ],
)
def test_a_user_s_scancel_or_command_is_not_a_node_failure(text: str) -> None:
    assert classify_text(text).category != "slurm_node_failure"

"""Twenty-fourth corpus round (issue 12 section 2): generalised from the round's tuning misses only.

Round 24 added 24 excerpts (pub1090-pub1113), a kind-chosen draw toward the weakest held-out category,
Slurm-side failures, with Slurm-side healthy look-alikes, split by the stored rule and committed (fe58e46)
before the classifier ran on them. Its tuning misses, read from Slurm's source (SchedMD/slurm at 284c3b95f0,
with the 21.08 and 17.11 tags for the older spellings):
- slurmstepd's cgroup interface write failing with ENOSPC (pub1098, Azure/cyclecloud-slurm#388, read
  storage_io / infrastructure because `No space left on device` took the line for a full disk): the writes
  of src/plugins/cgroup/common/cgroup_common.c (`common_file_write_uints: write value '%s' to '%s' failed:
  %m`, 21.08's `common_file_write_uint32s: write pid %s to %s failed: %m`, `common_file_write_content:
  unable to write %zu bytes to cgroup %s: %m`, `unable to add pids to '%s'`) are recorded on the node's
  Slurm set-up, not fatal, and the step's own conclusion (`job_manager: exiting abnormally`) decides (entry
  slurm_cgroup_file_write_failed);
- srun run on a job that has already ended (pub1101, BSC-ES/autosubmit#663, read healthy):
  src/srun/allocate.c existing_allocation's `Slurm job %u has expired` (`SLURM job` before 18.08), the
  sibling of `Unable to confirm allocation for job %u: %m`, after which srun exits: a cascade at priority 1,
  deciding as Slurm refusing the step only when the job's own end is not in the log (entry
  srun_allocation_expired).
Every positive case below fails on main before this change, and so does the first look-alike (a lone cgroup
write error read as a full disk); the other look-alikes pass on both.
"""

from __future__ import annotations

import pytest

from tests.unit.catalog_sources import assert_names_source, assert_not_fatal
from trainguard.detection.classify import classify_text

SLURM_SETUP = ("slurm_node_failure", "system_software")


@pytest.mark.parametrize(
    "text",
    [
        # 23.02 on: the step's pid written into a cpuset without cpus/mems, then the step gives up.
        "slurmstepd: error: common_file_write_uints: write value '39981' to"
        " '/sys/fs/cgroup/cpuset/slurm/uid_20006/job_6457/step_batch/cgroup.procs'"
        " failed: No space left on device\n"
        "slurmstepd: error: unable to add pids to"
        " '/sys/fs/cgroup/cpuset/slurm/uid_20006/job_6457/step_batch'\n"
        "slurmstepd: error: job_manager: exiting abnormally: Slurmd could not execve job\n",
        # 21.08-22.05's spelling and the pre-23.02 conclusion.
        "[2024-01-01T10:00:00.000] [4242.0] error: common_file_write_uint32s: write pid 1234 to"
        " /sys/fs/cgroup/memory/slurm/uid_1000/job_4242/step_0/cgroup.procs failed: No space left on device\n"
        "[2024-01-01T10:00:00.000] [4242.0] error: unable to add pids to"
        " '/sys/fs/cgroup/memory/slurm/uid_1000/job_4242/step_0'\n"
        "[2024-01-01T10:00:00.000] [4242.0] error: job_manager exiting abnormally, rc = 4020\n",
        # cgroup v2's subtree control written through common_file_write_content.
        "slurmstepd: error: common_file_write_content: unable to write 2 bytes to cgroup"
        " /sys/fs/cgroup/system.slice/slurmstepd.scope/job_4242/cgroup.subtree_control:"
        " No space left on device\n"
        "slurmstepd: error: job_manager: exiting abnormally: Slurmd could not execve job\n",
    ],
)
def test_a_cgroup_write_failure_is_the_steps_setup_not_a_full_disk(text: str) -> None:
    r = classify_text(text)
    assert (r.fatal, r.category, r.attribution) == (True, *SLURM_SETUP), (text, r.pattern_ids)
    assert "slurmstepd_step_setup_failed" in r.pattern_ids, r.pattern_ids
    assert "storage_no_space" not in r.pattern_ids, r.pattern_ids


def test_a_lone_cgroup_write_failure_is_recorded_not_fatal() -> None:
    # Accounting's or a memory cgroup's write can fail while the step runs on (the job prints its output and
    # ends): the line alone decides nothing, and it is never a full disk.
    text = (
        "slurmstepd: error: common_file_write_uints: write value '1234' to"
        " '/sys/fs/cgroup/memory/slurm/uid_1000/job_4242/step_0/cgroup.procs'"
        " failed: No space left on device\n"
        "epoch 1 loss 0.42\n"
        "done\n"
    )
    assert_not_fatal(text)


def test_a_full_disk_is_still_storage() -> None:
    r = classify_text("OSError: [Errno 28] No space left on device: '/scratch/ckpt/step_100.pt'\n")
    assert (r.fatal, r.category) == (True, "storage_io"), r.pattern_ids


@pytest.mark.parametrize(
    "text",
    [
        "+ mpirun -np 4 ./model.exe\n"
        "srun: error: SLURM job 14309532 has expired\n"
        "srun: Check SLURM_JOB_ID environment variable. Expired or invalid job 14309532\n",
        "srun: error: Slurm job 4242 has expired\n"
        "srun: Check SLURM_JOB_ID environment variable. Expired or invalid job 4242\n",
    ],
)
def test_srun_on_an_ended_job_is_refused_by_slurm(text: str) -> None:
    r = classify_text(text)
    assert (r.fatal, r.category, r.attribution) == (True, *SLURM_SETUP), (text, r.pattern_ids)
    assert "srun_allocation_expired" in r.pattern_ids, r.pattern_ids


def test_the_jobs_own_end_explains_the_expired_allocation() -> None:
    # A cascade: when the log shows why the job ended (its time limit), that is the verdict.
    r = classify_text(
        "slurmstepd: error: *** JOB 4242 ON node01 CANCELLED AT 2024-01-01T10:00:00 DUE TO TIME LIMIT ***\n"
        "srun: error: Slurm job 4242 has expired\n"
        "srun: Check SLURM_JOB_ID environment variable. Expired or invalid job 4242\n"
    )
    assert (r.fatal, r.category) == (True, "preemption_or_timelimit"), r.pattern_ids


def test_other_expiries_are_not_this_entry() -> None:
    assert_not_fatal("WARNING: the certificate for job 4242 has expired, renewing\ntraining step 10\n")


def test_round24_entries_name_their_sources() -> None:
    assert_names_source("slurm_cgroup_file_write_failed")
    assert_names_source("srun_allocation_expired")

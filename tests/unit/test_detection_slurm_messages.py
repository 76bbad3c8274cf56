"""Slurm's own job/step-ending messages, derived from Slurm's source (issue 12 section 1, "generalise, don't
memorise").

Instead of fitting excerpt lines, every message srun/sbatch/salloc, slurmstepd, slurmd and slurmctld print
when a job or step ends (or never starts) was read out of Slurm's source (SchedMD/slurm at 284c3b95f0) and
mapped to TrainGuard's categories (docs/detection.md, "Slurm's messages, from its source"). Each positive case
below is the source's format string with its conversions filled in; each failed (read healthy or as another
entry) on the code before this change. The look-alikes are messages a job survives.
"""

from __future__ import annotations

import re

import pytest

from tests.unit.catalog_sources import assert_names_source, assert_not_fatal, assert_read_as

# Entries added from Slurm's source, and the entries this change extended (each comment names the file).
ADDED = (
    "slurmstepd_cancelled_by_signal",
    "slurmstepd_task_failure_teardown",
    "srun_task_terminated",
    "srun_task_other_signal",
    "srun_task_crash_signal",
    "srun_step_aborted",
    "slurm_allocation_revoked",
    "slurm_time_limit_other_reports",
    "slurm_preempted_other_reports",
    "slurm_state_cancelled",
    "slurm_state_boot_fail",
    "slurm_state_out_of_memory",
    "slurm_state_launch_failed",
    "slurm_state_application_exit",
    "slurm_state_raised_signal",
    "slurm_state_raised_crash_signal",
    "slurmctld_job_killed_on_failed_node",
    "slurmctld_job_lost_on_node",
    "srun_step_lost_node",
    "slurm_step_setup_failed",
    "slurmctld_prolog_failed",
    "slurm_task_execve_failed",
)
EXTENDED = (
    "slurm_time_limit",
    "slurm_step_launch_refused",
    "slurm_node_launch_or_kill_failed",
    "slurm_batch_launch_failed_held",
)

# Slurm's own tree: the entries name the C file under src/ that prints the message.
SLURM_SOURCE_FILE = re.compile(r"src/(srun|sbatch|salloc|api|common|scontrol|slurmctld|slurmd)[a-z_/]*\.c")

CANCELLED = ("preemption_or_timelimit", "infrastructure")
TIME_OR_PREEMPT = ("preemption_or_timelimit", "infrastructure")
APP_EXIT = ("python_exception", "application")
SIGNAL = ("signal_kill", "unknown")
CRASH = ("segfault", "system_software")
NODE = ("slurm_node_failure", "hardware")
SITE = ("slurm_node_failure", "system_software")
NEVER_BOOTED = ("slurm_node_failure", "infrastructure")
OOM = ("killed_oom_host", "application")

# (line, expected category/attribution, deciding entry)
MESSAGES = [
    # src/slurmd/slurmstepd/req.c
    (
        "slurmstepd: error: *** JOB 4242 ON gpu-07 CANCELLED AT 2024-01-01T10:00:00 "
        "DUE to SIGNAL Terminated ***",
        CANCELLED,
        "slurmstepd_cancelled_by_signal",
    ),
    (
        "slurmstepd: error: *** STEP 4242.0 ON gpu-07 CANCELLED AT 2024-01-01T10:00:00 "
        "DUE to SIGNAL Killed ***",
        CANCELLED,
        "slurmstepd_cancelled_by_signal",
    ),
    (
        "slurmstepd: error: *** STEP 4242.0 ON gpu-07 CANCELLED AT 2024-01-01T10:00:00 "
        "DUE TO TASK FAILURE ***",
        APP_EXIT,
        "slurmstepd_task_failure_teardown",
    ),
    (
        "slurmstepd: error: *** JOB 4242 ON gpu-07 FAILED (non-zero exit code or other failure mode) ***",
        APP_EXIT,
        "slurmstepd_task_failure_teardown",
    ),
    # src/srun/launch.c (_task_finish): strsignal() of the task's signal
    ("srun: error: gpu-07: tasks 0-7: Terminated", SIGNAL, "srun_task_terminated"),
    ("srun: error: gpu-07: task 3: Hangup", SIGNAL, "srun_task_other_signal"),
    ("srun: error: gpu-07: task 3: Interrupt", SIGNAL, "srun_task_other_signal"),
    ("srun: error: gpu-07: task 3: User defined signal 2", SIGNAL, "srun_task_other_signal"),
    ("srun: error: gpu-07: task 3: Broken pipe", SIGNAL, "srun_task_other_signal"),
    ("srun: error: gpu-07: task 3: CPU time limit exceeded", SIGNAL, "srun_task_other_signal"),
    ("srun: error: gpu-07: task 3: Aborted", CRASH, "srun_task_crash_signal"),
    ("srun: error: gpu-07: task 3: Illegal instruction", CRASH, "srun_task_crash_signal"),
    ("srun: error: gpu-07: tasks 0-1: Floating point exception", CRASH, "srun_task_crash_signal"),
    ("srun: error: gpu-07: task 3: Trace/breakpoint trap", CRASH, "srun_task_crash_signal"),
    # src/api/step_launch.c, src/srun/allocate.c, src/srun/srun_job.c: srun tearing the step down
    (
        "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.",
        CANCELLED,
        "srun_step_aborted",
    ),
    ("srun: Job step aborted", CANCELLED, "srun_step_aborted"),
    ("srun: Force Terminated StepId=4242.0", CANCELLED, "srun_step_aborted"),
    ("srun: forcing job termination", CANCELLED, "srun_step_aborted"),
    ("srun: error: Timed out waiting for job step to complete", CANCELLED, "srun_step_aborted"),
    # src/srun/allocate.c, src/salloc/salloc.c
    ("srun: error: Job allocation 4242 has been revoked", CANCELLED, "slurm_allocation_revoked"),
    ("salloc: Job allocation 4242 has been revoked.", CANCELLED, "slurm_allocation_revoked"),
    (
        "salloc: error: Allocation was revoked for JobId=4242 before command could be run",
        CANCELLED,
        "slurm_allocation_revoked",
    ),
    (
        "salloc: Job 4242 has exceeded its time limit and its allocation has been revoked.",
        TIME_OR_PREEMPT,
        "slurm_time_limit_other_reports",
    ),
    # src/slurmctld/job_mgr.c, gang.c
    ("[2024-01-01T10:00:00.000] Time limit exhausted for JobId=4242", TIME_OR_PREEMPT, "slurm_time_limit"),
    (
        "[2024-01-01T10:00:00.000] job_time_limit: inactivity time limit reached for JobId=4242",
        TIME_OR_PREEMPT,
        "slurm_time_limit_other_reports",
    ),
    (
        "[2024-01-01T10:00:00.000] preempted JobId=4242 has been killed",
        TIME_OR_PREEMPT,
        "slurm_preempted_other_reports",
    ),
    (
        "[2024-01-01T10:00:00.000] preempted JobId=4242 has been requeued",
        TIME_OR_PREEMPT,
        "slurm_preempted_other_reports",
    ),
    (
        "[2024-01-01T10:00:00.000] _job_complete: JobId=4242 WEXITSTATUS 2",
        APP_EXIT,
        "slurm_state_application_exit",
    ),
    (
        "[2024-01-01T10:00:00.000] Killing JobId=4242 on failed node gpu-07",
        NODE,
        "slurmctld_job_killed_on_failed_node",
    ),
    (
        "[2024-01-01T10:00:00.000] requeue job JobId=4242 due to failure of node gpu-07",
        NODE,
        "slurmctld_job_killed_on_failed_node",
    ),
    (
        "[2024-01-01T10:00:00.000] Killing JobId=4242 on DOWN node gpu-07",
        NODE,
        "slurmctld_job_killed_on_failed_node",
    ),
    (
        "[2024-01-01T10:00:00.000] error: Nodes gpu-[07-08] not responding, setting DOWN",
        NODE,
        "slurmctld_job_lost_on_node",
    ),
    (
        "[2024-01-01T10:00:00.000] error: _job_requeue_op: "
        "Revoking job JobId=4242 due to nodes not responding",
        NODE,
        "slurmctld_job_lost_on_node",
    ),
    (
        "[2024-01-01T10:00:00.000] Batch JobId=4242 missing from batch node gpu-07 "
        "(not found BatchStartTime after startup), Requeuing job",
        NODE,
        "slurmctld_job_lost_on_node",
    ),
    # src/slurmctld/prep_slurmctld.c
    (
        "[2024-01-01T10:00:00.000] error: prolog_slurmctld JobId=4242 prolog exit status 1:0",
        SITE,
        "slurmctld_prolog_failed",
    ),
    (
        "[2024-01-01T10:00:00.000] error: prolog_slurmctld JobId=4242 failed due to timing out",
        SITE,
        "slurmctld_prolog_failed",
    ),
    # job_state_string / job_state_reason.c as scontrol (src/scontrol/info_job.c) and sacct print them
    (
        "   JobState=TIMEOUT Reason=TimeLimit Dependency=(null)",
        TIME_OR_PREEMPT,
        "slurm_time_limit_other_reports",
    ),
    (
        "   JobState=DEADLINE Reason=DeadLine Dependency=(null)",
        TIME_OR_PREEMPT,
        "slurm_time_limit_other_reports",
    ),
    (
        "4242             train        gpu    acct          8    TIMEOUT      0:0",
        TIME_OR_PREEMPT,
        "slurm_time_limit_other_reports",
    ),
    ("   JobState=PREEMPTED Reason=None Dependency=(null)", TIME_OR_PREEMPT, "slurm_preempted_other_reports"),
    (
        "4242             train        gpu    acct          8  PREEMPTED      0:0",
        TIME_OR_PREEMPT,
        "slurm_preempted_other_reports",
    ),
    ("   JobState=CANCELLED Reason=None Dependency=(null)", CANCELLED, "slurm_state_cancelled"),
    ("   JobState=BOOT_FAIL Reason=None Dependency=(null)", NEVER_BOOTED, "slurm_state_boot_fail"),
    (
        "4242             train        gpu    acct          8  BOOT_FAIL      0:0",
        NEVER_BOOTED,
        "slurm_state_boot_fail",
    ),
    (
        "4242             train        gpu    acct          8 OUT_OF_ME+    0:125",
        OOM,
        "slurm_state_out_of_memory",
    ),
    ("   JobState=FAILED Reason=JobLaunchFailure Dependency=(null)", SITE, "slurm_state_launch_failed"),
    ("   JobState=FAILED Reason=SystemFailure Dependency=(null)", SITE, "slurm_state_launch_failed"),
    ("   JobState=FAILED Reason=NonZeroExitCode Dependency=(null)", APP_EXIT, "slurm_state_application_exit"),
    (
        "   JobState=FAILED Reason=RaisedSignal:9(Killed) Dependency=(null)",
        SIGNAL,
        "slurm_state_raised_signal",
    ),
    (
        "   JobState=FAILED Reason=RaisedSignal:11(Segmentation_fault) Dependency=(null)",
        CRASH,
        "slurm_state_raised_crash_signal",
    ),
    (
        "   JobState=PENDING Reason=launch_failed_requeued_held Dependency=(null)",
        SITE,
        "slurm_batch_launch_failed_held",
    ),
    # src/api/step_launch.c: the step lost on a node
    ("srun: error: Aborting, step missing and io error on node 3", NODE, "srun_step_lost_node"),
    ("srun: error: Aborting, can not test connection to node 3.", NODE, "srun_step_lost_node"),
    ("srun: error: Aborting, io error and missing step on node 3", NODE, "srun_step_lost_node"),
    (
        "srun: error: _handle_stepd_io_error: aborting, io error with slurmstepd on node 3",
        NODE,
        "srun_step_lost_node",
    ),
    # src/api/step_launch.c, src/srun/launch.c: launch failures in srun's other wordings
    (
        "srun: error: task 3 launch failed: Communication connection failure",
        NODE,
        "slurm_node_launch_or_kill_failed",
    ),
    (
        "srun: error: Application launch failed: Socket timed out on send/recv operation",
        NODE,
        "slurm_node_launch_or_kill_failed",
    ),
    (
        "srun: error: Application launch add failed: Communication connection failure",
        NODE,
        "slurm_node_launch_or_kill_failed",
    ),
    ("srun: error: task 3 launch failed: Job credential expired", SITE, "slurm_step_launch_refused"),
    # src/slurmd/slurmstepd/task.c, mgr.c; src/slurmd/slurmd/req.c; src/srun/srun_job.c: set-up failures
    (
        "slurmstepd: error: Unable to attach to interconnect: Operation not permitted",
        SITE,
        "slurm_step_setup_failed",
    ),
    (
        "slurmstepd: error: Unable to configure MPI plugin: Operation not permitted",
        SITE,
        "slurm_step_setup_failed",
    ),
    (
        "slurmstepd: error: Failed to invoke task plugins: task_p_pre_launch error",
        SITE,
        "slurm_step_setup_failed",
    ),
    (
        "slurmstepd: error: batch script setup failed for JobId=4242 on gpu-07: Permission denied",
        SITE,
        "slurm_step_setup_failed",
    ),
    ("srun: error: Failure in local plugin stack", SITE, "slurm_step_setup_failed"),
    (
        "slurmd: error: Could not confirm batch launch for JobId=4242, aborting request",
        SITE,
        "slurm_step_setup_failed",
    ),
    # src/slurmd/slurmstepd/task.c: the job's command cannot be executed
    (
        "slurmstepd: error: execve(): train.py: No such file or directory",
        APP_EXIT,
        "slurm_task_execve_failed",
    ),
    ("slurmstepd: error: execve(): /home/u/run.sh: Permission denied", APP_EXIT, "slurm_task_execve_failed"),
    (
        "slurmstepd: error: execve(): bad interpreter(/usr/bin/python9): No such file or directory",
        APP_EXIT,
        "slurm_task_execve_failed",
    ),
]


@pytest.mark.parametrize(("line", "expected", "entry"), MESSAGES, ids=[m[0][:60] for m in MESSAGES])
def test_slurm_s_ending_message_is_read(line: str, expected: tuple[str, str], entry: str) -> None:
    assert_read_as(line + "\n", expected, entry)


def test_every_added_entry_is_exercised_here() -> None:
    assert {m[2] for m in MESSAGES} >= set(ADDED)


@pytest.mark.parametrize(
    "text",
    [
        # srun retries step creation while the allocation's nodes are busy (src/srun/launch.c)
        "srun: Job 4242 step creation temporarily disabled, retrying (Requested nodes are busy)\n"
        "srun: Step created for StepId=4242.0\n",
        "srun: error: Job step creation temporarily disabled, retrying\n",
        # slurmstepd's process scan losing a race with an exiting process (proctrack)
        "slurmstepd: error: _is_a_lwp: open() /proc/4242/status failed: No such file or directory\n",
        # a name lookup srun retries
        'srun: error: Unable to resolve "gpu-07": Unknown host\n',
        # older releases' accounting note after a step that completed
        "slurmstepd: error: Exceeded step memory limit at some point.\n",
        # an epilog runs after the job ended (src/slurmd/slurmd/req.c, src/slurmctld/job_mgr.c)
        "[2024-01-01T10:00:00.000] error: JobId=4242 epilog failed status=1:0\n",
        "[2024-01-01T10:00:00.000] error: _job_complete: "
        "JobId=4242 epilog error on gpu-07, draining the node\n",
        # slurmctld's periodic note before SlurmdTimeout; the node may answer again (src/slurmctld/node_mgr.c)
        "[2024-01-01T10:00:00.000] error: Nodes gpu-[07-08] not responding\n",
        # a job that ended well, in Slurm's job record
        "[2024-01-01T10:00:00.000] _job_complete: JobId=4242 WEXITSTATUS 0\n"
        "[2024-01-01T10:00:00.000] _job_complete: JobId=4242 done\n",
        "   JobState=COMPLETED Reason=None Dependency=(null)\n"
        "   RunTime=00:10:00 TimeLimit=01:00:00 TimeMin=N/A\n",
        "   JobState=RUNNING Reason=None Dependency=(null)\n",
        "   JobState=PENDING Reason=PartitionTimeLimit Dependency=(null)\n",
        "4242             train        gpu    acct          8  COMPLETED      0:0\n",
        # srun's verbose note for a task that completed (src/srun/launch.c)
        "srun: gpu-07: task 0: Completed\n",
        # configuration
        "PreemptMode=REQUEUE PreemptType=preempt/qos\nNCCL_TIMEOUT 1800\n",
    ],
)
def test_messages_a_job_survives_are_not_fatal(text: str) -> None:
    assert_not_fatal(text)


@pytest.mark.parametrize("sig_id", ADDED + EXTENDED)
def test_every_entry_names_its_slurm_source_file(sig_id: str) -> None:
    assert_names_source(sig_id, SLURM_SOURCE_FILE)

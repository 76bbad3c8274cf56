"""Slurm's job-output messages across releases 22.05 to 25.05, derived from their source (issue 12 section 1,
"generalise, don't memorise").

A fourth Slurm pass (docs/detection.md, "Slurm job-output messages across releases 22.05 to 25.05, from their
sources"). The three earlier Slurm passes read SchedMD/slurm at 284c3b95f0 (master after 25.05); this one
compares the release tags slurm-22-05-11-1, slurm-23-02-8-1, slurm-23-11-11-1, slurm-24-05-8-1,
slurm-24-11-7-1 and slurm-25-05-8-1 for what srun, sbatch/salloc and slurmstepd print into a job's output, and
each wording below is the format string of the tag named beside it with its conversions filled in. MESSAGES
read healthy before this change; RECORDED matched no entry before; ACROSS_RELEASES pins the kinds read already
whose wording changed between releases (both wordings); SURVIVED holds the look-alikes the job survives.
"""

from __future__ import annotations

import re

import pytest

from tests.unit.catalog_sources import assert_names_source, assert_not_fatal, assert_read_as
from trainguard.detection.catalog import load_catalog
from trainguard.detection.classify import classify_text

ADDED = (
    "slurmstepd_terminated_step_not_running",
    "slurmstepd_uncorrectable_memory_error",
    "slurmstepd_user_lookup_failed",
    "slurm_step_plugin_init_fatal",
    "slurmstepd_step_option_unsupported",
    "slurm_step_vmem_limit_kill",
    "slurm_auth_credential_error_23_11",
)
RECORDED_ENTRIES = ("slurmstepd_uncorrectable_memory_error", "slurm_auth_credential_error_23_11")

# The entries name the C file under src/ that prints the message, and the release tag(s) they were read from.
SLURM_SOURCE_FILE = re.compile(r"src/(srun|api|common|plugins|interfaces|slurmd)/[a-z0-9_/]*\.c")
SLURM_TAG = re.compile(r"slurm-2[2-5]-[0-9]{2}-[0-9]+-1|tags? 22-05")

SITE = ("slurm_node_failure", "system_software")
OOM = ("killed_oom_host", "application")

TS = "[2024-01-01T10:00:00.000] [4242.0] "
TIME = "2024-01-01T10:00:00"

# (line, expected category/attribution, deciding entry); the comment names the file and the tags that print it
MESSAGES = [
    # src/slurmd/slurmstepd/step_terminate_monitor.c, every tag 22-05 to 25-05
    (
        f"slurmstepd: error: *** STEP 4242.0 STEPD TERMINATED ON gpu-07 AT {TIME} DUE TO JOB NOT RUNNING ***",
        SITE,
        "slurmstepd_terminated_step_not_running",
    ),
    (
        f"slurmstepd: error: *** JOB 4242 STEPD TERMINATED ON gpu-07 AT {TIME} DUE TO JOB NOT RUNNING ***",
        SITE,
        "slurmstepd_terminated_step_not_running",
    ),
    (
        f"{TS}error: *** EXTERN STEP FOR 4242 STEPD TERMINATED ON gpu-07 AT {TIME} "
        "DUE TO JOB NOT RUNNING ***",
        SITE,
        "slurmstepd_terminated_step_not_running",
    ),
    # src/slurmd/slurmstepd/slurmstepd_job.c, from slurm-23-11-0-1
    (
        "slurmstepd: error: Failed to look up username for uid=1000, cannot continue with launch",
        SITE,
        "slurmstepd_user_lookup_failed",
    ),
    # src/slurmd/slurmstepd/slurmstepd.c: 22-05's wordings
    ("slurmstepd: fatal: failed to initialize authentication plugin", SITE, "slurm_step_plugin_init_fatal"),
    ("slurmstepd: fatal: failed to initialize hash plugin", SITE, "slurm_step_plugin_init_fatal"),
    ("slurmstepd: fatal: failed to initialize node selection plugin", SITE, "slurm_step_plugin_init_fatal"),
    # ... from 23-02, 23-11, 24-05, 24-11
    ("slurmstepd: fatal: failed to initialize gres plugins", SITE, "slurm_step_plugin_init_fatal"),
    ("slurmstepd: fatal: Couldn't load all plugins", SITE, "slurm_step_plugin_init_fatal"),
    (TS + "fatal: Failed to read gres.conf from slurmd.", SITE, "slurm_step_plugin_init_fatal"),
    (TS + "fatal: Failed to read job_container.conf from slurmd.", SITE, "slurm_step_plugin_init_fatal"),
    (
        "slurmstepd: fatal: slurmstepd: problem with unpack of slurm_conf",
        SITE,
        "slurm_step_plugin_init_fatal",
    ),
    ("slurmstepd: fatal: failed to initialize credential plugin", SITE, "slurm_step_plugin_init_fatal"),
    ("slurmstepd: fatal: failed to initialize switch plugin", SITE, "slurm_step_plugin_init_fatal"),
    ("slurmstepd: fatal: Failed to read cgroup state from slurmd", SITE, "slurm_step_plugin_init_fatal"),
    (
        "slurmstepd: fatal: main: Unable to reliably execute /usr/sbin/slurmstepd",
        SITE,
        "slurm_step_plugin_init_fatal",
    ),
    # every tag
    (TS + "fatal: Failed to read MPI conf from slurmd", SITE, "slurm_step_plugin_init_fatal"),
    (
        "slurmstepd: fatal: Error reading initialization data from slurmd",
        SITE,
        "slurm_step_plugin_init_fatal",
    ),
    # src/slurmd/slurmstepd/ulimits.c: setrlimit (22-05), _prlimit (from 23-02)
    (
        "slurmstepd: fatal: setrlimit(RLIMIT_AS, 8192 MB): Operation not permitted",
        SITE,
        "slurm_step_plugin_init_fatal",
    ),
    (
        "slurmstepd: fatal: _prlimit(RLIMIT_RSS, 8192 MB): Operation not permitted",
        SITE,
        "slurm_step_plugin_init_fatal",
    ),
    # src/srun/srun.c: switch and node selection (22-05), cred (from 23-02), cli_filter
    ("srun: fatal: failed to initialize switch plugins", SITE, "slurm_step_plugin_init_fatal"),
    ("srun: fatal: failed to initialize node selection plugin", SITE, "slurm_step_plugin_init_fatal"),
    ("srun: fatal: failed to initialize cred plugin", SITE, "slurm_step_plugin_init_fatal"),
    ("srun: fatal: failed to initialize cli_filter plugin", SITE, "slurm_step_plugin_init_fatal"),
    # src/slurmd/slurmstepd/slurmstepd.c (_validate_step), from slurm-25-05-0-1
    (
        "slurmstepd: error: Failed to validate step StepId=4242.0. --wait-for-children requires "
        "proctrack/cgroup plugin.",
        SITE,
        "slurmstepd_step_option_unsupported",
    ),
    (
        "slurmstepd: error: Failed to validate step StepId=4242.0. --wait-for-children is not supported in "
        "cgroup/v1. cgroup/v2 is required.",
        SITE,
        "slurmstepd_step_option_unsupported",
    ),
    # src/common/slurm_jobacct_gather.c (22-05), src/interfaces/jobacct_gather.c (from 23-02)
    (
        "slurmstepd: error: StepId=4242.0 exceeded virtual memory limit (9437184 > 8388608), being killed",
        OOM,
        "slurm_step_vmem_limit_kill",
    ),
    (
        "slurmstepd: error: StepId=4242.batch exceeded virtual memory limit (9437184 > 8388608), "
        "being killed",
        OOM,
        "slurm_step_vmem_limit_kill",
    ),
]


@pytest.mark.parametrize(("line", "expected", "entry"), MESSAGES, ids=[m[0][:70] for m in MESSAGES])
def test_release_message_is_read(line: str, expected: tuple[str, str], entry: str) -> None:
    assert_read_as(line + "\n", expected, entry)


def test_every_added_fatal_entry_is_exercised_here() -> None:
    assert {m[2] for m in MESSAGES} == set(ADDED) - set(RECORDED_ENTRIES)


def test_stepd_terminated_implicates_its_own_node() -> None:
    m = load_catalog().match_line(MESSAGES[0][0])
    assert m is not None and m.groups.get("node") == "gpu-07"


# Recorded, never a failure on their own: (line, entry)
RECORDED = [
    # src/slurmd/slurmstepd/req.c (SIG_UME from slurmd's ume_notify), every tag: logged, nothing is killed
    (
        f"slurmstepd: error: *** JOB 4242 ON gpu-07 UNCORRECTABLE MEMORY ERROR AT {TIME} ***",
        "slurmstepd_uncorrectable_memory_error",
    ),
    (
        f"slurmstepd: error: *** STEP 4242.0 ON gpu-07 UNCORRECTABLE MEMORY ERROR AT {TIME} ***",
        "slurmstepd_uncorrectable_memory_error",
    ),
    # src/plugins/auth/slurm/internal.c (decode_jwt, verify_internal), from slurm-23-11-0-1
    (
        "[2024-01-01T10:00:00.000] error: decode_jwt: token expired at 1704103200",
        "slurm_auth_credential_error_23_11",
    ),
    (
        "[2024-01-01T10:00:00.000] error: decode_jwt: jwt_decode (with key kid=k2) failure: "
        "Invalid authentication credential",
        "slurm_auth_credential_error_23_11",
    ),
    (
        "[2024-01-01T10:00:00.000] error: decode_jwt: could not find kid=k2",
        "slurm_auth_credential_error_23_11",
    ),
    (
        "[2024-01-01T10:00:00.000] error: decode_jwt: token received for expired key kid=k1",
        "slurm_auth_credential_error_23_11",
    ),
    (
        "[2024-01-01T10:00:00.000] error: verify_internal: decode_jwt() failed",
        "slurm_auth_credential_error_23_11",
    ),
    (
        "slurmd: fatal: auth/slurm: cannot stat '/etc/slurm/slurm.key': No such file or directory",
        "slurm_auth_credential_error_23_11",
    ),
    # src/plugins/auth/slurm/external.c, src/common/sack_api.c (clients through sackd), from slurm-23-11-0-1
    ("srun: error: failed to connect to any sack sockets", "slurm_auth_credential_error_23_11"),
    ("srun: error: create_external: failed to create token", "slurm_auth_credential_error_23_11"),
    (
        "[2024-01-01T10:00:00.000] error: verify_external: sack_verify failure: "
        "Protocol authentication error",
        "slurm_auth_credential_error_23_11",
    ),
    # src/plugins/auth/munge/auth_munge.c's wordings from slurm-23-11-0-1
    ("srun: error: Failed to create MUNGE Credential", "slurm_auth_credential_error_23_11"),
    ("srun: error: munge_ctx_create failure", "slurm_auth_credential_error_23_11"),
    (
        "srun: error: Failed to set MUNGE socket: Invalid argument",
        "slurm_auth_credential_error_23_11",
    ),
]


@pytest.mark.parametrize(("line", "entry"), RECORDED, ids=[r[0][:70] for r in RECORDED])
def test_release_message_is_recorded_not_fatal(line: str, entry: str) -> None:
    m = load_catalog().match_line(line)
    assert m is not None and m.signature.id == entry, (line, m)
    assert not m.signature.fatal
    assert_not_fatal(line + "\n")


def test_uncorrectable_memory_error_names_its_own_node() -> None:
    m = load_catalog().match_line(RECORDED[0][0])
    assert m is not None and m.groups.get("node") == "gpu-07"


# Kinds read already whose wording changed between releases: each release's wording keeps its verdict.
ACROSS_RELEASES = [
    # src/plugins/task/cgroup/task_cgroup_memory.c: 22-05, then from 23-02
    (
        "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=4242.0. Some of your processes may have "
        "been killed by the cgroup out-of-memory handler.",
        OOM,
        "host_oom_killer",
    ),
    (
        "slurmstepd: error: Detected 1 oom_kill event in StepId=4242.0. Some of the step tasks have been "
        "OOM Killed.",
        OOM,
        "host_oom_killer",
    ),
    (
        "slurmstepd: error: Detected 3 oom_kill events in StepId=4242.batch. Some of the step tasks have "
        "been OOM Killed.",
        OOM,
        "host_oom_killer",
    ),
    # src/plugins/launch/slurm/launch_slurm.c (22-05), moved to src/srun/launch.c (from 23-02), same wording
    ("srun: error: gpu-07: tasks 0-3: Out Of Memory", OOM, "host_oom_other_reports"),
    # src/slurmd/slurmstepd/req.c: SIGTERM, SIGKILL and a task failure's kill all print the bare form in
    # 22-05 to 24-11; 25-05 splits it into `DUE to SIGNAL <strsignal>` and `DUE TO TASK FAILURE`
    (
        f"slurmstepd: error: *** JOB 4242 ON gpu-07 CANCELLED AT {TIME} ***",
        ("preemption_or_timelimit", "infrastructure"),
        "slurm_cancelled",
    ),
    (
        f"slurmstepd: error: *** JOB 4242 ON gpu-07 CANCELLED AT {TIME} DUE to SIGNAL Terminated ***",
        ("preemption_or_timelimit", "infrastructure"),
        "slurmstepd_cancelled_by_signal",
    ),
    (
        f"slurmstepd: error: *** STEP 4242.0 ON gpu-07 CANCELLED AT {TIME} DUE TO TASK FAILURE ***",
        ("python_exception", "application"),
        "slurmstepd_task_failure_teardown",
    ),
    # unchanged in every tag
    (
        f"slurmstepd: error: *** JOB 4242 ON gpu-07 CANCELLED AT {TIME} DUE TO JOB REQUEUE ***",
        ("preemption_or_timelimit", "infrastructure"),
        "slurm_requeued",
    ),
    # src/slurmd/slurmstepd/step_terminate_monitor.c: the EXTERN STEP / INTERACTIVE STEP entities
    (
        f"{TS}error: *** INTERACTIVE STEP FOR 4242 STEPD TERMINATED ON gpu-07 AT {TIME} "
        "DUE TO JOB NOT ENDING WITH SIGNALS ***",
        ("slurm_node_failure", "hardware"),
        "slurm_stepd_not_ending",
    ),
    # src/slurmd/slurmstepd/mgr.c (from slurm-24-05-0-1: the prolog run by the extern step)
    (
        "[2024-01-01T10:00:00.000] [4242.extern] error: [job 4242] prolog failed status=1:0",
        SITE,
        "slurm_prolog_failed",
    ),
    # src/common/slurm_errno.c: ESPANK_JOB_FAILURE (from slurm-24-11-0-1) relayed by srun's launch
    (
        "srun: error: Task launch for StepId=4242.0 failed on node gpu-07: Spank plugin failure, job failed",
        SITE,
        "slurm_step_launch_refused",
    ),
    # src/slurmd/slurmd/req.c: 24.11's return-code wording (the daemons pass reads both)
    (
        "[2024-01-01T10:00:00.000] error: _handle_return_code: Can not read return code from slurmstepd: "
        "Resource temporarily unavailable",
        SITE,
        "slurmd_stepd_start_failed",
    ),
]


@pytest.mark.parametrize(
    ("line", "expected", "entry"), ACROSS_RELEASES, ids=[m[0][:70] for m in ACROSS_RELEASES]
)
def test_both_releases_wordings_are_read(line: str, expected: tuple[str, str], entry: str) -> None:
    assert_read_as(line + "\n", expected, entry)


SURVIVED = [
    # src/interfaces/gres.c (from slurm-23-11-0-1): the task is bound to what was found and runs
    "slurmstepd: error: Not enough gres to bind 2 per task",
    "slurmstepd: error: Invalid map or mask value specified.",
    "slurmstepd: error: Repetition count of 0 not allowed in gres binding mask, using 1 instead",
    # src/plugins/proctrack/cgroup/proctrack_cgroup.c (25-05): an exit code lost, the step's end is printed
    "slurmstepd: error: Task 2's primary pid 12345 is running but task cgroup says it is empty. "
    "Unable to get exit code for this task",
    # src/plugins/cgroup/v2/cgroup_v2.c, src/plugins/cgroup/common/cgroup_common.c: teardown after the job
    "slurmstepd: error: Writing 1 to /sys/fs/cgroup/system.slice/slurmstepd.scope/job_4242/step_0/"
    "cgroup.kill failed",
    "slurmstepd: error: Pid 12345 is still in the step_0 cgroup after 10 tries and 1000 ms.",
    # src/plugins/cgroup/v1/cgroup_v1.c (from 23-02): OOM monitoring not set up, the step runs
    "slurmstepd: error: OOM events were not monitored for StepId=4242.0: couldn't read memory.oom_control or "
    "subscribe to its events.",
    # src/slurmd/slurmstepd/mgr.c (24-05): the extern step's epilog, after the job ended
    "[2024-01-01T10:00:00.000] [4242.extern] error: [job 4242] epilog failed status=1:0",
    # src/slurmd/slurmstepd/ulimits.c (from 23-02): the RSS limit not read, not a fatal()
    "slurmstepd: error: _prlimit(RLIMIT_RSS,..) failed with Operation not permitted",
    # slurmd's and slurmctld's own start-up fatals (a daemon that does not start runs no job)
    "[2024-01-01T10:00:00.000] fatal: failed to initialize switch plugin",
    # src/srun/launch.c: --kill-on-bad-exit's teardown note (the task's exit decides)
    "srun: Terminating StepId=4242.0",
    # src/slurmd/slurmstepd/mgr.c (24-05): the completion RPC retried
    "slurmstepd: Retrying job complete RPC for StepId=4242.0 [sleeping 4s]",
    # the RSS sibling of the virtual memory kill is host_oom_killer's; the older summary stays unread
    "slurmstepd: error: Exceeded step memory limit at some point.",
]


@pytest.mark.parametrize("text", SURVIVED)
def test_messages_a_job_survives_are_not_fatal(text: str) -> None:
    assert_not_fatal(text + "\n")


def test_virtual_memory_kill_is_its_own_entry_and_rss_kill_unchanged() -> None:
    rss = "slurmstepd: error: StepId=4242.0 exceeded memory limit (9437184 > 8388608), being killed\n"
    assert "host_oom_killer" in classify_text(rss).pattern_ids


@pytest.mark.parametrize("sig_id", ADDED)
def test_every_entry_names_its_slurm_source_file_and_tag(sig_id: str) -> None:
    assert_names_source(sig_id, SLURM_SOURCE_FILE)
    assert_names_source(sig_id, SLURM_TAG)

"""Slurm daemons' error messages, derived from their source (issue 12 section 1, "generalise, don't
memorise").

A second Slurm pass: where "Slurm's messages, from its source" read what Slurm prints when a job or step ENDS,
this one reads the error()/fatal() messages slurmd, slurmstepd and srun's step-launch code log when launching,
running or tearing down a step FAILS on the node (docs/detection.md, "Slurm daemons' error messages,
from their sources"). Source: SchedMD/slurm at 284c3b95f08a2dc2478499837b03355e1b9c5c75 (the commit the
first pass used):
src/slurmd/slurmd/req.c (_forkexec_slurmstepd, _handle_return_code, _send_return_code, _rpc_launch_tasks),
src/slurmd/slurmstepd/slurmstepd.c, mgr.c, task.c, io.c, src/plugins/cgroup/v1|v2, src/plugins/task/cgroup,
src/plugins/proctrack/cgroup, src/api/step_launch.c, src/srun/, src/plugins/auth/munge/auth_munge.c and
src/common/slurm_errno.c; older releases' wordings from the same repository's history (tags slurm-17-11-0-1,
slurm-20-11-0-1, slurm-23-02-0-1; commits 24a43d60ee and 9c32bd41d9 for req.c's return-code messages). Each
positive case in MESSAGES is a format string with its conversions filled in; each read healthy on the code
before this change. ALREADY_READ pins the kinds the catalog read before. The look-alikes are messages the
daemons log while the job goes on (retries, a late credential, a cgroup attach an older release ignored).
"""

from __future__ import annotations

import re

import pytest

from tests.unit.catalog_sources import assert_names_source, assert_not_fatal, assert_read_as

# Entries added from Slurm's daemons (each comment names the file that prints the message).
ADDED = (
    "slurmd_stepd_start_failed",
    "slurmd_launch_credential_rejected",
    "slurmstepd_step_setup_failed",
    "slurmstepd_step_cgroup_failed",
    "srun_step_node_unreachable",
)

# Slurm's own tree: the entries name the C file under src/ that prints the message.
SLURM_SOURCE_FILE = re.compile(r"src/(slurmd|plugins|api|srun|common|interfaces)/[a-z0-9_/]*\.c")

SITE = ("slurm_node_failure", "system_software")
NODE = ("slurm_node_failure", "hardware")

T = "[2024-01-01T10:00:00.000] "
TS = "[2024-01-01T10:00:00.000] [4242.0] "

# (line, expected category/attribution, deciding entry)
MESSAGES = [
    # src/slurmd/slurmd/req.c: slurmstepd never answered slurmd's start-up pipe, or answered with an error
    (
        T + "error: _forkexec_slurmstepd: slurmstepd failed to send return code got 0: Success",
        SITE,
        "slurmd_stepd_start_failed",
    ),
    (
        T + "error: _forkexec_slurmstepd: Can not read return code from slurmstepd got -1: "
        "Connection reset by peer",
        SITE,
        "slurmd_stepd_start_failed",
    ),
    (
        T + "error: _handle_return_code: Can not read return code from slurmstepd: "
        "Resource temporarily unavailable",
        SITE,
        "slurmd_stepd_start_failed",
    ),
    ("slurmd: error: slurmstepd failed to send return code", SITE, "slurmd_stepd_start_failed"),
    (
        "slurmd: error: Error reading return code message from slurmstepd: Success",
        SITE,
        "slurmd_stepd_start_failed",
    ),
    (
        T + "error: slurmstepd return code 4020: Slurmd could not set up environment for batch job",
        SITE,
        "slurmd_stepd_start_failed",
    ),
    (T + "error: slurmstepd return code 4020", SITE, "slurmd_stepd_start_failed"),
    (T + "error: Unable to init slurmstepd", SITE, "slurmd_stepd_start_failed"),
    (T + "error: exec of slurmstepd failed: No such file or directory", SITE, "slurmd_stepd_start_failed"),
    (
        T + "error: _forkexec_slurmstepd: fork: Resource temporarily unavailable",
        SITE,
        "slurmd_stepd_start_failed",
    ),
    (T + "error: _forkexec_slurmstepd: pipe failed: Too many open files", SITE, "slurmd_stepd_start_failed"),
    (
        T + "error: _send_return_code: failed to send ack to stepd: Broken pipe",
        SITE,
        "slurmd_stepd_start_failed",
    ),
    # src/slurmd/slurmstepd/slurmstepd.c: the stepd's side of the same pipe
    (TS + 'error: Unable to send "ok" to slurmd', SITE, "slurmd_stepd_start_failed"),
    (TS + 'error: Unable to send "fail" to slurmd', SITE, "slurmd_stepd_start_failed"),
    # src/slurmd/slurmd/req.c (_rpc_launch_tasks), reasons from src/interfaces/cred.c
    (
        T + "error: Invalid job credential from 1000@10.0.0.1: Job credential expired",
        SITE,
        "slurmd_launch_credential_rejected",
    ),
    (
        "slurmd: error: Invalid job credential from 1000@10.0.0.1: Invalid job credential",
        SITE,
        "slurmd_launch_credential_rejected",
    ),
    # src/slurmd/slurmstepd/mgr.c: the step's set-up on the node
    (TS + "error: proctrack_g_create: Operation not permitted", SITE, "slurmstepd_step_setup_failed"),
    (TS + "error: proctrack_g_add: No such process", SITE, "slurmstepd_step_setup_failed"),
    (TS + "error: Failed mpi_g_slurmstepd_prefork", SITE, "slurmstepd_step_setup_failed"),
    ("slurmstepd: error: Failed mpi_hook_slurmstepd_prefork", SITE, "slurmstepd_step_setup_failed"),
    (
        TS + "error: _fork_all_tasks: IO setup failed: Slurmd could not connect IO",
        SITE,
        "slurmstepd_step_setup_failed",
    ),
    (TS + "error: IO setup failed: Connection refused", SITE, "slurmstepd_step_setup_failed"),
    (TS + "error: child fork: Resource temporarily unavailable", SITE, "slurmstepd_step_setup_failed"),
    (
        TS + "fatal: _fork_all_tasks: _pre_task_child_privileged() failed: Slurmd could not set UID or GID",
        SITE,
        "slurmstepd_step_setup_failed",
    ),
    (TS + "error: _become_user failed: Operation not permitted", SITE, "slurmstepd_step_setup_failed"),
    (
        TS + "error: job_manager: exiting abnormally: Slurmd could not execve job",
        SITE,
        "slurmstepd_step_setup_failed",
    ),
    (TS + "error: job_manager exiting abnormally, rc = 4020", SITE, "slurmstepd_step_setup_failed"),
    # src/plugins/cgroup/v2/cgroup_v2.c (cgroup_p_step_create)
    (TS + "error: unable to create step StepId=4242.0 cgroup", SITE, "slurmstepd_step_cgroup_failed"),
    (
        TS + "error: unable to instantiate step StepId=4242.0 user procs cgroup",
        SITE,
        "slurmstepd_step_cgroup_failed",
    ),
    (
        TS + "error: unable to create step StepId=4242.0 slurm procs cgroup",
        SITE,
        "slurmstepd_step_cgroup_failed",
    ),
    (
        "[2024-01-01T10:00:00.000] [4242.batch] error: unable to create JobId=4242 cgroup",
        SITE,
        "slurmstepd_step_cgroup_failed",
    ),
    (TS + "error: unable to move stepd pid to its dedicated cgroup", SITE, "slurmstepd_step_cgroup_failed"),
    # src/api/step_launch.c: srun giving up on a node that does not answer
    (
        "srun: error: timeout waiting for task launch, started 0 of 8 tasks",
        NODE,
        "srun_step_node_unreachable",
    ),
    ("srun: error: Cannot communicate with node 3.  Aborting job.", NODE, "srun_step_node_unreachable"),
]


@pytest.mark.parametrize(("line", "expected", "entry"), MESSAGES, ids=[m[0][:70] for m in MESSAGES])
def test_slurm_daemon_failure_message_is_read(line: str, expected: tuple[str, str], entry: str) -> None:
    assert_read_as(line + "\n", expected, entry)


def test_every_added_entry_is_exercised_here() -> None:
    assert {m[2] for m in MESSAGES} >= set(ADDED)


# Daemon messages the catalog read before this pass (pinned: they keep their entry).
ALREADY_READ = [
    # src/slurmd/slurmstepd/mgr.c, task.c (first Slurm pass; container pass)
    (
        TS + "error: _fork_all_tasks: Failed to invoke task plugins: "
        "one of task_p_pre_setuid functions returned error",
        SITE,
        "slurm_step_setup_failed",
    ),
    (
        "slurmstepd: error: Failed to invoke task plugins: task_p_pre_launch error",
        SITE,
        "slurm_step_setup_failed",
    ),
    (TS + "error: job_manager: Plugin stack initialization failed.", SITE, "container_step_start_failed"),
    # src/slurmd/slurmstepd/task.c: the site's TaskProlog exits non-zero; the task _exit()s before the program
    ("slurmstepd: error: TaskProlog failed status=1", SITE, "slurm_prolog_failed"),
    # src/srun/srun_job.c: the SrunProlog fails and srun aborts the step
    ("srun: error: srun prolog failed rc = 1. Aborting step.", SITE, "slurm_prolog_failed"),
    # srun relaying slurmd's answer (src/api/step_launch.c)
    (
        "srun: error: Task launch for StepId=4242.0 failed on node gpu-07: Slurmd could not execve job",
        SITE,
        "slurm_step_launch_refused",
    ),
    (
        "srun: error: Task launch for StepId=4242.0 failed on node gpu-07: Invalid job credential",
        SITE,
        "slurm_step_launch_refused",
    ),
    # src/slurmd/slurmd/req.c: a node prolog failure
    (T + "error: JobId=4242 prolog failed status=1:0", SITE, "slurm_prolog_failed"),
]


@pytest.mark.parametrize(("line", "expected", "entry"), ALREADY_READ, ids=[m[0][:70] for m in ALREADY_READ])
def test_daemon_messages_read_before_still_read(line: str, expected: tuple[str, str], entry: str) -> None:
    assert_read_as(line + "\n", expected, entry)


@pytest.mark.parametrize(
    "text",
    [
        # a credential revoked: the job was already killed; replayed: the step was already launched (req.c)
        T + "error: Invalid job credential from 1000@10.0.0.1: Job credential revoked\n",
        T + "error: Invalid job credential from 1000@10.0.0.1: Job credential replayed\n",
        # munge and RPC errors the daemons and srun retry or that concern another RPC
        # (src/plugins/auth/munge/auth_munge.c, src/common/slurm_errno.c)
        T + "error: Munge decode failed: Expired credential\n" + T + "error: Check for out of sync clocks\n",
        T + "error: slurm_unpack_received_msg: Protocol authentication error\n",
        T + "error: slurm_receive_msg [10.0.0.1:6818]: Zero Bytes were transmitted or received\n",
        "srun: error: slurm_receive_msgs: [[gpu-07]:6818] failed: Socket timed out on send/recv operation\n",
        "slurmd: error: Unable to register: Unable to contact slurm controller (connect failure)\n",
        'srun: error: Unable to resolve "gpu-07": Unknown host\n',
        # slurmstepd retrying its completion message (src/slurmd/slurmstepd/mgr.c)
        TS + "error: Rank 0 failed sending step completion message directly to slurmctld, retrying\n",
        # the stepd answered slurmd but its ack went missing; the step runs (slurmstepd.c)
        TS + 'error: Unable to receive "ok ack" from slurmd\n',
        # slurmd's start-up note: slurmstepd did answer (req.c)
        T + "warning: slurmstepd startup took 12 sec, possible file system problem or full memory\n",
        # slurmd could not answer srun after launching the step: the step runs (req.c)
        T + "error: _rpc_launch_tasks: unable to send return code to address:port=10.0.0.1:41234 "
        "msg_type=REQUEST_LAUNCH_TASKS: Broken pipe\n",
        # slurmctld's script daemon, not slurmstepd (src/slurmctld/slurmscriptd.c)
        T + "error: _run_script: slurmscriptd: failed to send return code to slurmctld: Broken pipe\n",
        # mgr.c: a task not put in the step's process group; the task runs on
        "slurmstepd: error: Unable to put task 0 (pid 1234) into pgrp 1234: Operation not permitted\n",
        # task.c: TMPDIR falls back to /tmp; mgr.c: the working directory falls back to /tmp
        "slurmstepd: error: TMPDIR [/scratch/u] is not writeable\n"
        "slurmstepd: error: Setting TMPDIR to /tmp\n",
        "slurmstepd: error: couldn't chdir to `/home/u/run': No such file or directory: "
        "going to /tmp instead\n",
        # 17.11-20.11 task/cgroup ignored a failed memory-cgroup attach (task_cgroup_memory.c); the task ran
        "slurmstepd: error: task/cgroup: unable to add task[pid=1234] to memory cg '(null)'\n",
        # cgroup v1's hierarchy (also made by jobacct_gather/cgroup, which the step survives) and v2's
        # subtree-control note (the controller is skipped)
        TS + "error: xcgroup_create_hierarchy: unable to create StepId=4242.0 cgroup\n",
        T + "error: Cannot enable memory in /sys/fs/cgroup/system.slice/cgroup.subtree_control: Device or "
        "resource busy\n",
        # teardown after the job ended (proctrack_cgroup.c, slurmd's step socket gone, an srun epilog)
        TS + "error: Container 1234 in cgroup plugin has 2 processes, giving up after 128 sec\n",
        T
        + "error: _step_connect: connect() failed for /var/spool/slurmd/gpu-07_4242.0: Connection refused\n",
        "srun: error: srun epilog failed status=1\n",
        # slurmstepd's process scan racing an exiting thread (first pass)
        TS + "error: _is_a_lwp: open() /proc/4242/status failed: No such file or directory\n",
        # debug trace of the same function names
        T + "debug3: _rpc_launch_tasks: return from _forkexec_slurmstepd\n",
    ],
)
def test_messages_a_job_survives_are_not_fatal(text: str) -> None:
    assert_not_fatal(text)


@pytest.mark.parametrize("sig_id", ADDED)
def test_every_entry_names_its_slurm_source_file(sig_id: str) -> None:
    assert_names_source(sig_id, SLURM_SOURCE_FILE)

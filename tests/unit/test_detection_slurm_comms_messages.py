"""Slurm communication, credential and GPU device set-up messages, derived from their source (issue 12 section
1, "generalise, don't memorise").

A third Slurm pass (docs/detection.md, "Slurm communication and credential messages, from their sources"):
what srun, salloc, sbatch and slurmstepd print when an RPC, munge authentication or a node's GPU (GRES) or
device-cgroup set-up fails. Source: SchedMD/slurm at 284c3b95f08a2dc2478499837b03355e1b9c5c75 (the commit
the two earlier Slurm passes used): src/srun/allocate.c (existing_allocation), src/api/allocate.c,
src/api/step_launch.c, src/common/slurm_protocol_api.c, src/common/slurm_errno.c,
src/plugins/auth/munge/auth_munge.c, src/plugins/task/cgroup/task_cgroup.c and task_cgroup_devices.c,
src/plugins/cgroup/v2/ebpf.c, src/interfaces/gres.c, src/slurmctld/node_mgr.c, src/slurmd/slurmstepd/mgr.c;
task_cgroup_devices.c's older wording at tag slurm-20-11-0-1. Each positive case in MESSAGES is a format
string with its conversions filled in, and each reads differently on the code before this change: healthy,
or (the launch failures with an authentication reason) through slurm_node_launch_or_kill_failed with the
node's hardware blamed. ALREADY_READ pins the communication failures the catalog read before. RECORDED holds
the munge and RPC-layer errors Slurm retries or logs for other RPCs: read by a `fatal: false` entry, never a
failure on their own; the other look-alikes are not read at all.
"""

from __future__ import annotations

import re

import pytest

from tests.unit.catalog_sources import assert_names_source, assert_not_fatal, assert_read_as
from trainguard.detection.catalog import load_catalog

# Entries added (each comment names the file that prints the message); slurm_step_launch_refused was extended.
ADDED = (
    "srun_allocation_unconfirmed",
    "slurm_auth_credential_error",
    "slurmstepd_device_constraint_failed",
    "slurm_node_gres_count_low",
)
EXTENDED = ("slurm_step_launch_refused",)
RECORDED = ("slurm_auth_credential_error", "slurm_node_gres_count_low")

# Slurm's own tree: the entries name the C file under src/ that prints the message.
SLURM_SOURCE_FILE = re.compile(r"src/(srun|api|common|plugins|interfaces|slurmctld|slurmd)/[a-z0-9_/]*\.c")

GRES_LOW = "slurm_node_gres_count_low"

SITE = ("slurm_node_failure", "system_software")
NODE = ("slurm_node_failure", "hardware")

T = "[2024-01-01T10:00:00.000] "
TS = "[2024-01-01T10:00:00.000] [4242.0] "

# (line, expected category/attribution, deciding entry)
MESSAGES = [
    # src/srun/allocate.c (existing_allocation): srun inside a job cannot look its allocation up, and exits
    (
        "srun: error: Unable to confirm allocation for job 4242: "
        "Unable to contact slurm controller (connect failure)",
        SITE,
        "srun_allocation_unconfirmed",
    ),
    (
        "srun: error: Unable to confirm allocation for job 4242: Socket timed out on send/recv operation",
        SITE,
        "srun_allocation_unconfirmed",
    ),
    (
        "srun: error: Unable to confirm allocation for job 4242: Zero Bytes were transmitted or received",
        SITE,
        "srun_allocation_unconfirmed",
    ),
    (
        "srun: error: Unable to confirm allocation for job 4242: Protocol authentication error",
        SITE,
        "srun_allocation_unconfirmed",
    ),
    # src/api/step_launch.c, src/srun/launch.c relaying slurmd's answer with an authentication code
    # (src/common/slurm_errno.c): read as the node's hardware before
    (
        "srun: error: Task launch for StepId=4242.0 failed on node gpu-07: Protocol authentication error",
        SITE,
        "slurm_step_launch_refused",
    ),
    (
        "srun: error: Application launch failed: Invalid authentication credential",
        SITE,
        "slurm_step_launch_refused",
    ),
    (
        "srun: error: task 3 launch failed: Authentication credential expired",
        SITE,
        "slurm_step_launch_refused",
    ),
    # src/plugins/task/cgroup/task_cgroup_devices.c: the step's GPU device constraint
    (
        TS + "error: Unable to set access constraint for device c 195:0 rwm(/dev/nvidia0)",
        SITE,
        "slurmstepd_device_constraint_failed",
    ),
    (TS + "error: Could not apply device constrain to job", SITE, "slurmstepd_device_constraint_failed"),
    (TS + "error: Could not apply device constrain to step", SITE, "slurmstepd_device_constraint_failed"),
    (TS + "error: Could not apply device constrain to task 3", SITE, "slurmstepd_device_constraint_failed"),
    # src/plugins/cgroup/v2/ebpf.c (load_ebpf_prog): the cgroup v2 device program
    (
        TS + "error: load_ebpf_prog: BPF load error (Operation not permitted). "
        "Please check your system limits (MEMLOCK).",
        SITE,
        "slurmstepd_device_constraint_failed",
    ),
    (
        TS + "error: load_ebpf_prog: BPF attach: -1: Invalid argument",
        SITE,
        "slurmstepd_device_constraint_failed",
    ),
    # task_cgroup_devices.c at slurm-20-11-0-1 (cgroup v1)
    (
        "slurmstepd: error: task_cgroup_devices_create: unable to add slurmstepd to devices cg "
        "'/sys/fs/cgroup/devices/slurm/uid_1000/job_4242/step_0'",
        SITE,
        "slurmstepd_device_constraint_failed",
    ),
]

# src/interfaces/gres.c's reasons, src/slurmctld/node_mgr.c (validate_node_specs): a node registers fewer
# GPUs than configured. Recorded since the false-positive review (tests/unit/test_detection_fp_review.py):
# the node is drained and the running job goes on, so the line alone never decides.
GRES_LOW_LINES = [
    T + "error: Setting node gpu-07 state to INVAL with reason:gres/gpu count reported lower than "
    "configured (7 < 8)",
    "   Reason=gres/gpu count reported lower than configured (7 < 8) [slurm@2024-01-01T10:00:00]",
    "   Reason=gres/gpu count too low (6 < 8) [slurm@2024-01-01T10:00:00]",
    "   Reason=gres/gpu:a100 count too low (3 < 4) [slurm@2024-01-01T10:00:00]",
]


@pytest.mark.parametrize("text", GRES_LOW_LINES)
def test_gres_count_low_is_recorded_not_fatal(text: str) -> None:
    m = load_catalog().match_line(text)
    assert m is not None and m.signature.id == GRES_LOW and m.signature.category.value == NODE[0], (text, m)
    assert_not_fatal(text + "\n")


@pytest.mark.parametrize(("line", "expected", "entry"), MESSAGES, ids=[m[0][:70] for m in MESSAGES])
def test_slurm_comms_failure_message_is_read(line: str, expected: tuple[str, str], entry: str) -> None:
    assert_read_as(line + "\n", expected, entry)


def test_gres_count_low_implicates_the_node() -> None:
    line = next(t for t in GRES_LOW_LINES if "Setting node" in t)
    m = load_catalog().match_line(line)
    assert m is not None and m.signature.id == "slurm_node_gres_count_low"
    assert m.groups.get("node") == "gpu-07"


def test_every_added_fatal_entry_is_exercised_here() -> None:
    assert {m[2] for m in MESSAGES} >= (set(ADDED) - set(RECORDED)) | set(EXTENDED)


# Communication failures the catalog read before this pass (pinned: they keep their entry).
ALREADY_READ = [
    # src/srun/allocate.c, src/sbatch/sbatch.c, src/salloc/salloc.c: the client gives up on slurmctld
    (
        "srun: error: Unable to allocate resources: Unable to contact slurm controller (connect failure)",
        SITE,
        "slurm_submission_refused",
    ),
    (
        "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation",
        SITE,
        "slurm_submission_refused",
    ),
    (
        "srun: error: Unable to create step for job 4242: Zero Bytes were transmitted or received",
        SITE,
        "slurm_step_create_failed",
    ),
    # src/api/step_launch.c: a launch the node does not answer stays the node's
    (
        "srun: error: Task launch for StepId=4242.0 failed on node gpu-07: Communication connection failure",
        NODE,
        "slurm_node_launch_or_kill_failed",
    ),
    (
        "srun: error: Application launch failed: Socket timed out on send/recv operation",
        NODE,
        "slurm_node_launch_or_kill_failed",
    ),
    ("srun: error: Cannot communicate with node 3.  Aborting job.", NODE, "srun_step_node_unreachable"),
    # src/slurmd/slurmd/req.c: slurmd refusing the job credential
    (
        T + "error: Invalid job credential from 1000@10.0.0.1: Job credential expired",
        SITE,
        "slurmd_launch_credential_rejected",
    ),
    # src/slurmd/slurmstepd/mgr.c: what follows a failed device constraint
    (
        TS + "error: _fork_all_tasks: Failed to invoke task plugins: "
        "one of task_p_pre_setuid functions returned error",
        SITE,
        "slurm_step_setup_failed",
    ),
]


@pytest.mark.parametrize(("line", "expected", "entry"), ALREADY_READ, ids=[m[0][:70] for m in ALREADY_READ])
def test_comms_messages_read_before_still_read(line: str, expected: tuple[str, str], entry: str) -> None:
    assert_read_as(line + "\n", expected, entry)


# munge and RPC-layer errors: one RPC failed; Slurm retries it or its caller reports its own failure
RECORDED_LINES = [
    # src/plugins/auth/munge/auth_munge.c (_decode_cred, auth_p_create)
    T + "error: Munge decode failed: Expired credential",
    T + "error: Munge decode failed: Rewound credential",
    T + "error: Check for out of sync clocks",
    T + "error: Munge decode failed: Invalid credential",
    'srun: error: Munge encode failed: Failed to access "/run/munge/munge.socket.2": '
    "No such file or directory (Did you start munged?)",
    "srun: error: If munged is up, restart with --num-threads=10",
    # src/common/slurm_protocol_api.c
    T + "error: slurm_unpack_received_msg: [10.0.0.1:41234] auth_g_verify: REQUEST_LAUNCH_TASKS has "
    "authentication error: Invalid authentication credential",
    "srun: error: slurm_send_node_msg: auth_g_create: REQUEST_RESOURCE_ALLOCATION has authentication error",
]


@pytest.mark.parametrize("text", RECORDED_LINES)
def test_credential_error_is_recorded_not_fatal(text: str) -> None:
    m = load_catalog().match_line(text)
    assert m is not None and m.signature.id == "slurm_auth_credential_error", (text, m)
    assert not m.signature.fatal
    assert_not_fatal(text + "\n")


@pytest.mark.parametrize("sig_id", RECORDED)
def test_recorded_entries_are_not_fatal(sig_id: str) -> None:
    sig = load_catalog().get(sig_id)
    assert sig is not None and not sig.fatal


@pytest.mark.parametrize(
    "text",
    [
        # RPC errors a daemon or a monitoring command logs and retries
        # (src/common/slurm_protocol_api.c, src/common/slurm_errno.c)
        T + "error: slurm_receive_msg [10.0.0.1:6818]: Zero Bytes were transmitted or received\n",
        "srun: error: slurm_receive_msgs: [[gpu-07]:6818] failed: Socket timed out on send/recv operation\n",
        "slurmd: error: Unable to register: Unable to contact slurm controller (connect failure)\n",
        "squeue: error: slurm_load_jobs error: Unable to contact slurm controller (connect failure)\n",
        T + "error: slurm_send_node_msg: [10.0.0.1:6818] slurm_bufs_sendto(msg_type=RESPONSE_SLURM_RC) "
        "failed: Communication connection failure\n",
        # slurmstepd's messages to srun after the tasks exited or started (src/slurmd/slurmstepd/mgr.c):
        # srun's own verdict (`timeout waiting for task launch`) decides when it matters
        TS + "error: Failed to send MESSAGE_TASK_EXIT: Connection refused\n",
        TS + "error: _send_launch_resp: Failed to send RESPONSE_LAUNCH_TASKS: Connection refused\n",
        TS + "error: Rank 0 failed sending step completion message directly to slurmctld, retrying\n",
        # src/api/allocate.c: the note while a pending allocation is awaited. (src/srun/allocate.c's `Slurm
        # job %u has expired`, after which srun exits, is read since round 24 as a cascade that decides only
        # when the job's own end is not in the log: tests/unit/test_detection_generalise_round24.py.)
        "salloc: debug3: Unable to confirm allocation for JobId=4242: "
        "Socket timed out on send/recv operation\n",
        # src/plugins/task/cgroup/task_cgroup_devices.c: the constraint is skipped in a user namespace
        TS + "debug:  task/cgroup: task_cgroup_devices_create: Skipping job and step device constrain "
        "as we are in a user namespace without a BPF token available\n",
        # src/interfaces/gres.c: more GPUs than configured is ignored
        T + "debug:  _node_config_validate: gres/gpu: Ignoring excess count on node gpu-07 (9 > 8)\n",
        # a launch credential revoked (the job was already killed: src/slurmd/slurmd/req.c)
        T + "error: Invalid job credential from 1000@10.0.0.1: Job credential revoked\n",
    ],
)
def test_messages_a_job_survives_are_not_fatal(text: str) -> None:
    assert_not_fatal(text)


@pytest.mark.parametrize("sig_id", ADDED + EXTENDED)
def test_every_entry_names_its_slurm_source_file(sig_id: str) -> None:
    assert_names_source(sig_id, SLURM_SOURCE_FILE)

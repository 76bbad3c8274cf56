"""Twentieth corpus round, part a (issue 12 section 2): generalised from the round's tuning misses only.

Round 20a added 27 excerpts (pub910-pub936) drawn at random from the HPC side (UCX / Open MPI / MPICH /
libfabric trackers, pyxis / enroot / Apptainer, AWS ParallelCluster, a Lustre burst buffer, Slurm job-tool
trackers), split by the stored rule and committed (79f73bc) before the classifier ran on them. Its tuning
misses, each generalised from the program that prints the text, not from an excerpt:
- Open MPI's ranks that selected different PMLs, and MPI_Init's `unreachable` abort (pub910, openucx/ucx#4224,
  read healthy): open-mpi/ompi (2d23aa5789420b88dde79c332e8f2f33b78fa608) ompi/mca/pml/base/pml_base_select.c
  `%s selected pml %s, but peer %s on %s selected pml %s` (OMPI_ERR_UNREACH), ompi/runtime/ompi_mpi_init.c
  showing help-mpi-runtime.txt [mpi_init:startup:pml-add-procs-fail]: interconnect, system_software (entry
  openmpi_process_unreachable_at_init);
- UCX with none of the transports it was asked for (pub913, openucx/ucx#9610, read interconnect /
  infrastructure): openucx/ucx (6a49e0082931d7249c682a21d5ebb740fe2ea55b) src/ucp/core/ucp_context.c
  `no usable transports/devices (asked %s)`, UCS_ERR_NO_DEVICE: interconnect, system_software (entry
  ucx_no_usable_transports);
- MPICH's / Intel MPI's OFI netmod refused a libfabric call in its init hook (pub922, firemodels/fds#7868,
  read python_exception / application): pmodels/mpich src/mpid/ch4/netmod/ofi/ofi_impl.h MPIDI_OFI_CALL
  (`**ofid_<call> %s %d %s %s`, errnames.txt at 259bad1eb5c186805cc40aa17fb87dcdd699aa8f): `OFI <call>()
  failed (<file>:<line>:MPIDI_NM_mpi_init_hook:<error>)`: interconnect, system_software (entry
  mpich_ofi_init_call_failed);
- mount.lustre giving up for a reason of the client's set-up (pub932, RSE-Cambridge/data-acc#119, read
  healthy): lustre/lustre-release (3bca0973cca3d50f9f0b1b3e22fcc5d82a40d5fe) lustre/utils/mount_lustre.c `%s:
  mount %s at %s failed: %s` with EBUSY / ENODEV / ENOENT / EINVAL: storage_io, system_software (entry
  lustre_client_mount_refused);
- not changed: pub920 (aws/aws-parallelcluster#1122; its first failure is a launch the node did not answer,
  `Communication connection failure`, read as the node's as everywhere else; the later `Can't find an
  address, check slurm.conf` cannot outrank it), pub928 (apptainer/singularity#2244, `FATAL: exec
  /.singularity.d/actions/shell failed: no such file or directory`: the same text is printed for an image
  whose action script cannot run, so the runtime's bug is not in the text) and pub934
  (aws/aws-parallelcluster#1988, the excerpt's MPICH abort line is cut short in the thread's copy and
  libfabric's EFA `Unable to register MR` warnings are not fatal on their own).
Every positive case below fails on main before this change (the look-alikes and guards pass on both).
"""

from __future__ import annotations

import pytest

from tests.unit.catalog_sources import assert_names_source, assert_not_fatal, assert_read_as
from trainguard.detection.classify import classify_text

MPI_STACK = ("interconnect", "system_software")
STORAGE_SETUP = ("storage_io", "system_software")

# ---------------------------------------------------------------- Open MPI: a peer unreachable at MPI_Init


@pytest.mark.parametrize(
    "text",
    [
        "[gpu-03:01234] [[4321,1],5] selected pml ob1, but peer [[4321,1],0] on gpu-01 selected pml ucx\n",
        "[n7:11] [[977,1],12] selected pml cm, but peer [[977,1],0] on unknown selected pml ucx\n"
        "[n7:11] [[977,1],13] selected pml cm, but peer [[977,1],0] on unknown selected pml ucx\n",
        "--------------------------------------------------------------------------\n"
        "MPI_INIT has failed because at least one MPI process is unreachable\n"
        "from another.  This *usually* means that an underlying communication\n"
        "plugin -- such as a BTL or an MTL -- has either not loaded or not\n"
        "allowed itself to be used.  Your MPI job will now abort.\n",
    ],
)
def test_openmpi_unreachable_at_init_is_the_mpi_stack(text: str) -> None:
    assert_read_as(text, MPI_STACK, "openmpi_process_unreachable_at_init")


def test_openmpi_pml_verbose_check_is_not_fatal() -> None:
    assert_not_fatal(
        "[gpu-03:01234] check:select: checking my pml ucx against process [[4321,1],0] pml ucx\n"
    )


# ---------------------------------------------------------------- UCX: none of the transports asked for


@pytest.mark.parametrize(
    "text",
    [
        "[1705555968.594329] [c204-009:189455:0]     ucp_context.c:1345 UCX  ERROR no usable"
        " transports/devices (asked knem,dc_x,rc on all devices)\n",
        "[1717000000.000001] [gpu-07:4242:0]     ucp_context.c:1582 UCX  ERROR No usable transports/devices,"
        " asked tcp on network:mlx5_ib0:1,mlx5_ib1:1\n",
        "[1700000000.1] [cn-12:777:0]     ucp_context.c:1081 UCX  WARN  transports 'rc_x' are not available,"
        " please use one or more of: posix, self, sysv, tcp\n"
        "[1700000000.2] [cn-12:777:0]     ucp_context.c:1345 UCX  ERROR no usable transports/devices"
        " (asked rc_x on network: mlx5_0:1)\n"
        "[cn-12:00777] pml_ucx.c:309  Error: Failed to create UCP worker\n",
    ],
)
def test_ucx_without_usable_transports_is_the_node_setup(text: str) -> None:
    assert_read_as(text, MPI_STACK, "ucx_no_usable_transports")


def test_ucx_unavailable_transport_warning_alone_is_not_fatal() -> None:
    assert_not_fatal(
        "[1705555968.594314] [c204-009:189455:0]     ucp_context.c:1081 UCX  WARN  transports"
        " 'knem','dc_x','rc' are not available, please use one or more of: mm, posix, self, shm, sm, sysv,"
        " tcp\n"
    )


def test_other_ucx_errors_stay_the_fabrics() -> None:
    r = classify_text("[node3:5678 :1] ucp_worker.c:1234 UCX ERROR Endpoint timeout on peer node4\n")
    assert (r.fatal, r.category, r.attribution) == (True, "interconnect", "infrastructure")
    assert "ucx_no_usable_transports" not in r.pattern_ids


# ---------------------------------------------------------------- MPICH / Intel MPI: OFI refused at init


@pytest.mark.parametrize(
    "text",
    [
        "Abort(1094799) on node 0 (rank 0 in comm 0): Fatal error in PMPI_Init_thread: Other MPI error, error"
        " stack:\nMPIR_Init_thread(666)......: \nMPID_Init(922).............: \n"
        "MPIDI_NM_mpi_init_hook(719): OFI addrinfo() failed (ofi_init.h:719:MPIDI_NM_mpi_init_hook:No data"
        " available)\n",
        "Abort(1091215) on node 0 (rank 0 in comm 0): Fatal error in PMPI_Init: Other MPI error, error"
        " stack:\n"
        "MPIR_Init_thread(136).......:\nMPID_Init(904)..............:\n"
        "MPIDI_OFI_mpi_init_hook(986): OFI addrinfo() failed (ofi_init.c:986:MPIDI_OFI_mpi_init_hook:No data"
        " available)\n",
        "MPIDI_OFI_mpi_init_hook(1512): OFI domain() failed (ofi_init.c:1512:MPIDI_OFI_mpi_init_hook:Function"
        " not implemented)\n",
    ],
)
def test_mpich_ofi_init_failure_is_the_provider_setup(text: str) -> None:
    assert_read_as(text, MPI_STACK, "mpich_ofi_init_call_failed")


def test_mpich_ofi_poll_failure_stays_the_fabrics() -> None:
    r = classify_text(
        "MPIDI_OFI_handle_cq_error(1075): OFI poll failed (ofi_events.c:1077:MPIDI_OFI_handle_cq_error:"
        "Input/output error - PTLTE_NOT_FOUND)\n"
    )
    assert (r.fatal, r.category, r.attribution) == (True, "interconnect", "infrastructure")
    assert "mpich_ofi_init_call_failed" not in r.pattern_ids


# ---------------------------------------------------------------- mount.lustre: the client's set-up


@pytest.mark.parametrize(
    "text",
    [
        "Jan 09 13:38:08 dac-e-19 dacd[57485]: Error in remote ssh run: 'mount -t lustre ...' error:"
        " exit status 16\n"
        "                                      mount.lustre: mount dac-e-19-opa@o2ib1:/Fs at /mnt/dac/1_job"
        " failed: Device or resource busy\n"
        "                                      Is the backend filesystem mounted?\n",
        "mount.lustre: mount 10.0.0.5@tcp:/scratch at /lustre/scratch failed: No such device\n"
        "Are the lustre modules loaded?\n Check /etc/modprobe.conf and /proc/filesystems\n",
        "mount.lustre: mount mgs01@o2ib:/scratc at /scratch failed: No such file or directory\n"
        "Is the MGS specification correct?\nIs the filesystem name correct?\n",
    ],
)
def test_lustre_mount_refused_by_the_client_setup(text: str) -> None:
    assert_read_as(text, STORAGE_SETUP, "lustre_client_mount_refused")


@pytest.mark.parametrize(
    "text",
    [
        "mount.lustre: mount 10.0.0.5@tcp:/scratch at /lustre/scratch failed: Device or resource busy retries"
        " left: 3\n",
        "mount.lustre: mount 10.0.0.5@tcp:/scratch at /lustre/scratch failed: Input/output error\n",
    ],
)
def test_lustre_mount_retries_and_server_errors_are_not_this_entry(text: str) -> None:
    assert "lustre_client_mount_refused" not in classify_text(text).pattern_ids


@pytest.mark.parametrize(
    "sig_id",
    [
        "openmpi_process_unreachable_at_init",
        "ucx_no_usable_transports",
        "mpich_ofi_init_call_failed",
        "lustre_client_mount_refused",
    ],
)
def test_round20a_entries_name_their_sources(sig_id: str) -> None:
    assert_names_source(sig_id)

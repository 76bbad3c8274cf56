"""Twenty-first corpus round, part a (issue 12 section 2): generalised from the round's tuning misses only.

Round 21a added 29 excerpts (pub970-pub998) drawn at random from the cluster/operations side of GPU training
(the Kubernetes GPU stack, mpi-operator and the training operator, Ray Train, SkyPilot, Determined,
nccl-tests, Horovod, Flux, Cluster Toolkit, DeepOps), split by the stored rule and committed (5315ae6) before
the classifier ran on them. Its tuning misses, each generalised from the program that prints the text, not
from an excerpt:
- MPICH's PMI-1 calls other than PMI_Init refused at MPI_Init (pub982, NVIDIA/nccl-tests#92, read
  python_exception / application): pmodels/mpich src/util/mpir_pmi.c with errnames.txt's `PMI_KVS_Get
  returned %d` and its siblings: slurm_node_failure, system_software (entry mpi_pmi_unavailable, extended);
- bash's error prologue without a line number, `bash: /usr/bin/python: No such file or directory` (pub978,
  skypilot-org/skypilot#5462, read healthy): bash error.c error_prolog (entry shell_main_command_not_found,
  extended);
- Flux's job shell that cannot start the job's command (pub984, flux-framework/flux-core#4195, read healthy):
  flux-core src/shell/shell.c `task %d: start failed: %s: %s` (entry flux_task_start_failed);
- Fluxion refusing a request it cannot satisfy (pub986, flux-framework/flux-sched#602, read healthy):
  flux-sched qmanager_callbacks.cpp `alloc denied due to type="%s"` (entry flux_alloc_denied);
- Flux's fatal node-failure exception (from pub985, flux-framework/flux-core#6653, read healthy):
  flux-core src/modules/job-exec/bgexec.c `node failure on %s (rank %d)`; pub985 itself lists only the
  lost-shell note `(shell rank N)`, which a resilient job survives, and stays as it was (entry
  flux_node_failure);
- NCCL's socket handshake of the wrong connection type (pub992, NVIDIA/nccl-tests#188, read healthy):
  NVIDIA/nccl src/misc/socket.cc socketFinalizeAccept `wrong type %d != %d`, ncclInternalError (entry
  nccl_socket_wrong_type);
- not changed: pub971 (NVIDIA/k8s-device-plugin#444: the plugin's `Failed to initialize NVML` is followed, in
  the releases of that time, by the plugin waiting on without GPUs rather than exiting, and whether a job is
  affected is not in the text) and pub977 (skypilot-org/skypilot#4599: SkyPilot's `Job N failed with return
  code list: [1]` summary was not traced to SkyPilot's own source this round).
Every positive case below fails on main before this change (the look-alikes and guards pass on both).
"""

from __future__ import annotations

import pytest

from tests.unit.catalog_sources import assert_names_source, assert_not_fatal, assert_read_as
from trainguard.detection.classify import classify_text

LAUNCH_SETUP = ("slurm_node_failure", "system_software")
JOB_COMMAND = ("python_exception", "application")
NODE_LOST = ("slurm_node_failure", "hardware")
NCCL_SETUP = ("nccl_error", "system_software")

# ---------------------------------------------------------------- MPICH: PMI-1 calls refused at MPI_Init


@pytest.mark.parametrize(
    "text",
    [
        "Abort(3712399) on node 0 (rank 0 in comm 0): Fatal error in PMPI_Init: Other MPI error, error"
        " stack:\n"
        "MPIR_Init_thread(159).......: \nMPID_Init(597)..............: \n"
        "MPIR_pmi_allgather_shm(699).: \nget_ex(450).................: \n"
        "MPIR_pmi_kvs_get(227).......: PMI_KVS_Get returned -1\n",
        "Fatal error in MPI_Init: Other MPI error, error stack:\n"
        "MPIR_Init_thread(586)..............: \nMPID_Init(224).....................: \n"
        "MPIR_pmi_init(160).................: PMI_Get_size returned 14\n",
        "MPIR_pmi_barrier(301): \nput_ex(510)...........: PMI_KVS_Put returned -1\n",
    ],
)
def test_mpich_pmi_calls_refused_are_the_launchers_interface(text: str) -> None:
    assert_read_as(text, LAUNCH_SETUP, "mpi_pmi_unavailable")


def test_mpich_pmi_finalize_is_not_this_entry() -> None:
    r = classify_text("MPID_Finalize(206)..........: PMI_Finalize returned -1\n")
    assert "mpi_pmi_unavailable" not in r.pattern_ids


# ---------------------------------------------------------------- bash without a line number


@pytest.mark.parametrize(
    "text",
    [
        "(sky-service-7080, pid=2846) bash: /usr/bin/python: No such file or directory\n",
        "bash: torchrun: command not found\n",
        "-bash: /opt/venv/bin/python3: Permission denied\n",
    ],
)
def test_bash_without_line_number_is_the_jobs_command(text: str) -> None:
    assert_read_as(text, JOB_COMMAND, "shell_main_command_not_found")


@pytest.mark.parametrize(
    "text",
    ["bash: nvidia-smi: command not found\n", "mybash: python: command not found\n"],
)
def test_bash_probe_and_other_programs_are_not_read(text: str) -> None:
    assert "shell_main_command_not_found" not in classify_text(text).pattern_ids


# ---------------------------------------------------------------- Flux: the job's command, refusals, nodes


@pytest.mark.parametrize(
    "text",
    [
        "$ flux mini run -N5 -n5 -t 5s stress --cpu=1\n"
        "0.778s: flux-shell[1]: FATAL: task 0: start failed: stress: No such file or directory\n"
        "0.784s: job.exception type=exec severity=0 task 0: start failed: stress: No such file or"
        " directory\n",
        "flux-shell[0]: FATAL: task 3: start failed: ./train.sh: Permission denied\n",
        "1.204s: job.exception type=exec severity=0 task 0: start failed: /scratch/app/solver: Exec format"
        " error\n",
    ],
)
def test_flux_task_start_failure_is_the_jobs_command(text: str) -> None:
    assert_read_as(text, JOB_COMMAND, "flux_task_start_failed")


def test_flux_task_start_failure_for_want_of_memory_is_not_this_entry() -> None:
    r = classify_text("flux-shell[0]: FATAL: task 0: start failed: python: Cannot allocate memory\n")
    assert "flux_task_start_failed" not in r.pattern_ids


@pytest.mark.parametrize(
    "text",
    [
        "$ flux job attach 52458411786240\n"
        '0.018s: job.exception type=alloc severity=0 alloc denied due to type="unsatisfiable"\n',
        '0.021s: job.exception type=alloc severity=0 alloc denied due to type="unsatisfiable"\n',
    ],
)
def test_flux_alloc_denied_is_a_refused_job(text: str) -> None:
    assert_read_as(text, LAUNCH_SETUP, "flux_alloc_denied")


@pytest.mark.parametrize(
    "text",
    [
        "3742.118s: job.exception type=node-failure severity=0 node failure on elcap8767 (rank 1127)\n",
        "12.345s: job.exception type=node-failure severity=0 node failure on tioga12 (rank 11)\n",
    ],
)
def test_flux_fatal_node_failure_is_the_node(text: str) -> None:
    assert_read_as(text, NODE_LOST, "flux_node_failure")
    assert classify_text(text).nodes


@pytest.mark.parametrize(
    "text",
    [
        "fdFmCpYwQZ5  node-failure              node failure on elcap8767 (shell rank 1127)\n",
        "3742.118s: job.exception type=node-failure severity=1 node failure on elcap8767 (shell rank 1127)\n",
    ],
)
def test_flux_lost_shell_notice_alone_is_not_fatal(text: str) -> None:
    assert_not_fatal(text)


# ---------------------------------------------------------------- NCCL: a socket of the wrong type


@pytest.mark.parametrize(
    "text",
    [
        "user:16899:16961 [0] misc/socket.cc:441 NCCL WARN socketFinalizeAccept: wrong type 4 != 3\n"
        "user:16899:16961 [0] NCCL INFO misc/socket.cc:561 -> 3\n",
        "bigo:1884:2346 [0] socket.c:446 NCCL WARN socketFinalizeAccept: wrong type 3 != 4\n",
    ],
)
def test_nccl_socket_of_the_wrong_type_is_the_nodes_setup(text: str) -> None:
    assert_read_as(text, NCCL_SETUP, "nccl_socket_wrong_type")


def test_nccl_socket_wrong_magic_is_not_fatal() -> None:
    assert_not_fatal(
        "gpu1:123:456 [0] misc/socket.cc:441 NCCL WARN socketFinalizeAccept: wrong magic 3f4a != 5c6b\n"
    )


@pytest.mark.parametrize(
    "sig_id",
    [
        "mpi_pmi_unavailable",
        "shell_main_command_not_found",
        "flux_task_start_failed",
        "flux_alloc_denied",
        "flux_node_failure",
        "nccl_socket_wrong_type",
    ],
)
def test_round21a_entries_name_their_sources(sig_id: str) -> None:
    assert_names_source(sig_id)

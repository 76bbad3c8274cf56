"""False-positive review of round 21a's fatal entries (docs/detection.md, "False-positive review of the day's
entries", subsection "Round 21a").

Each entry round 21a added or extended was checked against the printing program's source for paths on which
the program prints the matched text and goes on. SURVIVED lines read FATAL on main before the review
(bdb0e6a); MISSED lines are the fatal forms the same source prints that main read healthy; KEPT lines read
fatal before and after, and SURVIVED_BEFORE lines were already not fatal (regression guards).

Sources: NVIDIA/nccl src/misc/socket.cc socketFinalizeAccept (v2.16.2 to 43467c6d:
`WARN("socketFinalizeAccept: wrong type %d != %d")`, from 2.27.3 `socketFinalizeAccept from %s: wrong type`),
src/include/socket.h (ncclSocketType, NCCL_SOCKET_MAGIC), src/ras/ras.cc and src/ras/rasnet.cc (the RAS
listener drops a failed accept); bminor/bash error.c get_name_for_error and error_prolog, shell.c
run_startup_files; flux-framework/flux-core src/shell/shell.c (`task %d (host %s): start failed` since
d8a835990), src/modules/job-exec/bgexec.c and job-exec.c (jobinfo_lost_shell, jobinfo_fatal_error);
flux-framework/flux-sched qmanager/modules/qmanager_callbacks.cpp; pmodels/mpich src/util/mpir_pmi1.inc.
"""

from __future__ import annotations

import pytest

from tests.unit.catalog_sources import assert_names_source, assert_not_fatal, assert_read_as
from trainguard.detection.catalog import load_catalog
from trainguard.detection.classify import classify_text

OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
    "79.11 GiB of which 1.06 GiB is free."
)
TRAINING = "Epoch 1/10: 100%|##########| 500/500 [01:02<00:00, 8.01it/s, loss=0.312]\nTraining finished."

# Printed on a path the job survives: FATAL on main, not fatal now.
SURVIVED = [
    # A stray NET/IB or NET/Socket connection (NCCL_SOCKET_MAGIC) reaching NCCL's RAS listener (type 5):
    # rasnet.cc terminates that socket and the job trains on.
    "gpu1:123:456 [0] misc/socket.cc:503 NCCL WARN socketFinalizeAccept: wrong type 4 != 5",
    "gpu1:123:456 [0] misc/socket.cc:503 NCCL WARN socketFinalizeAccept: wrong type 3 != 5",
    # A login shell's startup files (named by BASH_SOURCE) call python before the job script sets it up.
    "/home/alice/.bashrc: line 12: python: command not found",
    "/home/alice/.bash_profile: line 9: python3: command not found",
    "/etc/profile.d/site-python.sh: line 4: /usr/bin/python: No such file or directory",
    "/etc/bashrc: line 80: python: command not found",
    "/home/alice/.profile: line 27: /opt/conda/bin/python: No such file or directory",
]

# Already not fatal on main; kept that way (the survivable forms the round 21a entries were written to leave).
SURVIVED_BEFORE = [
    # bgexec.c jobinfo_lost_shell: a non-critical shell lost, severity FLUX_JOB_EXCEPTION_CRIT (2)
    "12.1s: job.exception type=node-failure severity=2 node failure on tioga12 (shell rank 11)",
    "fdFmCpYwQZ5  node-failure              node failure on elcap8767 (shell rank 1127)",
    # NCCL 43467c6d: the wrong type is an INFO and the connection is discarded
    "gpu1:123:456 [0] NCCL INFO socketFinalizeAccept from 10.0.0.7<45123>: wrong socket type "
    "(peer 4 != expected 3 -- peer connected to wrong NCCL socket), discarding peer connection",
    # mpir_pmi1.inc pmi1_get_jobattr: a failed optional get is silent; only PMI_Finalize's failure is printed
    "MPID_Finalize(206)..........: PMI_Finalize returned -1",
    # a sourced profile script that is not there: not one of the job's commands
    "-bash: /etc/profile.d/conda.sh: No such file or directory",
    "bash: /home/alice/venv/bin/activate: No such file or directory",
    "bash: type: python: not found",
]

# The fatal forms the same sources print that main did not read.
MISSED = [
    (
        "gpu1:123:456 [0] misc/socket.cc:533 NCCL WARN socketFinalizeAccept from 10.0.0.7<45123>: wrong type "
        "4 != 3",
        ("nccl_error", "system_software"),
        "nccl_socket_wrong_type",
    ),
    (
        "0.312s: flux-shell[0]: FATAL: task 0 (host tioga12): start failed: python3: "
        "No such file or directory",
        ("python_exception", "application"),
        "flux_task_start_failed",
    ),
    (
        "0.318s: job.exception type=exec severity=0 task 3 (host tioga12): start failed: ./train.sh: "
        "Permission denied",
        ("python_exception", "application"),
        "flux_task_start_failed",
    ),
]

# What the review kept fatal.
KEPT = [
    (
        "user:16899:16961 [0] misc/socket.cc:441 NCCL WARN socketFinalizeAccept: wrong type 4 != 3",
        ("nccl_error", "system_software"),
        "nccl_socket_wrong_type",
    ),
    (
        "gpu1:123:456 [0] misc/socket.cc:503 NCCL WARN socketFinalizeAccept: wrong type 2 != 1",
        ("nccl_error", "system_software"),
        "nccl_socket_wrong_type",
    ),
    (
        "/var/spool/slurmd/job4242/slurm_script: line 12: python: command not found",
        ("python_exception", "application"),
        "shell_main_command_not_found",
    ),
    (
        "(sky-service-7080, pid=2846) bash: /usr/bin/python: No such file or directory",
        ("python_exception", "application"),
        "shell_main_command_not_found",
    ),
    (
        "/home/alice/run_profile.sh: line 3: torchrun: command not found",
        ("python_exception", "application"),
        "shell_main_command_not_found",
    ),
    (
        "0.778s: flux-shell[1]: FATAL: task 0: start failed: stress: No such file or directory",
        ("python_exception", "application"),
        "flux_task_start_failed",
    ),
    (
        '0.018s: job.exception type=alloc severity=0 alloc denied due to type="match error"',
        ("slurm_node_failure", "system_software"),
        "flux_alloc_denied",
    ),
    (
        "12.1s: job.exception type=exec severity=0 node failure on tioga12 (rank 11)",
        ("slurm_node_failure", "hardware"),
        "flux_node_failure",
    ),
    (
        "MPIR_pmi_kvs_get(227).......: PMI_KVS_Get returned 14",
        ("slurm_node_failure", "system_software"),
        "mpi_pmi_unavailable",
    ),
    (
        "MPIR_pmi_init(130)..........: PMI_KVS_Get_my_name returned -1",
        ("slurm_node_failure", "system_software"),
        "mpi_pmi_unavailable",
    ),
]


@pytest.mark.parametrize("text", SURVIVED + SURVIVED_BEFORE)
def test_survived_paths_are_not_fatal(text: str) -> None:
    assert_not_fatal(text)


@pytest.mark.parametrize("text", SURVIVED)
def test_survived_paths_are_not_fatal_while_the_job_trains(text: str) -> None:
    assert_not_fatal(text + "\n" + TRAINING)


@pytest.mark.parametrize("text", SURVIVED)
def test_a_later_failure_decides_after_a_survived_line(text: str) -> None:
    r = classify_text(text + "\n" + OOM)
    assert (r.fatal, r.category, r.attribution) == (True, "cuda_oom", "application"), (text, r.pattern_ids)


@pytest.mark.parametrize(("text", "expected", "entry"), MISSED + KEPT)
def test_fatal_paths_read(text: str, expected: tuple[str, str], entry: str) -> None:
    assert_read_as(text, expected, entry)


def test_startup_file_entry_is_recorded_before_the_shell_entry() -> None:
    cat = load_catalog()
    sig = cat.get("shell_startup_file_command_not_found")
    assert sig is not None and sig.fatal is False
    m = cat.match_line("/home/alice/.bashrc: line 12: python: command not found")
    assert m is not None and m.signature.id == "shell_startup_file_command_not_found"


@pytest.mark.parametrize(
    "sig_id", ["shell_startup_file_command_not_found", "nccl_socket_wrong_type", "flux_task_start_failed"]
)
def test_reviewed_entries_name_their_source(sig_id: str) -> None:
    assert_names_source(sig_id)

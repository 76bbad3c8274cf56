"""Job environment messages, derived from their sources (issue 12 section 1, "generalise, don't memorise").

What ends a batch script before or as training starts, because the job's environment cannot run its main
command, was read out of the printing programs' source and mapped to TrainGuard's categories
(docs/detection.md, "Job environment messages, from their sources"):

- glibc's dynamic loader (bminor/glibc 04277e02: elf/dl-error-skeleton.c fatal_error, elf/dl-load.c,
  elf/dl-version.c match_symbol, elf/rtld.c print_missing_version),
- CPython's start-up (python/cpython 9c68aef6 Modules/main.c pymain_run_file_obj; 01ba50a6 Lib/runpy.py
  _run_module_as_main, _get_module_details, _get_main_module_details),
- bash (bminor/bash a59615a1 execute_cmd.c: execute_disk_command, shell_execve; error.c's `line N: ` prefix).

The job's command or the environment its script set up is the program's: python_exception / application
(the tuning part's labels: pub105, a training script that does not exist; pub852, hydra's execvp failure).
The NVIDIA driver's own libraries missing at exec are the node's driver set-up (slurm_node_failure /
system_software, as the catalog's CUDA driver entries). Each positive case in MESSAGES is a source's format
string with its conversions filled in; each read healthy on the code before this change (the catalog had no
entry for these lines; checked by running this file against main's catalog). The look-alikes are messages a
job goes on after: Lmod's and environment-modules' errors, conda's activation errors, a probe's `command not
found`, a plugin's dlopen() failure, the loader's own non-fatal version notices.
"""

from __future__ import annotations

import pytest

from tests.unit.catalog_sources import assert_names_source, assert_not_fatal, assert_read_as
from trainguard.detection.catalog import load_catalog
from trainguard.detection.classify import classify_text

ADDED = (
    "loader_gpu_driver_library_missing",
    "loader_shared_library_failed",
    "loader_symbol_version_not_found",
    "python_main_file_unopenable",
    "python_m_module_not_found",
    "shell_main_command_not_found",
)

USER = ("python_exception", "application")
NODE = ("slurm_node_failure", "system_software")

# (text, expected category/attribution, deciding entry)
MESSAGES = [
    # glibc elf/dl-error-skeleton.c fatal_error with elf/dl-load.c's errstrings
    (
        "python: error while loading shared libraries: libpython3.10.so.1.0: cannot open shared object file: "
        "No such file or directory",
        USER,
        "loader_shared_library_failed",
    ),
    (
        "/home/alice/venv/bin/python3: error while loading shared libraries: libssl.so.1.1: cannot open "
        "shared object file: No such file or directory",
        USER,
        "loader_shared_library_failed",
    ),
    (
        "./train: error while loading shared libraries: libcudart.so.12: wrong ELF class: ELFCLASS32",
        USER,
        "loader_shared_library_failed",
    ),
    (
        "0: torchrun: error while loading shared libraries: libmpi.so.40: cannot open shared object file: "
        "No such file or directory",
        USER,
        "loader_shared_library_failed",
    ),
    # the NVIDIA driver's libraries: the node's driver set-up
    (
        "python: error while loading shared libraries: libcuda.so.1: cannot open shared object file: "
        "No such file or directory",
        NODE,
        "loader_gpu_driver_library_missing",
    ),
    (
        "./train_gpt2cu: error while loading shared libraries: libnvidia-ml.so.1: cannot open shared object "
        "file: No such file or directory",
        NODE,
        "loader_gpu_driver_library_missing",
    ),
    # glibc elf/dl-version.c match_symbol through elf/rtld.c print_missing_version
    (
        "./train: /lib64/libc.so.6: version `GLIBC_2.34' not found (required by ./train)",
        USER,
        "loader_symbol_version_not_found",
    ),
    (
        "python: /lib/x86_64-linux-gnu/libstdc++.so.6: version `GLIBCXX_3.4.29' not found (required by "
        "/home/alice/miniconda3/envs/llm/lib/libpython3.11.so.1.0)",
        USER,
        "loader_symbol_version_not_found",
    ),
    # CPython Modules/main.c pymain_run_file_obj (3.10+ %R and the older '%ls' form)
    (
        "/usr/bin/python3: can't open file '/home/alice/train.py': [Errno 2] No such file or directory",
        USER,
        "python_main_file_unopenable",
    ),
    (
        "python: can't open file 'train_gpt.py': [Errno 13] Permission denied",
        USER,
        "python_main_file_unopenable",
    ),
    # Lib/runpy.py _get_main_module_details
    (
        "/opt/conda/bin/python: can't find '__main__' module in '/workspace/llm'",
        USER,
        "python_main_file_unopenable",
    ),
    # Lib/runpy.py _run_module_as_main: `<sys.executable>: <_Error>`
    ("/usr/bin/python3: No module named torch.distributed.run", USER, "python_m_module_not_found"),
    ("/home/alice/venv/bin/python: No module named 'deepspeed'", USER, "python_m_module_not_found"),
    (
        "/usr/bin/python3: No module named 'trian'. Did you mean: 'train'?",
        USER,
        "python_m_module_not_found",
    ),
    (
        "/opt/conda/bin/python3.11: Error while finding module specification for 'train.py' "
        "(ModuleNotFoundError: __path__ attribute not found on 'train' while trying to find 'train.py'). "
        "Try using 'train' instead of 'train.py' as the module name.",
        USER,
        "python_m_module_not_found",
    ),
    (
        "/usr/bin/python3: No module named llm.__main__; 'llm' is a package and cannot be directly executed",
        USER,
        "python_m_module_not_found",
    ),
    ("/usr/bin/python: Relative module names not supported", USER, "python_m_module_not_found"),
    # bash execute_cmd.c (execute_disk_command, shell_execve) with error.c's prefix
    (
        "/var/spool/slurmd/job4242/slurm_script: line 12: torchrun: command not found",
        USER,
        "shell_main_command_not_found",
    ),
    ("run.sh: line 3: python3: command not found", USER, "shell_main_command_not_found"),
    (
        "/var/spool/slurm/d/job4242/slurm_script: line 9: /home/alice/venv/bin/python: No such file or "
        "directory",
        USER,
        "shell_main_command_not_found",
    ),
    (
        "/var/spool/slurmd/job4242/slurm_script: line 7: ./train.py: /home/alice/.venv/bin/python3: bad "
        "interpreter: No such file or directory",
        USER,
        "shell_main_command_not_found",
    ),
    ("bash: line 1: deepspeed: command not found", USER, "shell_main_command_not_found"),
]


@pytest.mark.parametrize(("text", "expected", "entry"), MESSAGES, ids=[m[0][-60:] for m in MESSAGES])
def test_environment_failure_message_is_read(text: str, expected: tuple[str, str], entry: str) -> None:
    assert_read_as(text + "\n", expected, entry)


def test_every_added_entry_is_exercised_here() -> None:
    assert {m[2] for m in MESSAGES} == set(ADDED)


@pytest.mark.parametrize("sig_id", ADDED)
def test_added_entry_names_its_source(sig_id: str) -> None:
    assert_names_source(sig_id)


def test_the_loader_entries_are_generic_and_the_driver_s_is_specific() -> None:
    cat = load_catalog()
    for sig_id in ("loader_shared_library_failed", "loader_symbol_version_not_found"):
        sig = cat.get(sig_id)
        assert sig is not None and sig.priority == 1 and not sig.cascade
    driver = cat.get("loader_gpu_driver_library_missing")
    assert driver is not None and driver.priority == 2


def test_a_specific_finding_decides_over_a_loader_error() -> None:
    # the loader's line does not say whose program failed: slurmd's own report of the step decides
    text = (
        "slurmstepd: error while loading shared libraries: libslurmfull.so: cannot open shared object file: "
        "No such file or directory\n"
        "[2024-01-01T10:00:00.000] error: _forkexec_slurmstepd: slurmstepd failed to send return code got 0: "
        "Success\n"
    )
    assert_read_as(text, NODE, "slurmd_stepd_start_failed")


def test_a_missing_script_decides_over_the_launcher_s_exit_report() -> None:
    # the shape of pub105 (tuning): python cannot open the script, torchelastic reports exit code 2
    text = (
        "/usr/bin/python3: can't open file 'train.py': [Errno 2] No such file or directory\n"
        "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 2) local_rank: 0 (pid: 1218) "
        "of binary: /usr/bin/python3\n"
    )
    r = classify_text(text)
    assert (r.fatal, r.category, r.attribution) == (True, *USER)
    assert r.pattern_ids[0] == "python_main_file_unopenable", r.pattern_ids


def test_a_probe_s_command_not_found_before_training_stays_healthy() -> None:
    text = (
        "/var/spool/slurmd/job4242/slurm_script: line 5: nvidia-smi: command not found\n"
        "iteration      100/  10000 | consumed samples: 3200 | elapsed time per iteration (ms): 512.3 | "
        "lm loss: 6.521E+00\n"
        "iteration      200/  10000 | consumed samples: 6400 | elapsed time per iteration (ms): 510.9 | "
        "lm loss: 5.982E+00\n"
    )
    assert_not_fatal(text)


@pytest.mark.parametrize(
    "text",
    [
        # Lmod and environment-modules: `module load` fails, the script goes on (see the docs section)
        'Lmod has detected the following error:  The following module(s) are unknown: "cuda/12.9"',
        "Lmod has detected the following error: These module(s) exist but cannot be loaded as requested: "
        '"OpenMPI/3.1.3"',
        "Lmod Warning:  MODULEPATH is undefined.",
        "ERROR: Unable to locate a modulefile for 'cuda/12.9'",
        "ModuleCmd_Load.c(213):ERROR:105: Unable to locate a modulefile for 'nix/nse/brainbuilder'",
        # conda's activation errors: the script goes on with the interpreter it had
        "EnvironmentNameNotFound: Could not find conda environment: llm",
        # a probe or helper a script goes on after
        "/var/spool/slurmd/job4242/slurm_script: line 5: nvidia-smi: command not found",
        "/var/spool/slurmd/job4242/slurm_script: line 2: module: command not found",
        "/var/spool/slurmd/job4242/slurm_script: line 3: conda: command not found",
        "/var/spool/slurmd/job4242/slurm_script: line 4: /home/alice/data/prepare.sh: No such file or "
        "directory",
        "prep.sh: line 3: ./fetch.sh: /bin/bash^M: bad interpreter: No such file or directory",
        "zsh: command not found: python",
        # dlopen() failures the program survives (tuning: gh038, pub409)
        "node2:14159:14159 [0] NCCL INFO NET/Plugin : Plugin load (libnccl-net.so) returned 2 : "
        "libnccl-net.so: cannot open shared object file: No such file or directory",
        "libibverbs: Warning: couldn't load driver 'libipathverbs-rdmav25.so': libipathverbs-rdmav25.so: "
        "cannot open shared object file: No such file or directory",
        # the loader's notices that are not fatal (elf/dl-version.c returns 0 for them)
        "./train: /lib64/libc.so.6: weak version `GLIBC_2.40' not found (required by ./train)",
        "./train: /usr/lib/libfoo.so: no version information available (required by ./train)",
        # torchvision's warning about its image extension (the job goes on)
        "/opt/conda/lib/python3.10/site-packages/torchvision/io/image.py:13: UserWarning: Failed to load "
        "image Python extension: /lib/x86_64-linux-gnu/libstdc++.so.6: version `GLIBCXX_3.4.29' not found "
        "(required by /opt/conda/lib/python3.10/site-packages/torchvision/image.so)",
        # `python -m pip` in a set-up step
        "/usr/bin/python3: No module named pip",
        "tensorboard: can't open file for writing, logging disabled",
    ],
)
def test_environment_look_alike_is_not_fatal(text: str) -> None:
    assert_not_fatal(text + "\n")

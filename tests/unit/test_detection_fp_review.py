"""False-positive review of the day's fatal entries (docs/detection.md, "False-positive review of the day's
entries"; issue 12: "no healthy log called fatal").

Each fatal entry the day's passes added or extended was checked against the printing program's source: is the
matched text printed only where the job (or its step) ends, or also where the program goes on? Where it is
also printed on a path the job survives, the entry was narrowed, recorded (`fatal: false`) or made generic
(priority 1). Every look-alike in this file reads differently on main before the review (c4376fb): the lines
in SURVIVED read FATAL there (through nccl_ib_setup_call_failed, loader_symbol_version_not_found,
loader_shared_library_failed or slurm_node_gres_count_low), and each PROBE_THEN_FAILURE excerpt read as its
probe (interconnect or python_exception) instead of the failure that followed it.

Sources: NVIDIA/nccl 48bb7fec src/transport/net_ib.cc (ncclIbInit passes over a device it cannot open or
query, and ignores ibv_fork_init's result) and src/misc/ibvwrap.cc (the `Call to ibv_* failed` WARNs);
bminor/glibc 04277e02 elf/dl-error-skeleton.c and elf/rtld.c (the loader's start-up failures, printed for
any program); open-mpi/ompi 7e8fab20 ompi/mca/pml/ucx/pml_ucx.c (mca_pml_ucx_open returns OMPI_ERROR when
ucp_init fails, and MPI goes on with another PML); CPython Lib/runpy.py and bash builtins/exec.def (a probe's
`python -m X` or a helper's exec ends only that process); SchedMD/slurm src/slurmctld/node_mgr.c
(validate_node_specs drains a node that registers fewer GPUs; it kills no running job).
"""

from __future__ import annotations

import pytest

from tests.unit.catalog_sources import assert_names_source, assert_not_fatal, assert_read_as
from trainguard.detection.catalog import load_catalog
from trainguard.detection.classify import classify_text

ADDED = ("nccl_ib_device_probe_failed", "loader_helper_program_failed")
RECORDED = (*ADDED, "slurm_node_gres_count_low")
NARROWED = ("nccl_ib_setup_call_failed",)
GENERIC = ("python_m_module_not_found", "shell_exec_builtin_failed", "ucx_no_usable_transports")

OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
    "79.11 GiB of which 1.06 GiB is free."
)

# Lines printed on a path the job survives: FATAL on main, recorded (not fatal) now.
SURVIVED = [
    # NVIDIA/nccl src/transport/net_ib.cc ncclIbInit: `... continue;` after each of these
    "gpu1:123:456 [0] misc/ibvwrap.cc:120 NCCL WARN Call to ibv_open_device failed",
    "gpu1:123:456 [0] misc/ibvwrap.cc:98 NCCL WARN Call to ibv_fork_init failed",
    "gpu1:123:456 [0] misc/ibvwrap.cc:140 NCCL WARN Call to ibv_query_device failed with error "
    "Permission denied errno 13",
    "gpu1:123:456 [0] misc/ibvwrap.cc:144 NCCL WARN Call to ibv_query_port failed with error "
    "Invalid argument errno 22",
    "gpu1:123:456 [0] misc/ibvwrap.cc:152 NCCL WARN Call to ibv_query_port failed with error Operation not "
    "supported errno 95",
    # glibc's loader failing a tool the job runs on the side, under the job's LD_LIBRARY_PATH
    "git: /opt/conda/lib/libcurl.so.4: version `CURL_OPENSSL_4' not found (required by git)",
    "/usr/lib/git-core/git-remote-https: /opt/conda/lib/libcurl.so.4: version `CURL_OPENSSL_4' not found "
    "(required by /usr/lib/git-core/git-remote-https)",
    "ssh: error while loading shared libraries: libcrypto.so.1.1: cannot open shared object file: "
    "No such file or directory",
    "/usr/bin/lua: /home/alice/miniconda3/lib/libtinfo.so.6: version `NCURSES6_5.0.19991023' not found "
    "(required by /usr/bin/lua)",
    "curl: error while loading shared libraries: libssl.so.3: cannot open shared object file: "
    "No such file or directory",
]

# src/slurmctld/node_mgr.c validate_node_specs drains an INVAL node (running jobs go on), and `sinfo -R` /
# scontrol print the same reason for any drained node of the partition: recorded, FATAL (hardware) on main.
SURVIVED += [
    "gres/gpu count reported lower than configured (7 < 8)  slurm     2024-01-01T10:00:00 gpu-[07-08]",
    "   Reason=gres/gpu count too low (6 < 8) [slurm@2024-01-01T10:00:00]",
    "[2024-01-01T10:00:00.000] error: Setting node gpu-07 state to INVAL with reason:gres/gpu count reported "
    "lower than configured (7 < 8)",
]

# A probe or fall-back the job goes on after, then the failure that really ended it: the failure decides.
PROBE_THEN_FAILURE = [
    (
        "gpu1:123:456 [0] misc/ibvwrap.cc:120 NCCL WARN Call to ibv_open_device failed\n" + OOM,
        "nccl_ib_device_probe_failed",
    ),
    ("/usr/bin/python3: No module named nvitop\n" + OOM, "python_m_module_not_found"),
    ("sh: 1: exec: nvidia-smi: not found\n" + OOM, "shell_exec_builtin_failed"),
    (
        "[1705555968.594329] [c204-009:189455:0]     ucp_context.c:1345 UCX  ERROR no usable "
        "transports/devices (asked knem,dc_x,rc on all devices)\n" + OOM,
        "ucx_no_usable_transports",
    ),
]

# What the review kept fatal: each still reads as its entry.
KEPT = [
    (
        "gpu1:123:456 [0] misc/ibvwrap.cc:148 NCCL WARN Call to ibv_alloc_pd failed",
        ("interconnect", "system_software"),
        "nccl_ib_setup_call_failed",
    ),
    (
        "gpu1:123:456 [0] misc/ibvwrap.cc:160 NCCL WARN Call to ibv_query_gid failed with error "
        "Invalid argument errno 22",
        ("interconnect", "system_software"),
        "nccl_ib_setup_call_failed",
    ),
    (
        "python: error while loading shared libraries: libpython3.10.so.1.0: cannot open shared object "
        "file: No such file or directory",
        ("python_exception", "application"),
        "loader_shared_library_failed",
    ),
    (
        "./train: /lib64/libc.so.6: version `GLIBC_2.34' not found (required by ./train)",
        ("python_exception", "application"),
        "loader_symbol_version_not_found",
    ),
    (
        "python: error while loading shared libraries: libcuda.so.1: cannot open shared object "
        "file: No such file or directory",
        ("slurm_node_failure", "system_software"),
        "loader_gpu_driver_library_missing",
    ),
    # generic entries still decide alone
    (
        "/usr/bin/python3: No module named torch.distributed.run",
        ("python_exception", "application"),
        "python_m_module_not_found",
    ),
    (
        "/.singularity.d/actions/exec: 9: exec: python3: not found",
        ("python_exception", "application"),
        "shell_exec_builtin_failed",
    ),
    (
        "[1705555968.594329] [c204-009:189455:0]     ucp_context.c:1345 UCX  ERROR no usable "
        "transports/devices (asked knem,dc_x,rc on all devices)",
        ("interconnect", "system_software"),
        "ucx_no_usable_transports",
    ),
]


@pytest.mark.parametrize("text", SURVIVED)
def test_survived_paths_are_not_fatal(text: str) -> None:
    assert_not_fatal(text)
    assert set(classify_text(text).pattern_ids) <= set(RECORDED), text


@pytest.mark.parametrize("text", SURVIVED)
def test_survived_paths_are_recorded(text: str) -> None:
    m = load_catalog().match_line(text)
    assert m is not None and m.signature.id in RECORDED, (text, m)


@pytest.mark.parametrize(("text", "probe"), PROBE_THEN_FAILURE)
def test_the_failure_after_a_probe_decides(text: str, probe: str) -> None:
    r = classify_text(text)
    assert (r.fatal, r.category, r.attribution) == (True, "cuda_oom", "application"), (text, r.pattern_ids)
    if probe in GENERIC:  # a recorded (non-fatal) probe is not listed among the findings
        assert probe in r.pattern_ids, r.pattern_ids
    else:
        assert load_catalog().match_line(text.splitlines()[0]).signature.id == probe  # type: ignore[union-attr]


@pytest.mark.parametrize(("text", "expected", "entry"), KEPT)
def test_fatal_paths_still_read(text: str, expected: tuple[str, str], entry: str) -> None:
    assert_read_as(text, expected, entry)


def test_review_entries_are_deliberate() -> None:
    cat = load_catalog()
    for sig_id in RECORDED:
        sig = cat.get(sig_id)
        assert sig is not None and sig.fatal is False, sig_id
    for sig_id in GENERIC:
        sig = cat.get(sig_id)
        assert sig is not None and sig.priority == 1, sig_id


@pytest.mark.parametrize("sig_id", RECORDED + NARROWED + GENERIC)
def test_reviewed_entries_name_their_source(sig_id: str) -> None:
    assert_names_source(sig_id)

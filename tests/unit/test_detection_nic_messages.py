"""Network adapter and collective-library messages, derived from their printers' source (issue 12 section 1).

Instead of fitting excerpt lines, the messages that the Linux mlx5 core driver (torvalds/linux
drivers/net/ethernet/mellanox/mlx5/core/health.c 1c5ba67d2277 and its later form, events.c 02039fb659b3),
GPUDirect RDMA's peer-memory modules (NVIDIA/open-gpu-kernel-modules df1c9a3de2be
kernel-open/nvidia-peermem/nvidia-peermem.c, Mellanox/nv_peer_memory 02882649ff38 nv_peer_mem.c, with the
kernel's module loader and kmod's modprobe), NVSHMEM (NVIDIA/nvshmem 2d7d25f08162 src/host/init/init.cu,
src/device/init/init_device.cu, src/include/non_abi/nvshmemx_error.h) and UCC (openucx/ucc 8263de4742d5
src/components/tl/ucp/tl_ucp_sendrecv.c, src/utils/debug/log.c) print were read out of their source and mapped
to TrainGuard's categories (docs/detection.md, "Network adapter messages, from their sources"). Each positive
case in MESSAGES is the source's format string with its conversions filled in; every one read healthy on the
code before this change. ALREADY_READ pins the driver's messages the catalog read right before. The
look-alikes are messages a job survives (one, a health buffer the firmware logs at WARNING, was read fatal
before when its syndrome was `firmware internal error`).
"""

from __future__ import annotations

import pytest

from tests.unit.catalog_sources import assert_names_source, assert_not_fatal, assert_read_as
from trainguard.detection.catalog import load_catalog
from trainguard.detection.classify import classify_text

ADDED = ("mlx5_health_unrecovered", "nvshmem_init_failed", "ucc_tl_ucp_completion_failure")
RECORDED = ("mlx5_adapter_event_note", "gpu_peer_memory_module_error")  # fatal: false

FABRIC = ("interconnect", "infrastructure")
NODE_STACK = ("interconnect", "system_software")

DEV = "mlx5_core 0000:3b:00.0: "
UCC = "[1700000000.123456] [node1:1234 :0]  tl_ucp_sendrecv.c:{line}   TL_UCP ERROR "

# (line, expected category/attribution, deciding entry)
MESSAGES = [
    # health.c print_health_info: the health buffer's header at the firmware's severity, ERROR or worse
    (
        DEV
        + "print_health_info:431:(pid 0): Health issue observed, irisc not responding, severity(3) ERROR:",
        FABRIC,
        "mlx5_health_unrecovered",
    ),
    (
        DEV
        + "print_health_info:431:(pid 0): Health issue observed, unrecoverable hardware error, severity(2) "
        "CRITICAL:",
        FABRIC,
        "mlx5_health_unrecovered",
    ),
    (
        DEV + "print_health_info:431:(pid 0): Health issue observed, ICM fetch PCI error, severity(1) ALERT:",
        FABRIC,
        "mlx5_health_unrecovered",
    ),
    # health.c print_health_info: the adapter no longer answers PCI reads
    (DEV + "print_health_info:424:(pid 0): PCI slot is unavailable", FABRIC, "mlx5_health_unrecovered"),
    # health.c mlx5_health_try_recover / mlx5_fw_fatal_reporter_err_work
    (
        DEV
        + "mlx5_health_try_recover:336:(pid 1234): health recovery flow aborted, PCI reads still not working",
        FABRIC,
        "mlx5_health_unrecovered",
    ),
    (
        DEV + "mlx5_health_try_recover:340:(pid 1234): health recovery failed",
        FABRIC,
        "mlx5_health_unrecovered",
    ),
    (
        DEV + "mlx5_fw_fatal_reporter_err_work:701:(pid 1234): Driver is in error state. Unloading",
        FABRIC,
        "mlx5_health_unrecovered",
    ),
    # the same through the journal's kernel prefix
    (
        "Dec  2 03:10:11 gpu-07 kernel: "
        + DEV
        + "mlx5_health_try_recover:340:(pid 1234): health recovery failed",
        FABRIC,
        "mlx5_health_unrecovered",
    ),
    # NVSHMEM's NVSHMEMI_ERROR_EXIT (`<file>:<func>:<line>: <msg>`, then exit(-1))
    (
        "/build/nvshmem/src/host/init/init.cu:nvshmemi_check_state_and_init:1200: nvshmem "
        "initialization failed, "
        "exiting ",
        NODE_STACK,
        "nvshmem_init_failed",
    ),
    (
        "/build/nvshmem/src/device/init/init_device.cu:nvshmemi_init_thread:118: nvshmem device "
        "initialization "
        "failed, exiting ",
        NODE_STACK,
        "nvshmem_init_failed",
    ),
    # UCC's tl/ucp completion callbacks with UCX's ucs_status_string
    (
        UCC.format(line=25) + "failure in send completion Endpoint timeout",
        FABRIC,
        "ucc_tl_ucp_completion_failure",
    ),
    (
        UCC.format(line=91) + "failure in recv completion Connection reset by remote peer",
        FABRIC,
        "ucc_tl_ucp_completion_failure",
    ),
    (
        UCC.format(line=51) + "failure in put completion Input/output error",
        FABRIC,
        "ucc_tl_ucp_completion_failure",
    ),
]

# Read right before this change (kept as they were): health.c poll_health's own verdicts.
ALREADY_READ = [
    (DEV + "poll_health:816:(pid 0): Fatal error 1 detected", FABRIC, "ib_adapter_or_transport_error"),
    (
        DEV + "poll_health:805:(pid 0): device's health compromised - reached miss count",
        FABRIC,
        "ib_adapter_or_transport_error",
    ),
]


@pytest.mark.parametrize(("line", "expected", "entry"), MESSAGES, ids=[m[0][-60:] for m in MESSAGES])
def test_adapter_or_library_failure_is_read(line: str, expected: tuple[str, str], entry: str) -> None:
    assert_read_as(line + "\n", expected, entry)


@pytest.mark.parametrize(("line", "expected", "entry"), ALREADY_READ, ids=[m[0][-60:] for m in ALREADY_READ])
def test_messages_read_before_still_read(line: str, expected: tuple[str, str], entry: str) -> None:
    assert_read_as(line + "\n", expected, entry)


def test_every_added_entry_is_exercised_here() -> None:
    assert {m[2] for m in MESSAGES} >= set(ADDED)


def test_fatal_health_error_decides_over_a_later_recorded_port_event() -> None:
    text = (
        DEV
        + "poll_health:816:(pid 0): Fatal error 1 detected\n"
        + DEV
        + "print_health_info:431:(pid 0): Health issue observed, irisc not responding, severity(3) ERROR:\n"
        + DEV
        + "port_module:1093:(pid 0): Port module event: module 0, Cable unplugged\n"
    )
    r = classify_text(text)
    assert (r.fatal, r.category, r.attribution) == (True, *FABRIC), r.pattern_ids


RECORDED_LINES = [
    # events.c port_module (INFO) and temp_warn
    (DEV + "port_module:1093:(pid 0): Port module event: module 0, Cable plugged", "mlx5_adapter_event_note"),
    (
        DEV + "port_module:1093:(pid 0): Port module event: module 1, Cable unplugged",
        "mlx5_adapter_event_note",
    ),
    (
        DEV + "port_module:1099:(pid 0): Port module event[error]: module 0, Cable error, High Temperature",
        "mlx5_adapter_event_note",
    ),
    (
        DEV + "port_module:1099:(pid 0): Port module event[error]: module 0, Cable error, Bad or shorted "
        "cable/module",
        "mlx5_adapter_event_note",
    ),
    (DEV + "temp_warn:1061:(pid 0): High temperature on sensors with bit set 0 1", "mlx5_adapter_event_note"),
    # health.c: a device the driver recovered, a health buffer the firmware logs below ERROR
    (DEV + "mlx5_health_try_recover:344:(pid 1234): health recovery succeeded", "mlx5_adapter_event_note"),
    (
        DEV + "print_health_info:431:(pid 0): Health issue observed, firmware internal error, "
        "severity(4) WARNING:",
        "mlx5_adapter_event_note",
    ),
    (
        DEV + "print_health_info:431:(pid 0): Health issue observed, High temperature, severity(4) WARNING:",
        "mlx5_adapter_event_note",
    ),
    # nvidia-peermem.c peer_err, nv_peer_mem.c peer_err, the module loader and modprobe
    (
        "nvidia-peermem nv_mem_client_init:573 ERROR nv_mem_client_init -- error while registering "
        "traditional "
        "client",
        "gpu_peer_memory_module_error",
    ),
    (
        "nvidia-peermem nv_dma_map:325 ERROR nv_dma_map -- error -22 while calling "
        "nvidia_p2p_dma_map_pages()",
        "gpu_peer_memory_module_error",
    ),
    (
        "nv_mem nv_mem_get_pages:527 nv_mem_get_pages -- error -22 while calling nvidia_p2p_get_pages()",
        "gpu_peer_memory_module_error",
    ),
    (
        "nvidia_peermem: Unknown symbol ib_register_peer_memory_client (err -2)",
        "gpu_peer_memory_module_error",
    ),
    (
        "nv_peer_mem: Unresolved symbol ib_register_peer_memory_client (err -2)",
        "gpu_peer_memory_module_error",
    ),
    ("modprobe: ERROR: could not insert 'nvidia_peermem': Invalid argument", "gpu_peer_memory_module_error"),
    (
        "modprobe: ERROR: could not insert 'nv_peer_mem': Unknown symbol in module, or unknown "
        "parameter (see dmesg)",
        "gpu_peer_memory_module_error",
    ),
]


@pytest.mark.parametrize(("line", "entry"), RECORDED_LINES, ids=[m[0][-60:] for m in RECORDED_LINES])
def test_survivable_adapter_messages_are_recorded_not_fatal(line: str, entry: str) -> None:
    m = load_catalog().match_line(line)
    assert m is not None and m.signature.id == entry, (line, m and m.signature.id)
    assert_not_fatal(line + "\n")


@pytest.mark.parametrize(
    "text",
    [
        # health.c: the recovery flow's progress notes, and the health buffer's body lines
        DEV + "mlx5_health_try_recover:330:(pid 1234): handling bad device here\n",
        DEV + "mlx5_health_try_recover:338:(pid 1234): starting health recovery flow\n",
        DEV + "print_health_info:447:(pid 0): synd 0x8: unrecoverable hardware error\n",
        DEV + "print_health_info:437:(pid 0): fw_ver 28.39.1002\n",
        # UCC's own configuration error: it goes on with its other TLs (src/core/ucc_context.c)
        "[1700000000.123456] [node1:1234 :0]     ucc_context.c:424  UCC  ERROR failed to create tl "
        "context for "
        "cuda\n",
        # NVSHMEM's informational fallback and its warning prints
        "NVSHMEM: nvshmemi_common_init failed, continuing\n",
        "WARN: IB HCA and GPU are not connected to a PCIe switch so InfiniBand performance can be limited\n",
        # NCCL after a missing peer-memory module: it goes on without GPUDirect RDMA
        "gpu1:1:2 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0'\n",
        # source and configuration mentioning the names
        "modprobe nvidia_peermem\n",
        "export NVSHMEM_IB_ENABLE_IBGDA=1  # nvshmem initialization failed otherwise\n",
    ],
)
def test_messages_a_job_survives_are_not_fatal(text: str) -> None:
    assert_not_fatal(text)


@pytest.mark.parametrize("sig_id", ADDED + RECORDED)
def test_every_entry_names_its_source_file(sig_id: str) -> None:
    assert_names_source(sig_id)


@pytest.mark.parametrize("sig_id", RECORDED)
def test_recorded_entries_are_not_fatal(sig_id: str) -> None:
    sig = load_catalog().get(sig_id)
    assert sig is not None and not sig.fatal

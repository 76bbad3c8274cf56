"""GPU and node health messages, from their sources (issue 12 section 1, "generalise, don't memorise").

Instead of fitting excerpt lines, the messages that say a GPU or the node under a job failed were read out of
the printers' source and mapped to TrainGuard's categories (docs/detection.md, "GPU and node health messages,
from their sources"):
- NVIDIA's kernel module, NVIDIA/open-gpu-kernel-modules df1c9a3de2 (595.45.04; 1739a20ef, 515.43.04, for the
  older call sites): src/nvidia/arch/nvalloc/unix/src/osinit.c, osapi.c, kernel-open/nvidia/nv.c,
  kernel-open/common/inc/os-interface.h, src/nvidia/src/kernel/gpu/gsp/kernel_gsp.c,
  src/nvidia/src/kernel/gpu/rc/kernel_rc.c;
- NVML's error strings as DCGM ships them, NVIDIA/DCGM 72fa3feaa6 (4.6.0):
  sdk/nvidia/nvml/nvml_error_strings.h
  (nvidia-smi itself is closed source; its `Unable to determine the device handle` was read already);
- DCGM's health and diagnostic messages, same commit: dcgmlib/dcgm_errors.h (DCGM_FR_*_MSG),
  modules/health/DcgmHealthWatch.cpp;
- the Linux kernel, torvalds/linux: kernel/panic.c, arch/x86/kernel/cpu/mce/core.c (006c077041),
  mm/memory-failure.c (003fa19591), arch/x86/mm/fault.c, drivers/edac/edac_mc.c, kernel/watchdog.c.
Each positive case in MESSAGES is the source's format string with its conversions filled in; each read healthy
on the code before this change, except memory-failure's `Sending SIGBUS` form (read as a bus error).
ALREADY_READ pins the kinds the catalog read before. The look-alikes are messages a job survives (warnings,
thresholds, corrected errors, banners).
"""

from __future__ import annotations

import pytest

from tests.unit.catalog_sources import assert_names_source, assert_not_fatal, assert_read_as
from trainguard.detection.catalog import load_catalog

ADDED = (
    "nvrm_gpu_init_failed",
    "nvrm_gpu_crash_dump",
    "nvrm_gsp_rpc_reset_needed",
    "dcgm_gpu_health_failure",
    "dcgm_gpu_degraded",
    "node_kernel_panic",
    "node_memory_error_kill",
    "edac_uncorrected_error",
)
RECORDED = ("kernel_cpu_lockup",)  # fatal: false

GPU = ("gpu_hardware", "hardware")
NODE = ("slurm_node_failure", "hardware")
K = "[ 12.345] "

# (text, expected category/attribution, deciding entry)
MESSAGES = [
    # src/nvidia/arch/nvalloc/unix/src/osinit.c RmInitAdapter, through NV_DEV_PRINTF
    # (`NVRM: GPU %04x:%02x:%02x.%x: `)
    (K + "NVRM: GPU 0000:3b:00.0: RmInitAdapter failed! (0x26:0x65:1601)", GPU, "nvrm_gpu_init_failed"),
    # kernel-open/nvidia/nv.c nv_start_device
    (
        K + "NVRM: GPU 0000:3b:00.0: rm_init_adapter failed, device minor number 0",
        GPU,
        "nvrm_gpu_init_failed",
    ),
    # src/nvidia/arch/nvalloc/unix/src/osapi.c RmLogGpuCrash
    (
        K
        + "NVRM: A GPU crash dump has been created. If possible, please run\n"
        + K
        + "NVRM: nvidia-bug-report.sh as root to collect this data before\n"
        + K
        + "NVRM: the NVIDIA kernel module is unloaded.",
        GPU,
        "nvrm_gpu_crash_dump",
    ),
    # src/nvidia/src/kernel/gpu/gsp/kernel_gsp.c _kgspRpcIncrementTimeoutCountAndRateLimitPrints
    (
        K
        + "NVRM: Rate limiting GSP RPC error prints for GPU at PCI:0000:3b:00 (printing 1 of every 30).  The "
        "GPU likely needs to be reset.",
        GPU,
        "nvrm_gsp_rpc_reset_needed",
    ),
    # dcgmlib/dcgm_errors.h, hard failures
    ("GPU 0 had uncorrectable memory errors and 3 rows were remapped", GPU, "dcgm_gpu_health_failure"),
    ("GPU 1 exceeded uncorrectable row remap limit with 512 remapped rows", GPU, "dcgm_gpu_health_failure"),
    ("Pending page retirements together with a DBE were detected on GPU 2.", GPU, "dcgm_gpu_health_failure"),
    (
        "GPU 3 requires a reset to recover from a fault. Recovery action: 1 (GPU_RESET).",
        GPU,
        "dcgm_gpu_health_failure",
    ),
    (
        "GPU 4 fault may have left the OS in an inconsistent state. Recovery action: 2 (NODE_REBOOT).",
        GPU,
        "dcgm_gpu_health_failure",
    ),
    ("Detected fatal errors on NvSwitch 2 link 7", GPU, "dcgm_gpu_health_failure"),
    ("Detected fatal NvSwitch SXID 12028", GPU, "dcgm_gpu_health_failure"),
    # dcgmlib/dcgm_errors.h, a GPU to drain or repair
    ("GPU 0 had memory errors and row remappings are pending", GPU, "dcgm_gpu_degraded"),
    ("A pending retired page has been detected in GPU 0.", GPU, "dcgm_gpu_degraded"),
    (
        "An excess of 60 retired pages due to DBEs have been detected and more than one page has been "
        "retired due to DBEs in the past week in GPU 0.",
        GPU,
        "dcgm_gpu_degraded",
    ),
    ("GPU 0's NvLink link 3 is currently down", GPU, "dcgm_gpu_degraded"),
    ("NVSwitch 1's NvLink 12 is down.", GPU, "dcgm_gpu_degraded"),
    ("NvSwitch physical ID 8's NvLink port 33 is currently down.", GPU, "dcgm_gpu_degraded"),
    (
        "GPU 0 requires peer-to-peer traffic to be quiesced. Recovery action: 3 (DRAIN_P2P).",
        GPU,
        "dcgm_gpu_degraded",
    ),
    (
        "GPU 0 operating at reduced capacity due to a fault. Recovery action: 4 (DRAIN_AND_RESET).",
        GPU,
        "dcgm_gpu_degraded",
    ),
    ("Found 12 faulty memory elements on GPU 0", GPU, "dcgm_gpu_degraded"),
    # kernel/panic.c panic(), with arch/x86/kernel/cpu/mce/core.c mce_panic's reasons
    (K + "Kernel panic - not syncing: Fatal machine check", NODE, "node_kernel_panic"),
    (K + "Kernel panic - not syncing: Fatal local machine check", NODE, "node_kernel_panic"),
    (K + "Kernel panic - not syncing: Fatal machine check on current CPU", NODE, "node_kernel_panic"),
    (K + "Kernel panic - not syncing: Fatal machine check from unknown source", NODE, "node_kernel_panic"),
    (K + "Kernel panic - not syncing: Failed kernel mode recovery", NODE, "node_kernel_panic"),
    (K + "Kernel panic - not syncing: Fatal exception", NODE, "node_kernel_panic"),
    (K + "Kernel panic - not syncing: softlockup: hung tasks", NODE, "node_kernel_panic"),
    (K + "---[ end Kernel panic - not syncing: Fatal exception in interrupt ]---", NODE, "node_kernel_panic"),
    (K + "mce: [Hardware Error]: Machine check: Processor context corrupt", NODE, "node_kernel_panic"),
    # mm/memory-failure.c kill_proc (both wordings), arch/x86/mm/fault.c, mce/core.c do_memory_failure
    (
        K + "Memory failure: 0x1234567: Sending SIGBUS to python:4242 due to hardware memory corruption",
        NODE,
        "node_memory_error_kill",
    ),
    (
        K + "Memory failure: 0x1234567: Killing python:4242 due to hardware memory corruption",
        NODE,
        "node_memory_error_kill",
    ),
    (
        K + "MCE: Killing python:4242 due to hardware memory corruption fault at 7f0000001000",
        NODE,
        "node_memory_error_kill",
    ),
    (
        K + "mce: Uncorrected hardware memory error in user-access at 1234567000",
        NODE,
        "node_memory_error_kill",
    ),
    (
        K + "Memory failure: 0x1234567: forcibly killing python:4242 because of failure to unmap "
        "corrupted page",
        NODE,
        "node_memory_error_kill",
    ),
    # drivers/edac/edac_mc.c edac_ue_error through edac_mc_printk
    (
        K
        + "EDAC MC0: 1 UE memory read error on CPU_SrcID#0_Ha#0_Chan#1_DIMM#0 (channel:1 slot:0 page:0x1234 "
        "offset:0x0 grain:32 - err_code:0x0000:0x009f)",
        NODE,
        "edac_uncorrected_error",
    ),
]

# Read before this change (kept as they were): the Xid lines DCGM relays, `fallen off the bus` (the driver's
# both forms and DCGM's), NVML's `GPU is lost` / `GPU requires reset`, nvidia-smi's device-handle error, ECC
# double-bit errors and the row-remap failure.
ALREADY_READ = [
    (K + "NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.", GPU, "gpu_fallen_off_bus"),
    (
        K
        + "NVRM: The NVIDIA GPU 0000:3b:00.0\n"
        + K
        + "NVRM: (PCI ID: 10de:20b2) installed in this system has\n"
        + K
        + "NVRM: fallen off the bus and is not responding to commands.",
        GPU,
        "gpu_fallen_off_bus",
    ),
    ("GPU 0 has fallen off the bus", GPU, "gpu_fallen_off_bus"),
    ("pynvml.NVMLError_GPUIsLost: GPU is lost", GPU, "gpu_fallen_off_bus"),
    ("pynvml.NVMLError_ResetRequired: GPU requires reset", GPU, "gpu_fallen_off_bus"),
    (
        "Unable to determine the device handle for GPU0: 0000:3B:00.0: Unknown Error",
        GPU,
        "gpu_fallen_off_bus",
    ),
    ("Detected XID 79 for GPU 0", GPU, "xid_hardware"),
    ("GPU had an uncontained error (XID 95)", GPU, "xid_hardware"),
    ("Detected 2 volatile double-bit ECC error(s) in GPU 0.", GPU, "gpu_ecc_uncorrectable"),
    (
        "CUDA APIs have indicated that a double-bit ECC error has occured on GPU 0.",
        GPU,
        "gpu_ecc_uncorrectable",
    ),
    ("GPU 0 had uncorrectable memory errors and row remapping failed.", GPU, "gpu_row_remap"),
]


@pytest.mark.parametrize(("text", "expected", "entry"), MESSAGES, ids=[m[0][-60:] for m in MESSAGES])
def test_gpu_and_node_failure_message_is_read(text: str, expected: tuple[str, str], entry: str) -> None:
    assert_read_as(text + "\n", expected, entry)


@pytest.mark.parametrize(("text", "expected", "entry"), ALREADY_READ, ids=[m[0][-60:] for m in ALREADY_READ])
def test_kinds_read_before_still_read(text: str, expected: tuple[str, str], entry: str) -> None:
    assert_read_as(text + "\n", expected, entry)


def test_every_added_entry_is_exercised_here() -> None:
    assert {m[2] for m in MESSAGES} >= set(ADDED)


def test_oom_panics_stay_the_oom_killer_s() -> None:
    # mm/oom_kill.c's panics are read first by oom_kill_other_printers, not as a node failure
    for text in (
        "Kernel panic - not syncing: Out of memory and no killable processes...\n",
        "Kernel panic - not syncing: Out of memory: system-wide panic_on_oom is enabled\n",
    ):
        assert_read_as(text, ("killed_oom_host", "application"), "oom_kill_other_printers")


@pytest.mark.parametrize(
    "text",
    [
        # NVIDIA's kernel module: load banner (nv.c), the once-per-GPU preamble before an Xid (kernel_rc.c),
        # the board's serial number, the persistence-mode deprecation (nv.c)
        K + "NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  595.45.04  Release Build  "
        "(dvs-builder@U16-I2-C03-12-4)  Thu Feb 26 00:00:00 UTC 2026",
        K + "NVRM: GPU at PCI:0000:3b:00: GPU-6f3c7e2a-1b2c-3d4e-5f60-718293a4b5c6",
        K + "NVRM: GPU Board Serial Number: 1234567890123",
        K + "NVRM: Persistence mode is deprecated and will be removed in a future release. Please use "
        "nvidia-persistenced instead.",
        # DCGM's warnings and thresholds for a GPU that keeps running (dcgmlib/dcgm_errors.h)
        "More than 10 single-bit ECC error(s) detected in GPU 0 Volatile SBEs: 12",
        "64 or more retired pages have been detected in GPU 0. ",
        "A corrupt InfoROM has been detected in GPU 0.",
        "Detected clocks event due to thermal violation in GPU 0.",
        "Detected clocks event due to power violation in GPU 0.",
        "There were thermal violations totaling 12.5 seconds for GPU 0",
        "Detected more than 8 PCIe replays per minute for GPU 0 : 20",
        "Detected 12 CRC FLIT NvLink errors on GPU 0's NVLink which exceeds threshold of 100",
        "Detected effective BER 1.00e-09 exceeds minimum threshold on GPU 0's NVLink.",
        "Detected nonfatal errors on NvSwitch 2 link 7",
        "Only 10 NvLinks are up out of the expected 18",
        # the kernel: corrected machine checks and memory errors, a page recovered with no process killed
        K + "mce: [Hardware Error]: Machine check events logged",
        K + "mce: [Hardware Error]: CPU 3: Machine Check: 0 Bank 7: 8c00004000010091",
        K
        + "EDAC MC0: 1 CE memory read error on CPU_SrcID#0_Ha#0_Chan#1_DIMM#0 (channel:1 slot:0 page:0x1234 "
        "offset:0x0 grain:32 syndrome:0x0 - err_code:0x0000:0x009f)",
        K + "EDAC skx MC1: HANDLING MCE MEMORY ERROR",
        K + "Memory failure: 0x1234567: recovery action for dirty LRU page: Recovered",
        # the lockup watchdogs without a panic (kernel/watchdog.c)
        K + "watchdog: BUG: soft lockup - CPU#12 stuck for 23s! [python:4242]",
        K + "NMI watchdog: Watchdog detected hard LOCKUP on cpu 12",
        # configuration
        "kernel.panic = 10",
    ],
)
def test_messages_a_job_survives_are_not_fatal(text: str) -> None:
    assert_not_fatal(text + "\n")


def test_cpu_lockup_is_recorded_not_fatal() -> None:
    sig = load_catalog().get("kernel_cpu_lockup")
    assert sig is not None and not sig.fatal


@pytest.mark.parametrize("sig_id", ADDED + RECORDED)
def test_every_entry_names_its_source_file(sig_id: str) -> None:
    assert_names_source(sig_id)

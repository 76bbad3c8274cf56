"""JAX and XLA runtime messages, from their sources (docs/detection.md, "JAX and XLA runtime messages, from
their sources").

The messages a JAX/XLA multi-host GPU job prints when it dies or hangs, and the look-alikes it prints
while it goes on, were read out of XLA/TSL (Orbax and JAX reach them through XLA's client) and checked
against the catalog. Each case is the source's format string with its conversions filled in.
FAILED_ON_MAIN read wrong before this change: a CHECK failure at the FATAL level read healthy (the
TSL/glog CHECK macro, xla/tsl/platform/default/logging.h), XLA's PTX load refused for a driver too old for
the jaxlib's PTX read as the program's exception (xla/stream_executor/cuda/cuda_driver.cc, LoadPtx), and
StreamExecutor's refused cuMemAlloc, a step of the BFC allocator's retry, read as a fatal out of memory
(cuda_driver.cc DeviceAllocate, xla/tsl/framework/bfc_allocator.cc Extend). ALREADY_READ pins what the
catalog read right before (the coordination service, XLA's out-of-memory and NCCL statuses, CUDA faults
through PJRT).
"""

from __future__ import annotations

import pytest

from tests.unit.catalog_sources import assert_names_source, assert_not_fatal, assert_read_as
from trainguard.detection.classify import classify_text

ADDED = ("glog_check_failed", "xla_device_alloc_retry", "xla_cuinit_fallback")
EXTENDED = ("cuda_node_driver_setup", "cuda_devices_unavailable")

CRASH = ("segfault", "system_software")
NODE_SETUP = ("slurm_node_failure", "system_software")
OOM = ("cuda_oom", "application")
ILLEGAL = ("cuda_illegal_access", "application")
TIMEOUT = ("nccl_timeout", "system_software")
APP_EXIT = ("python_exception", "application")

TB = 'Traceback (most recent call last):\n  File "train.py", line 42, in <module>\n    main()\n'
E = "2024-05-01 10:00:00.000000: E external/xla/xla/"
# StreamExecutor's cuda_driver.cc DeviceAllocate; the BFC allocator backs off 0.9 x per attempt
ALLOC_RETRY = (
    "I0501 10:00:00.000000 1234 cuda_driver.cc:775] failed to allocate 256.00M (268435456 bytes) from "
    "device: "
    "CUDA_ERROR_OUT_OF_MEMORY: out of memory\n"
    "I0501 10:00:00.000100 1234 cuda_driver.cc:775] failed to allocate 230.40M (241592064 bytes) from "
    "device: "
    "CUDA_ERROR_OUT_OF_MEMORY: out of memory\n"
)

# (text, expected category/attribution, deciding entry)
FAILED_ON_MAIN = [
    # jax/_src/xla_bridge.py backends() raising a GPU backend the job asked for, with
    # xla/pjrt/gpu/gpu_helpers.cc GetGpuXlaClient's status: no GPU visible to the process
    (
        TB
        + "RuntimeError: Unable to initialize backend 'cuda': FAILED_PRECONDITION: No visible GPU devices. "
        "(you may need to uninstall the failing plugin package, or set JAX_PLATFORMS=cpu to skip this "
        "backend.)",
        ("slurm_node_failure", "system_software"),
        "cuda_devices_unavailable",
    ),
    (
        TB
        + "RuntimeError: Unable to initialize backend 'cuda': FAILED_PRECONDITION: No visible GPU devices. "
        "(set JAX_PLATFORMS='' to automatically choose an available backend)",
        ("slurm_node_failure", "system_software"),
        "cuda_devices_unavailable",
    ),
    # xla/tsl/platform/default/logging.h CHECK -> LOG(FATAL), glog / absl prefix
    (
        "F0501 10:00:00.000000 1234 gpu_executable.cc:456] Check failed: buffer.size() == expected_size "
        "(1024 vs. 2048)\n*** Check failure stack trace: ***",
        CRASH,
        "glog_check_failed",
    ),
    # the same, TSL's own prefix
    (
        "2024-05-01 10:00:00.000000: F external/xla/xla/service/gpu/ir_emitter_unnested.cc:3412] Check "
        "failed: "
        "ShapeUtil::Equal(shape, other) ",
        CRASH,
        "glog_check_failed",
    ),
    # behind srun -l's task label
    (
        "3: F0501 10:00:00.000000 1234 nccl_clique.cc:210] Check failed: clique != nullptr ",
        CRASH,
        "glog_check_failed",
    ),
    # cuda_driver.cc LoadPtx: LOG(ERROR), then the raised status
    (
        E + "stream_executor/cuda/cuda_driver.cc:548] failed to load PTX text as a module: "
        "CUDA_ERROR_UNSUPPORTED_PTX_VERSION: the provided PTX was compiled with an unsupported toolchain.",
        NODE_SETUP,
        "cuda_node_driver_setup",
    ),
    (
        TB + "jaxlib.xla_extension.XlaRuntimeError: INTERNAL: Failed to load PTX text as a module: "
        "CUDA_ERROR_UNSUPPORTED_PTX_VERSION: the provided PTX was compiled with an unsupported toolchain.",
        NODE_SETUP,
        "cuda_node_driver_setup",
    ),
]

ALREADY_READ = [
    # the BFC retry's lines, then the allocation that stays refused: the raised OOM decides, the retry is kept
    (
        ALLOC_RETRY + TB + "jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to "
        "allocate 60.91GiB.",
        OOM,
        "cuda_oom_allocator",
    ),
    # xla/stream_executor/integrations/tf_allocator_adapter.cc, in jax's newer and older exception names
    (
        TB
        + "jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 60.91GiB.",
        OOM,
        "cuda_oom_allocator",
    ),
    (
        TB + "jaxlib._jax.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate "
        "1073741824 bytes.",
        OOM,
        "cuda_oom_allocator",
    ),
    # xla/pjrt/pjrt_stream_executor_client.cc, the replica's failure before it is raised
    (
        E
        + "pjrt/pjrt_stream_executor_client.cc:2732] Execution of replica 0 failed: RESOURCE_EXHAUSTED: Out "
        "of memory while trying to allocate 1073741824 bytes.",
        OOM,
        "cuda_oom_allocator",
    ),
    # xla/backends/gpu/collectives/nccl_communicator.cc ToStatus, with NCCL's last warning
    (
        TB + "jax.errors.JaxRuntimeError: INTERNAL: external/xla/xla/backends/gpu/collectives/"
        "nccl_communicator.cc:123: NCCL operation ncclAllToAll(send_buffer, recv_buffer, count, nccl_dtype, "
        "comm_, stream) failed: unhandled cuda error (run with NCCL_DEBUG=INFO for details). Last NCCL "
        "warning(error) log entry (may be unrelated) 'Cuda failure 2 'out of memory''.",
        OOM,
        "cuda_oom_runtime",
    ),
    # xla/service/gpu/gpu_executable.cc ExecuteThunks, a kernel fault found at the stream's end
    (
        TB
        + "jaxlib.xla_extension.XlaRuntimeError: INTERNAL: Failed to complete all kernels launched on stream "
        "0x5581b6e3d0a0: CUDA error: Failed to synchronize GPU stream: CUDA_ERROR_ILLEGAL_ADDRESS: an "
        "illegal "
        "memory access was encountered",
        ILLEGAL,
        "cuda_illegal_memory_access",
    ),
    (
        TB + "jaxlib.xla_extension.XlaRuntimeError: INTERNAL: Failed to launch CUDA kernel: fusion_123 with "
        "block dimensions: 256x1x1 and grid dimensions: 1024x1x1: CUDA_ERROR_LAUNCH_FAILED: unspecified "
        "launch "
        "failure",
        ILLEGAL,
        "cuda_launch_failure",
    ),
    # an illegal access that then fails a CHECK: the specific fault decides over the generic check
    (
        "E0501 10:00:00.000000 1234 cuda_event.cc:29] Error polling for event status: failed to query event: "
        "CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered\nF0501 10:00:00.000100 1234 "
        "gpu_event_mgr.cc:220] Check failed: status.ok() Unexpected Event status: 1",
        ILLEGAL,
        "cuda_illegal_memory_access",
    ),
    # xla/tsl/distributed_runtime/coordination/coordination_service.cc SetTaskError, and the barrier it fails
    (
        "E0501 10:00:00.000000 1234 coordination_service.cc:1234] /job:jax_worker/replica:0/task:3 has "
        "been set "
        "to ERROR in coordination service: UNAVAILABLE: Task /job:jax_worker/replica:0/task:3 heartbeat "
        "timeout. "
        "This indicates that the remote task has failed, got preempted, or crashed unexpectedly.",
        TIMEOUT,
        "xla_coordination_task_failed",
    ),
    # xla/pjrt/distributed/client.h QFATAL with the agent's RPC-layer prefix (coordination_service_agent.cc)
    (
        "F0511 07:38:29.000000 1234 client.h:77] Terminating process because the JAX distributed service "
        "detected fatal errors. This most likely indicates that another task died; see the other task "
        "logs for "
        "more details. Disable Python buffering, i.e. `python -u`, to be sure to see all the previous "
        "output. "
        "absl::Status: UNAVAILABLE: Failed to send RPC to coordination service. Either the leader task was "
        "preempted/died/restarted unexpectedly or this task is experiencing network issues. Check "
        "earlier logs "
        "from 1) this task, 2) the leader (usually slice 0 task 0), and 3) cluster scheduler to debug "
        "further.",
        TIMEOUT,
        "xla_coordination_task_failed",
    ),
]

# raised into the program, the program's (as the distributed-runtime pass decided, tuning pub498)
PROGRAM_ERRORS = [
    # a refused cuInit raised, not logged: still fatal (xla_cuinit_fallback reads the logged line only)
    TB + "RuntimeError: Unable to initialize backend 'cuda': INTERNAL: failed call to cuInit: "
    "CUDA_ERROR_SYSTEM_NOT_READY: system not yet initialized",
    # coordination_service.cc barrier timeout, raised from orbax's multihost barrier / sync_global_devices
    TB + "jaxlib.xla_extension.XlaRuntimeError: DEADLINE_EXCEEDED: Barrier timed out. Id: "
    "0_async_write_complete.0.1. This usually happens because a task triggered the barrier too early or too "
    "slowly. Please look at the task logs (both timed out and first task) to debug further.\n# of tasks that "
    "reached the barrier: 8/16.\nThe first task at the barrier: /job:jax_worker/replica:0/task:13. Some "
    "timed "
    "out task names:\n/job:jax_worker/replica:0/task:6",
    # xla/stream_executor/cuda/cuda_dnn.cc: the job's cuDNN older than the jaxlib's (its environment)
    "E0430 22:32:43.417007 2493694 cuda_dnn.cc:454] Loaded runtime CuDNN library: 9.1.0 but source was "
    "compiled "
    "with: 9.8.0. CuDNN library needs to have matching major version and equal or higher minor version.\n"
    + TB
    + "jax.errors.JaxRuntimeError: FAILED_PRECONDITION: DNN library initialization failed. Look at the "
    "errors "
    "above for more details.",
]

# messages a job prints and goes on
SURVIVED = [
    # cuda_driver.cc's refused cuInit, then JAX falling back to the CPU (xla_bridge.py, INFO and WARNING)
    "E0501 10:00:00.000000 1234 cuda_driver.cc:152] failed call to cuInit: CUDA_ERROR_NO_DEVICE: no "
    "CUDA-capable device is detected\n"
    "2023-09-10 13:47:04 - INFO - Unable to initialize backend 'cuda': FAILED_PRECONDITION: No visible GPU "
    "devices.\n"
    "WARNING:jax._src.xla_bridge:An NVIDIA GPU may be present on this machine, but a CUDA-enabled jaxlib is "
    "not installed. Falling back to cpu.\n",
    ALLOC_RETRY,
    E + "stream_executor/cuda/cuda_driver.cc:1006] failed to allocate 79.08GiB (84915355648 bytes) from "
    "device: "
    "CUDA_ERROR_OUT_OF_MEMORY: out of memory\n",
    # xla/service/slow_operation_alarm.cc and the compiler's slow-compile alarm (ERROR level, healthy)
    E + "service/slow_operation_alarm.cc:65] \n********************************\n[Compiling module "
    "jit_n_steps] "
    "Very slow compile? If you want to file a bug, run with envvar XLA_FLAGS=--xla_dump_to=/tmp/foo and "
    "attach "
    "the results.\n********************************\n"
    + E
    + "service/slow_operation_alarm.cc:133] The operation took 8m6.9600373s\n",
    E + "service/slow_operation_alarm.cc:65] Constant folding an instruction is taking > 1s:\n\n  "
    "%compare.5788 "
    "= pred[221184,1]{1,0} compare(s32[221184,1]{1,0} %constant.857, s32[221184,1]{1,0} %broadcast.5787)\n",
    # plugin factories registered twice (TensorFlow and JAX in one process)
    "E0000 00:00:1739486925.821562  176814 cuda_dnn.cc:8310] Unable to register cuDNN factory: Attempting to "
    "register factory for plugin cuDNN when one has already been registered\n",
    # the autotuners
    E
    + "service/gpu/conv_algorithm_picker.cc:1234] Results mismatch between different convolution algorithms. "
    "This is likely a bug/unexpected loss of precision in cudnn.\n"
    + E
    + "service/gpu/buffer_comparator.cc:157] Difference at 0: 0.5, expected 0.25\n",
    E.replace(": E ", ": W ")
    + "service/gpu/gemm_algorithm_picker.cc:321] Failed to find best cuBLAS algorithm, "
    "GEMM performance might be suboptimal: INTERNAL: All algorithms tried for %cublas-gemm.1 failed. Falling "
    "back to default algorithm.\n",
    E.replace(": E ", ": W ") + "service/gpu/autotuning/gemm_fusion_autotuner.cc:1000] Failed to compile "
    "fusion_1 with config block_m:64 block_n:64: RESOURCE_EXHAUSTED: Shared memory size limit exceeded: "
    "requested 262144, available: 232448\n",
    # nvptx_compiler.cc
    "W0501 10:00:00.000000 1234 nvptx_compiler.cc:930] The NVIDIA driver's CUDA version is 12.2 which is "
    "older "
    "than the PTX compiler version 12.6.77. Because the driver is older than the PTX compiler version, "
    "XLA is "
    "disabling parallel compilation, which may slow down compilation.\n",
    E.replace(": E ", ": W ") + "service/gpu/nvptx_compiler.cc:760] Falling back to the CUDA driver for PTX "
    "compilation; ptxas does not support CC 9.0\n",
    # BFC: a caller that recovers, the pinned host pool
    E.replace(": E ", ": W ") + "tsl/framework/bfc_allocator.cc:290] Allocator (GPU_0_bfc) ran out of memory "
    "trying to allocate 2.25GiB with freed_by_count=0. The caller indicates that this is not a failure, "
    "but this "
    "may mean that there could be performance gains if more memory were available.\n",
    E.replace(": E ", ": W ")
    + "stream_executor/cuda/cuda_driver.cc:1000] could not allocate pinned host memory "
    "of size: 4294967296\n",
    # XLA's rendezvous warning (the pass of round 20b)
    E + "service/rendezvous.cc:38] This thread has been waiting for `initialize clique for rank 6; "
    "clique=devices=[0,1]; stream=0; run_id=1` for 10 seconds and may be stuck.\n",
    # CHECK text outside the FATAL level
    "W0501 10:00:00.000000 1234 gpu_executable.cc:456] Check failed: buffer.size() == expected_size\n",
]


@pytest.mark.parametrize(
    ("text", "expected", "entry"), FAILED_ON_MAIN, ids=[m[0][-50:] for m in FAILED_ON_MAIN]
)
def test_runtime_message_is_read(text: str, expected: tuple[str, str], entry: str) -> None:
    assert_read_as(text + "\n", expected, entry)


@pytest.mark.parametrize(("text", "expected", "entry"), ALREADY_READ, ids=[m[0][-50:] for m in ALREADY_READ])
def test_messages_read_before_still_read(text: str, expected: tuple[str, str], entry: str) -> None:
    assert_read_as(text + "\n", expected, entry)


@pytest.mark.parametrize("text", PROGRAM_ERRORS, ids=[t[-40:] for t in PROGRAM_ERRORS])
def test_raised_into_the_program_stays_the_program_s(text: str) -> None:
    r = classify_text(text + "\n")
    assert (r.fatal, r.category, r.attribution) == (True, *APP_EXIT), r.pattern_ids


@pytest.mark.parametrize("text", SURVIVED, ids=[t[-40:] for t in SURVIVED])
def test_messages_a_job_survives_are_not_fatal(text: str) -> None:
    assert_not_fatal(text)


def test_every_added_entry_is_exercised_here() -> None:
    # the two non-fatal entries' cases are in SURVIVED, and its catalog examples are checked
    # by test_detection_catalog
    assert {m[2] for m in FAILED_ON_MAIN} >= set(ADDED + EXTENDED) - {
        "xla_device_alloc_retry",
        "xla_cuinit_fallback",
    }


@pytest.mark.parametrize("sig_id", ADDED + EXTENDED)
def test_every_entry_names_its_source_file(sig_id: str) -> None:
    assert_names_source(sig_id)

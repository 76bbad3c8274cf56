"""CUDA and ROCm status messages, derived from their sources (issue 12 section 1, "generalise, don't
memorise").

The error strings the GPU runtimes and math libraries return were read out of sources that reproduce them,
and mapped to TrainGuard's categories (docs/detection.md, "CUDA and ROCm status messages, from their
sources"):
- CUDA's cudaGetErrorString / cuGetErrorString texts (NVIDIA's runtime is closed): ROCm/hip-tests
  catch/unit/errorHandling/hipDrvGetErrorString.cc (listed at ac9aa951b9, its HT_NVIDIA branch is checked
  against CUDA's cuGetErrorString), and a CUDA driver- and runtime-API re-implementation's suGetErrorString /
  sudaGetErrorString tables for the codes hip-tests does not cover (34, 36, 102, 222, 714, 717, 718, 802-805;
  its repository was not identified);
- HIP's hipGetErrorString texts: ROCm/clr hipamd/src/hip_error.cpp (commit 0bf2a9834c, ihipGetErrorString),
  and its code-object loader's abort (hipamd/src/hip_code_object.cpp, hipErrorNoBinaryForGpu);
- PyTorch's printing: c10/cuda/CUDAException.cpp (0e4c6cd662, `CUDA error: <string>`, torch.AcceleratorError),
  c10/cuda/CUDAMiscFunctions.cpp (0ac83aeb35, the asynchronous-error suffix and the `Search for `<name>'` help
  line), c10/cuda/CUDAFunctions.cpp (01a6a16d9b, device_count_impl: `Unexpected error from
  cudaGetDeviceCount()`, `Found no NVIDIA driver`, `driver ... too old`, logged as a warning by device_count),
  aten/src/ATen/cuda/Exceptions.h (0220ea5a36: `cuDNN error:`, `CUDA error: CUBLAS_... when calling`,
  `cusolver error:`, `CUDA driver error:`), aten/src/ATen/native/cuda/CuFFTUtils.h (b06db13e51,
  `cuFFT error:`); CuPy's cupy_backends/cuda/api/runtime.pyx (3a2a047c25) and driver.pyx (`<name>: <string>`).
Each positive case in MESSAGES is a source's format string filled in; each read as python_exception /
application (or, for the no-device strings, gpu_hardware / hardware) before this change. ALREADY_READ pins
the kinds the catalog read right before. The look-alikes are messages a job survives.
"""

from __future__ import annotations

import pytest

from tests.unit.catalog_sources import assert_names_source, assert_not_fatal, assert_read_as

ADDED = (
    "cuda_node_driver_setup",
    "cuda_kernel_fault_other",
    "cuda_library_alloc_failed",
    "hip_no_binary_for_gpu",
)
EXTENDED = ("cuda_devices_unavailable",)  # HIP's no-device string; relabelled to the node's set-up

NODE = ("slurm_node_failure", "system_software")
KERNEL = ("cuda_illegal_access", "application")
OOM = ("cuda_oom", "application")
HW = ("gpu_hardware", "hardware")

TB = 'Traceback (most recent call last):\n  File "train.py", line 42, in <module>\n    main()\n'
ASYNC = (
    "\nCUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below "
    "might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
)


def _help(name: str) -> str:
    # c10/cuda/CUDAMiscFunctions.cpp, get_cuda_error_help
    return (
        f"\nSearch for `{name}' in https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html "
        "for more information."
    )


# (text, expected category/attribution, deciding entry)
MESSAGES = [
    # the node's driver / runtime set-up
    (
        TB
        + "RuntimeError: CUDA error: CUDA driver version is insufficient for CUDA runtime version"
        + _help("cudaErrorInsufficientDriver"),
        NODE,
        "cuda_node_driver_setup",
    ),
    (
        TB + "torch.AcceleratorError: CUDA error: system has unsupported display driver / cuda driver "
        "combination" + _help("cudaErrorSystemDriverMismatch"),
        NODE,
        "cuda_node_driver_setup",
    ),
    (
        TB
        + "RuntimeError: Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions before "
        "calling NumCudaDevices() that might have already set an error? Error 804: forward compatibility was "
        "attempted on non supported HW",
        NODE,
        "cuda_node_driver_setup",
    ),
    (
        TB
        + "RuntimeError: Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions before "
        "calling NumCudaDevices() that might have already set an error? Error 803: system has unsupported "
        "display driver / cuda driver combination",
        NODE,
        "cuda_node_driver_setup",
    ),
    (TB + "RuntimeError: CUDA error: system not yet initialized", NODE, "cuda_node_driver_setup"),
    (TB + "RuntimeError: CUDA driver error: CUDA driver is a stub library", NODE, "cuda_node_driver_setup"),
    (
        TB + "RuntimeError: CUDA driver error: device doesn't have valid Grid license",
        NODE,
        "cuda_node_driver_setup",
    ),
    (
        TB + "RuntimeError: CUDA error: API call is not supported in the installed CUDA driver",
        NODE,
        "cuda_node_driver_setup",
    ),
    (
        TB + "RuntimeError: CUDA error: the provided PTX was compiled with an unsupported toolchain.",
        NODE,
        "cuda_node_driver_setup",
    ),
    (
        TB + "RuntimeError: CUDA error: MPS client failed to connect to the MPS control daemon or the MPS "
        "server",
        NODE,
        "cuda_node_driver_setup",
    ),
    # CuPy (cupy_backends/cuda/api/runtime.pyx, driver.pyx): `<name>: <string>`
    (
        TB
        + "cupy_backends.cuda.api.runtime.CUDARuntimeError: cudaErrorInsufficientDriver: CUDA driver version "
        "is insufficient for CUDA runtime version",
        NODE,
        "cuda_node_driver_setup",
    ),
    (
        TB
        + "cupy_backends.cuda.api.driver.CUDADriverError: CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE: forward "
        "compatibility was attempted on non supported HW",
        NODE,
        "cuda_node_driver_setup",
    ),
    (
        TB + "RuntimeError: HIP error: driver version is insufficient for runtime version",
        NODE,
        "cuda_node_driver_setup",
    ),
    (
        TB
        + "RuntimeError: Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and "
        "installed a driver from http://www.nvidia.com/Download/index.aspx",
        NODE,
        "cuda_node_driver_setup",
    ),
    (
        TB + "RuntimeError: The NVIDIA driver on your system is too old (found version 11040). Please update "
        "your GPU driver by downloading and installing a new version from the URL: "
        "http://www.nvidia.com/Download/index.aspx Alternatively, go to: https://pytorch.org to install a "
        "PyTorch version that has been compiled with your version of the CUDA driver.",
        NODE,
        "cuda_node_driver_setup",
    ),
    (TB + "RuntimeError: CUDA error: no CUDA-capable device is detected", NODE, "cuda_devices_unavailable"),
    (
        TB + "RuntimeError: CUDA error: all CUDA-capable devices are busy or unavailable",
        NODE,
        "cuda_devices_unavailable",
    ),
    (
        TB + "RuntimeError: CUDA driver error: CUDA-capable device(s) is/are busy or unavailable",
        NODE,
        "cuda_devices_unavailable",
    ),
    (TB + "RuntimeError: HIP error: no ROCm-capable device is detected", NODE, "cuda_devices_unavailable"),
    # the application's kernel faults
    (TB + "RuntimeError: CUDA error: hardware stack error" + ASYNC, KERNEL, "cuda_kernel_fault_other"),
    (
        TB + "torch.AcceleratorError: CUDA error: invalid program counter" + ASYNC,
        KERNEL,
        "cuda_kernel_fault_other",
    ),
    (
        TB + "RuntimeError: CUDA error: operation not supported on global/shared address space" + ASYNC,
        KERNEL,
        "cuda_kernel_fault_other",
    ),
    # HIP's runtime aborting on a fat binary without the GPU's gfx target (hipamd/src/hip_code_object.cpp):
    # the build's, read as the program's, not as the abort that follows
    (
        '"hipErrorNoBinaryForGpu: Unable to find code object for all current devices!"\n'
        "Aborted (core dumped)",
        ("python_exception", "application"),
        "hip_no_binary_for_gpu",
    ),
    # the math libraries' own out-of-memory status
    (TB + "RuntimeError: cuDNN error: CUDNN_STATUS_ALLOC_FAILED", OOM, "cuda_library_alloc_failed"),
    (TB + "RuntimeError: cuFFT error: CUFFT_ALLOC_FAILED", OOM, "cuda_library_alloc_failed"),
    (
        TB + "RuntimeError: cusolver error: CUSOLVER_STATUS_ALLOC_FAILED, when calling "
        "`cusolverDnCreate(handle)`. "
        "If you keep seeing this error, you may use `torch.backends.cuda.preferred_linalg_library()` to try "
        "linear algebra operators with other supported backends.",
        OOM,
        "cuda_library_alloc_failed",
    ),
    (
        TB + "RuntimeError: CUDA error: CUSPARSE_STATUS_ALLOC_FAILED when calling `cusparseCreate(handle)`",
        OOM,
        "cuda_library_alloc_failed",
    ),
]

# (text, expected, entry): the strings the catalog read right before this pass
ALREADY_READ = [
    (
        TB + "torch.AcceleratorError: CUDA error: an illegal memory access was encountered" + ASYNC,
        KERNEL,
        "cuda_illegal_memory_access",
    ),
    (TB + "RuntimeError: CUDA error: misaligned address" + ASYNC, KERNEL, "cuda_illegal_memory_access"),
    (
        TB + "RuntimeError: CUDA error: an illegal instruction was encountered" + ASYNC,
        KERNEL,
        "cuda_illegal_memory_access",
    ),
    (
        TB + "RuntimeError: CUDA error: device-side assert triggered" + ASYNC,
        KERNEL,
        "cuda_illegal_memory_access",
    ),
    (TB + "RuntimeError: CUDA error: unspecified launch failure" + ASYNC, KERNEL, "cuda_launch_failure"),
    (TB + "RuntimeError: CUDA error: the launch timed out and was terminated", KERNEL, "cuda_launch_failure"),
    (
        TB + "RuntimeError: HIP error: an illegal memory access was encountered",
        KERNEL,
        "cuda_illegal_memory_access",
    ),
    (TB + "RuntimeError: HIP error: unspecified launch failure", KERNEL, "cuda_launch_failure"),
    (TB + "RuntimeError: CUDA error: uncorrectable ECC error encountered", HW, "gpu_ecc_uncorrectable"),
    (TB + "RuntimeError: HIP error: uncorrectable ECC error encountered", HW, "gpu_ecc_uncorrectable"),
    (
        TB + "RuntimeError: CUDA error: uncorrectable NVLink error detected during the execution",
        HW,
        "nvlink_uncorrectable",
    ),
    (TB + "RuntimeError: CUDA error: out of memory", OOM, "cuda_oom_runtime"),
    (TB + "RuntimeError: HIP error: out of memory", OOM, "hip_oom_runtime"),
    (
        TB + "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
        OOM,
        "cuda_oom_allocator",
    ),
    (
        TB
        + "RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasGemmEx( handle, opa, "
        "opb, m, n, k, &falpha, a, CUDA_R_16F, lda, b, CUDA_R_16F, ldb, &fbeta, c, CUDA_R_16F, ldc, "
        "CUDA_R_32F, "
        "CUBLAS_GEMM_DEFAULT_TENSOR_OP)`",
        KERNEL,
        "cuda_library_execution_failed",
    ),
    (
        TB + "RuntimeError: cuDNN error: CUDNN_STATUS_EXECUTION_FAILED",
        KERNEL,
        "cuda_library_execution_failed",
    ),
    # the build lacks the GPU's architecture, API misuse: the program's exception
    (
        TB + "RuntimeError: CUDA error: no kernel image is available for execution on the device",
        ("python_exception", "application"),
        "python_exception_line",
    ),
    (
        TB + "RuntimeError: HIP error: invalid device function",
        ("python_exception", "application"),
        "python_exception_line",
    ),
    (
        TB + "RuntimeError: CUDA error: operation not permitted when stream is capturing",
        ("python_exception", "application"),
        "python_exception_line",
    ),
]


@pytest.mark.parametrize(
    ("text", "expected", "entry"), MESSAGES, ids=[m[0][len(TB) : len(TB) + 70] for m in MESSAGES]
)
def test_cuda_status_message_is_read(text: str, expected: tuple[str, str], entry: str) -> None:
    assert_read_as(text + "\n", expected, entry)


@pytest.mark.parametrize(
    ("text", "expected", "entry"), ALREADY_READ, ids=[m[0][len(TB) : len(TB) + 70] for m in ALREADY_READ]
)
def test_status_strings_read_before_still_read(text: str, expected: tuple[str, str], entry: str) -> None:
    assert_read_as(text + "\n", expected, entry)


def test_every_added_entry_is_exercised_here() -> None:
    assert {m[2] for m in MESSAGES} >= set(ADDED + EXTENDED)


@pytest.mark.parametrize(
    "text",
    [
        # c10/cuda/CUDAFunctions.cpp device_count: the same text logged as a warning; the program runs on
        # the CPU
        "/usr/lib/python3/dist-packages/torch/cuda/__init__.py:138: UserWarning: CUDA initialization: "
        "Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions before calling "
        "NumCudaDevices() that might have already set an error? Error 804: forward compatibility was "
        "attempted on non supported HW "
        "(Triggered internally at ../c10/cuda/CUDAFunctions.cpp:108.)\n",
        "UserWarning: CUDA initialization: The NVIDIA driver on your system is too old (found version "
        "11040). "
        "Please update your GPU driver by downloading and installing a new version\n",
        # TensorFlow's failed cuInit: it logs and falls back to the CPU
        "2023-11-14 23:00:37.345835: E tensorflow/compiler/xla/stream_executor/cuda/cuda_driver.cc:266] "
        "failed call to cuInit: CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE: forward compatibility was "
        "attempted on non supported HW\n",
        # c10's C10_CUDA_CHECK_WARNING in a destructor at shutdown
        "[W CUDAGuardImpl.h:119] Warning: CUDA warning: driver shutting down (function uncheckedSetDevice)\n",
        # polling statuses and benign duplicates, as names or strings
        "cudaErrorNotReady\n",
        "event query: device not ready\n",
        "cudaErrorPeerAccessAlreadyEnabled: peer access is already enabled\n",
        "cudaErrorHostMemoryAlreadyRegistered: part or all of the requested memory range is already mapped\n",
    ],
)
def test_messages_a_job_survives_are_not_fatal(text: str) -> None:
    assert_not_fatal(text)


@pytest.mark.parametrize("sig_id", ADDED + EXTENDED)
def test_every_entry_names_its_source_file(sig_id: str) -> None:
    assert_names_source(sig_id)

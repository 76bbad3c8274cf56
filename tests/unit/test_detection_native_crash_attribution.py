"""Native crash attribution: whose code crashed (issue 12 section 1, docs/detection.md).

A native crash (category segfault) is the platform's by default (system_software). Where the crash report
names the code that faulted, that code decides: the innermost frame outside the C runtime in a system or
installed library stays system_software, one in the user's own program or module is the application's,
and a machine check the kernel logged on the node makes it the hardware's. The formats come from the
printers' sources:

- glibc's backtrace_symbols (bminor/glibc 04277e02d7f54d3582bebcf8386b317018cd5e1d debug/backtracesyms.c:
  `%s(%s%c%#tx) [%p]`; backtrace_symbols_fd writes it without the space, as Open MPI's and UCX's handlers
  print it);
- gdb's backtrace (bminor/binutils-gdb gdb/stack.c print_frame: ` from <solib>` for a frame without a source
  line);
- the kernel's segfault and trap lines (torvalds/linux 0069455bcbf9 arch/x86/mm/fault.c show_signal_msg
  `%s%s[%d]: segfault at %lx ip %px sp %px error %lx`, arch/x86/kernel/traps.c show_signal, then mm/memory.c
  print_vma_addr `%s%s[%lx+%lx]` with ` in ` and the object's base name);
- the kernel's machine-check log (arch/x86/kernel/cpu/mce/core.c: `[Hardware Error]: Machine check events
  logged`, `[Hardware Error]: CPU %d: Machine Check%s: %Lx Bank %d: %016Lx`).

The APPLICATION and HARDWARE cases below read segfault / system_software on the code before this change (it
did not look at frames, the crashing object or machine checks); the SYSTEM cases read the same before and
after and are pinned so the rule cannot turn a library's crash into the user's. No corpus excerpt was added.
"""

from __future__ import annotations

import pytest

from tests.unit.catalog_sources import SOURCE_FILE, assert_names_source, assert_not_fatal
from trainguard.attribution.rules import attribute, kernel_crash_object
from trainguard.detection.catalog import CatalogError, parse_catalog
from trainguard.detection.classify import classify_text
from trainguard.models import Attribution, Category, Finding, FindingSource, JobSnapshot

ADDED = (
    "native_frame_c_runtime",
    "native_frame_system_library",
    "native_frame_installed_object",
    "native_frame_user_object",
    "kernel_machine_check_logged",
)

SEGV = "Segmentation fault (core dumped)\n"
ABRT = "Aborted (core dumped)\n"

# The user's own code: read system_software before this change.
APPLICATION = [
    # the kernel names the process's own executable (comm is the executable's name)
    "[ 1234.567890] llama-cli[4242]: segfault at 10 ip 000055d1a2b5a1b2 sp 00007ffd12345678 error 4 in "
    "llama-cli[55d1a2b00000+100000]\n",
    "[ 1234.567890] traps: train_bin[4242] trap invalid opcode ip:55d1a2b5a1b2 sp:7ffd12345678 error:0 in "
    "train_bin[55d1a2b00000+100000]\n",
    # glibc backtrace (debug/backtracesyms.c) whose innermost frame past the C runtime is the user's
    SEGV
    + "/lib/x86_64-linux-gnu/libc.so.6(+0x42520) [0x7f4b8e442520]\n"
    + "./llama-cli(+0x5a1b2) [0x55d1a2b5a1b2]\n"
    + "/usr/lib/x86_64-linux-gnu/libnccl.so.2(+0x6b2e1) [0x7f2a3c46b2e1]\n",
    SEGV + "/home/alice/proj/build/libmyops.so(_Z6kernelPf+0x2c) [0x7f00aa00102c]\n",
    # Open MPI's handler: backtrace_symbols_fd, no space before the address
    "[gpu-01:04242] *** Process received signal ***\n"
    "[gpu-01:04242] Signal: Segmentation fault (11)\n"
    "[gpu-01:04242] [ 0] /lib64/libpthread.so.0(+0xf630)[0x2b7c3c6d2630]\n"
    "[gpu-01:04242] [ 1] ./my_solver(+0x3e21)[0x55e9b2a03e21]\n",
    # an abort, the user's frame under abort() in libc
    ABRT
    + "/lib/x86_64-linux-gnu/libc.so.6(abort+0xd3) [0x7f4b8e4287f3]\n"
    + "/scratch/bob/sim/bin/solver(_ZN6Solver4stepEv+0x91) [0x55d1a2b5a1b2]\n",
    # gdb: a frame without source line information names its shared object (gdb/stack.c print_frame)
    SEGV
    + "#0  0x00007ffff7a42428 in __GI_raise () from /lib/x86_64-linux-gnu/libc.so.6\n"
    + "#1  0x00007f00aa00102c in my_op () from /home/alice/proj/build/libmyops.so\n",
]

# The platform's or an installed package's code: system_software before and after (pinned).
SYSTEM = [
    "[ 1234.567890] python[4242]: segfault at 0 ip 00007f2a3c46b2e1 sp 00007ffd12345678 error 4 in "
    "libnccl.so.2[7f2a3c400000+1000000]\n",
    "[ 1234.567890] python3[4242]: segfault at 8 ip 00007f9c1e8a0c4f sp 00007ffd12345678 error 4 in "
    "libcuda.so.1[7f9c1e600000+2000000]\n",
    "[ 1234.567890] pt_main_thread[4242]: segfault at 0 ip 00007f4b8e5a1b2c sp 00007ffd12345678 error 6 in "
    "libc.so.6[7f4b8e428000+195000]\n",
    "[ 1234.567890] osu_bw[4242]: segfault at 10 ip 00007f11a2e2c1f0 sp 00007ffd12345678 error 4 in "
    "libfabric.so.1[7f11a2e00000+100000]\n",
    # the interpreter's own executable is not the user's program
    "[ 1234.567890] python3.10[4242]: segfault at 0 ip 000055d1a2b5a1b2 sp 00007ffd12345678 error 4 in "
    "python3.10[55d1a2b00000+300000]\n",
    # an extension module the kernel names by base name only: whose it is is not known, the default stays
    "[ 1234.567890] python[4242]: segfault at 0 ip 00007f00aa00102c sp 00007ffd12345678 error 4 in "
    "my_ext.cpython-310-x86_64-linux-gnu.so[7f00aa000000+10000]\n",
    # UCX's handler (glibc's format), system libraries innermost
    "[host:15081:0:15081] Caught signal 11 (Segmentation fault: address not mapped to object at "
    "address 0x8)\n"
    "==== backtrace ====\n"
    "    0  /lib64/libucs.so.0(+0x194a3) [0x7f0b015bf4a3]\n"
    "    1  /lib64/libc.so.6(+0x42520) [0x7f0b03a42520]\n"
    "    2  /home/alice/proj/build/app(+0x1234) [0x55d1a2b01234]\n",
    SEGV
    + "/lib/x86_64-linux-gnu/libc.so.6(+0x42520) [0x7f4b8e442520]\n"
    + "/usr/lib64/libmlx5.so.1(+0x2c1f0) [0x7f11a2e2c1f0]\n"
    + "./train(+0x5a1b2) [0x55d1a2b5a1b2]\n",
    # an installed extension and the interpreter (site-packages, /usr, conda)
    SEGV + "/opt/conda/lib/python3.10/site-packages/apex_C.cpython-310-x86_64-linux-gnu.so(+0x1a2b3) "
    "[0x7f00aa01a2b3]\n" + "./train(+0x5a1b2) [0x55d1a2b5a1b2]\n",
    SEGV + "python(_PyEval_EvalFrameDefault+0x6152) [0x55d4c3a6a482]\n",
    SEGV + "#3  0x00007fffe6c2b1a0 in ?? () from /usr/lib/x86_64-linux-gnu/libcuda.so.1\n",
    # only C runtime frames: nothing past them, the default
    SEGV + "/lib/x86_64-linux-gnu/libc.so.6(__memmove_avx_unaligned_erms+0x3c) [0x7f4b8e5a1b2c]\n",
    # glog / abseil print symbols, not objects: the default
    "*** SIGSEGV (@0x8) received by PID 19262 (TID 0x7f79839ca700) from PID 8; stack trace: ***\n"
    "    @     0x7f792173df80 mylib::Matrix::sum()\n",
]

# A machine check the kernel logged on the node: read system_software before this change.
HARDWARE = [
    "[ 1200.000001] mce: [Hardware Error]: CPU 3: Machine Check: 0 Bank 7: 8c00004000010091\n"
    "[ 1200.000002] mce: [Hardware Error]: Machine check events logged\n"
    "[ 1234.567890] python[4242]: segfault at 7f00aa00102c ip 00007f2a3c46b2e1 sp 00007ffd12345678 "
    "error 4 in "
    "libnccl.so.2[7f2a3c400000+1000000]\n",
    "[ 1.0] mce: [Hardware Error]: Machine check events logged\n" + SEGV,
    "[ 1.0] mce: [Hardware Error]: CPU 12: Machine Check Exception: 5 Bank 1: b200000000070005\n"
    "srun: error: gpu-01: task 3: Segmentation fault (core dumped)\n"
    "./train(+0x5a1b2) [0x55d1a2b5a1b2]\n",
]


def _read(text: str) -> tuple[bool, str, str]:
    r = classify_text(text)
    return r.fatal, r.category, r.attribution


@pytest.mark.parametrize("text", APPLICATION)
def test_the_users_own_code_crashing_is_the_applications(text: str) -> None:
    assert _read(text) == (True, "segfault", "application")


@pytest.mark.parametrize("text", SYSTEM)
def test_a_system_library_crashing_stays_system_software(text: str) -> None:
    assert _read(text) == (True, "segfault", "system_software")


@pytest.mark.parametrize("text", HARDWARE)
def test_a_crash_with_a_machine_check_is_the_hardwares(text: str) -> None:
    assert _read(text) == (True, "segfault", "hardware")


def test_the_summary_says_which_frame_decided() -> None:
    r = classify_text(SEGV + "./llama-cli(+0x5a1b2) [0x55d1a2b5a1b2]\n")
    assert "the user's own code" in r.summary and "./llama-cli" in r.summary


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            "a.out[7]: segfault at 0 ip 0000000000401136 sp 00007ffc1 error 6 in a.out[401000+1000]",
            "application",
        ),
        (
            "python[7]: segfault at 0 ip 00007f1 sp 00007ffc1 error 4 in libc-2.31.so[7f0+1b000]",
            "system_software",
        ),
        (
            "python[7]: segfault at 0 ip 00007f1 sp 00007ffc1 error 4 in libtorch_cuda.so[7f0+1b000]",
            "system_software",
        ),
        # comm is cut to 15 characters (TASK_COMM_LEN); the object's name is not
        (
            "my_long_trainin[7]: segfault at 0 ip 00007f1 sp 00007ffc1 error 4 in "
            "my_long_training_bin[7f0+1b0]",
            "application",
        ),
        ("python[7]: segfault at 0 ip 00007f1 sp 00007ffc1 error 4 in myext.so[7f0+1b000]", None),
        ("Segmentation fault (core dumped)", None),
    ],
)
def test_kernel_crash_object(line: str, expected: str | None) -> None:
    got = kernel_crash_object(line)
    assert (got.value if got else None) == expected


@pytest.mark.parametrize(
    "text",
    [
        # frames alone (a handler's dump the program survives, a debugger session): evidence, never a failure
        "/lib/x86_64-linux-gnu/libc.so.6(+0x42520) [0x7f4b8e442520]\n"
        "./llama-cli(+0x5a1b2) [0x55d1a2b5a1b2]\n",
        "#1  0x00007f00aa00102c in my_op () from /home/alice/proj/build/libmyops.so\n",
        # a machine check logged alone (a corrected error is logged the same way; the node goes on)
        "[ 1.0] mce: [Hardware Error]: Machine check events logged\n",
        "[ 1.0] mce: [Hardware Error]: CPU 3: Machine Check: 0 Bank 7: 8c00004000010091\n",
        "mcelog: no machine check events logged\n",
        # libraries named outside a crash report
        "Using /usr/lib/x86_64-linux-gnu/libnccl.so.2\n",
        "NCCL INFO NET/Plugin: Plugin load returned 2 : libnccl-net.so: cannot open shared object file\n",
        "step 10 (loss 0.5) [0x1]\n",
    ],
)
def test_frames_and_machine_checks_alone_are_not_fatal(text: str) -> None:
    assert_not_fatal(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # a frame never changes a verdict that is not a native crash: PyTorch's C++ stack under an OOM
        (
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
            "./train(+0x5a1b2) [0x55d1a2b5a1b2]\n",
            ("cuda_oom", "application"),
        ),
        (
            "[ 1.0] mce: [Hardware Error]: Machine check events logged\n"
            "torch.distributed.DistBackendError: NCCL error in: "
            "../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, "
            "unhandled system error\n",
            ("nccl_error", "hardware"),
        ),
    ],
)
def test_other_verdicts_keep_their_attribution(text: str, expected: tuple[str, str]) -> None:
    r = classify_text(text)
    assert (r.fatal, r.category, r.attribution) == (True, *expected)


def _finding(
    pattern_id: str, category: Category, attribution: Attribution, *, fatal: bool, line_no: int
) -> Finding:
    return Finding(
        source=FindingSource.LOG,
        pattern_id=pattern_id,
        category=category,
        attribution=attribution,
        fatal=fatal,
        line="./train(+0x5a1b2) [0x55d1a2b5a1b2]",
        line_no=line_no,
        offset=line_no * 100,
    )


def test_evidence_alone_keeps_a_running_job_healthy() -> None:
    job = JobSnapshot(job_id="1", state="RUNNING", nodes=("gpu-01",))
    frame = _finding(
        "native_frame_user_object", Category.SEGFAULT, Attribution.APPLICATION, fatal=False, line_no=1
    )
    mce = _finding(
        "kernel_machine_check_logged",
        Category.SLURM_NODE_FAILURE,
        Attribution.HARDWARE,
        fatal=False,
        line_no=2,
    )
    for v in (attribute([frame, mce], job), attribute([frame, mce])):
        assert not v.fatal


def test_the_innermost_frame_decides() -> None:
    crash = _finding("segfault", Category.SEGFAULT, Attribution.SYSTEM_SOFTWARE, fatal=True, line_no=1)
    system = _finding(
        "native_frame_system_library", Category.SEGFAULT, Attribution.SYSTEM_SOFTWARE, fatal=False, line_no=2
    )
    user = _finding(
        "native_frame_user_object", Category.SEGFAULT, Attribution.APPLICATION, fatal=False, line_no=3
    )
    assert attribute([crash, system, user]).attribution == Attribution.SYSTEM_SOFTWARE
    assert (
        attribute(
            [
                crash,
                user.model_copy(update={"line_no": 2, "offset": 200}),
                system.model_copy(update={"line_no": 3, "offset": 300}),
            ]
        ).attribution
        == Attribution.APPLICATION
    )


def test_evidence_entries_must_not_be_fatal() -> None:
    text = (
        "version: 1\nsignatures:\n  - id: x\n    keywords: ['abc']\n    regex: 'abc'\n"
        "    category: segfault\n"
        "    attribution: system_software\n    evidence: true\n    examples: ['abc']\n"
    )
    with pytest.raises(CatalogError):
        parse_catalog(text)


@pytest.mark.parametrize("sig_id", ADDED)
def test_every_entry_names_its_source_file(sig_id: str) -> None:
    assert_names_source(sig_id, SOURCE_FILE)

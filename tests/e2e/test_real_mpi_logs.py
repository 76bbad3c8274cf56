"""Real `mpirun` (Open MPI 4.1.4, Debian 12's openmpi-bin) output, read as the Categories table says.

The catalog reads Open MPI's launcher messages from its source (docs/detection.md "Launcher and MPI
messages, from their sources", "Process-management interface messages, from their sources"); here they
are printed on the spot by a real `mpirun --allow-run-as-root --oversubscribe -np 4` on this machine,
stdout and stderr captured together, verbatim. mpirun launches any command, so most jobs are /bin/sh or
python; tests/e2e/mpi_ctypes_job.py is a real MPI program (libmpi through ctypes) for the transports'
verbose output and MPI_Abort.

- healthy: a clean run, a clean MPI program, and both with the verbose settings operators turn on when
  debugging (-v, --display-map, --display-allocation, --report-bindings, --mca <framework>_base_verbose
  for plm, rmaps, odls, state, errmgr, oob, btl, pml, coll): `classify_text` reads each healthy, and the
  streaming LogAnalyzer, fed 4 KiB chunks, finds nothing fatal.
- faults: one rank exits non-zero, segfaults, is SIGKILLed or SIGTERMed from outside by pid, raises a
  Python exception, calls MPI_Abort; mpirun refuses to launch (too few slots, no executable). Each reads
  as the Categories table says, statically and streamed: mpirun's own verdicts are cascades or wrappers,
  the rank's own evidence decides where it was printed.

What the runs found (tests/unit/test_detection_real_mpi_messages.py): a SIGTERMed rank read
python_exception (mpirun's `Primary job  terminated normally, but 1 process returned a non-zero exit
code.` comes first and was as strong as the signal line); `There are not enough slots available ...` and
`mpirun was unable to launch the specified application as it could not access or execute an executable`
read healthy.

mpirun is required: without it these tests fail, they never skip. No Slurm, no Temporal.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.e2e.real_logs import finish, stream
from trainguard.detection.classify import classify_text

pytestmark = [pytest.mark.e2e]

MPI_JOB = Path(__file__).with_name("mpi_ctypes_job.py")
PY = sys.executable
RUN_TIMEOUT_S = 30.0
APP = ("python_exception", "application")
SIGNAL = ("signal_kill", "unknown")
SEGV = ("segfault", "system_software")
VERBOSE = [
    "-v",
    "--display-map",
    "--display-allocation",
    "--report-bindings",
    *("--mca", "plm_base_verbose", "5"),
    *("--mca", "rmaps_base_verbose", "10"),
    *("--mca", "odls_base_verbose", "10"),
    *("--mca", "state_base_verbose", "5"),
    *("--mca", "errmgr_base_verbose", "5"),
    *("--mca", "oob_base_verbose", "10"),
    *("--mca", "btl_base_verbose", "30"),
    *("--mca", "pml_base_verbose", "10"),
    *("--mca", "coll_base_verbose", "10"),
]


def mpirun(*args: str, np: int = 4, oversubscribe: bool = True) -> list[str]:
    exe = shutil.which("mpirun")
    # A missing component fails the test, never skips it.
    assert exe is not None, (
        "mpirun is not installed: apt-get install -y --no-install-recommends openmpi-bin "
        "(scripts/bootstrap.sh)"
    )
    return [
        exe,
        "--allow-run-as-root",
        *(["--oversubscribe"] if oversubscribe else []),
        "-np",
        str(np),
        *args,
    ]


def start(argv: list[str], **env: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        argv,
        env={**os.environ, "OMPI_MCA_rmaps_base_oversubscribe": "0", **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )


def run(argv: list[str], **env: str) -> tuple[int, str]:
    return finish(start(argv, **env), RUN_TIMEOUT_S, "mpirun")


def until_printed(marker: str, attempt: Callable[[], tuple[int, str]], tries: int = 3) -> tuple[int, str]:
    """The last of up to `tries` runs, stopping at the first whose output holds `marker`. Under load mpirun
    has reported a fault in another form than its usual one (each test's docstring says which): such a run is
    not the fault the test reads, so it is run again."""
    rc, text = attempt()
    for _ in range(tries - 1):
        if marker in text:
            break
        rc, text = attempt()
    return rc, text


def streamed(text: str) -> tuple[list[tuple[str, bool]], tuple[bool, str, str]]:
    """The LogAnalyzer fed 4 KiB chunks, as the watch reads a growing file: its findings and their verdict."""
    findings, verdict = stream(text)
    return [(f.pattern_id, f.fatal) for f in findings], (
        verdict.fatal,
        verdict.category.value,
        verdict.attribution.value,
    )


def assert_healthy(name: str, text: str) -> None:
    r = classify_text(text)
    assert not r.fatal and r.category == "healthy", (
        f"{name}: read {r.category} ({r.pattern_ids}): {r.evidence}"
    )
    findings, _ = streamed(text)
    fatal = [pid for pid, is_fatal in findings if is_fatal]
    assert not fatal, f"{name}: the streaming analyzer found fatal lines in a healthy mpirun log: {fatal}"
    print(f"{len(text.splitlines()):6d} lines read healthy: {name}")


def assert_reads(name: str, text: str, expected: tuple[str, str], first: set[str] | None = None) -> None:
    """Fatal with `expected`, statically and streamed; `first`: the entries one of which must decide."""
    r = classify_text(text)
    assert (r.fatal, r.category, r.attribution) == (True, *expected), f"{name}: {r.pattern_ids}\n{text}"
    if first is not None:
        assert r.pattern_ids[0] in first, f"{name}: decided by {r.pattern_ids[0]} ({r.pattern_ids})\n{text}"
    _, verdict = streamed(text)
    assert verdict == (True, *expected), f"{name}: streamed {verdict}\n{text}"
    print(f"{len(text.splitlines()):6d} lines read {expected}: {name} ({r.pattern_ids})")


SH_RANK = 'echo "rank $OMPI_COMM_WORLD_RANK pid $$"; '


def test_clean_and_verbose_runs_read_healthy() -> None:
    sh = ["/bin/sh", "-c", SH_RANK + "echo rank-finished"]
    rc, text = run(mpirun(*sh))
    assert rc == 0 and text.count("rank-finished") == 4, text
    assert_healthy("mpirun -np 4 sh", text)

    rc, text = run(mpirun(*VERBOSE, *sh))
    assert rc == 0 and text.count("rank-finished") == 4, text
    for marker in ("JOB MAP", "rmaps:base", "odls:launch", "state:base"):
        assert marker in text, f"verbose mpirun printed no {marker!r}:\n{text[-3000:]}"
    assert_healthy("mpirun -v --display-map --report-bindings --mca *_base_verbose sh", text)

    rc, text = run(mpirun(PY, str(MPI_JOB)))
    assert rc == 0 and text.count("allreduce 10") == 4, text
    assert_healthy("mpirun -np 4 MPI program", text)

    rc, text = run(mpirun(*VERBOSE, PY, str(MPI_JOB)))
    assert rc == 0 and text.count("allreduce 10") == 4, text
    for marker in ("btl component tcp", "btl component vader", "pml component ob1", "coll:base"):
        assert marker in text, f"verbose MPI job printed no {marker!r}:\n{text[-3000:]}"
    assert_healthy("mpirun -v ... --mca btl/pml/coll_base_verbose MPI program", text)


def test_rank_exits_non_zero() -> None:
    """mpirun's `Primary job  terminated normally, but 1 process returned a non-zero exit code` and
    (not always: the two race) `mpirun detected that one or more processes exited with non-zero
    status`: wrappers, read python_exception / application, as the table's launcher wrappers (nothing
    else was printed)."""
    rc, text = run(mpirun("/bin/sh", "-c", '[ "$OMPI_COMM_WORLD_RANK" = 2 ] && exit 3; sleep 0.3; echo ok'))
    assert rc == 3 and "returned\na non-zero exit code" in text, text
    assert_reads("rank 2 exit 3", text, APP, {"launcher_teardown", "launcher_nonzero_exit_detected"})


def test_rank_segfaults() -> None:
    """python -c ctypes.string_at(0) in rank 1: `exited on signal 11 (Segmentation fault)`."""
    code = (
        'import os, ctypes, time; os.environ["OMPI_COMM_WORLD_RANK"] == "1" and ctypes.string_at(0); '
        "time.sleep(0.5)"
    )
    rc, text = run(mpirun(PY, "-c", code))
    assert rc == 139 and "exited on signal 11 (Segmentation fault)" in text, (rc, text)
    assert_reads("rank 1 SIGSEGV", text, SEGV, {"mpirun_exited_on_signal"})
    # With faulthandler the rank's own report is printed first and decides.
    rc, text = run(mpirun(PY, "-X", "faulthandler", "-c", code))
    assert rc == 139 and "Segmentation fault" in text and "Current thread" in text, (rc, text)
    assert_reads("rank 1 SIGSEGV, faulthandler", text, SEGV, {"segfault"})
    # --tag-output prefixes each chunk mpirun reads from a rank, not each line: the rank's report may come out
    # as `[1,1]<stderr>:Fatal Python error: [1,1]<stderr>:Segmentation fault` (seen here). Category and
    # attribution hold either way (mpirun's own signal line); which entry decides depends on the split.
    rc, text = run(mpirun("--tag-output", PY, "-X", "faulthandler", "-c", code))
    assert rc == 139 and "[1,1]<stderr>:" in text, (rc, text)
    assert_reads("rank 1 SIGSEGV, faulthandler, --tag-output", text, SEGV)


def test_rank_that_crashes_at_once_names_no_signal() -> None:
    """Observed with Open MPI 4.1.4: a rank that kills itself with SIGSEGV as soon as it starts
    (`kill -SEGV $$` from sh) ends mpirun with 139 but, every time here, WITHOUT the `noticed ... exited on
    signal 11` block: orte/runtime/orte_quit.c prints it only when the job's state is ABORTED_BY_SIG, and
    only the `Primary job ... returned a non-zero exit code` wrapper is left. Nothing in the text names
    the signal, so it reads as the wrapper (python_exception / application); where the block does come
    out it reads segfault."""
    rc, text = run(
        mpirun("/bin/sh", "-c", '[ "$OMPI_COMM_WORLD_RANK" = 1 ] && kill -SEGV $$; sleep 1; echo ok')
    )
    assert rc == 139, (rc, text)
    if "exited on signal 11" in text:
        assert_reads("rank 1 SIGSEGV at once (signal named)", text, SEGV)
    else:
        assert_reads("rank 1 SIGSEGV at once (no signal named)", text, APP, {"launcher_teardown"})


def _kill_rank_from_outside(rank: int, sig: signal.Signals) -> tuple[int, str]:
    proc = start(mpirun("/bin/sh", "-c", SH_RANK + "sleep 5; echo done"))
    assert proc.stdout is not None
    head = b""
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        head += line
        if line.startswith(f"rank {rank} pid ".encode()):
            os.kill(int(line.split()[-1]), sig)
            break
        assert line, head.decode()
    return finish(proc, RUN_TIMEOUT_S, "mpirun", head)


def test_rank_sigkilled_from_outside() -> None:
    """`exited on signal 9 (Killed)` with no OOM evidence: signal_kill / unknown. In one CI run under load
    mpirun reported that kill only as "1 process returned a non-zero exit code" (no signal named): that run
    is not the fault this test reads, so it is run again, up to three times, until mpirun names the signal."""
    rc, text = until_printed(
        "exited on signal 9 (Killed)", lambda: _kill_rank_from_outside(2, signal.SIGKILL)
    )
    assert rc == 137 and "rank 2 with PID" in text and "exited on signal 9 (Killed)" in text, (rc, text)
    assert_reads("rank 2 SIGKILL", text, SIGNAL, {"mpirun_exited_on_signal_kill"})


def test_rank_sigtermed_from_outside() -> None:
    """`exited on signal 15 (Terminated)`: signal_kill / unknown, as srun's `Terminated` (read
    python_exception before this change: mpirun's earlier `Primary job ...` wrapper decided). In one CI run
    under load mpirun printed only that the job was aborted "per user-direction", naming no rank or signal:
    that run is not the fault this test reads, so it is run again, up to three times."""
    rc, text = until_printed(
        "exited on signal 15 (Terminated)", lambda: _kill_rank_from_outside(1, signal.SIGTERM)
    )
    assert rc == 143 and "exited on signal 15 (Terminated)" in text, (rc, text)
    assert_reads("rank 1 SIGTERM", text, SIGNAL, {"mpirun_rank_terminated"})


def test_rank_python_exception() -> None:
    """The rank's own traceback decides over mpirun's wrappers."""
    code = (
        "import os\n"
        "def load(p):\n    return open(p).read()\n"
        'if os.environ["OMPI_COMM_WORLD_RANK"] == "3":\n    load("/nonexistent/ckpt.pt")\n'
    )
    rc, text = run(mpirun(PY, "-c", code))
    assert rc == 1 and "FileNotFoundError: [Errno 2]" in text, (rc, text)
    assert_reads("rank 3 FileNotFoundError", text, APP, {"python_exception_line", "python_exception"})
    # With --timestamp-output --tag-output mpirun prefixes each chunk it reads, so the exception line can come
    # out split, `...<stderr>:FileNotFoundErrorWed Dec  2 04:33:08 2026[1,3]<stderr>:: ...` (seen here): then
    # the traceback has no exception line TrainGuard can read and mpirun's wrapper decides, with the same
    # category and attribution. Listed as not fixed (docs/detection.md "Real Open MPI runs").
    rc, text = run(mpirun("--timestamp-output", "--tag-output", PY, "-c", code))
    assert rc == 1 and "FileNotFoundError" in text and "[1,3]<stderr>:" in text, (rc, text)
    assert_reads("rank 3 FileNotFoundError, --timestamp-output --tag-output", text, APP)


def test_rank_calls_mpi_abort() -> None:
    """Run again (up to three times) when mpirun's event loop fails first (`... Bad file descriptor`, seen
    under load) and the MPI_ABORT help text is never printed: that run is not the fault this test reads."""
    rc, text = until_printed(
        "MPI_ABORT was invoked on rank 2",
        lambda: run(mpirun("-x", "MPI_JOB_ABORT", PY, str(MPI_JOB)), MPI_JOB_ABORT="2"),
    )
    assert rc == 7 and "MPI_ABORT was invoked on rank 2" in text, (rc, text)
    assert_reads("rank 2 MPI_Abort", text, APP, {"mpi_abort_called"})


def test_launch_refused() -> None:
    """More ranks than slots without --oversubscribe, and a missing executable (both read healthy before)."""
    slots = os.cpu_count() or 1
    rc, text = run(mpirun("/bin/true", np=slots + 1, oversubscribe=False))
    assert rc != 0 and "There are not enough slots available" in text, (rc, text)
    assert_reads("not enough slots", text, APP, {"mpirun_start_failed"})
    rc, text = run(mpirun("/nonexistent/train"))
    assert rc != 0 and "could not access" in text, (rc, text)
    assert_reads("executable not found", text, APP, {"mpirun_start_failed"})

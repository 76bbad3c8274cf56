"""What real `mpirun` (Open MPI 4.1.4, Debian 12's openmpi-bin) printed and TrainGuard misread.

tests/e2e/test_real_mpi_logs.py runs real `mpirun --oversubscribe -np 4` jobs and classifies their output; the
outputs below are copied verbatim from those runs (host `vm`; Open MPI 4.1.4 prints `PID 0` for a rank it
launched). Each positive case read differently before this change:

- a rank ended by SIGTERM read python_exception / application: mpirun prints `Primary job  terminated
  normally, but 1 process returned a non-zero exit code.` (launcher_teardown, a priority-1 cascade) BEFORE the
  `exited on signal 15 (Terminated)` line (a priority-1 cascade too), so the earlier, less specific wrapper
  decided. Open MPI's and PRRTE's SIGTERM line is now `mpirun_rank_terminated`, a priority-2 cascade:
  signal_kill / unknown, as srun's `Terminated`; a rank's own evidence printed with it (initiating)
  still decides.
- mpirun refusing to launch (help-orterun.txt [orterun:exe-not-accessible], [orterun:exe-not-found],
  help-orte-rmaps-base.txt [orte-rmaps-base:alloc-error]) read healthy: `mpirun_start_failed` read only
  [orterun:proc-failed-to-start]'s wording.
"""

from __future__ import annotations

import pytest

from tests.unit.catalog_sources import assert_names_source, assert_not_fatal, assert_read_as
from trainguard.detection.classify import classify_text

SIGNAL = ("signal_kill", "unknown")
APP = ("python_exception", "application")
RULE = "-" * 74

PRIMARY = (
    f"{RULE}\nPrimary job  terminated normally, but 1 process returned\n"
    f"a non-zero exit code. Per user-direction, the job has been aborted.\n{RULE}\n"
)

SIGTERM_RUN = (
    "rank 0 pid 2211\nrank 1 pid 2212\nrank 2 pid 2213\nrank 3 pid 2214\n"
    + PRIMARY
    + f"{RULE}\nmpirun noticed that process rank 1 with PID 0 on node vm exited on signal 15 (Terminated).\n"
    + f"{RULE}\n"
)

NO_SLOTS_RUN = f"""{RULE}
There are not enough slots available in the system to satisfy the 4
slots that were requested by the application:

  /bin/true

Either request fewer slots for your application, or make more slots
available for use.

A "slot" is the Open MPI term for an allocatable unit where we can
launch a process.  The number of slots available are defined by the
environment in which Open MPI processes are run:

  1. Hostfile, via "slots=N" clauses (N defaults to number of
     processor cores if not provided)
  2. The --host command line parameter, via a ":N" suffix on the
     hostname (N defaults to 1 if not provided)
  3. Resource manager (e.g., SLURM, PBS/Torque, LSF, etc.)
  4. If none of a hostfile, the --host command line parameter, or an
     RM is present, Open MPI defaults to the number of processor cores

In all the above cases, if you want Open MPI to default to the number
of hardware threads instead of the number of processor cores, use the
--use-hwthread-cpus option.

Alternatively, you can use the --oversubscribe option to ignore the
number of available slots when deciding the number of processes to
launch.
{RULE}
"""

NO_EXE_RUN = f"""{RULE}
mpirun was unable to launch the specified application as it could not access
or execute an executable:

Executable: /nonexistent/train
Node: vm

while attempting to start process rank 0.
{RULE}
4 total processes failed to start
"""

# help-orterun.txt [orterun:exe-not-found] and [orterun:wdir-not-found], filled in (Open MPI 4.1.4).
EXE_NOT_FOUND = (
    "mpirun was unable to find the specified executable file, and therefore\n"
    "did not launch the job.  This error was first reported for process\n"
    "rank 0; it may have occurred for other processes as well.\n"
)
WDIR_NOT_FOUND = (
    "mpirun was unable to launch the specified application as it could not\n"
    "change to the specified working directory:\n\nWorking directory: /scratch/run7\nNode: vm\n"
)

CASES = [
    (SIGTERM_RUN, SIGNAL, "mpirun_rank_terminated"),
    (NO_SLOTS_RUN, APP, "mpirun_start_failed"),
    (NO_EXE_RUN, APP, "mpirun_start_failed"),
    (EXE_NOT_FOUND, APP, "mpirun_start_failed"),
    (WDIR_NOT_FOUND, APP, "mpirun_start_failed"),
]


@pytest.mark.parametrize(("text", "expected", "entry"), CASES)
def test_real_mpirun_output_reads_as_its_table_row(text: str, expected: tuple[str, str], entry: str) -> None:
    assert_read_as(text, expected, entry)


def test_a_ranks_own_evidence_still_decides_over_the_sigterm_line() -> None:
    """The SIGTERM line is a cascade: a rank's traceback printed before it is initiating and decides."""
    tb = (
        "Traceback (most recent call last):\n"
        '  File "train.py", line 3, in <module>\n'
        "FileNotFoundError: [Errno 2] No such file or directory: '/nonexistent/ckpt.pt'\n"
    )
    r = classify_text(tb + SIGTERM_RUN)
    assert (r.fatal, r.category, r.attribution) == (True, *APP), r.pattern_ids
    assert r.pattern_ids[0] == "python_exception_line", r.pattern_ids


def test_other_signals_still_decide_as_before() -> None:
    """SIGKILL (signal_kill, non-cascade) and SIGSEGV (segfault) decide over the wrapper, as before."""
    kill = PRIMARY + "mpirun noticed that process rank 2 with PID 0 on node vm exited on signal 9 (Killed).\n"
    segv = (
        PRIMARY
        + "mpirun noticed that process rank 1 with PID 0 on node vm exited on signal 11 "
        + "(Segmentation fault).\n"
    )
    assert_read_as(kill, SIGNAL, "mpirun_exited_on_signal_kill")
    assert_read_as(segv, ("segfault", "system_software"), "mpirun_exited_on_signal")


@pytest.mark.parametrize(
    "text",
    [
        # the slots help text's advice, and mpirun's option help, without the refusal
        "Either request fewer slots for your application, or make more slots\navailable for use.\n",
        "Alternatively, you can use the --oversubscribe option to ignore the\nnumber of available slots",
        # a rank's healthy report of its binding under --report-bindings
        "[vm:01528] MCW rank 2 is not bound (or bound to all available processors)\n",
    ],
)
def test_look_alikes_are_not_fatal(text: str) -> None:
    assert_not_fatal(text)


@pytest.mark.parametrize(
    "entry", ["mpirun_rank_terminated", "launcher_rank_terminated", "mpirun_start_failed"]
)
def test_changed_entries_name_their_source(entry: str) -> None:
    assert_names_source(entry)

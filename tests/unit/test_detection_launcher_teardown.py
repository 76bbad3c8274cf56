"""Launcher teardown lines (docs/detection.md, "Launcher teardown lines, from their sources").

A launcher that kills the job's other processes once one ended says so in a line the catalog marks
`tears_down`; one generic rule (attribution.rules.teardown_kills_as_cascades) reads the signal kills
printed after it as its teardown, so the first failure decides, not the loudest kill. Each case is the
launchers' format strings with their conversions filled in. FIRST_FAILURE_DECIDES read signal_kill on
main (the teardown's kills decided); OUTSIDE_KILL_STILL_DECIDES pins a kill from outside the launcher (the
OOM killer, an operator) that ended the first process, reported before the teardown line or by it, still
read as that kill.
"""

from __future__ import annotations

import pytest

from tests.unit.catalog_sources import assert_names_source, assert_not_fatal
from trainguard.attribution.rules import teardown_kills_as_cascades
from trainguard.detection.analyzer import LogAnalyzer
from trainguard.detection.catalog import CatalogError, load_catalog, parse_catalog
from trainguard.detection.classify import classify_bytes, classify_text
from trainguard.models import Category, Finding

APP_EXIT = ("python_exception", "application")
CRASH = ("segfault", "system_software")
KILL = ("signal_kill", "unknown")
HOST_OOM = ("killed_oom_host", "application")

# The other ranks' ends, as the launchers and shells around them print them
SRUN_KILLED = "srun: error: node2: tasks 4-7: Killed\n"
SHELL_KILLED = (
    "/var/spool/slurmd/job1234/slurm_script: line 20: 4242 Killed                  python train.py\n"
)
KERNEL_OOM = (
    "[Mon Jan  1 10:00:00 2024] Out of memory: Killed process 4242 (python) total-vm:1000kB, anon-rss:900kB\n"
)


def lightning(code: int) -> str:
    """src/lightning/fabric/strategies/launchers/subprocess_script.py, _ChildProcessObserver."""
    return (
        f"[rank: 1] Child process with PID 2977 terminated with code {code}. Forcefully terminating all "
        "other processes to avoid zombies 🧟\n"
    )


def torch_first_failure(code: int) -> str:
    """torch/distributed/elastic/multiprocessing/api.py, SubprocessContext._poll (after close())."""
    return (
        "E1202 04:31:35.635000 6312 torch/distributed/elastic/multiprocessing/"
        f"api.py:1002] failed (exitcode: {code}) local_rank: 1 (pid: 6870) of binary: /venv/bin/python\n"
    )


def torch_closing() -> str:
    """torch/distributed/elastic/multiprocessing/api.py, SubprocessContext._close."""
    return (
        "W1202 04:31:35.457000 6312 torch/distributed/elastic/multiprocessing/api.py:1028] Sending process "
        "6869 closing signal SIGTERM\n"
        "W1202 04:32:05.460000 6312 torch/distributed/elastic/multiprocessing/api.py:1047] Unable to "
        "shutdown process 6869 via Signals.SIGTERM, forcefully exiting via Signals.SIGKILL\n"
    )


def torch_table(first_code: int) -> str:
    """torch/distributed/elastic/multiprocessing/errors/__init__.py, ChildFailedError.format_msg: the other
    workers' ends (recorded after close(), api.py _poll) under Failures, then the first one's."""
    return (
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
        "============================================================\n"
        "train.py FAILED\n"
        "------------------------------------------------------------\n"
        "Failures:\n"
        "[1]:\n"
        "  time      : 2024-01-01_10:00:31\n"
        "  host      : node1\n"
        "  rank      : 0 (local_rank: 0)\n"
        "  exitcode  : -9 (pid: 6869)\n"
        "  error_file: <N/A>\n"
        "  traceback : Signal 9 (SIGKILL) received by PID 6869\n"
        "------------------------------------------------------------\n"
        "Root Cause (first observed failure):\n"
        "[0]:\n"
        "  time      : 2024-01-01_10:00:00\n"
        "  host      : node1\n"
        "  rank      : 1 (local_rank: 1)\n"
        f"  exitcode  : {first_code} (pid: 6870)\n"
        "  error_file: <N/A>\n"
        "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html\n"
        "============================================================\n"
    )


def deepspeed(code: int) -> str:
    """deepspeed/launcher/launch.py, main -> sigkill_handler: all ranks killed, then the first failed code."""
    return (
        "[2024-01-01 10:00:00,000] [INFO] [launch.py:319:sigkill_handler] Killing subprocess 12345\n"
        "[2024-01-01 10:00:00,001] [INFO] [launch.py:319:sigkill_handler] Killing subprocess 12346\n"
        "[2024-01-01 10:00:00,002] [ERROR] [launch.py:321:sigkill_handler] ['python', '-u', 'train.py', "
        f"'--local_rank=1'] exits with return code = {code}\n"
    )


def srun_first(end: str) -> str:
    """src/srun/launch.c, _task_finish: the first abnormal end, then _step_signal's `Terminating %ps`."""
    return f"srun: error: node1: task 3: {end}\nsrun: Terminating StepId=1234.0\n"


HOROVOD = (
    # horovod/runner/gloo_run.py, _exec_command
    "Process 1 exit with status code 1.\nTerminating remaining workers after failure of Process 1.\n"
)
MPI_ABORT = (
    # ompi/mpi/help-mpi-api.txt [mpi-abort]
    "--------------------------------------------------------------------------\n"
    "MPI_ABORT was invoked on rank 3 in communicator MPI_COMM_WORLD\n"
    "with errorcode 1.\n\n"
    "NOTE: invoking MPI_ABORT causes Open MPI to kill all MPI processes.\n"
    "You may or may not see output from other processes, depending on\n"
    "exactly when Open MPI kills them.\n"
    "--------------------------------------------------------------------------\n"
)
TB = 'Traceback (most recent call last):\n  File "train.py", line 42, in <module>\n    main()\n'

# (launcher, text, expected): rank K's own end first, then the teardown line, then the others' kills
FIRST_FAILURE_DECIDES = [
    ("torchrun exit 1", torch_closing() + torch_first_failure(1) + torch_table(1), APP_EXIT),
    ("torchrun abort", torch_closing() + torch_first_failure(-6) + torch_table(-6), CRASH),
    ("torchrun exit 1, srun", torch_closing() + torch_first_failure(1) + SRUN_KILLED, APP_EXIT),
    ("deepspeed exit 1", deepspeed(1) + SRUN_KILLED, APP_EXIT),
    ("deepspeed abort", deepspeed(-6) + SHELL_KILLED, CRASH),
    ("srun --kill-on-bad-exit exit 1", srun_first("Exited with exit code 1") + SRUN_KILLED, APP_EXIT),
    (
        "srun --kill-on-bad-exit, slurmstepd",
        srun_first("Exited with exit code 1")
        + "slurmstepd: error: *** STEP 1234.0 ON node2 CANCELLED AT 2024-01-01T10:00:00 ***\n"
        + SRUN_KILLED,
        APP_EXIT,
    ),
    ("horovodrun gloo", HOROVOD + SRUN_KILLED, APP_EXIT),
    ("MPI_ABORT", MPI_ABORT + SRUN_KILLED, APP_EXIT),
]

# Read right before and after: rank K's own error is specific, or a kill from outside ended it
ALREADY_READ = [
    (
        "lightning, a rank's traceback",
        TB + "ValueError: bad shapes\n" + lightning(1) + SHELL_KILLED,
        APP_EXIT,
    ),
    (
        "srun, a rank's traceback",
        TB + "ValueError: bad shapes\n" + srun_first("Exited with exit code 1") + SRUN_KILLED,
        APP_EXIT,
    ),
]

# (launcher, text, expected): the first process was killed from outside the launcher
OUTSIDE_KILL_STILL_DECIDES = [
    ("lightning -9", lightning(-9) + SHELL_KILLED, KILL),
    ("lightning, kill before", SRUN_KILLED + lightning(1), KILL),
    ("torchrun -9", torch_closing() + torch_first_failure(-9) + torch_table(-9), KILL),
    ("torchrun -15", torch_closing() + torch_first_failure(-15) + SRUN_KILLED, KILL),
    (
        "torchrun, OOM killer",
        KERNEL_OOM + torch_closing() + torch_first_failure(-9) + torch_table(-9),
        HOST_OOM,
    ),
    ("deepspeed -9", deepspeed(-9) + SRUN_KILLED, KILL),
    (
        "deepspeed, launcher signalled",
        "[2024-01-01 10:00:00,000] [INFO] [launch.py:319:sigkill_handler] Killing subprocess 12345\n"
        "[2024-01-01 10:00:00,001] [INFO] [launch.py:314:sigkill_handler] Main process received SIGINT, "
        "exiting\n",
        KILL,
    ),
    ("srun, task killed", srun_first("Killed") + SRUN_KILLED, KILL),
    ("srun, OOM killer", KERNEL_OOM + srun_first("Killed") + SRUN_KILLED, HOST_OOM),
    ("horovodrun, OOM killer", KERNEL_OOM + HOROVOD + SRUN_KILLED, HOST_OOM),
    ("MPI_ABORT, kill before", "srun: error: node1: task 3: Killed\n" + MPI_ABORT + SRUN_KILLED, KILL),
]

TEARDOWN_ENTRIES = (
    "sigkill",
    "elastic_child_crash_signal",
    "launcher_child_segv",
    "elastic_child_failed",
    "elastic_first_failure_sigterm",
    "deepspeed_launcher_child_crash_signal",
    "launcher_nonzero_exit_detected",
    "mpi_abort_called",
    "srun_kill_on_bad_exit",
)


def _findings(text: str) -> list[Finding]:
    analyzer = LogAnalyzer()
    return analyzer.feed(text.encode(), now=0.0) + analyzer.flush(now=0.0)


def _read(text: str) -> tuple[bool, str, str]:
    r = classify_text(text)
    return r.fatal, r.category, r.attribution


@pytest.mark.parametrize(
    ("name", "text", "expected"), FIRST_FAILURE_DECIDES, ids=[c[0] for c in FIRST_FAILURE_DECIDES]
)
def test_the_first_failure_decides_not_the_teardown_s_kills(
    name: str, text: str, expected: tuple[str, str]
) -> None:
    assert _read(text) == (True, *expected), name
    findings = _findings(text)
    teardown = min(i for i, f in enumerate(findings) if f.tears_down)
    after = teardown_kills_as_cascades(findings, [f for f in findings if f.fatal])
    kills = [
        f
        for f in after
        if f.category == Category.SIGNAL_KILL and (f.line_no or 0) > findings[teardown].line_no
    ]
    assert kills and all(f.cascade for f in kills), [(f.pattern_id, f.cascade) for f in kills]


@pytest.mark.parametrize(("name", "text", "expected"), ALREADY_READ, ids=[c[0] for c in ALREADY_READ])
def test_a_specific_first_error_still_decides(name: str, text: str, expected: tuple[str, str]) -> None:
    assert _read(text) == (True, *expected), name


@pytest.mark.parametrize(
    ("name", "text", "expected"), OUTSIDE_KILL_STILL_DECIDES, ids=[c[0] for c in OUTSIDE_KILL_STILL_DECIDES]
)
def test_a_kill_from_outside_is_still_that_kill(name: str, text: str, expected: tuple[str, str]) -> None:
    assert _read(text) == (True, *expected), name


def test_a_teardown_line_alone_decides_nothing() -> None:
    assert_not_fatal("srun: Terminating StepId=1234.0\n")
    # torchelastic's closing lines precede its first-failure line, which reports the first process: not marked
    assert_not_fatal(torch_closing())
    assert not any(f.tears_down for f in _findings(torch_closing()))
    assert_names_source("elastic_close_escalated_to_sigkill")


@pytest.mark.parametrize("sig_id", TEARDOWN_ENTRIES)
def test_every_teardown_entry_marks_one_of_its_examples_and_names_its_source(sig_id: str) -> None:
    sig = load_catalog().get(sig_id)
    assert sig is not None and sig.teardown is not None, sig_id
    assert any(sig.tears_down(e) for e in sig.examples), sig_id
    assert_names_source(sig_id)


def test_the_catalog_marks_exactly_these_entries() -> None:
    assert {s.id for s in load_catalog().signatures if s.teardown is not None} == set(TEARDOWN_ENTRIES)


def test_a_narrowed_entry_marks_only_the_teardown_printer_s_lines() -> None:
    sig = load_catalog().get("sigkill")
    assert sig is not None
    assert sig.tears_down(lightning(-9)) and sig.tears_down(torch_first_failure(-9))
    assert not sig.tears_down("srun: error: gpu-02: task 5: Killed")
    assert not sig.tears_down("  exitcode  : -9 (pid: 6869)")


_OPERATOR_CATALOG = """
version: 1
signatures:
  - id: my_launcher_teardown
    keywords: ["[my-launcher] rank"]
    regex: '\\[my-launcher\\] rank [0-9]+ failed with code [0-9]+, stopping the others'
    category: python_exception
    attribution: application
    cascade: true
    priority: 1
    tears_down: true
  - id: killed
    keywords: ["Killed"]
    regex: 'tasks? [0-9,-]+: Killed'
    category: signal_kill
    attribution: unknown
    priority: 1
"""


def test_any_launcher_s_teardown_line_is_data() -> None:
    # An operator's catalog marks its own launcher's line: the same rule reads it, no code.
    catalog = parse_catalog(_OPERATOR_CATALOG)
    text = "[my-launcher] rank 3 failed with code 1, stopping the others\n" + SRUN_KILLED
    r = classify_bytes(text.encode(), catalog=catalog)
    assert (r.fatal, r.category, r.attribution) == (True, *APP_EXIT), r.pattern_ids
    plain = parse_catalog(_OPERATOR_CATALOG.replace("    tears_down: true\n", ""))
    assert classify_bytes(text.encode(), catalog=plain).category == "signal_kill"


@pytest.mark.parametrize(
    ("field", "message"),
    [
        ("    tears_down: '(unclosed'\n", "bad tears_down regex"),
        ("    tears_down: 3\n", "tears_down must be"),
        ("    fatal: false\n    tears_down: true\n", "must be evidence"),
    ],
)
def test_tears_down_is_checked_when_the_catalog_loads(field: str, message: str) -> None:
    text = _OPERATOR_CATALOG.replace("    tears_down: true\n", field)
    with pytest.raises(CatalogError, match=message):
        parse_catalog(text)

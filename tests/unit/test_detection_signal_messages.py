"""Signal and OOM-kill messages, derived from their sources (issue 12 section 1, "generalise").

Instead of fitting excerpt lines, the messages that say a process was killed by a signal or by the OOM
killer, as the programs between the kernel and the log print them, were read out of those programs' source
and mapped to TrainGuard's categories (docs/detection.md, "Signal and OOM-kill messages, from their
sources"): bash (jobs.c, siglist.c), zsh (Src/signames2.awk), GNU time (time.c), coreutils timeout
(src/timeout.c), the Linux kernel (mm/oom_kill.c, arch/x86/kernel/traps.c), systemd (src/core/service.c,
src/core/unit.c, src/oom/oomd-manager.c), runc (libcontainer/process_linux.go), moby (the container state's
`OOMKilled`), CPython (Lib/concurrent/futures/process.py) and joblib's loky (process_executor.py). Each
positive case below is the source's format string with its conversions filled in; each read healthy or as
another entry on the code before this change, except `"OOMKilled": true`, kept as the positive of the
extended entry. The look-alikes are lines a job survives, or prose.
"""

from __future__ import annotations

import pytest

from tests.unit.catalog_sources import assert_names_source, assert_not_fatal, assert_read_as
from trainguard.detection.classify import classify_text

# Entries added from the printers' sources, and the entry this change extended (each comment names the file).
ADDED = (
    "shell_job_crash_signal",
    "shell_job_terminated",
    "shell_job_other_signal",
    "kernel_user_trap",
    "systemd_main_process_signal",
    "systemd_main_process_killed",
    "python_pool_worker_terminated",
    "oom_kill_other_printers",
)
EXTENDED = ("host_oom_killer",)

SIGNAL = ("signal_kill", "unknown")
CRASH = ("segfault", "system_software")
OOM = ("killed_oom_host", "application")

SCRIPT = "/var/spool/slurmd/job12345/slurm_script: line 25: 424242 "

# (text, expected category/attribution, deciding entry)
MESSAGES = [
    # bash jobs.c (notify_of_job_status, pretty_print_job) with siglist.c's strsignal texts
    (f"{SCRIPT}Aborted                 python train.py", CRASH, "shell_job_crash_signal"),
    (f"{SCRIPT}Illegal instruction     python train.py", CRASH, "shell_job_crash_signal"),
    (f"{SCRIPT}Floating point exception python train.py", CRASH, "shell_job_crash_signal"),
    (f"{SCRIPT}Trace/breakpoint trap   python train.py", CRASH, "shell_job_crash_signal"),
    ("Illegal instruction", CRASH, "shell_job_crash_signal"),
    ("Floating point exception", CRASH, "shell_job_crash_signal"),
    (f"{SCRIPT}Terminated              python train.py", SIGNAL, "shell_job_terminated"),
    ("Terminated", SIGNAL, "shell_job_terminated"),
    (f"{SCRIPT}Hangup                  python train.py", SIGNAL, "shell_job_other_signal"),
    (f"{SCRIPT}User defined signal 1   python train.py", SIGNAL, "shell_job_other_signal"),
    (f"{SCRIPT}CPU time limit exceeded python train.py", SIGNAL, "shell_job_other_signal"),
    ("[1]+  Killed                  python train.py", SIGNAL, "shell_job_other_signal"),
    # zsh Src/signames2.awk (jobs.c printjob)
    ("zsh: killed     python train.py", SIGNAL, "shell_job_other_signal"),
    ("zsh: abort      python train.py", CRASH, "shell_job_crash_signal"),
    ("zsh: illegal hardware instruction  python train.py", CRASH, "shell_job_crash_signal"),
    ("zsh: floating point exception  python train.py", CRASH, "shell_job_crash_signal"),
    ("zsh: terminated  python train.py", SIGNAL, "shell_job_terminated"),
    # GNU time, time.c; coreutils src/timeout.c
    ("Command terminated by signal 6", CRASH, "shell_job_crash_signal"),
    ("Command terminated by signal 4", CRASH, "shell_job_crash_signal"),
    ("Command terminated by signal 15", SIGNAL, "shell_job_terminated"),
    ("Command terminated by signal 1", SIGNAL, "shell_job_other_signal"),
    ("Command exited with non-zero status 137", SIGNAL, "shell_job_other_signal"),
    ("timeout: the monitored command dumped core", CRASH, "shell_job_crash_signal"),
    # Linux arch/x86/kernel/traps.c (show_signal, exc_general_protection)
    (
        "traps: python[4242] trap invalid opcode ip:7f1234567890 sp:7ffd12345678 error:0 in "
        "libtorch_cpu.so[7f1200000000+1000000]",
        CRASH,
        "kernel_user_trap",
    ),
    (
        "traps: python[4242] trap divide error ip:7f1234567890 sp:7ffd12345678 error:0 in "
        "libfoo.so[7f12+1000]",
        CRASH,
        "kernel_user_trap",
    ),
    (
        "[ 1234.567890] traps: python[4242] general protection fault ip:7f1234567890 sp:7ffd12345678 error:0 "
        "in libc.so.6[7f1200000000+1000000]",
        CRASH,
        "kernel_user_trap",
    ),
    # systemd src/core/service.c (service_sigchld_event, service_result_to_string)
    ("train.service: Main process exited, code=killed, status=9/KILL", SIGNAL, "systemd_main_process_killed"),
    ("train.service: Main process exited, code=dumped, status=11/SEGV", CRASH, "systemd_main_process_signal"),
    ("train.service: Main process exited, code=killed, status=6/ABRT", CRASH, "systemd_main_process_signal"),
    ("train.service: Failed with result 'core-dump'.", CRASH, "systemd_main_process_signal"),
    # CPython Lib/concurrent/futures/process.py; joblib/externals/loky/process_executor.py
    (
        'Traceback (most recent call last):\n  File "prep.py", line 3, in <module>\n    f.result()\n'
        "concurrent.futures.process.BrokenProcessPool: A process in the process pool was terminated abruptly "
        "while the future was running or pending.",
        SIGNAL,
        "python_pool_worker_terminated",
    ),
    (
        "concurrent.futures.process.BrokenProcessPool: A child process terminated abruptly, the process pool "
        "is not usable anymore",
        SIGNAL,
        "python_pool_worker_terminated",
    ),
    (
        "joblib.externals.loky.process_executor.TerminatedWorkerError: A worker process managed by the "
        "executor was unexpectedly terminated. This could be caused by a segmentation fault while calling "
        "the function or by an excessive memory usage causing the Operating System to kill the worker.",
        SIGNAL,
        "python_pool_worker_terminated",
    ),
    # Linux mm/oom_kill.c; systemd src/core/unit.c, src/oom/oomd-manager.c; runc libcontainer/process_linux.go
    (
        "[ 1234.567890] Killed process 4242 (python) total-vm:123456kB, anon-rss:1234kB, file-rss:0kB",
        OOM,
        "oom_kill_other_printers",
    ),
    (
        "Kernel panic - not syncing: Out of memory and no killable processes...",
        OOM,
        "oom_kill_other_printers",
    ),
    (
        "Kernel panic - not syncing: Out of memory: system-wide panic_on_oom is enabled",
        OOM,
        "oom_kill_other_printers",
    ),
    (
        "systemd[1]: train.service: A process of this unit has been killed by the OOM killer.",
        OOM,
        "oom_kill_other_printers",
    ),
    (
        "systemd-oomd[812]: Killed /user.slice/user-1000.slice/session-3.scope due to memory pressure for "
        "/user.slice/user-1000.slice being 80.51% > 50.00% for > 20s with reclaim activity",
        OOM,
        "oom_kill_other_printers",
    ),
    ("container init was OOM-killed (memory limit too low?)", OOM, "oom_kill_other_printers"),
    ('        "OOMKilled": true,', OOM, "host_oom_killer"),
]


@pytest.mark.parametrize(("text", "expected", "entry"), MESSAGES, ids=[m[0][:60] for m in MESSAGES])
def test_signal_or_oom_kill_message_is_read(text: str, expected: tuple[str, str], entry: str) -> None:
    assert_read_as(text + "\n", expected, entry)


def test_every_added_entry_is_exercised_here() -> None:
    assert {m[2] for m in MESSAGES} >= set(ADDED + EXTENDED)


def test_an_oom_kill_with_the_unit_s_sigkill_reads_oom() -> None:
    # systemd prints both; the OOM killer's own report (priority 3) decides, not the SIGKILL it sent
    r = classify_text(
        "train.service: A process of this unit has been killed by the OOM killer.\n"
        "train.service: Main process exited, code=killed, status=9/KILL\n"
        "train.service: Failed with result 'oom-kill'.\n"
    )
    assert (r.fatal, r.category) == (True, "killed_oom_host")


@pytest.mark.parametrize(
    "text",
    [
        # docker inspect prints the field for every container (moby's container state)
        '        "OOMKilled": false,\n',
        # a kernel-mode #GP is an oops (arch/x86/kernel/traps.c die_addr), not a user process's crash
        "general protection fault, probably for non-canonical address 0xdead000000000100: 0000 [#1] SMP "
        "NOPTI\n",
        # systemd: a clean exit, and SIGTERM, which systemd counts as clean by default (logged at debug)
        "train.service: Main process exited, code=exited, status=0/SUCCESS\n",
        "train.service: Main process exited, code=killed, status=15/TERM\n",
        # timeout's verbose note and a command that finished within its time; GNU time's ordinary exit code
        "timeout: sending signal TERM to command 'python'\n",
        "Command exited with non-zero status 1\n",
        "Command terminated by signal 61 seconds ago\n",
        # prose
        "The process was killed by the OOM killer\n",
        "We found that Killed is shown when the OOM killer runs\n",
        "The run Aborted by user request\n",
        "Terminated the old server at 10:00\n",
        "zsh: command not found: python\n",
        "The worker terminated abruptly but was restarted\n",
    ],
)
def test_look_alikes_are_not_fatal(text: str) -> None:
    assert_not_fatal(text)


@pytest.mark.parametrize("sig_id", ADDED + EXTENDED)
def test_every_entry_names_its_source_file(sig_id: str) -> None:
    assert_names_source(sig_id)

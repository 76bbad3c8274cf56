"""Hangs and stalls that a static log shows: messages derived from their sources (issue 12 section 1,
"generalise, don't memorise").

Instead of fitting excerpt lines, the messages that the programs watching a training job for a hang print
when they give up on it were read out of their source and mapped to TrainGuard's categories
(docs/detection.md, "Hang and stall messages, from their sources"): PyTorch's ProcessGroupNCCL heartbeat
monitor and blocking wait (pytorch/pytorch torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp,
heartbeatMonitor, getNCCLWatchdogTimeoutExitMsg, WorkNCCL::synchronize), its non-blocking communicator
timeout (torch/csrc/distributed/c10d/NCCLUtils.hpp), torchelastic's expiration timers (pytorch/pytorch
01c9f4fc torch/distributed/elastic/timer/file_based_local_timer.py, timer/api.py), CPython's faulthandler
(python/cpython e3bf4254 Modules/faulthandler.c, format_timeout) and the kernel's RCU stall warnings
(torvalds/linux kernel/rcu/tree_stall.h). Each positive case in MESSAGES is the source's format string with
its conversions filled in; each read differently on the code before this change (6 healthy, the 3 raised
into a traceback as the generic nccl_error_generic). faulthandler's timed dump and RCU's stall warnings are
recorded, not fatal (the job goes on after either); those tests fail before too (no entry matched them).
ALREADY_READ pins what the catalog read before (the hung-task report, py-spy's dump, the store and rendezvous
timeouts, the watchdog's own messages). The look-alikes are messages a job survives (a disabled monitor's
note, a timer with no signal, a faulthandler thread header alone, the kernel's lockup and stall warnings,
information lines).
"""

from __future__ import annotations

import pytest

from tests.unit.catalog_sources import assert_names_source, assert_not_fatal, assert_read_as
from trainguard.detection.catalog import load_catalog
from trainguard.detection.classify import classify_text
from trainguard.detection.normalize import normalize

ADDED = (
    "elastic_timer_reaped",
    "nccl_nonblocking_timeout",
)
EXTENDED = (
    "nccl_heartbeat_stuck",
    "nccl_teardown",
    "nccl_watchdog_timeout",
)
# Added or extended with non-fatal texts only (recorded, never deciding).
RECORDED = ("faulthandler_timeout_dump", "kernel_cpu_lockup")

TIMEOUT = ("nccl_timeout", "system_software")
HANG = ("hang", "application")

TB = 'Traceback (most recent call last):\n  File "train.py", line 42, in <module>\n    main()\n'
PG = "[PG ID 0 PG GUID 0(default_pg) Rank 2] "
FRAMES = (
    "Thread 0x00007f0c3a5fe700 (most recent call first):\n"
    '  File "/usr/lib/python3.10/threading.py", line 320 in wait\n'
    "Thread 0x00007f0c4b2a1740 (most recent call first):\n"
    '  File "/usr/lib/python3.10/site-packages/torch/distributed/distributed_c10d.py", line 2050 in '
    "all_reduce\n"
    '  File "train.py", line 88 in train_step'
)

# (text, expected category/attribution, deciding entry)
MESSAGES = [
    # ProcessGroupNCCL.cpp heartbeatMonitor -> terminateProcess(getNCCLWatchdogTimeoutExitMsg(exitReason)),
    # LOG(FATAL); the message carries logPrefix() twice (once from the glog line, once from the helper)
    (
        f"[rank2]:[F919 07:00:13.418192812 ProcessGroupNCCL.cpp:1653] {PG}{PG}Terminating the process after "
        "attempting to dump debug info, due to ProcessGroupNCCL watchdog hang.",
        TIMEOUT,
        "nccl_heartbeat_stuck",
    ),
    (
        f"[rank2]:[F710 18:08:32.707469047 ProcessGroupNCCL.cpp:1725] {PG}{PG}Terminating the process after "
        "attempting to dump debug info, due to collective timeout or exception.",
        TIMEOUT,
        "nccl_teardown",
    ),
    # ProcessGroupNCCL.cpp WorkNCCL::synchronize with blocking wait (newer and older wordings)
    (
        TB + f"torch.distributed.DistBackendError: {PG}Work WorkNCCL(SeqNum=12, OpType=ALLREDUCE, "
        "NumelIn=1, NumelOut=1, Timeout(ms)=60000) timed out in blocking wait.",
        TIMEOUT,
        "nccl_watchdog_timeout",
    ),
    (
        "[E ProcessGroupNCCL.cpp:566] [Rank 1] Work WorkNCCL(SeqNum=12, OpType=ALLREDUCE, Timeout(ms)=60000) "
        "timed out in blocking wait (TORCH_NCCL_BLOCKING_WAIT=1).",
        TIMEOUT,
        "nccl_watchdog_timeout",
    ),
    # NCCLUtils.hpp C10D_NCCL_CHECK_TIMEOUT_BASE / C10D_CHECK_TIMEOUT (DistBackendError)
    (
        TB + "torch.distributed.DistBackendError: NCCL timeout in: "
        "../torch/csrc/distributed/c10d/NCCLUtils.cpp:75, NCCL operation in progress, NCCL version 2.21.5",
        TIMEOUT,
        "nccl_nonblocking_timeout",
    ),
    (
        TB + "torch.distributed.DistBackendError: NCCL timeout in: "
        "/opt/pytorch/torch/csrc/distributed/c10d/NCCLUtils.hpp:341",
        TIMEOUT,
        "nccl_nonblocking_timeout",
    ),
    # torch/distributed/elastic/timer/file_based_local_timer.py FileTimerServer._run_watchdog
    (
        "INFO:torch.distributed.elastic.timer.file_based_local_timer:Reaping worker_pid=[4242]. Expired "
        "timers: ['train_step']\n"
        "INFO:torch.distributed.elastic.timer.file_based_local_timer:Successfully reaped worker=[4242] with "
        "signal=9",
        HANG,
        "elastic_timer_reaped",
    ),
    (
        "INFO:torch.distributed.elastic.timer.file_based_local_timer:Terminating the server process=[4100] "
        "because of expired timers",
        HANG,
        "elastic_timer_reaped",
    ),
    # torch/distributed/elastic/timer/api.py TimerServer._run_watchdog (local_timer.py: SIGKILL)
    (
        "INFO:torch.distributed.elastic.timer.api:Reaping worker_id=[4242]. Expired timers: ['step']\n"
        "INFO:torch.distributed.elastic.timer.api:Successfully reaped worker=[4242]",
        HANG,
        "elastic_timer_reaped",
    ),
]

# Read before this change (kept as they were).
ALREADY_READ = [
    # kernel/hung_task.c check_hung_task
    (
        "[Sat Mar  4 04:10:52 2023] INFO: task python:280058 blocked for more than 120 seconds.",
        HANG,
        "kernel_hung_task",
    ),
    # py-spy src/dump.rs print_traces
    (
        "Process 4242: python train.py\nPython v3.10.12 (/usr/bin/python3.10)\n\n"
        'Thread 0x7F2A4B1F2740 (active+gil): "MainThread"\n'
        "    all_reduce (torch/distributed/distributed_c10d.py:2050)",
        HANG,
        "hang_stated",
    ),
    # ProcessGroupNCCL.cpp heartbeatMonitor (older and newer error messages)
    (
        "[rank0]:[E ProcessGroupNCCL.cpp:1316] [PG 0 Rank 0] Heartbeat monitor timed out! Process will be "
        "terminated after dumping debug info. workMetaList_.size()=1",
        TIMEOUT,
        "nccl_heartbeat_stuck",
    ),
    (
        f"[rank3]:[E1229 20:29:13.156284896 ProcessGroupNCCL.cpp:1484] {PG}ProcessGroupNCCL's watchdog got "
        "stuck for 480 seconds without making progress in monitoring enqueued collectives.",
        TIMEOUT,
        "nccl_heartbeat_stuck",
    ),
    (
        f"[rank1]:[E ProcessGroupNCCL.cpp:1294] {PG}Received a global timeout from another rank and will "
        "start to dump the debug info.",
        TIMEOUT,
        "nccl_watchdog_work_timeout",
    ),
    # torch/csrc/distributed/c10d/TCPStore.cpp; distributed_c10d.py _store_based_barrier
    (
        TB + "torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. 1/2 clients "
        "joined.",
        TIMEOUT,
        "store_barrier_timeout",
    ),
    (
        TB + "torch.distributed.DistStoreError: Timed out initializing process group in store based barrier "
        "on rank 3, for key: store_based_barrier_key:1 (world_size=8, num_workers_joined=4, timeout=0:30:00)",
        TIMEOUT,
        "store_barrier_timeout",
    ),
    # torch/distributed/elastic/rendezvous/dynamic_rendezvous.py
    (
        TB + "torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError",
        TIMEOUT,
        "rendezvous_timeout",
    ),
]


@pytest.mark.parametrize(("text", "expected", "entry"), MESSAGES, ids=[m[0][-60:] for m in MESSAGES])
def test_hang_message_is_read(text: str, expected: tuple[str, str], entry: str) -> None:
    assert_read_as(text + "\n", expected, entry)


@pytest.mark.parametrize(("text", "expected", "entry"), ALREADY_READ, ids=[m[0][-60:] for m in ALREADY_READ])
def test_messages_read_before_still_read(text: str, expected: tuple[str, str], entry: str) -> None:
    assert_read_as(text + "\n", expected, entry)


def test_every_added_entry_is_exercised_here() -> None:
    assert {m[2] for m in MESSAGES} >= set(ADDED + EXTENDED)


@pytest.mark.parametrize(
    "line",
    [
        # Modules/faulthandler.c format_timeout (with and without microseconds), also behind a rank prefix
        "Timeout (0:05:00)!",
        "Timeout (0:00:30.500000)!",
        "[rank0]:Timeout (1:00:00)!",
    ],
)
def test_faulthandler_timeout_is_recorded_as_a_hang_not_fatal(line: str) -> None:
    found = load_catalog().match_line(normalize(line).text)
    assert found is not None and found.signature.id == "faulthandler_timeout_dump", found
    assert found.signature.category == "hang" and not found.signature.fatal
    assert_not_fatal(line + "\n" + FRAMES + "\n")


def test_an_error_found_with_a_faulthandler_dump_decides() -> None:
    text = "Timeout (0:05:00)!\n" + FRAMES + "\n" + TB
    text += "RuntimeError: CUDA error: an illegal memory access was encountered\n"
    r = classify_text(text)
    assert (r.fatal, r.category) == (True, "cuda_illegal_access"), r.pattern_ids


def test_the_timer_s_kill_explains_the_agent_s_sigkill_report() -> None:
    text = (
        "INFO:torch.distributed.elastic.timer.file_based_local_timer:Successfully reaped worker=[4242] with "
        "signal=9\n"
        "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 0 (pid: 4242) "
        "of binary: /usr/bin/python\n"
    )
    r = classify_text(text)
    assert (r.fatal, r.category, r.attribution) == (True, *HANG), r.pattern_ids


def test_the_watchdog_timeout_decides_over_the_monitor_s_abort() -> None:
    text = (
        "[rank3]:[E1006 15:30:20.630185464 ProcessGroupNCCL.cpp:632] [Rank 3] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1806789 "
        "milliseconds before timing out.\n"
        f"[rank3]:[F710 18:08:32.707469047 ProcessGroupNCCL.cpp:1725] {PG}{PG}Terminating the process after "
        "attempting to dump debug info, due to collective timeout or exception.\n"
    )
    r = classify_text(text)
    assert r.category == "nccl_timeout" and r.pattern_ids[0] == "nccl_watchdog_timeout", r.pattern_ids


@pytest.mark.parametrize(
    "text",
    [
        # ProcessGroupNCCL.cpp heartbeatMonitor with TORCH_NCCL_ENABLE_MONITORING=0: LOG(ERROR), no abort
        f"[rank2]:[E919 07:00:13.418192812 ProcessGroupNCCL.cpp:1660] {PG}ProcessGroupNCCL monitor thread "
        "is disabled, but would have terminated the processafter attempting to dump debug info, due to "
        "collective timeout or exception.\n",
        # ... its GIL check on the way out, and the dump it prepares (information)
        f"[rank2]:[E919 07:00:13.418192812 ProcessGroupNCCL.cpp:1400] {PG}Could not acquire GIL within 300 "
        "ms on exit, possible GIL induced hang\n",
        f"[rank2]:[E919 06:52:14.737942593 ProcessGroupNCCL.cpp:1628] {PG}ProcessGroupNCCL preparing to dump "
        "debug info. Include stack trace: 1, only active collectives: 0\n",
        # file_based_local_timer.py: an expired timer with no signal is reported and the worker goes on
        "INFO:torch.distributed.elastic.timer.file_based_local_timer:Reaping worker_pid=[4242]. Expired "
        "timers: ['train_step']\n"
        "INFO:torch.distributed.elastic.timer.file_based_local_timer:No signal specified with worker=[4242]. "
        "Do not reap it.\n",
        # py-spy's dump header without its thread lines (src/dump.rs): any process listing
        "Process 4242: python train.py\nPython v3.10.12 (/usr/bin/python3.10)\n",
        # faulthandler's thread headers and frames alone (faulthandler.register on a user's signal)
        FRAMES + "\n",
        # distributed_c10d.py _store_based_barrier's progress note
        "INFO:torch.distributed.distributed_c10d:Waiting in store based barrier to initialize process group "
        "for rank: 0, key: store_based_barrier_key:1 (world_size=2, num_workers_joined=1, timeout=0:30:00)\n",
        # NVIDIA/nccl src/init.cc ncclCommAbort (information: PyTorch aborts communicators on shutdown too)
        "host:7655:7655 [0] NCCL INFO comm 0x4d2d12d0 rank 5 nranks 16 cudaDev 5 busId 92000 - Abort "
        "COMPLETE\n",
        # kernel/hung_task.c's hint line; the kernel's lockup and RCU stall warnings (the node goes on)
        '[Sat Mar  4 04:10:52 2023] "echo 0 > /proc/sys/kernel/hung_task_timeout_secs" disables this '
        "message.\n",
        "[ 1234.567890] watchdog: BUG: soft lockup - CPU#12 stuck for 23s! [python:4242]\n",
        "[ 5973.259566] rcu: INFO: rcu_preempt self-detected stall on CPU\n"
        "[ 5973.259566] rcu:     3-...!: (4 ticks this GP) idle=f824/0/0x1 softirq=4614/4614 fqs=0\n",
        "[  455.220133] rcu: INFO: rcu_sched detected stalls on CPUs/tasks:\n"
        "[  455.235477] rcu: \t(detected by 0, t=5252 jiffies, g=24829, q=1290)\n",
        "[ 5973.259566] rcu: rcu_preempt kthread starved for 20964 jiffies! g938281 f0x0 RCU_GP_WAIT_FQS(5) "
        "->state=0x0 ->cpu=0\n",
        # configuration that names the knobs
        "export TORCH_NCCL_NONBLOCKING_TIMEOUT=1800  # NCCL timeout in seconds\n",
        "Timeout (ms)=1800000\n",
    ],
)
def test_messages_a_job_survives_are_not_fatal(text: str) -> None:
    assert_not_fatal(text)


@pytest.mark.parametrize(
    "line",
    [
        "[ 5973.259566] rcu: INFO: rcu_preempt self-detected stall on CPU",
        "[  455.220133] rcu: INFO: rcu_sched detected stalls on CPUs/tasks:",
        "[ 5973.259566] rcu: rcu_preempt kthread starved for 20964 jiffies! g938281 f0x0",
    ],
)
def test_rcu_stalls_are_recorded_not_fatal(line: str) -> None:
    found = load_catalog().match_line(line)
    assert found is not None and found.signature.id == "kernel_cpu_lockup", found
    assert not found.signature.fatal


@pytest.mark.parametrize("sig_id", ADDED + EXTENDED + RECORDED)
def test_every_entry_names_its_source_file(sig_id: str) -> None:
    assert_names_source(sig_id)

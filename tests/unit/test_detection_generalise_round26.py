"""Rounds 26a and 26b (issue 12 section 2): generalised from the rounds' tuning misses only.

Rounds 26a (pub1150-pub1169) and 26b (pub1180-pub1201) were random draws, labelled, split by the stored
rule and measured blind with no catalog change. Their tuning misses are read here from the printing
programs' sources (docs/detection.md, "Rounds 26a and 26b: tuning misses"). Every positive case below fails
on main before this change; the look-alikes stay non-fatal (or keep their reading) on both.
"""

from __future__ import annotations

import pytest

from tests.unit.catalog_sources import assert_names_source, assert_not_fatal, assert_read_as

SLURM_REFUSAL = ("slurm_node_failure", "system_software")
ENTRIES = (
    "slurm_submission_refused_in_exception",
    "ucx_memtype_transport_missing",
    "failure_handler_sigterm",
    "tcmalloc_large_alloc_failed",
    "colossalai_run_failed",
)
UCX = "[1700000000.000001] [gpu7:311 :0]  "


# 1. submitit (facebookincubator/submitit submitit/core/utils.py CommandFunction) raises
# FailedJobError(stderr) only when sbatch exits non-zero: sbatch's refusal is inside the exception line.
@pytest.mark.parametrize(
    "text",
    [
        "submitit.core.utils.FailedJobError: sbatch: error: Invalid generic resource (gres) specification\n",
        "Traceback (most recent call last):\n"
        '  File "/home/u/.local/lib/python3.10/site-packages/submitit/core/utils.py", line 352, in __call__\n'
        "    raise FailedJobError(stderr) from subprocess_error\n"
        "submitit.core.utils.FailedJobError: sbatch: error: QOSMaxGRESPerUser\n"
        "sbatch: error: Batch job submission failed: Job violates accounting/QOS policy\n",
        "FailedJobError: sbatch: error: Job rejected: no GPU partition given, use -p gpu\n",
        "RuntimeError: salloc: error: Job rejected: please give a time limit with --time\n",
    ],
)
def test_a_submitters_exception_carrying_sbatchs_refusal_is_slurms(text: str) -> None:
    assert_read_as(text, SLURM_REFUSAL, "slurm_submission_refused_in_exception")


def test_sbatch_retrying_then_submitting_is_not_fatal() -> None:
    assert_not_fatal(
        "sbatch: error: Slurm job queue full, sleeping and retrying\n"
        "Submitted batch job 4242\n"
        "submitit INFO (2024-01-01 10:00:00,000) - Job 4242 submitted\n"
    )


def test_round26_entries_name_their_sources() -> None:
    for entry in ENTRIES:
        assert_names_source(entry)


# 2. UCX's loopback memory-type endpoints (openucx/ucx src/ucp/wireup/select.c, src/ucp/core/ucp_worker.c): no
# transport copies across memory types on this node, so its worker is not created; no peer is involved.
UCX_NODE_SOFTWARE = ("interconnect", "system_software")


@pytest.mark.parametrize(
    "text",
    [
        UCX + "select.c:443  UCX  ERROR no copy across memory types transport"
        " to <no debug data>: Unsupported operation\n"
        "[gpu7:00311] pml_ucx.c:273  Error: Failed to create UCP worker\n",
        UCX + "select.c:640  UCX  ERROR   no copy across memory types transport to gpu7:311:"
        " self/memory - Destination is unreachable, sysv/memory - no memory registration\n",
        "[gpu7:311 :0]         select.c:180  UCX  ERROR No copy across memory types transport to gpu7:311:"
        " tcp/eth0 - no put short\n",
    ],
)
def test_no_copy_across_memory_types_transport_is_the_nodes_ucx(text: str) -> None:
    assert_read_as(text, UCX_NODE_SOFTWARE, "ucx_memtype_transport_missing")


def test_a_peer_ucx_cannot_reach_stays_the_fabrics() -> None:
    text = (
        UCX + "select.c:640  UCX  ERROR   no active messages transport to"
        " gpu8:412: rc_mlx5/mlx5_0:1 - Destination is unreachable\n"
    )
    assert_read_as(text, ("interconnect", "infrastructure"), "ucx_error")


def test_ucx_transport_list_at_info_level_is_not_fatal() -> None:
    assert_not_fatal(
        UCX + "ucp_worker.c:1877 UCX  INFO  ep_cfg[1]: copy across memory types"
        " via cuda_copy/cuda\n"
        "epoch 1 loss 0.42\n"
    )


# 3. Google's failure-signal handlers (abseil-cpp absl/debugging/failure_signal_handler.cc, glog
# src/signalhandler.cc) print their SIGTERM line for any sender: a SIGTERM kill, its sender not in the text.
SIGTERM_ANY = ("signal_kill", "unknown")


@pytest.mark.parametrize(
    "text",
    [
        "*** SIGTERM received by PID 4242 (TID 4242) on cpu 7 from PID 4100; stack trace: ***\n"
        "PC: @     0x7f0000001234  (unknown)  do_futex_wait.constprop.0\n"
        "    @     0x7f0000005678        976  (unknown)\n"
        "E0101 10:00:00.000000    4242 coredump_hook.cc:255]\n",
        "*** SIGTERM received by PID 4242 (TID 4250) on cpu 1; stack trace: ***\n"
        "PC: @     0x7f0000001234  (unknown)  poll\n",
    ],
)
def test_the_tpu_runtimes_sigterm_report_names_no_sender(text: str) -> None:
    assert_read_as(text, SIGTERM_ANY, "failure_handler_sigterm")


def test_a_schedulers_time_limit_still_decides_over_the_handlers_line() -> None:
    text = (
        "slurmstepd: error: *** JOB 4242 ON gpu1 CANCELLED AT 2024-01-01T10:00:00 DUE TO TIME LIMIT ***\n"
        "*** SIGTERM received by PID 4242 (TID 4242) on cpu 7 from PID 4100; stack trace: ***\n"
    )
    assert_read_as(text, ("preemption_or_timelimit", "infrastructure"), "failure_handler_sigterm")


def test_installing_the_failure_signal_handler_is_not_fatal() -> None:
    assert_not_fatal(
        "I0101 10:00:00.000000 4242 main.cc:42] failure signal handler installed;"
        " SIGTERM will dump the stack\n"
        "step 100 loss 0.42\n"
    )


# 4. gperftools' tcmalloc (src/tcmalloc.cc, ReportLargeAlloc) reports a large allocation with its result;
# `== (nil)`: the system refused the pages and the process dies in native code.
NATIVE_CRASH = ("segfault", "system_software")


@pytest.mark.parametrize(
    "text",
    [
        "tcmalloc: large alloc 281474976710656 bytes == (nil) @  0x7f0000001680 0x7f0000002824\n"
        "Unhandled exception:\n"
        "    @     0x7f0000003b62  (unknown)\n",
        "tcmalloc: large alloc 140737488355328 bytes == (nil) @  0x7f0000001680 0x55d000001234\n",
    ],
)
def test_a_failed_large_allocation_is_a_native_crash(text: str) -> None:
    assert_read_as(text, NATIVE_CRASH, "tcmalloc_large_alloc_failed")


def test_a_large_allocation_that_succeeded_is_not_fatal() -> None:
    assert_not_fatal(
        "tcmalloc: large alloc 1073741824 bytes == 0x7f1a2c000000 @  0x7f1b3c2d1680 0x7f1b3c2f2824\n"
        "tcmalloc: large alloc 1207959552 bytes == 0x7f1a6c000000 @  0x7f1b3c2d1680 0x7f1b3c2f2824\n"
        "step 100 loss 0.42\n"
    )


# 5. ColossalAI's launcher (colossalai/cli/launcher/multinode_runner.py run_on_host, run.py) reports the
# torchrun command it ran through fabric when that command exits non-zero: the launcher's summary.
LAUNCHER_SUMMARY = ("python_exception", "application")


@pytest.mark.parametrize(
    "text",
    [
        "Error: failed to run torchrun --nproc_per_node=8 --nnodes=2 --node_rank=1 --master_addr=10.0.0.1"
        " --master_port=29500 train.py --config cfg.py on 10.0.0.2\n"
        "\n====== Training on All Nodes =====\n10.0.0.1: success\n10.0.0.2: failure\n",
        "Error: failed to run python -m torch.distributed.launch --nproc_per_node=2 --nnodes=1 --node_rank=0"
        " train.py on 127.0.0.1, is localhost: True, exception: Encountered a bad command exit code!\n",
    ],
)
def test_colossalais_failed_torchrun_is_the_launchers_summary(text: str) -> None:
    assert_read_as(text, LAUNCHER_SUMMARY, "colossalai_run_failed")


def test_a_ranks_own_error_decides_over_colossalais_summary() -> None:
    text = (
        "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total"
        " capacity of 79.15 GiB of which 1.02 GiB is free.\n"
        "Error: failed to run torchrun --nproc_per_node=8 --nnodes=1 --node_rank=0 train.py on 127.0.0.1\n"
    )
    assert_read_as(text, ("cuda_oom", "application"), "colossalai_run_failed")


def test_colossalai_runs_that_succeed_are_not_fatal() -> None:
    assert_not_fatal(
        "step 100 loss 0.42\n\n====== Training on All Nodes =====\n127.0.0.1: success\n"
        "\n====== Stopping All Nodes =====\n127.0.0.1: finish\n"
    )

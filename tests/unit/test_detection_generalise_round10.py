"""Tenth corpus round (issue 12 section 1): generalised from the round's tuning misses only.

Round 10 added 31 excerpts from sources the corpus had not used (ROCm, submitit, Ray's memory monitor,
JAX, NCCL's shared-memory transport, Horovod/Open MPI, torchtitan, NeMo), split by the stored rule and
committed before the classifier ran on them. Its tuning misses were kinds the catalog did not know:
Slurm cancelling a job to requeue it (pub492), submitit's preemption / time-out notice (pub493), Ray's
memory-monitor kill summary (pub510), HIP's out-of-memory error (pub496), the ROCm runtime's GPU page
fault (pub518) and hardware exception (pub520, pub521), and NCCL's bootstrap finding no socket
interface (pub519). Each is generalised from the component that prints it (Slurm's slurmstepd req.c,
submitit's job_environment.py, Ray's node_manager.cc and OOM-prevention docs, hip_runtime_api.h,
ROCR-Runtime's runtime.cpp, NCCL's bootstrap.cc), not from the line. Every case below fails on the
round-9 catalog: it checks the kind inside the noise a real job prints around it, who it blames, and in
the same case that the closest look-alike does not count.
"""

from __future__ import annotations

import pytest

from tests.unit.classify_verdict import verdict
from trainguard.detection.catalog import load_catalog
from trainguard.detection.classify import classify_text

# ---------------------------------------------------------------- Slurm requeue, submitit


@pytest.mark.parametrize(
    "line",
    [
        "slurmstepd: error: *** JOB 31182239 ON sh-06-34 CANCELLED AT 2018-11-05T10:35:06 "
        "DUE TO JOB REQUEUE ***",
        "slurmstepd: error: *** STEP 77.0 ON gpu-03 CANCELLED AT 2024-03-01T08:00:00 DUE TO JOB REQUEUE ***",
        # slurmstepd before the node name moved into the message
        "slurmstepd: error: *** JOB 42 CANCELLED AT 2015-01-01T00:00:00 DUE TO JOB REQUEUE ***",
    ],
)
def test_a_job_slurm_cancels_to_requeue_is_taken_off_by_the_scheduler(line: str) -> None:
    text = (
        "Epoch 3:  41%|####      | 410/1000 [10:02<14:26,  0.68it/s, loss=2.31]\n"
        + line
        + "\nsrun: error: gpu-03: tasks 2-3: Exited with exit code 1\n"
    )
    r = classify_text(text)
    # Not the tasks' exit that follows: the scheduler stopped the run.
    assert (r.fatal, r.category, r.attribution) == (True, "preemption_or_timelimit", "infrastructure"), line
    assert "slurm_requeued" in r.pattern_ids
    # A cancellation that gives no reason stays the generic, low-priority one.
    plain = classify_text("slurmstepd: error: *** JOB 42 ON node1 CANCELLED AT 2024-01-01T10:00:00 ***\n")
    assert "slurm_requeued" not in plain.pattern_ids


@pytest.mark.parametrize("case", ["preempted", "timed-out"])
def test_submitit_s_notice_that_the_scheduler_is_ending_the_job(case: str) -> None:
    text = (
        "submitit INFO (2024-05-02 10:59:01,100) - Starting with JobEnvironment(job_id=60601445, "
        "hostname=learnfair0293, local_rank=0(2), node=0(1), global_rank=0(2))\n"
        "submitit WARNING (2024-05-02 11:00:01,000) - Bypassing signal SIGTERM\n"
        "submitit WARNING (2024-05-02 11:00:01,001) - Caught signal SIGUSR2 on learnfair0293: "
        f"this job is {case}.\n"
        "submitit INFO (2024-05-02 11:00:01,020) - Requeued job 60601445 (2 remaining timeouts)\n"
        "submitit INFO (2024-05-02 11:00:01,021) - Exiting gracefully after preemption/timeout.\n"
    )
    r = classify_text(text)
    assert (r.fatal, r.category, r.attribution) == (True, "preemption_or_timelimit", "infrastructure")
    assert "submitit_preempted_or_timed_out" in r.pattern_ids
    # submitit ignoring signals on a task that completes is not it.
    done = classify_text(
        "submitit WARNING (2022-03-31 21:08:23,557) - Bypassing signal SIGTERM\n"
        "03/31/2022 21:08:31 - INFO - submitit - Job completed successfully\n"
    )
    assert done.fatal is False


# ---------------------------------------------------------------- Ray's memory monitor


def test_ray_s_memory_monitor_killing_workers_is_a_host_oom_on_that_node() -> None:
    text = (
        "(TrainWorker pid=4331) step 1200 loss 0.42\n"
        "(raylet) [2023-07-23 15:21:29,851 E 9751 9751] (raylet) node_manager.cc:3084: 4 Workers (tasks / "
        "actors) killed due to memory pressure (OOM), 0 Workers crashed due to other reasons at node (ID: "
        "b287aac2de42bef55d13e884c4bdb6cffb2d81d1dc96aa08c4633a43, IP: 172.28.0.12) over the last time "
        "period. To see more information about the Workers killed on this node, use `ray logs raylet.out "
        "-ip 172.28.0.12`\n"
        "(raylet) \n"
        "(raylet) Refer to the documentation on how to address the out of memory issue: "
        "https://docs.ray.io/en/latest/ray-core/scheduling/ray-oom-prevention.html.\n"
    )
    r = classify_text(text)
    assert (r.fatal, r.category, r.attribution) == (True, "killed_oom_host", "application")
    assert "ray_memory_monitor_kill" in r.pattern_ids
    # A summary that counts no OOM kill is not one.
    zero = classify_text(
        "(raylet) node_manager.cc:3040: 0 Workers (tasks / actors) killed due to memory pressure (OOM), "
        "2 Workers crashed due to other reasons at node (ID: 2c82, IP: 172.31.183.172) "
        "over the last time period.\n"
    )
    assert "ray_memory_monitor_kill" not in zero.pattern_ids


# ---------------------------------------------------------------- ROCm runtime and HIP


@pytest.mark.parametrize("reason", ["GPU Hang", "ECC"])
def test_the_rocm_runtime_s_hardware_exception_is_the_gpu_s(reason: str) -> None:
    text = (
        " 41%|####      | 366/903 [5:15:39<6:53:09, 46.16s/it]"
        f"HW Exception by GPU node-9 (Agent handle: 0x631351bb5a20) reason :{reason}\n"
        f"HW Exception by GPU node-9 (Agent handle: 0x64ff272d8ab0) reason :{reason}\n"
        "Aborted (core dumped)\n"
        "E0902 15:10:49.013000 819010 torch/distributed/elastic/multiprocessing/api.py:874] failed "
        "(exitcode: -6) local_rank: 0 (pid: 819025) of binary: /usr/bin/python\n"
        "Traceback (most recent call last):\n"
        '  File "/usr/bin/torchrun", line 8, in <module>\n'
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n"
    )
    assert verdict(text) == (True, "gpu_hardware", "hardware"), reason
    assert "rocm_hw_exception" in classify_text(text).pattern_ids


@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        ("Page not present or supervisor privilege", ("cuda_illegal_access", "application")),
        ("Write access to a read-only page", ("cuda_illegal_access", "application")),
        ("DRAM ECC failure", ("gpu_hardware", "hardware")),
        ("Generic hang recovery", ("gpu_hardware", "hardware")),
    ],
)
def test_a_gpu_page_fault_from_the_rocm_runtime_blames_by_its_reason(
    reason: str, expected: tuple[str, str]
) -> None:
    text = (
        "Epoch [3/20], Step [140/600], Loss: 0.7312\n"
        "Memory access fault by GPU node-2 (Agent handle: 0x55fea5592860) on address 0x7fc133800000. "
        f"Reason: {reason}.\n"
        "Aborted (core dumped)\n"
    )
    r = classify_text(text)
    # Not the abort that follows (read as a segfault before).
    assert (r.fatal, r.category, r.attribution) == (True, *expected), reason


@pytest.mark.parametrize(
    "line",
    [
        "2019-01-08 19:06:11.303639: E tensorflow/stream_executor/rocm/rocm_driver.cc:601] "
        "failed to allocate 7.35G (7889485824 bytes) from device: hipError_t(1002)",
        "2023-11-01 16:19:17.812101: E tensorflow/compiler/xla/stream_executor/rocm/rocm_driver.cc:606] "
        "failed to allocate 127.99TiB (140729850295296 bytes) from device: HIP_ERROR_OutOfMemory",
        "RuntimeError: HIP error: out of memory",
        "hipMalloc failed: hipErrorOutOfMemory",
    ],
)
def test_hip_s_out_of_memory_is_the_application_s_like_cuda_s(line: str) -> None:
    assert verdict(line + "\n") == (True, "cuda_oom", "application"), line
    # Another HIP error is not an OOM.
    other = classify_text("RuntimeError: HIP error: invalid device function\n")
    assert other.category != "cuda_oom"


# ---------------------------------------------------------------- NCCL bootstrap


def test_nccl_finding_no_socket_interface_is_the_node_s_network_configuration() -> None:
    # PyTorch prints NCCL's summary first and the reason as its `Last error:`.
    text = (
        "torch.distributed.DistBackendError: NCCL error in: /opt/pytorch/pytorch/torch/csrc/distributed/c10d/"
        "ProcessGroupNCCL.cpp:2897, invalid usage (run with NCCL_DEBUG=WARN for details), "
        "NCCL version 2.27.3\n"
        "ncclInvalidUsage: This usually reflects invalid usage of NCCL library.\n"
        "Last error:\n"
        "Bootstrap : no socket interface found\n"
    )
    r = classify_text(text)
    assert (r.fatal, r.category, r.attribution) == (True, "nccl_error", "system_software")
    assert "nccl_bootstrap_no_interface" in r.pattern_ids
    # With NCCL_DEBUG the WARN carries the host.
    warn = classify_text(
        "gpu-11:2345:2345 [0] bootstrap.cc:1234 NCCL WARN Bootstrap : no socket interface found\n"
    )
    assert (warn.category, warn.attribution, warn.nodes) == ("nccl_error", "system_software", ["gpu-11"])
    # Bootstrap choosing an interface is start-up chatter.
    assert classify_text("node1:2345:2345 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n").fatal is False


def test_the_new_entries_are_ordered_before_the_entries_they_refine() -> None:
    ids = [s.id for s in load_catalog().signatures]
    # Within a line the first matching entry wins.
    assert ids.index("rocm_memory_fault_hardware") < ids.index("rocm_memory_access_fault")
    assert ids.index("hip_oom_runtime") < ids.index("cuda_oom_allocator")
    assert ids.index("nccl_bootstrap_no_interface") < ids.index("nccl_invalid_usage")

"""Kinds of real failures the signatures must cover beyond their own examples (issue 12 section 1): each case
is a whole excerpt of the kind, with the launcher noise around it that real jobs print."""

from __future__ import annotations

import pytest

from trainguard.detection.classify import classify_text

CASES = [
    (
        "device-side assertion without the summary line",
        "[rank2]: /pytorch/aten/src/ATen/native/cuda/Indexing.cu:1289: indexSelectLargeIndex: "
        "block: [215,0,0], thread: [64,0,0] Assertion `srcIndex < srcSelectDimSize` failed.\n"
        "[rank2]: /pytorch/aten/src/ATen/native/cuda/Indexing.cu:1289: indexSelectLargeIndex: "
        "block: [215,0,0], thread: [65,0,0] Assertion `srcIndex < srcSelectDimSize` failed.\n",
        ("cuda_illegal_access", "application"),
    ),
    (
        "DeepSpeed launcher killing its subprocesses after the real error",
        "[default1]:Traceback (most recent call last):\n"
        "[default1]:torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
        "[2024-05-01 10:00:00,000] [INFO] [launch.py:319:sigkill_handler] Killing subprocess 4242\n"
        "[2024-05-01 10:00:00,000] [ERROR] [launch.py:325:sigkill_handler] ['python', 'train.py'] exits with "
        "return code = 1\n",
        ("cuda_oom", "application"),
    ),
    (
        "mpirun exited on signal 9 without OOM evidence",
        "--------------------------------------------------------------------------\n"
        "mpirun noticed that process rank 5 with PID 0 on node gpu-12 exited on signal 9 (Killed).\n"
        "--------------------------------------------------------------------------\n",
        ("signal_kill", "unknown"),
    ),
    (
        "UCX error before the abort",
        "[1,3]<stderr>:[1700000000.123] [gpu-3:1234 :0]   ib_iface.c:746  UCX  ERROR ibv_create_cq() failed\n"
        "[1,3]<stderr>:Traceback (most recent call last):\n"
        "[1,3]<stderr>:RuntimeError: NCCL communicator was aborted on rank 3.\n",
        ("interconnect", "infrastructure"),
    ),
    (
        "scheduler health-check drain",
        "slurmstepd: error: *** JOB 99 ON gpu-4 CANCELLED AT 2024-05-01T10:00:00 ***\n"
        "gpu-4: NHC: check_hw_gpu:  GPU 3 not found (expected 8 GPUs, found 7)\n",
        ("slurm_node_failure", "hardware"),
    ),
    (
        "CUDA error: out of memory is the application's",
        "0: Traceback (most recent call last):\n0: RuntimeError: CUDA error: out of memory\n",
        ("cuda_oom", "application"),
    ),
    (
        "a watchdog timeout decided by PyTorch's collective-mismatch check",
        "[rank0]:[E ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=7, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600051 milliseconds "
        "before timing out.\n"
        "[rank1]: RuntimeError: Detected mismatch between collectives on ranks. "
        "Rank 1 is running collective: "
        "CollectiveFingerPrint(SequenceNumber=7, OpType=BROADCAST)\n",
        ("nccl_timeout", "application"),
    ),
    (
        "a watchdog timeout decided by a preceding network error",
        "node3:1:2 [0] NCCL WARN NET/IB : Got completion from peer node4<1234> with error 12, opcode 0\n"
        "[rank3]:[E ProcessGroupNCCL.cpp:607] [Rank 3] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=7, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600051 milliseconds "
        "before timing out.\n",
        ("interconnect", "infrastructure"),
    ),
    (
        "an NVLink5 Xid in a collected kernel log",
        "Nov 30 12:00:00 gpu-9 kernel: NVRM: Xid (PCI:0018:01:00): 149, NETIR Error\n",
        ("gpu_hardware", "hardware"),
    ),
    (
        "a traceback ending in an exception whose name is not ...Error",
        "[rank1]:Traceback (most recent call last):\n"
        '[rank1]:  File "train.py", line 80, in <module>\n'
        "[rank0]:step 12 loss 2.1\n"
        "[rank1]:    model = torch.compile(model)(batch)\n"
        "[rank1]:torch._dynamo.exc.Unsupported: call_function UserDefinedObjectVariable\n",
        ("python_exception", "application"),
    ),
    (
        "Ray echoing a worker's wrapped exception",
        "(RayTrainWorker pid=4242, ip=10.0.0.7) ray.exceptions.RayTaskError(ValueError): ray::train() "
        "(pid=4242, ip=10.0.0.7)\n",
        ("python_exception", "application"),
    ),
    (
        "nvidia-smi -q shows a pending row remap",
        "    Remapped Rows\n        Correctable Error                 : 0\n"
        "        Uncorrectable Error               : 2\n        Pending                           : Yes\n",
        ("gpu_hardware", "hardware"),
    ),
    (
        "srun's per-task host OOM verdict",
        "slurmstepd: error: Detected 1 oom_kill event in StepId=77.0.\n"
        "srun: error: gpu-3: task 1: Out Of Memory\n",
        ("killed_oom_host", "application"),
    ),
    (
        "Open MPI's InfiniBand retry verdict",
        "The InfiniBand retry count between two MPI processes has been exceeded.\n",
        ("interconnect", "infrastructure"),
    ),
    (
        "Slurm could not launch the step on a node",
        "srun: error: Task launch for StepId=12.0 failed on node gpu-12: Communication connection failure\n",
        ("slurm_node_failure", "hardware"),
    ),
    (
        "a kernel block-device I/O error under the checkpoint directory",
        "[1234.5] blk_update_request: I/O error, dev nvme0n1, sector 12345 op 0x1:(WRITE)\n",
        ("storage_io", "infrastructure"),
    ),
    (
        "unspecified launch failure is the kernel's, i.e. the application's",
        "RuntimeError: CUDA error: unspecified launch failure\n",
        ("cuda_illegal_access", "application"),
    ),
]


@pytest.mark.parametrize(("kind", "text", "expected"), CASES, ids=[c[0] for c in CASES])
def test_kinds_of_real_failures(kind: str, text: str, expected: tuple[str, str]) -> None:
    r = classify_text(text)
    assert r.fatal, kind
    assert (r.category, r.attribution) == expected, (kind, r.pattern_ids, r.summary)


def test_torchrun_child_failed_names_no_localhost_node() -> None:
    text = (
        "[default0]:RuntimeError: CUDA error: an illegal memory access was encountered\n"
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n"
        "Root Cause (first observed failure):\n[0]:\n  time      : 2024-05-01_10:00:00\n"
        "  host      : localhost\n  rank      : 0 (local_rank: 0)\n  exitcode  : 1 (pid: 1)\n"
    )
    r = classify_text(text)
    assert (r.category, r.attribution, r.nodes) == ("cuda_illegal_access", "application", [])


@pytest.mark.parametrize(
    "text",
    [
        # a clean exit through SystemExit is no failure
        'Traceback (most recent call last):\n  File "t.py", line 1, in <module>\nSystemExit: 0\n',
        # a truncated traceback names no exception: unexplained, not fatal (confidence says so)
        'Traceback (most recent call last):\n  File "t.py", line 1, in <module>\n',
        # a name-like line that does not follow a frame is not an exception line
        "Traceback (most recent call last):\nEpoch: 3\n",
    ],
)
def test_traceback_grammar_does_not_invent_failures(text: str) -> None:
    assert not classify_text(text).fatal


def test_a_dataloader_workers_own_report_counts_only_when_the_parent_raises() -> None:
    worker = "ERROR: Unexpected segmentation fault encountered in worker.\n"
    carried_on = "INFO:train:Epoch 7 [70%]\n" + worker + "INFO:train:Epoch 8 [5%]\n"
    assert not classify_text(carried_on).fatal
    raised = (
        worker + "Traceback (most recent call last):\n"
        '  File "train.py", line 3, in <module>\n'
        "    for batch in loader:\n"
    )
    r = classify_text(raised)
    assert (r.fatal, r.category, r.attribution) == (True, "data_loader", "system_software")

"""Fourth corpus round (issue 12 section 1): launcher verdicts in the forms the earlier signatures missed.

Each kind was generalised from a miss on the tuning part of the corpus. The cases check the kind (whole
excerpts with the noise real jobs print around it), that the verdict stays a cascade (a cause printed
next to it decides), and that look-alikes stay healthy.
"""

from __future__ import annotations

import pytest

from trainguard.detection.catalog import load_catalog
from trainguard.detection.classify import classify_text
from trainguard.detection.normalize import normalize

NO_ERROR_FILE = (
    "**********************************************************************\n"
    "               CHILD PROCESS FAILED WITH NO ERROR_FILE                \n"
    "**********************************************************************\n"
    "CHILD PROCESS FAILED WITH NO ERROR_FILE\n"
    "Child process 4242 (local_rank 3) FAILED (exitcode 1)\n"
    "Error msg: Process failed with exitcode 1\n"
    "  warnings.warn(_no_error_file_warning_msg(rank, failure))\n"
    "Traceback (most recent call last):\n"
    '  File "/opt/conda/lib/python3.8/runpy.py", line 194, in _run_module_as_main\n'
    "    return _run_code(code, main_globals, None,\n"
)
HOROVOD = (
    '[1,1]<stderr>:  File "/usr/lib/python3/horovod/torch/mpi_ops.py", line 52, in synchronize\n'
    "[1,1]<stderr>:Horovod has been shut down. This was caused by an exception on one of the ranks or an "
    "attempt to allreduce, allgather or broadcast a tensor after one of the ranks finished execution.\n"
)
HYDRA_KILLED = (
    "=====================================================================\n"
    "=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\n"
    "=   PID 4242 RUNNING AT gpu-07\n"
    "=   EXIT CODE: 9\n"
    "=   CLEANING UP REMAINING PROCESSES\n"
    "=====================================================================\n"
)


@pytest.mark.parametrize(
    ("kind", "text", "expected"),
    [
        (
            "torchelastic child failed with no error file, traceback cut off",
            NO_ERROR_FILE,
            "python_exception",
        ),
        (
            "only the warning's source line survived",
            "  warnings.warn(_no_error_file_warning_msg(rank, failure))\n",
            "python_exception",
        ),
        ("Horovod shut down behind mpirun's rank prefix", HOROVOD, "python_exception"),
        ("hydra's verdict: a rank killed by signal 9", HYDRA_KILLED, "signal_kill"),
        (
            "hydra's exit string for a kill",
            "YOUR APPLICATION TERMINATED WITH THE EXIT STRING: Killed (signal 9)\n",
            "signal_kill",
        ),
        (
            "hydra's verdict: a rank ended by SIGSEGV (Intel MPI: 128 + 11)",
            HYDRA_KILLED.replace("EXIT CODE: 9", "EXIT CODE: 139"),
            "segfault",
        ),
        (
            "hydra's bad termination with an ordinary exit code",
            HYDRA_KILLED.replace("EXIT CODE: 9", "EXIT CODE: 1"),
            "python_exception",
        ),
    ],
)
def test_launcher_verdicts_are_failures(kind: str, text: str, expected: str) -> None:
    result = classify_text(text)
    assert result.fatal, kind
    assert result.category == expected, (kind, result)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # The child's own error printed before the agent's warning is the cause.
        (
            "[default3]:torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
            + NO_ERROR_FILE,
            ("cuda_oom", "application"),
        ),
        # The rank that raised first decides over the survivors' shutdown notices.
        (
            "[1,0]<stderr>:Traceback (most recent call last):\n"
            '[1,0]<stderr>:  File "train.py", line 10, in <module>\n'
            "[1,0]<stderr>:torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB\n"
            + HOROVOD,
            ("cuda_oom", "application"),
        ),
        # The kernel's OOM killer names the cause of hydra's signal 9.
        (
            "[12345.678] Out of memory: Killed process 4242 (python) total-vm:100000kB\n" + HYDRA_KILLED,
            ("killed_oom_host", "application"),
        ),
    ],
)
def test_a_cause_next_to_the_verdict_decides(text: str, expected: tuple[str, str]) -> None:
    result = classify_text(text)
    assert (result.category, result.attribution) == expected, result


def test_verdicts_alone_are_cascades_at_low_confidence() -> None:
    catalog = load_catalog()
    for sig_id in ("elastic_no_error_file", "horovod_shutdown", "hydra_bad_termination"):
        sig = catalog.get(sig_id)
        assert sig is not None and sig.cascade and sig.priority == 1, sig_id
    assert classify_text(HOROVOD).confidence < 0.6


@pytest.mark.parametrize(
    "text",
    [
        "Consider decorating your top level entrypoint function with\n",
        "hvd.init()\nEpoch 1/10 - loss: 0.42\nHorovod rank 0 finished training\n",
        "=   EXIT CODE: 99\n",
        "[proxy:0:0@gpu-07] EXIT CODE: 0 reported by all ranks\n",
    ],
)
def test_look_alikes_stay_healthy(text: str) -> None:
    assert not classify_text(text).fatal, text


# -- nodes the scheduler names (generalised from tuning misses on the implicated node) ---------------------

PBS_MAIL = (
    "PBS Job Id: 77.head.local\nJob Name:   train\nExec host:  gpu-4-02/3\njob preempted (node failure)\n"
)


@pytest.mark.parametrize(
    ("text", "nodes"),
    [
        (PBS_MAIL, ["gpu-4-02"]),
        (
            "[2024-01-01T10:00:00.001] sched: Allocate JobId=42 NodeList=c014 #CPUs=8 Partition=gpu\n"
            "slurmstepd: error: *** JOB 42 CANCELLED AT 2024-01-01T11:00:00 DUE TO NODE FAILURE ***\n",
            ["c014"],
        ),
        # The record names several hosts (or a range): it does not say which one failed.
        (
            PBS_MAIL.replace("Exec host:  gpu-4-02/3\n", "Exec host:  gpu-4-02/3\nExec host:  gpu-4-03/3\n"),
            [],
        ),
        (
            "sched: Allocate JobId=42 NodeList=gpu-[01-02] #CPUs=8\n"
            "slurmstepd: error: *** JOB 42 CANCELLED AT 2024-01-01T11:00:00 DUE TO NODE FAILURE ***\n",
            [],
        ),
    ],
)
def test_a_node_failure_without_a_host_is_the_jobs_own_host(text: str, nodes: list[str]) -> None:
    result = classify_text(text)
    assert result.category == "slurm_node_failure"
    assert result.nodes == nodes


def test_the_jobs_host_is_not_blamed_for_an_application_error() -> None:
    result = classify_text(
        "Exec host:  gpu-4-02/3\nTraceback (most recent call last):\n  File \"t.py\", line 1\nKeyError: 'x'\n"
    )
    assert result.category == "python_exception" and result.nodes == []


def test_slurmctld_names_the_node_it_takes_out_of_service() -> None:
    result = classify_text(
        "[2025-07-04T00:54:23.932] update_node: node gpu-12 reason set to: Kill task failed\n"
    )
    assert (result.category, result.attribution, result.nodes) == (
        "slurm_node_failure",
        "hardware",
        ["gpu-12"],
    )
    assert not classify_text("update_node: node gpu-12 reason set to: planned maintenance\n").fatal


@pytest.mark.parametrize(
    "line",
    [
        "[rank7]:[E1006 15:30:20.630185464 ProcessGroupNCCL.cpp:1772] [PG ID 0 PG GUID 0(default_pg) Rank 7] "
        "Received a dump signal due to a collective timeout from  rank 3 and we will try our best to "
        "dump the debug info. Last enqueued NCCL work: 41, last completed NCCL work: 41.",
        "[rank1]:[E ProcessGroupNCCL.cpp:1294] [PG 0 Rank 1] Received a global timeout from another rank and "
        "will start to dump the debug info.",
    ],
)
def test_a_timeout_signalled_by_another_rank_is_a_collective_timeout(line: str) -> None:
    result = classify_text(line + "\n")
    assert (result.fatal, result.category, result.attribution) == (True, "nccl_timeout", "system_software")
    assert result.confidence < 0.5  # a cascade alone: nothing says which rank never arrived


def test_the_signalled_timeout_gives_way_to_a_cause() -> None:
    text = (
        "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB\n"
        "[rank7]:[E1006 ProcessGroupNCCL.cpp:1772] [PG ID 0 PG GUID 0(default_pg) Rank 7] Received a dump "
        "signal due to a collective timeout from  rank 3 and we will try our best to dump the debug info.\n"
    )
    assert classify_text(text).category == "cuda_oom"


def test_sagemakers_user_script_verdict_is_a_failure_and_a_cascade() -> None:
    verdict = (
        "2024-01-01 10:00:00,000 sagemaker-training-toolkit ERROR    ExecuteUserScriptError:\n"
        'Command "/opt/conda/bin/python3.10 train.py --epochs 3"\n'
        "2024-01-01 10:00:09 Failed - Training job failed\n"
    )
    alone = classify_text(verdict)
    assert (alone.fatal, alone.category) == (True, "python_exception") and alone.confidence < 0.5
    cause = "RuntimeError: CUDA error: out of memory\n"
    assert classify_text(cause + verdict).category == "cuda_oom"


# -- a multi-node launcher's `[host:local_rank]:` prefix (tuning excerpts carry it) -------------------------


def test_host_and_local_rank_prefix_is_stripped_and_kept() -> None:
    norm = normalize("[gpu187:1]:torch.cuda.OutOfMemoryError: CUDA out of memory.")
    assert (norm.text, norm.host, norm.local_rank) == (
        "torch.cuda.OutOfMemoryError: CUDA out of memory.",
        "gpu187",
        1,
    )
    assert normalize("[localhost:0]: x").host is None
    assert normalize("[Errno 2]: No such file").prefix == ""


def test_a_traceback_behind_host_prefixes_ends_in_its_exception() -> None:
    text = (
        "[gpu187:0]:Traceback (most recent call last):\n"
        '[gpu187:0]:  File "/train.py", line 263, in main\n'
        "[gpu187:0]:    accelerator.backward(loss)\n"
        "[gpu187:0]:ValueError: Expected input batch_size (4) to match target batch_size (8).\n"
    )
    result = classify_text(text)
    assert (result.fatal, result.category, result.nodes) == (True, "python_exception", [])


def test_a_hardware_error_behind_a_host_prefix_names_that_host() -> None:
    result = classify_text("[gpu-07:3]:NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n")
    assert (result.category, result.nodes) == ("gpu_hardware", ["gpu-07"])


def test_only_the_jobs_own_node_list_names_its_host() -> None:
    failure = "slurmstepd: error: *** JOB 42 CANCELLED AT 2024-01-01T11:00:00 DUE TO NODE FAILURE ***\n"
    for record in (
        "ExcNodeList=gpu-09 ReqNodeList=(null)\n",
        "NodeList=gpu-01,gpu-02\n",
        "NodeList=(null)\n",
    ):
        assert classify_text(record + failure).nodes == [], record

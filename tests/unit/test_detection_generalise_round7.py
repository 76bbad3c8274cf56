"""Seventh corpus round (issue 12 section 1): UCX interfaces that cannot be opened, UCP workers that
cannot be created, and Slurm job steps the controller refuses.

Each kind was generalised from a miss on the tuning part of the corpus (pub404, pub405, pub423). The
cases check the kind inside the noise a real job prints around it, who it blames, and that the
look-alikes (a run that goes on over other transports, srun retrying step creation) stay healthy.
"""

from __future__ import annotations

import pytest

from trainguard.detection.catalog import load_catalog
from trainguard.detection.classify import classify_text

_ENOMEM = (
    "[1668693503.473099] [ampere:1188443:0]          ib_log.c:246  UCX  ERROR mlx5_0: ibv_create_cq() "
    "failed: Cannot allocate memory. Please set max locked memory (ulimit -l) to 'unlimited' "
    "(current: 64 kbytes)\n"
)


def test_a_ucx_interface_that_cannot_be_opened_leaves_a_run_on_other_transports_healthy() -> None:
    text = (
        "$ mpirun -n 2 --mca pml ob1 --mca btl sm,self osu_bcast -m 1\n"
        + _ENOMEM
        + _ENOMEM.replace("1188443", "1188442")
        + "\n# OSU MPI Broadcast Latency Test v5.8\n# Size       Avg Latency(us)\n"
        + "1                       0.23\n"
    )
    r = classify_text(text)
    assert (r.fatal, r.category, r.attribution) == (False, "healthy", "none")


@pytest.mark.parametrize(
    "line",
    [
        "[1652739463.054681] [cn0022:4071024:0]        ib_iface.c:1035 UCX  ERROR ibv_create_cq(cqe=4096) "
        "failed: Cannot allocate memory\n",
        "[1652740949.516398] [cn0337:3290573:0]         ib_mlx5.c:90   UCX  ERROR mlx5dv_create_cq(cqe=4096) "
        "failed: Cannot allocate memory\n",
        "[1652740949.516743] [cn0337:3290573:0]         ib_mlx5.c:90   UCX  ERROR mlx5dv_create_srq() "
        "failed: Cannot allocate memory\n",
    ],
)
def test_an_interface_open_failure_alone_is_not_a_failure(line: str) -> None:
    assert not classify_text(line).fatal


def test_no_ucp_worker_after_the_interfaces_failed_is_the_node_s_configuration() -> None:
    text = (
        "[1652739463.054681] [cn0022:4071024:0]        ib_iface.c:1035 UCX  ERROR ibv_create_cq(cqe=4096) "
        "failed: Cannot allocate memory\n"
        "[cn0022:4071024] pml_ucx.c:309  Error: Failed to create UCP worker\n"
        "--------------------------------------------------------------------------\n"
        "MPI_INIT has failed because at least one MPI process is unreachable\n"
    )
    r = classify_text(text)
    assert (r.fatal, r.category, r.attribution) == (True, "interconnect", "system_software")
    assert "ucx_worker_create_failed" in r.pattern_ids


def test_a_worker_that_cannot_be_created_decides_whoever_prints_it() -> None:
    for line in (
        "[mpi-multus-b300x8-worker-1:01000] pml_ucx.c:314  Error: Failed to create UCP worker\n",
        "Client: Failed to create UCP worker\n",
    ):
        r = classify_text(line)
        assert (r.fatal, r.category, r.attribution) == (True, "interconnect", "system_software"), line


def test_a_ucx_transport_error_after_the_worker_exists_stays_the_network_s() -> None:
    line = (
        "[1564069506.097666] [dgx15:34226:0]     ucp_worker.c:505  UCX  ERROR error 'Endpoint timeout' "
        "will not be handled for ep 0x7fb7fd48f120 - rc_mlx5/mlx5_3:1\n"
    )
    r = classify_text(line)
    assert (r.fatal, r.category, r.attribution) == (True, "interconnect", "infrastructure")
    assert "ucx_error" in r.pattern_ids


def test_a_queue_that_cannot_be_created_for_another_reason_still_names_the_network() -> None:
    text = (
        "[1,3]<stderr>:[1700000000.123] [gpu-3:1234 :0]   ib_iface.c:746  UCX  ERROR ibv_create_cq() failed\n"
        "[1,3]<stderr>:RuntimeError: NCCL communicator was aborted on rank 3.\n"
    )
    r = classify_text(text)
    assert (r.fatal, r.category, r.attribution) == (True, "interconnect", "infrastructure")


def test_nccl_s_own_verbs_failure_is_not_taken_for_a_ucx_interface_note() -> None:
    line = (
        "gpu-2:4016:4653 [7] misc/ibvwrap.cc:190 NCCL WARN Call to ibv_create_cq failed with error "
        "Cannot allocate memory\n"
    )
    assert "ucx_iface_open_failed" not in classify_text(line).pattern_ids


_STEP_RETRIES = (
    "srun: Job 29986033 step creation temporarily disabled, retrying (Requested nodes are busy)\n"
    "srun: Job 29986033 step creation still disabled, retrying (Requested nodes are busy)\n"
)


def test_a_job_step_the_controller_refuses_is_a_scheduler_failure() -> None:
    text = _STEP_RETRIES + (
        "srun: error: Unable to create step for job 29986033: Memory required by task is not available\n"
    )
    r = classify_text(text)
    assert (r.fatal, r.category, r.attribution) == (True, "slurm_node_failure", "system_software")
    assert "slurm_step_create_failed" in r.pattern_ids


def test_srun_retrying_step_creation_and_then_creating_the_steps_stays_healthy() -> None:
    text = _STEP_RETRIES + (
        "srun: Step created for StepId=29986033.1\nsrun: Step created for StepId=29986033.2\n"
        "epoch 1 step 100 loss 2.31\n"
    )
    r = classify_text(text)
    assert (r.fatal, r.category) == (False, "healthy")


def test_the_new_entries_are_ordered_before_the_catch_alls_they_refine() -> None:
    ids = [s.id for s in load_catalog().signatures]
    assert ids.index("ucx_iface_open_failed") < ids.index("ucx_error")
    assert ids.index("ucx_worker_create_failed") < ids.index("ucx_error")
    assert ids.index("slurm_step_create_failed") < ids.index("slurm_cancelled")

"""Rounds 26a and 26b (issue 12 section 2): generalised from the rounds' tuning misses only.

Rounds 26a (pub1150-pub1169) and 26b (pub1180-pub1201) were random draws, labelled, split by the stored rule and
measured blind with no catalog change. Their tuning misses are read here from the printing programs' sources
(docs/detection.md, "Rounds 26a and 26b: tuning misses"). Every positive case below fails on main before this
change; the look-alikes stay non-fatal (or keep their reading) on both.
"""

from __future__ import annotations

import pytest

from tests.unit.catalog_sources import assert_names_source, assert_not_fatal, assert_read_as

SLURM_REFUSAL = ("slurm_node_failure", "system_software")


# 1. submitit (facebookincubator/submitit submitit/core/utils.py CommandFunction) raises FailedJobError(stderr)
# only when sbatch exits non-zero: sbatch's refusal is inside the exception line.
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
    for entry in ("slurm_submission_refused_in_exception", "ucx_memtype_transport_missing"):
        assert_names_source(entry)


# 2. UCX's loopback memory-type endpoints (openucx/ucx src/ucp/wireup/select.c, src/ucp/core/ucp_worker.c): no
# transport copies across memory types on this node, so its worker is not created; no peer is involved.
UCX_NODE_SOFTWARE = ("interconnect", "system_software")


@pytest.mark.parametrize(
    "text",
    [
        "[1700000000.000001] [gpu7:311 :0]         select.c:443  UCX  ERROR no copy across memory types transport"
        " to <no debug data>: Unsupported operation\n"
        "[gpu7:00311] pml_ucx.c:273  Error: Failed to create UCP worker\n",
        "[1700000000.000001] [gpu7:311 :0]          select.c:640  UCX  ERROR   no copy across memory types"
        " transport to gpu7:311: self/memory - Destination is unreachable, sysv/memory - no memory registration\n",
        "[gpu7:311 :0]         select.c:180  UCX  ERROR No copy across memory types transport to gpu7:311:"
        " tcp/eth0 - no put short\n",
    ],
)
def test_no_copy_across_memory_types_transport_is_the_nodes_ucx(text: str) -> None:
    assert_read_as(text, UCX_NODE_SOFTWARE, "ucx_memtype_transport_missing")


def test_a_peer_ucx_cannot_reach_stays_the_fabrics() -> None:
    text = (
        "[1700000000.000001] [gpu7:311 :0]          select.c:640  UCX  ERROR   no active messages transport to"
        " gpu8:412: rc_mlx5/mlx5_0:1 - Destination is unreachable\n"
    )
    assert_read_as(text, ("interconnect", "infrastructure"), "ucx_error")


def test_ucx_transport_list_at_info_level_is_not_fatal() -> None:
    assert_not_fatal(
        "[1700000000.000001] [gpu7:311 :0]     ucp_worker.c:1877 UCX  INFO  ep_cfg[1]: copy across memory types"
        " via cuda_copy/cuda\n"
        "epoch 1 loss 0.42\n"
    )

"""Ninth corpus round (issue 12 section 1): generalised from the round's tuning misses only.

Round 9 added 40 excerpts from sources the corpus had not used, split by the stored rule and committed
before the classifier ran on them. Its two tuning misses were verbs calls the catalog did not know:
NCCL's verbs wrapper refusing a memory registration for want of locked memory (pub468,
NVIDIA/nccl-tests#206), and libfabric's verbs provider failing to create a queue pair for an endpoint
(pub467, ofiwg/libfabric#7368). Each is generalised from the component that prints it (NCCL's
misc/ibvwrap.cc and troubleshooting guide, libfabric's prov/verbs and prov/rxm), not from the line. The
cases check the kind inside the noise a real job prints around it, who it blames, and the look-alikes.
"""

from __future__ import annotations

import pytest

from trainguard.detection.catalog import load_catalog
from trainguard.detection.classify import classify_text

_NCCL_INIT = (
    "node1:2345:2345 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n"
    "node1:2345:2400 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [RO]; OOB eth0:10.0.0.1<0>\n"
    "node1:2345:2400 [0] NCCL INFO Using network IB\n"
)


@pytest.mark.parametrize("call", ["ibv_reg_mr", "ibv_reg_mr_iova2", "ibv_reg_dmabuf_mr"])
def test_nccl_refused_a_memory_registration_for_want_of_locked_memory(call: str) -> None:
    text = _NCCL_INIT + (
        f"node1:2345:2400 [0] misc/ibvwrap.cc:213 NCCL WARN Call to {call} failed with error "
        "Cannot allocate memory\n"
        "node1:2345:2400 [0] NCCL INFO transport/net_ib.cc:1061 -> 2\n"
        "node1:2345:2400 [0] NCCL INFO transport/net.cc:1006 -> 2\n"
        "torch.distributed.DistBackendError: NCCL error in: "
        "../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1691, "
        "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5\n"
    )
    r = classify_text(text)
    # The node's memlock limit (configuration), not a broken link and not NCCL's hardware default.
    assert (r.fatal, r.category, r.attribution) == (True, "interconnect", "system_software"), call
    assert "nccl_ib_reg_mr_nomem" in r.pattern_ids


def test_another_verbs_call_failing_in_nccl_stays_the_network_s() -> None:
    # A verbs call with a digit in its name now reads as the verbs failure it is (it read healthy).
    line = "misc/ibvwrap.cc:301 NCCL WARN Call to ibv_reg_mr_iova2 failed with error Bad address\n"
    r = classify_text(_NCCL_INIT + line)
    assert (r.fatal, r.category, r.attribution) == (True, "interconnect", "infrastructure")
    assert "nccl_ib_reg_mr_nomem" not in r.pattern_ids
    r = classify_text("misc/ibvwrap.cc:252 NCCL WARN Call to ibv_modify_qp failed with error No such device")
    assert (r.category, r.attribution) == ("interconnect", "infrastructure")


def test_nccl_probing_dmabuf_support_is_not_a_failure() -> None:
    text = _NCCL_INIT + (
        "node1:2345:2400 [0] NCCL INFO dlvsym failed on mlx5dv_reg_dmabuf_mr - "
        "/lib/x86_64-linux-gnu/libmlx5.so.1: "
        "undefined symbol: mlx5dv_reg_dmabuf_mr, version MLX5_1.25 version MLX5_1.25\n"
        "node1:2345:2400 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0'\n"
    )
    assert classify_text(text).fatal is False


_VRB = "libfabric:4711:1700000000:verbs:ep_ctrl:vrb_ep_enable():884<warn> "


@pytest.mark.parametrize(
    "line",
    [
        _VRB + "rdma_create_qp: Cannot allocate memory (12)",
        _VRB + "rdma_create_qp: Invalid argument (22)",
        "libfabric:4711:1700000000:ofi_rxm:ep_ctrl:rxm_open_conn():140<warn> "
        "fi_enableCannot allocate memory (-12)",
        "server.c:88: rdma_create_qp failed",
    ],
)
def test_a_queue_pair_the_verbs_stack_cannot_create_is_the_fabric_s(line: str) -> None:
    text = "mdtest-3.4.0+dev was launched with 512 total task(s) on 16 node(s)\n" + line + "\n"
    r = classify_text(text)
    assert (r.fatal, r.category, r.attribution) == (True, "interconnect", "infrastructure"), line
    assert "verbs_qp_create_failed" in r.pattern_ids


@pytest.mark.parametrize(
    "line",
    [
        # libfabric warns at init about memory interfaces it cannot use; the job runs on.
        "libfabric:4711:1700000000::core:core:ofi_hmem_init():420<warn> "
        "Failed to initialize hmem iface FI_HMEM_ZE: No data available",
        "libfabric:4711:1700000000:verbs:ep_ctrl:vrb_ep_enable():870<debug> rdma_create_qp",
    ],
)
def test_libfabric_s_other_notes_are_not_a_queue_pair_failure(line: str) -> None:
    r = classify_text(line + "\n")
    assert "verbs_qp_create_failed" not in r.pattern_ids
    assert "nccl_ib_reg_mr_nomem" not in r.pattern_ids


def test_the_new_entries_are_ordered_before_the_entries_they_refine() -> None:
    ids = [s.id for s in load_catalog().signatures]
    # Within a line the first matching entry wins: the memlock case must precede the generic verbs call.
    assert ids.index("nccl_ib_reg_mr_nomem") < ids.index("ib_completion_error")
    assert ids.index("verbs_qp_create_failed") < ids.index("efa_ofi_error")

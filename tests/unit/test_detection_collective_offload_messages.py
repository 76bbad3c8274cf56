"""Collective offload and RDMA verbs messages, from their sources (docs/detection.md, "Collective offload and
RDMA verbs messages, from their sources").

The messages a job prints from NVIDIA SHARP (through NCCL's nccl-rdma-sharp-plugins), HCOLL (through Open
MPI's coll/hcoll), and the verbs layer (rdma-core's libibverbs, NCCL's verbs wrappers, UCX's and Open MPI's
btl/openib verbs transports), each the source's format string with its conversions filled in. Set-up
failures are the node's software, error completions the fabric's; an offload the job runs without (SHARP or
HCOLL unavailable, CollNet falling back to the point-to-point network) is recorded, not fatal.
Read wrong on main: UCX's and Open MPI's `error modifying QP to RTR|RTS` (the fabric's through ucx_error, or
healthy), NCCL's `Call to ibv_create_qp failed` and UCX's `ibv_reg_mr(...) failed: Cannot allocate memory`
(the fabric's), and the SHARP plugin's `NET/IB : SHARP coll init error` before NCCL's CollNet fallback (fatal
through ib_completion_error). The error completions, NCCL's reg_mr over the memlock limit and the other
survived lines read right before and are pinned here.
"""

from __future__ import annotations

import pytest

from tests.unit.catalog_sources import assert_names_source, assert_not_fatal, assert_read_as
from trainguard.detection.classify import classify_text

ADDED = ("verbs_qp_state_transition_failed", "nccl_collnet_sharp_fallback", "ucx_ib_reg_mr_nomem")
EXTENDED = ("nccl_ib_setup_call_failed",)

NODE_SETUP = ("interconnect", "system_software")
FABRIC = ("interconnect", "infrastructure")
NCCL = "gpu-07:4242:4300 [0] "

# (text, expected category/attribution, deciding entry or None when any entry may decide)
READ_AS: list[tuple[str, tuple[str, str], str | None]] = [
    # UCX src/uct/ib/rc/verbs/rc_verbs_iface.c and rc/base/rc_iface.c uct_rc_iface_qp_connect:
    # ucs_error("error modifying QP to RTR: %m"), the RTS step the same
    (
        "[1717000000.000001] [gpu-07:4242:0]     rc_iface.c:868  UCX  ERROR error modifying QP to RTR: "
        "Connection timed out",
        NODE_SETUP,
        None,
    ),
    (
        "[1717000000.000001] [gpu-07:4242:0]     rc_iface.c:890  UCX  ERROR error modifying QP to RTS: "
        "Invalid argument",
        NODE_SETUP,
        None,
    ),
    # Open MPI opal/mca/btl/openib/btl_openib_endpoint.c: BTL_ERROR(("error modifying QP to RTS errno
    # says %s"))
    (
        "[gpu-07][[12345,1],0][btl_openib_endpoint.c:1032:qp_connect_all] error modifying QP to RTS errno "
        "says Invalid argument",
        NODE_SETUP,
        None,
    ),
    # NCCL src/misc/ibvwrap.cc IBV_PTR_CHECK_ERRNO for ibv_create_qp (connection set-up)
    (
        NCCL + "misc/ibvwrap.cc:245 NCCL WARN Call to ibv_create_qp failed with error Cannot allocate memory",
        NODE_SETUP,
        None,
    ),
    # Open MPI btl/openib btl_openib_component.c handle_wc: BTL_PEER_ERROR "error polling %s with status %s
    # status number %d for wr_id %llu opcode %d qp_idx %d" (btl_openib_component_status_to_string)
    (
        "[gpu-07][[12345,1],0][btl_openib_component.c:3644:handle_wc] from gpu-07 to: gpu-08 error polling "
        "LP CQ with status RETRY EXCEEDED ERROR status number 12 for wr_id 7e2e80 opcode 0  vendor error 129 "
        "qp_idx 3",
        FABRIC,
        None,
    ),
    (
        "[gpu-07][[12345,1],0][btl_openib_component.c:3644:handle_wc] from gpu-07 to: gpu-08 error polling "
        "HP CQ with status REMOTE ACCESS ERROR status number 10 for wr_id 1c8a400 opcode 1  vendor error 136 "
        "qp_idx 0",
        FABRIC,
        None,
    ),
    # NCCL src/transport/net_ib.cc ncclIbTest: an error completion with its IBV_WC_* status
    (
        NCCL + "transport/net_ib.cc:1720 NCCL WARN NET/IB : Got completion from peer 10.0.0.8<54321> with "
        "status=12 opcode=0 len=0 vendor err 129 (Send) localGid ::ffff:10.0.0.7 remoteGidsfe80::1",
        FABRIC,
        None,
    ),
    # rdma-core providers/mlx5/cq.c mlx5_handle_error_cqe's dump header
    ("mlx5: gpu-07: got completion with error:", FABRIC, None),
    # UCX src/uct/ib/base/ib_md.c uct_ib_md_print_mem_reg_err_msg with ib_log.c's memlock hint (newer) and
    # the older `. Please set ...` form: the locked-memory limit, the node's
    (
        "[1765653660.705652] [magi175:640743:0]          ib_md.c:287  UCX  ERROR "
        "ibv_reg_mr(address=0x15213b956010, "
        "length=65536, access=0xf) failed: Cannot allocate memory : Please set max locked memory "
        "(ulimit -l) to "
        "'unlimited' (current: 524288 kbytes)",
        NODE_SETUP,
        "ucx_ib_reg_mr_nomem",
    ),
    (
        "[1717000000.000001] [gpu-07:4242:0]          ib_md.c:350  UCX  ERROR "
        "ibv_reg_mr(address=0x7f00a0000000, "
        "length=20971520, access=0x1) failed: Cannot allocate memory. Please set max locked memory "
        "(ulimit -l) to "
        "'unlimited' (current: 8192 kbytes)",
        NODE_SETUP,
        "ucx_ib_reg_mr_nomem",
    ),
    # UCX src/uct/ib/mlx5/ib_mlx5_log.c uct_ib_mlx5_completion_with_err: an error completion, the fabric's
    (
        "[1717000000.000001] [gpu-07:4242:0]      ib_mlx5_log.c:177  UCX  ERROR Transport retry count "
        "exceeded on "
        "mlx5_0:1/IB (synd 0x15 vend 0x81 hw_synd 0/0)",
        FABRIC,
        None,
    ),
    # NCCL before 2.12 (transport/net_ib.cc): `NET/IB : Got completion with error %d, opcode %d, len %d,
    # vendor
    # err %d`, the status an ibv_wc_status number
    (NCCL + "NCCL WARN NET/IB : Got completion with error 12, opcode 0, len 0, vendor err 129", FABRIC, None),
    # NCCL's reg_mr refused for want of locked memory (set-up: the node's memlock limit)
    (
        NCCL
        + "misc/ibvwrap.cc:213 NCCL WARN Call to ibv_reg_mr_iova2 failed with error Cannot allocate memory",
        NODE_SETUP,
        "nccl_ib_reg_mr_nomem",
    ),
]

SURVIVED = [
    # nccl-rdma-sharp-plugins src/sharp_plugin.c ncclSharpConnect: WARN("NET/IB : SHARP coll init error:
    # %s(%d)\n", sharp_coll_strerror(ret), ret), then NCCL src/transport/coll_net.cc (localRank 0):
    # WARN("Cannot initialize CollNet, using point-to-point network instead"); NCCL disables CollNet and
    # trains on
    NCCL
    + "sharp_plugin.c:412 NCCL WARN NET/IB : SHARP coll init error: Cannot create SHARP job(-11)\n"
    + NCCL
    + "NCCL INFO transport.cc:356 -> 2\n"
    + NCCL
    + "transport.cc:384 NCCL WARN Cannot initialize CollNet, using point-to-point network instead\n"
    + NCCL
    + "NCCL INFO transport/coll_net.cc:1358 -> 2\n",
    # the same plugin: SHARP group creation refused (sharp_coll_comm_init), then the fallback
    NCCL
    + "sharp_plugin.c:450 NCCL WARN SHARP group create: Failed to allocate resources(-3)\n"
    + NCCL
    + "transport.cc:384 NCCL WARN Cannot initialize CollNet, using point-to-point network instead\n",
    # the group-size threshold: the plugin's own fallback notice
    NCCL + "NCCL INFO SHARP: Group size:1 is less than threshold:2. fallback to non-sharp\n",
    # Open MPI ompi/mca/coll/hcoll/coll_hcoll_module.c mca_coll_hcoll_comm_query: HCOL_ERROR("Hcol library
    # init failed"), hcoll_enable = 0 and no module: MPI goes on with its other coll components
    "[gpu-07:04242] Error: ../../../../../ompi/mca/coll/hcoll/coll_hcoll_module.c:310 - "
    "mca_coll_hcoll_comm_query() Hcol library init failed\n",
    # Open MPI ompi/mca/coll/ucc/coll_ucc_module.c mca_coll_ucc_init_ctx: UCC_ERROR("UCC lib init
    # failed"); the
    # component's comm_query sets ucc_enable = 0 and returns no module, so MPI uses its other coll components
    "[gpu-07:04242] coll_ucc_module.c:150 - mca_coll_ucc_init_ctx() UCC lib init failed\n",
    # rdma-core libibverbs/init.c check_memlock_limit: a warning at library load
    "libibverbs: Warning: RLIMIT_MEMLOCK is 32768 bytes.\n    This will severely limit memory "
    "registrations.\n",
    # rdma-core libibverbs/dynamic_driver.c / init.c: drivers and devices it passes over
    "libibverbs: Warning: couldn't load driver 'libmlx4-rdmav34.so': libmlx4-rdmav34.so: cannot open shared "
    "object file: No such file or directory\n",
    "libibverbs: Warning: no userspace device-specific driver found for "
    "/sys/class/infiniband_verbs/uverbs0\n",
]


@pytest.mark.parametrize(("text", "expected", "entry"), READ_AS, ids=[m[0][-50:] for m in READ_AS])
def test_verbs_message_is_read(text: str, expected: tuple[str, str], entry: str | None) -> None:
    if entry is None:
        r = classify_text(text + "\n")
        assert (r.fatal, r.category, r.attribution) == (True, *expected), (text, r.pattern_ids)
    else:
        assert_read_as(text + "\n", expected, entry)


@pytest.mark.parametrize("text", SURVIVED, ids=[t[-50:] for t in SURVIVED])
def test_offload_a_job_runs_without_is_not_fatal(text: str) -> None:
    assert_not_fatal(text)


@pytest.mark.parametrize("sig_id", ADDED + EXTENDED)
def test_every_entry_names_its_source_file(sig_id: str) -> None:
    assert_names_source(sig_id)

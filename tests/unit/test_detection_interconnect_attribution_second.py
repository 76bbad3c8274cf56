"""Interconnect attribution, second pass (docs/detection.md, the section of that name).

The first pass read a verbs set-up call that fails as the node's software and every error completion as the
fabric's. This pass reads, from the printers' sources, the other messages a node prints about its own link
configuration before any transfer: NCCL's IB transport finding a GID index without a RoCE type in sysfs,
devices of two link layers in one communicator, or an out-of-range NCCL_IB_SUBNET_PREFIX_LEN (NVIDIA/nccl
src/transport/net_ib/connect.cc); UCX's IB layer refusing a GID, subnet or pkey setting
(openucx/ucx src/uct/ib/base/ib_device.c, ib_iface.c); Open MPI's BML finding no BTL that reaches a peer
(open-mpi/ompi ompi/mca/bml/r2/help-mca-bml-r2.txt); NCCL finding no socket interface that matches its
settings (src/bootstrap.cc, src/transport/net_socket.cc). Each positive case is its printer's format
string with the conversions filled in, and each read otherwise on main (the fabric's, or healthy).

The fabric's look-alikes keep their attribution: a link down, a port-error event, a transport retry
exceeded, a connect to a peer that timed out, and a UCX GID query on a device that vanished.
"""

from __future__ import annotations

import re

import pytest

from tests.unit.catalog_sources import assert_names_source, assert_not_fatal, assert_read_as
from trainguard.detection.classify import classify_text

NODE_SOFTWARE = ("interconnect", "system_software")
NCCL_SETUP = ("nccl_error", "system_software")
FABRIC = ("interconnect", "infrastructure")

ADDED_OR_EXTENDED = (
    "nccl_ib_link_config_invalid",
    "ucx_ib_gid_config_invalid",
    "openmpi_process_unreachable_at_init",
    "nccl_bootstrap_no_interface",
)
SOURCE = re.compile(
    r"(src/transport/net_ib/connect\.cc|src/uct/ib/base/ib_device\.c|ompi/mca/bml/r2/bml_r2\.c"
    r"|src/transport/net_socket\.cc)"
)

NCCL = "gpu1:1234:1290 [0] "
UCX = "[1700000000.123456] [gpu1:1234:0]      "

# (text, expected category/attribution, the entry that reads it)
NODE_MESSAGES = [
    # NVIDIA/nccl src/transport/net_ib/connect.cc ncclIbRoceGetVersionNum (before 2.27 in net_ib.cc)
    (
        NCCL + "transport/net_ib/connect.cc:242 NCCL WARN NET/IB: open failed in ncclIbRoceGetVersionNum: "
        "No such file or directory",
        NODE_SOFTWARE,
        "nccl_ib_link_config_invalid",
    ),
    (
        NCCL + "transport/net_ib.cc:1021 NCCL WARN NET/IB: read failed in ncclIbRoceGetVersionNum: "
        "Invalid argument",
        NODE_SOFTWARE,
        "nccl_ib_link_config_invalid",
    ),
    # the same file: devices of two link layers, and a bad NCCL_IB_SUBNET_PREFIX_LEN
    (
        NCCL + "transport/net_ib/connect.cc:987 NCCL WARN NET/IB : Attempted to connect incompatible "
        "devices: [0]mlx5_0:1/IB and [1]mlx5_2:1/RoCE. Try selecting NICs of only one link type using "
        "NCCL_IB_HCA",
        NODE_SOFTWARE,
        "nccl_ib_link_config_invalid",
    ),
    (
        NCCL + "transport/net_ib/connect.cc:1034 NCCL WARN NET/IB : Remote IB device is incompatible with "
        "the local [0]mlx5_2:1/RoCE. Try selecting NICs of only one link type using NCCL_IB_HCA",
        NODE_SOFTWARE,
        "nccl_ib_link_config_invalid",
    ),
    (
        NCCL + "transport/net_ib/connect.cc:529 NCCL WARN NET/IB: NCCL_IB_SUBNET_PREFIX_LEN=40 is out of "
        "range [1,32]",
        NODE_SOFTWARE,
        "nccl_ib_link_config_invalid",
    ),
    # openucx/ucx src/uct/ib/base/ib_device.c, ib_iface.c
    (
        UCX + "ib_device.c:953  UCX  ERROR ibv_query_gid(dev=mlx5_0 port=1 index=3) failed: Invalid argument",
        NODE_SOFTWARE,
        "ucx_ib_gid_config_invalid",
    ),
    (
        UCX + "ib_device.c:939  UCX  ERROR failed to parse gid type 'IB/RoCE v3' (dev=mlx5_0 port=1 index=3)",
        NODE_SOFTWARE,
        "ucx_ib_gid_config_invalid",
    ),
    (
        UCX + "ib_device.c:1199 UCX  ERROR failed to find a gid which matches/unmatches the following subnet "
        "list: 10.0.0.0/8",
        NODE_SOFTWARE,
        "ucx_ib_gid_config_invalid",
    ),
    (
        UCX + "ib_iface.c:1440 UCX  ERROR both GID_INDEX and ROCE_SUBNET_LIST are specified, please select "
        "only one of them",
        NODE_SOFTWARE,
        "ucx_ib_gid_config_invalid",
    ),
    (
        UCX + "ib_iface.c:1166 UCX  ERROR requested pkey 0x8001 is invalid, should be in the range 0..0x7fff",
        NODE_SOFTWARE,
        "ucx_ib_gid_config_invalid",
    ),
    # open-mpi/ompi ompi/mca/bml/r2/help-mca-bml-r2.txt [unreachable proc], as opal_show_help prints it
    (
        "--------------------------------------------------------------------------\n"
        "At least one pair of MPI processes are unable to reach each other for\n"
        "MPI communications.  This means that no Open MPI device has indicated\n"
        "that it can be used to communicate between these processes.  This is\n"
        "an error; Open MPI requires that all MPI processes be able to reach\n"
        "each other.  This error can sometimes be the result of forgetting to\n"
        'specify the "self" BTL.\n\n'
        "  Process 1 ([[4321,1],0]) is on host: gpu1\n"
        "  Process 2 ([[4321,1],8]) is on host: gpu2\n"
        "  BTLs attempted: self vader\n\n"
        "Your MPI job is now going to abort; sorry.\n"
        "--------------------------------------------------------------------------",
        NODE_SOFTWARE,
        "openmpi_process_unreachable_at_init",
    ),
    # NVIDIA/nccl src/transport/net_socket.cc ncclNetSocketInit, src/bootstrap.cc
    (
        NCCL + "transport/net_socket.cc:61 NCCL WARN NET/Socket : no interface found",
        NCCL_SETUP,
        "nccl_bootstrap_no_interface",
    ),
    (
        NCCL + "bootstrap.cc:120 NCCL WARN NET/Socket : No usable listening interface found",
        NCCL_SETUP,
        "nccl_bootstrap_no_interface",
    ),
    (
        NCCL + "bootstrap.cc:577 NCCL WARN no device found matching mlx5_9, verify NCCL_OOB_NET_IFNAME",
        NCCL_SETUP,
        "nccl_bootstrap_no_interface",
    ),
]

# The fabric's failures keep their attribution (interconnect / infrastructure).
FABRIC_MESSAGES = [
    "mlx5_core 0000:5e:00.0: mlx5_port_module_event: Link down",
    NCCL + "transport/net_ib.cc:154 NCCL WARN NET/IB : Got async event : port error",
    "[gpu1:1:0:1] ib_mlx5_log.c:139  Transport retry count exceeded on mlx5_0:1/IB (synd 0x15 vend 0x81 "
    "hw_synd 0/0)",
    NCCL + "transport/net_ib/p2p.cc:688 NCCL WARN NET/IB: Got completion from peer 10.0.0.2<43210> with "
    "status=IBV_WC_RETRY_EXC_ERR(12) opcode=IBV_WC_SEND(0) vendor_err=129 hca mlx5_0",
    UCX + "sock.c:327  UCX  ERROR   connect(fd=45, dest_addr=10.0.0.2:41748) failed: Connection timed out",
    NCCL + "misc/ibvwrap.cc:376 NCCL WARN Call to ibv_modify_qp failed with 110 Connection timed out, on dev "
    "mlx5_0:1, curr state RTR, next state RTS, local GID index 3",
    # a device that vanished is not a setting: the GID query on it stays the fabric's (ucx_error)
    UCX + "ib_device.c:953  UCX  ERROR ibv_query_gid(dev=mlx5_0 port=1 index=3) failed: No such device",
]

NOT_FATAL = [
    NCCL + "NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_2:1/RoCE [RO]; OOB eth0:10.0.0.1<0>",
    NCCL + "NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>",
    UCX + "ib_device.c:1579 UCX  DIAG  failed to read "
    "/sys/class/infiniband/mlx5_0/ports/1/gid_attrs/ndevs/3: No such file or directory",
]


@pytest.mark.parametrize(
    ("text", "expected", "entry"), NODE_MESSAGES, ids=[m[0][-60:] for m in NODE_MESSAGES]
)
def test_node_link_configuration_is_system_software(text: str, expected: tuple[str, str], entry: str) -> None:
    assert_read_as(text, expected, entry)


@pytest.mark.parametrize("text", FABRIC_MESSAGES, ids=[m[-60:] for m in FABRIC_MESSAGES])
def test_fabric_failure_stays_infrastructure(text: str) -> None:
    r = classify_text(text)
    assert (r.fatal, r.category, r.attribution) == (True, *FABRIC), (text, r.pattern_ids)


@pytest.mark.parametrize("text", NOT_FATAL, ids=[m[-60:] for m in NOT_FATAL])
def test_look_alikes_are_not_fatal(text: str) -> None:
    assert_not_fatal(text)


def test_an_error_completion_after_the_set_up_failure_stays_the_nodes() -> None:
    """A GID index with no RoCE type, then an error completion: the set-up entry (priority 3) decides."""
    completion = (
        NCCL + "transport/net_ib/p2p.cc:688 NCCL WARN NET/IB: Got completion from peer 10.0.0.2<43210> with "
        "status=IBV_WC_RETRY_EXC_ERR(12) opcode=IBV_WC_SEND(0) vendor_err=129 hca mlx5_0"
    )
    text = NODE_MESSAGES[0][0] + "\n" + completion
    assert_read_as(text, NODE_SOFTWARE, "nccl_ib_link_config_invalid")


@pytest.mark.parametrize("sig_id", ADDED_OR_EXTENDED)
def test_every_added_or_extended_entry_names_its_source_file(sig_id: str) -> None:
    assert_names_source(sig_id, SOURCE)


def test_every_added_or_extended_entry_is_exercised_here() -> None:
    assert {entry for _, _, entry in NODE_MESSAGES} == set(ADDED_OR_EXTENDED)

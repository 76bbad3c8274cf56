"""Interconnect attribution: the node's software or the fabric (docs/detection.md, the section of that name).

An interconnect failure is the fabric's (infrastructure) when the printers report a transfer the network
failed: an error completion, whatever its status (a retry counter exceeded, a response timeout, a protection
or access error), a port or link down, a peer that became unreachable. It is the node's software and
configuration (system_software) when they report what the node set up wrongly, before or beside any transfer:
a verbs call that opens, queries or configures the HCA failing before a packet leaves (NVIDIA/nccl
src/misc/ibvwrap.cc), an MPI library failing to read its own completion queue rather than reading a completion
with an error (open-mpi/ompi ompi/mca/mtl/ofi/mtl_ofi.h), a transport connecting to an address where nothing
listens (openucx/ucx src/ucs/sys/sock.c) or missing its peer's published address (open-mpi/ompi
ompi/mca/pml/ucx/pml_ucx.c).

Each positive case is the printer's format string with its conversions filled in; each read interconnect /
infrastructure (or another verdict) on the code before this change. The fabric cases, the request-fault
completion statuses among them, are kept as they were read: the split does not move a transfer the network
failed onto the node.
"""

from __future__ import annotations

import re

import pytest

from tests.unit.catalog_sources import assert_names_source, assert_not_fatal, assert_read_as
from trainguard.detection.classify import classify_text

NODE_SOFTWARE = ("interconnect", "system_software")
FABRIC = ("interconnect", "infrastructure")

ADDED = (
    "nccl_ib_setup_call_failed",
    "ofi_cq_read_call_failed",
    "ucx_endpoint_setup_failed",
)
SOURCE = re.compile(
    r"(src/misc/ibvwrap\.cc|ompi/mca/mtl/ofi/mtl_ofi\.h|src/ucs/sys/sock\.c"
    r"|ompi/mca/pml/ucx/pml_ucx\.c)"
)

# (text, expected category/attribution, an entry among the findings)
NODE_SOFTWARE_MESSAGES = [
    # NVIDIA/nccl src/misc/ibvwrap.cc: the set-up calls of a connection (the start-up device probes NCCL
    # passes over, ibv_open_device / ibv_query_device / ibv_query_port / ibv_fork_init, are recorded only
    # since the false-positive review: tests/unit/test_detection_fp_review.py)
    (
        "gpu1:123:456 [0] misc/ibvwrap.cc:148 NCCL WARN Call to ibv_alloc_pd failed",
        "nccl_ib_setup_call_failed",
    ),
    (
        "gpu1:123:456 [0] misc/ibvwrap.cc:148 NCCL WARN Call to ibv_query_gid failed with error Invalid "
        "argument errno 22",
        "nccl_ib_setup_call_failed",
    ),
    (
        "gpu1:123:456 [0] misc/ibvwrap.cc:268 NCCL WARN Call to ibv_create_cq failed with error Cannot "
        "allocate memory",
        "nccl_ib_setup_call_failed",
    ),
    # open-mpi/ompi ompi/mca/mtl/ofi/mtl_ofi.h (the read call failed, not a completion's status)
    (
        "mtl_ofi.h:188: Error returned from fi_cq_readerr: Resource temporarily unavailable(-11).\n"
        "*** The Open MPI OFI MTL is aborting the MPI job (via exit(3)).",
        "ofi_cq_read_call_failed",
    ),
    (
        "mtl_ofi.h:214: Error returned from fi_cq_read: Input/output error(-5).\n"
        "*** The Open MPI OFI MTL is aborting the MPI job (via exit(3)).",
        "ofi_cq_read_call_failed",
    ),
    (
        "mtl_ofi.h:195: Error returned from fi_cq_readerr with null context. Completion flags: "
        "0000000000000000",
        "ofi_cq_read_call_failed",
    ),
    # openucx/ucx src/ucs/sys/sock.c, open-mpi/ompi ompi/mca/pml/ucx/pml_ucx.c
    (
        "[1700000000.440877] [gpu1:7356 :0]            sock.c:323  UCX  ERROR   connect(fd=48, "
        "dest_addr=172.17.0.1:42887) failed: Connection refused",
        "ucx_endpoint_setup_failed",
    ),
    (
        "[gpu1:05215] pml_ucx.c:178  Error: Failed to receive UCX worker address: Not found (-13)",
        "ucx_endpoint_setup_failed",
    ),
]

# The fabric's failures: read as before (interconnect / infrastructure).
FABRIC_MESSAGES = [
    # rdma-core libibverbs/enum_strs.c statuses for a request the HCA refused (protection, length, access):
    # error completions, read as the fabric's like the corpus labels them (not split by status)
    "Failed status local protection error (4) for wr_id 1",
    "Failed status remote access error (10) for wr_id 2",
    "gpu1:1:2 [0] transport/net_ib/p2p.cc:688 NCCL WARN NET/IB: Got completion from peer "
    "10.0.0.2<43210> with "
    "status=IBV_WC_REM_ACCESS_ERR(10) opcode=IBV_WC_RDMA_WRITE(1) vendor_err=136 hca mlx5_0",
    # NVIDIA/nccl src/misc/ibvwrap.cc: a device that vanished or failed, in a set-up call too
    "gpu1:123:456 [0] misc/ibvwrap.cc:140 NCCL WARN Call to ibv_query_device failed with error No "
    "such device "
    "errno 19",
    "Failed status transport retry counter exceeded (12) for wr_id 1",
    "Failed status RNR retry counter exceeded (13) for wr_id 2",
    "Failed status response timeout error (20) for wr_id 1",
    "Failed status bad response error (7) for wr_id 1",
    "Failed status remote operation error (11) for wr_id 1",
    "host-a:5776:5902 [0] transport/net_ib.cc:1296 NCCL WARN NET/IB : Got completion from peer host-b<33092> "
    "with error 12, opcode 0, len 0, vendor err 129 (Send)",
    "gpu1:1:2 [0] transport/net_ib/p2p.cc:688 NCCL WARN NET/IB: Got completion from peer "
    "10.0.0.2<43210> with "
    "status=IBV_WC_RETRY_EXC_ERR(12) opcode=IBV_WC_SEND(0) vendor_err=129 hca mlx5_0",
    " Completion with error at client\n Failed status 12: wr_id 0 syndrom 0x81",
    "[b5244:224582:0:224582] ib_mlx5_log.c:139  Transport retry count exceeded on mlx5_0:1/IB (synd "
    "0x15 vend "
    "0x81 hw_synd 0/0)",
    "CQE ERROR wr_id=12887842422 status=12(transport retry counter exceeded) opcode=4 byte_len=0 "
    "vendor_err=0xa qp_num=0x2e24",
    "misc/ibvwrap.cc:252 NCCL WARN Call to ibv_modify_qp failed with error No such device",
    "misc/ibvwrap.cc:252 NCCL WARN Call to ibv_modify_qp failed with error Invalid argument",
    "gpu1:1:2 [0] misc/ibvwrap.cc:376 NCCL WARN Call to ibv_modify_qp failed with 110 Connection "
    "timed out, on dev "
    "mlx5_0:1, curr state RTR, next state RTS, local GID index 3",
    "libfabric:1234:1700000000::efa:cq:efa_rdm_cq_readerr():120<warn> fi_cq_readerr: err: Remote "
    "end unreachable "
    "(113), prov_errno: Peer unreachable (4)",
    "[1700000000.1] [gpu1:7356 :0]            sock.c:323  UCX  ERROR   connect(fd=48, "
    "dest_addr=10.0.0.2:42887) "
    "failed: Connection timed out",
    "NCCL WARN NET/IB : Got async event : port error",
    "mlx5: gpu-07: got completion with error:",
]

NOT_FATAL = [
    "NCCL INFO NET/IB : remote access error counters reset",
    "gpu1:1:2 [0] NCCL INFO Call to ibv_modify_qp failed with 110 Connection timed out, on dev "
    "mlx5_0:1, curr "
    "state RTR, next state RTS, local GID index 3, retrying 1/35 after 100 msec of sleep",
    "[1700000000.4] [gpu1:7356 :0]            sock.c:340  UCX  DEBUG connect(fd=48, "
    "dest_addr=10.0.0.2:42887): "
    "Operation now in progress",
]


@pytest.mark.parametrize(
    ("text", "entry"), NODE_SOFTWARE_MESSAGES, ids=[m[0][:60] for m in NODE_SOFTWARE_MESSAGES]
)
def test_node_software_failure_is_system_software(text: str, entry: str) -> None:
    assert_read_as(text, NODE_SOFTWARE, entry)


@pytest.mark.parametrize("text", FABRIC_MESSAGES, ids=[m[:60] for m in FABRIC_MESSAGES])
def test_fabric_failure_stays_infrastructure(text: str) -> None:
    r = classify_text(text)
    assert (r.fatal, r.category, r.attribution) == (True, *FABRIC), (text, r.pattern_ids)


@pytest.mark.parametrize("text", NOT_FATAL, ids=[m[:60] for m in NOT_FATAL])
def test_look_alikes_are_not_fatal(text: str) -> None:
    assert_not_fatal(text)


MLX5_DUMP = (
    "mlx5: cn10: got completion with error:\n"
    "00000000 00000000 00000000 00000000\n"
    "00000000 00008813 10012abe 0dd0c1d3\n"
)


@pytest.mark.parametrize(
    "status_line",
    [
        "libfabric:4711:1700000000:ofi_rxm:cq:rxm_cq_read_write_error():819<warn> fi_cq_readerr: err: 5, "
        "prov_err: remote access error (10)",
        "Failed status local protection error (4) for wr_id 1",
        "Failed status RNR retry counter exceeded (13) for wr_id 1",
    ],
)
def test_an_error_completion_is_the_fabric_whatever_its_status(status_line: str) -> None:
    """rdma-core's mlx5 dump (providers/mlx5/cq.c) and the polling program's status line: a completion."""
    r = classify_text(MLX5_DUMP + status_line)
    assert (r.fatal, r.category, r.attribution) == (True, *FABRIC), r.pattern_ids


def test_a_failed_read_is_the_library_even_after_an_error_completion() -> None:
    """Open MPI's MTL could not read the error entry (mtl_ofi.h): the MPI library's, not the completion's."""
    text = (
        "mtl_ofi.h:188: Error returned from fi_cq_readerr: Resource temporarily unavailable(-11).\n"
        "*** The Open MPI OFI MTL is aborting the MPI job (via exit(3)).\n"
        "mpirun noticed that process rank 0 with PID 4242 on node gpu1 exited on signal 6 (Aborted)."
    )
    assert_read_as(text, NODE_SOFTWARE, "ofi_cq_read_call_failed")


@pytest.mark.parametrize("sig_id", ADDED)
def test_every_added_entry_names_its_source_file(sig_id: str) -> None:
    assert_names_source(sig_id, SOURCE)


def test_every_added_entry_is_exercised_here() -> None:
    assert {entry for _, entry in NODE_SOFTWARE_MESSAGES} == set(ADDED)

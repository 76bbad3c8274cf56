"""Interconnect messages, derived from the printers' source (issue 12 section 1, "generalise,
don't memorise").

Instead of fitting excerpt lines, the messages NCCL's IB/socket transports (NVIDIA/nccl 5067397c), rdma-core's
libibverbs and mlx5 provider (linux-rdma/rdma-core 691953d8d), UCX (openucx/ucx 9466d104a3), libfabric
(ofiwg/libfabric af8ddbe92) and aws-ofi-nccl (aws/aws-ofi-nccl 2daf7d30) print when a transfer or a
connection fails for good were read out of their source and mapped to TrainGuard's categories
(docs/detection.md, "Interconnect messages, from their sources"). Each positive case below is the source's
format string with its conversions filled in; each failed (read healthy or as another entry) on the code
before this change. The look-alikes are messages a job survives; several of them were read fatal before.
"""

from __future__ import annotations

import re

import pytest

from tests.unit.catalog_sources import assert_names_source, assert_not_fatal, assert_read_as
from trainguard.detection.catalog import load_catalog
from trainguard.detection.classify import classify_text
from trainguard.detection.normalize import normalize

TRANSPORT_SOURCE_FILE = re.compile(
    r"(src/[a-z0-9_/]+\.(c|cc|cpp)|providers/mlx5/cq\.c|libibverbs/[a-z_/]+\.c|prov/[a-z]+)"
)

# Entries added from the printers' source, and the entry this change extended (each comment names the file).
ADDED = (
    "nccl_ib_async_event_survived",
    "nccl_ib_resiliency_recovering",
    "nccl_ib_comm_fatal_error",
    "rdma_mlx5_error_cqe",
    "ibv_wc_error_status",
    "ibv_wc_flush_status",
    "libfabric_core_probe_note",
    "nccl_socket_peer_closed",
    "nccl_socket_call_failed",
)
EXTENDED = ("ucx_error",)
NOT_FATAL = ("nccl_ib_async_event_survived", "nccl_ib_resiliency_recovering", "libfabric_core_probe_note")

FABRIC = ("interconnect", "infrastructure")
NCCL_NET = ("nccl_error", "hardware")

# (line, expected category/attribution, deciding entry)
MESSAGES = [
    # NVIDIA/nccl src/transport/net_ib/common.cc (ncclIbStatsCheckFatalCount)
    (
        "gpu1:123:456 [0] transport/net_ib/common.cc:32 NCCL WARN communicator encountered a fatal error "
        "(detected in ncclIbTest)",
        FABRIC,
        "nccl_ib_comm_fatal_error",
    ),
    (
        "gpu1:123:456 [0] transport/net_ib.cc:111 NCCL WARN communicator encountered a fatal error "
        "(detected in ncclIbIsend)",
        FABRIC,
        "nccl_ib_comm_fatal_error",
    ),
    # linux-rdma/rdma-core providers/mlx5/cq.c (mlx5_parse_cqe), behind the launchers' prefixes
    ("mlx5: gpu-07: got completion with error:", FABRIC, "rdma_mlx5_error_cqe"),
    ("[1,3]<stdout>:mlx5: gpu-07: got completion with error:", FABRIC, "rdma_mlx5_error_cqe"),
    ("12: mlx5: gpu-07: got completion with error:", FABRIC, "rdma_mlx5_error_cqe"),
    # rdma-core libibverbs/enum_strs.c ibv_wc_status_str, printed by libibverbs/examples/rc_pingpong.c
    ("Failed status RNR retry counter exceeded (13) for wr_id 2", FABRIC, "ibv_wc_error_status"),
    ("Failed status local protection error (4) for wr_id 1", FABRIC, "ibv_wc_error_status"),
    ("Failed status remote access error (10) for wr_id 2", FABRIC, "ibv_wc_error_status"),
    ("Failed status remote invalid request error (9) for wr_id 2", FABRIC, "ibv_wc_error_status"),
    ("Failed status remote operation error (11) for wr_id 2", FABRIC, "ibv_wc_error_status"),
    ("Failed status local QP operation error (2) for wr_id 1", FABRIC, "ibv_wc_error_status"),
    ("Failed status local length error (1) for wr_id 1", FABRIC, "ibv_wc_error_status"),
    ("Failed status local access error (8) for wr_id 1", FABRIC, "ibv_wc_error_status"),
    ("Failed status bad response error (7) for wr_id 1", FABRIC, "ibv_wc_error_status"),
    ("Failed status response timeout error (20) for wr_id 1", FABRIC, "ibv_wc_error_status"),
    ("Completion with error: memory management operation error (6)", FABRIC, "ibv_wc_error_status"),
    ("Failed status Work Request Flushed Error (5) for wr_id 1", FABRIC, "ibv_wc_flush_status"),
    # openucx/ucx src/uct/ib/mlx5/ib_mlx5_log.c (uct_ib_mlx5_completion_with_err), the fatal handler's form
    (
        "[gpu-07:1234:0:1234] ib_mlx5_log.c:190  Receive-no-ready retry count exceeded on mlx5_0:1/IB "
        "(synd 0x16 vend 0x82 hw_synd 0/0)",
        FABRIC,
        "ucx_error",
    ),
    (
        "[gpu-07:1234:0:1234] ib_mlx5_log.c:190  Remote access error on mlx5_bond_0:1/RoCE "
        "(synd 0x13 vend 0x88 hw_synd 0/0)",
        FABRIC,
        "ucx_error",
    ),
    (
        "[gpu-07:1234:0:1234] ib_mlx5_log.c:190  Local protection error on ibp12s0:1/IB "
        "(synd 0x4 vend 0x51 hw_synd 0/0)",
        FABRIC,
        "ucx_error",
    ),
    # NVIDIA/nccl src/misc/socket.cc (socketProgress), src/os/linux.cc (socketConnectCheck, ProgressOpt)
    (
        "gpu1:123:456 [0] misc/socket.cc:58 NCCL WARN socketProgress: Connection closed by remote peer "
        "gpu2<43210>",
        NCCL_NET,
        "nccl_socket_peer_closed",
    ),
    (
        "gpu1:123:456 [0] misc/socket.cc:46 NCCL WARN socketProgressOpt: Call to recv from 10.0.0.2<43210> "
        "failed : Connection reset by peer",
        NCCL_NET,
        "nccl_socket_call_failed",
    ),
    (
        "gpu1:123:456 [0] os/linux.cc:362 NCCL WARN ncclOsSocketProgressOpt: Call to send to 10.0.0.2<43210> "
        "failed : Broken pipe",
        NCCL_NET,
        "nccl_socket_call_failed",
    ),
    (
        "gpu1:123:456 [0] os/linux.cc:302 NCCL WARN ncclOsSocketPollConnect: connect to 10.0.0.2<43210> "
        "failed : No route to host",
        NCCL_NET,
        "nccl_socket_call_failed",
    ),
    (
        "gpu1:123:456 [0] os/linux.cc:288 NCCL WARN ncclOsSocketStartConnect: connect to 10.0.0.2<43210> "
        "returned Connection refused, exceeded error retry count after 34 attempts",
        NCCL_NET,
        "nccl_socket_call_failed",
    ),
    (
        "gpu1:123:456 [0] misc/socket.cc:543 NCCL WARN socketStartConnect: connect returned Connection timed "
        "out, exceeded error retry count (34)",
        NCCL_NET,
        "nccl_socket_call_failed",
    ),
    (
        "gpu1:123:456 [0] misc/socket.cc:579 NCCL WARN socketPollConnect poll() failed with error Bad "
        "address",
        NCCL_NET,
        "nccl_socket_call_failed",
    ),
]

# Messages a job does not survive that the catalog read already (kept, so none is dropped).
ALREADY_READ = [
    # NVIDIA/nccl src/transport/net_ib/common.cc, p2p.cc, p2p_resiliency.cc; src/misc/ibvwrap.cc
    "gpu1:1:2 [0] transport/net_ib/common.cc:123 NCCL WARN NET/IB : mlx5_0:1 async fatal event: local "
    "catastrophic error",
    "gpu1:1:2 [0] transport/net_ib/common.cc:127 NCCL WARN NET/IB : mlx5_0:1 async fatal event on CQ "
    "(0x7f00) "
    "handle=3 cqe=4096: CQ error",
    "gpu1:1:2 [0] transport/net_ib/p2p.cc:688 NCCL WARN NET/IB: Got completion from peer 10.0.0.2<43210> "
    "with "
    "status=IBV_WC_RETRY_EXC_ERR(12) opcode=IBV_WC_SEND(0) vendor_err=129 hca mlx5_0",
    "gpu1:1:2 [0] transport/net_ib/p2p.cc:854 NCCL WARN NET/IB: Got CQE with error (devIndex=0, req=0x7f, "
    "comm=0x7f (send), wr_id=5, qp_num=1234)",
    "gpu1:1:2 [0] transport/net_ib/p2p_resiliency.cc:64 NCCL WARN NET/IB: The error is fatal "
    "(No functional devices left). Cannot continue.",
    "gpu1:1:2 [0] misc/ibvwrap.cc:376 NCCL WARN Call to ibv_modify_qp failed with 110 Connection timed out, "
    "on dev mlx5_0:1, curr state RTR, next state RTS, local GID index 3",
    "NCCL WARN NET/IB : Got async event : port error",
    # aws/aws-ofi-nccl src/nccl_ofi_rdma.cpp (a request completed with error, fi_cq_readerr)
    "gpu1:1:2 [0] nccl_net_ofi_rdma:1465 NCCL WARN NET/OFI Request 0x7f completed with error. RC: 5. "
    "Error: 13 (Unresponsive remote (was previously responsive)). Completed length: 0",
    # openucx/ucx ib_mlx5_log.c at ERROR level
    "[1700000000.1] [gpu-07:1234:0]    ib_mlx5_log.c:190  UCX  ERROR Transport retry count exceeded on "
    "mlx5_0:1/IB (synd 0x15 vend 0x81 hw_synd 0/0)",
    "[gpu-07:1234:0:1234] ib_mlx5_log.c:190  WR flushed because QP in error state on mlx5_0:1/IB "
    "(synd 0x5 vend 0xf9 hw_synd 0/0)",
    # ofiwg/libfabric prov/efa (a transfer error under the cq subsystem)
    "libfabric:1234:1700000000::efa:cq:efa_rdm_cq_readerr():120<warn> fi_cq_readerr: err: Remote end "
    "unreachable "
    "(113), prov_errno: Peer unreachable (4)",
]


@pytest.mark.parametrize(("line", "expected", "entry"), MESSAGES, ids=[m[0][:60] for m in MESSAGES])
def test_interconnect_failure_message_is_read(line: str, expected: tuple[str, str], entry: str) -> None:
    assert_read_as(line + "\n", expected, entry)


@pytest.mark.parametrize("line", ALREADY_READ, ids=[m[:60] for m in ALREADY_READ])
def test_failure_messages_read_before_stay_fatal(line: str) -> None:
    r = classify_text(line + "\n")
    assert r.fatal and r.category == "interconnect", (line, r.pattern_ids)


def test_every_added_fatal_entry_is_exercised_here() -> None:
    assert {m[2] for m in MESSAGES} >= set(ADDED) - set(NOT_FATAL)


def test_mlx5_host_prefix_is_the_host_after_the_provider_name() -> None:
    n = normalize("[1,3]<stdout>:mlx5: gpu-07: got completion with error:")
    assert (n.text, n.host, n.rank) == ("got completion with error:", "gpu-07", 3)


@pytest.mark.parametrize(
    "text",
    [
        # NCCL falls back to sockets when no IB device is found (src/transport/net_ib/init.cc)
        "gpu1:1:2 [0] NCCL INFO NET/IB : No device found.\ngpu1:1:2 [0] NCCL INFO NET/Socket : Using "
        "[0]eth0:10.0.0.1<0>\n",
        "gpu1:1:2 [0] transport/net_ib/init.cc:307 NCCL WARN NET/IB : No IP interface found.\n",
        # NCCL's own connect retries (src/os/linux.cc, INFO) and an older release's retry note
        "gpu1:1:2 [0] NCCL INFO ncclOsSocketStartConnect: connect to 10.0.0.2<43210> returned Connection "
        "refused, "
        "retrying (1/34) after sleep for 100 msec\n",
        "gpu1:1:2 [0] NCCL INFO Call to connect returned Connection refused, retrying\n",
        # async events NCCL itself calls non-fatal (src/transport/net_ib/common.cc; older net_ib.cc)
        "gpu1:1:2 [0] transport/net_ib/common.cc:179 NCCL WARN NET/IB : mlx5_0:1 Got non-fatal async event: "
        "port error(10)\n",
        "gpu1:1:2 [0] transport/net_ib/common.cc:179 NCCL WARN NET/IB : mlx5_0:1 Got non-fatal async event: "
        "port active(9)\n",
        "gpu1:1:2 [0] transport/net_ib.cc:171 NCCL WARN NET/IB : mlx5_0:1 Got async error event: client "
        "reregistration\n",
        "gpu1:1:2 [0] transport/net_ib.cc:94 NCCL WARN NET/IB : Got async event : port active\n",
        "gpu1:1:2 [0] transport/net_ib.cc:94 NCCL WARN NET/IB : Got async event : LID change\n",
        "gpu1:1:2 [0] transport/net_ib.cc:94 NCCL WARN NET/IB : Got async event : GID table change\n",
        "gpu1:1:2 [0] transport/net_ib/common.cc:150 NCCL WARN NET/IB : mlx5_0:1 async fatal event on "
        "SRQ, unused "
        "for now (0x7f00): SRQ catastrophic error\n",
        "gpu1:1:2 [0] transport/net_ib/common.cc:153 NCCL WARN NET/IB : mlx5_0:1 GID table changed\n",
        # NCCL's IB resiliency moving traffic off a failed device (src/transport/net_ib/p2p_resiliency.cc)
        "gpu1:1:2 [0] transport/net_ib/p2p_resiliency.cc:376 NCCL WARN NET/IB: Device 0 marked as failed. "
        "Initiating recovery? Yes (send comm=0x7f, outstandingRecovery=0)\n",
        # UCX's configuration warnings and port notices (src/ucs/config/parser.c, src/uct/ib/base/ib_device.c)
        "[1700000000.1] [gpu-07:1234:0]           parser.c:2036 UCX  WARN  unused environment variable: "
        "UCX_IB_GID_INDEX\n",
        "[1700000000.1] [gpu-07:1234:0]           parser.c:2036 UCX  WARN  unused env variable: "
        "UCX_MEM_MMAP_HOOK_MODE "
        "(set UCX_WARN_UNUSED_ENV_VARS=n to suppress this warning)\n",
        "[1700000000.1] [gpu-07:1234:0]        ib_device.c:468  UCX  DIAG  IB Async event on mlx5_0: "
        "port active on "
        "port 1\n",
        # libfabric probing providers and hmem interfaces (src/hmem.c, src/fabric.c, prov/efa, prov/cxi)
        "libfabric:4711:1700000000::core:core:ofi_hmem_init():420<warn> Failed to initialize hmem iface "
        "FI_HMEM_ZE: "
        "No data available\n",
        "libfabric:1234:1700000000::efa:core:efa_device_init():123<warn> Failed to open EFA device rdmap0s0: "
        "Permission denied\n",
        "libfabric:1234:1700000000::cxi:core:cxip_gen_auth_key():123<warn> cxil_get_svc failed: -2\n",
        "libfabric:1234:1700000000::core:core:fi_getinfo_():1338<warn> fi_getinfo: provider usnic "
        "returned -61 "
        "(No data available)\n",
        # aws-ofi-nccl finding no EFA: NCCL falls back (src/nccl_ofi_net.cpp)
        "gpu1:1:2 [0] nccl_net_ofi_create_plugin:257 NCCL WARN NET/OFI aws-ofi-nccl initialization failed\n",
        # the status strings outside a completion, and a bare flush
        "NCCL INFO NET/IB : remote access error counters reset\n",
        "Work Request Flushed Error\n",
    ],
)
def test_messages_a_job_survives_are_not_fatal(text: str) -> None:
    assert_not_fatal(text)


@pytest.mark.parametrize("sig_id", ADDED + EXTENDED)
def test_every_entry_names_its_source_file(sig_id: str) -> None:
    assert_names_source(sig_id, TRANSPORT_SOURCE_FILE)


@pytest.mark.parametrize("sig_id", NOT_FATAL)
def test_survivable_entries_are_not_fatal(sig_id: str) -> None:
    sig = load_catalog().get(sig_id)
    assert sig is not None and not sig.fatal

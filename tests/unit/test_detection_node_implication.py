"""Which node a verdict implicates (docs/detection.md, "Which node a verdict implicates").

Each case in the `*_reads_*` / `*_implicates_*` tests reads differently on the code before this change (a host
missed, or a program name, a container id or a survivor implicated); the look-alike cases guard what must stay
no host.
"""

from __future__ import annotations

import pytest

from trainguard.attribution.rules import attribute
from trainguard.detection.analyzer import LogAnalyzer
from trainguard.detection.classify import classify_text
from trainguard.detection.evaluation import Outcome, Sample
from trainguard.detection.locate import locate, valid_node_name
from trainguard.detection.normalize import match_node, normalize, same_host, short_name
from trainguard.models import Attribution, Category, Finding, FindingSource

XID_79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus."
IB_ERROR = (
    "{host}:5776:5902 [0] transport/net_ib.cc:1296 NCCL WARN NET/IB : Got completion from peer "
    "peer-b<33092> with error 12, opcode 0, len 0, vendor err 129"
)


@pytest.mark.parametrize(
    ("line", "nodes"),
    [
        # UCX's `[host:pid:thread]` (openucx/ucx src/ucs/debug/log.c, UCS_LOG_PROC_DATA_FMT "[%s:%-5d:%s]")
        # with a host that begins with a digit, behind UCX's `[sec.usec]` stamp.
        (
            "[1700554343.440877] [10-192-80-132:7356 :0]            sock.c:323  UCX  ERROR   connect(fd=48, "
            "dest_addr=172.17.0.1:42887) failed: Connection refused",
            ("10-192-80-132",),
        ),
        # Open MPI's `[host:pid] ` (opal/util/output.c, opal_output_init: "[%s:%05d] ";
        # opal/util/stacktrace.c, HOSTFORMAT).
        ("[gpu-a17:07356] *** An error occurred in MPI_Allgather", ("gpu-a17",)),
        (
            "[h16n18:57926] pml_ucx.c:424  Error: ucp_ep_create(proc=3) failed: Destination is unreachable",
            ("h16n18",),
        ),
        (
            "[gpu-3:31150] [ 6] /usr/lib64/ucx/libuct_ib.so.0"
            "(uct_ib_mlx5_completion_with_err+0x4c9)[0x7f26a15c7079]",
            ("gpu-3",),
        ),
        # NCCL's `host:pid:tid [gpu]` with a host named after its address.
        (IB_ERROR.format(host="10-0-3-17"), ("10-0-3-17",)),
        # srun's per-task verdict with such a host.
        ("srun: error: 10-0-3-17: task 3: Bus error", ("10-0-3-17",)),
    ],
)
def test_locate_reads_hosts_in_the_printers_forms(line: str, nodes: tuple[str, ...]) -> None:
    assert locate(line).nodes == nodes


@pytest.mark.parametrize(
    "line",
    [
        XID_79,  # the driver's `NVRM: ` prefix is no host
        "kernel: NVRM: Xid (PCI:0000:01:00): 62, 323f0f30 0000c3d8",
        IB_ERROR.format(host="a1b2c3d4e5f6"),  # a Docker container's default hostname: its id
        "[INFO:1234] starting",  # a level and a number in brackets: no digit or hyphen in the name
        "[0000:3b:00.0] PCI address",  # a PCI address is no host
        "12:3456:78 [0] NCCL WARN x",  # a clock, not `host:pid:tid`
        "2023-06-15:12:34 [0] NCCL WARN x",  # a date
    ],
)
def test_locate_look_alikes_name_no_host(line: str) -> None:
    assert locate(line).nodes == ()


def test_valid_node_name_takes_digit_first_names_but_no_numbers() -> None:
    assert valid_node_name("10-192-80-132")
    assert valid_node_name("1n2")
    for not_a_host in ("10.0.0.1", "2.14.3", "12345", "2023-06-15", "nvrm", "python3", "abcdef012345"):
        assert not valid_node_name(not_a_host), not_a_host


def test_syslog_host_that_begins_with_a_digit_is_read() -> None:
    norm = normalize("Nov 30 12:00:00 10-192-80-132 kernel: " + XID_79)
    assert norm.host == "10-192-80-132"
    assert norm.text == XID_79


def test_syslog_address_is_stripped_but_no_host() -> None:
    norm = normalize("Nov 30 12:00:00 10.0.0.5 kernel: " + XID_79)
    assert norm.host is None
    assert norm.text == XID_79


def test_xid_verdict_implicates_the_syslog_host_not_the_driver() -> None:
    bare = classify_text(XID_79)
    assert bare.category == "gpu_hardware" and bare.nodes == []  # was ["NVRM"]
    stamped = classify_text("Nov 30 12:00:00 10-192-80-132 kernel: " + XID_79)
    assert stamped.category == "gpu_hardware" and stamped.nodes == ["10-192-80-132"]


def test_interconnect_verdict_implicates_the_open_mpi_and_ucx_host() -> None:
    log = "\n".join(
        [
            "[1700554343.440877] [10-192-80-132:7356 :0]            sock.c:323  UCX  ERROR   connect(fd=48, "
            "dest_addr=172.17.0.1:42887) failed: Connection refused",
            "[10-192-80-132.example.com:07356] pml_ucx.c:477  Error: Failed to resolve UCX endpoint "
            "for rank 3",
            "[10-192-80-132:07356] *** An error occurred in MPI_Allgather",
        ]
    )
    got = classify_text(log)
    assert got.category == "interconnect"
    assert got.nodes == ["10-192-80-132"]


def test_container_id_hostname_implicates_no_node() -> None:
    got = classify_text(IB_ERROR.format(host="a1b2c3d4e5f6"))
    assert got.category == "interconnect" and got.nodes == []


def test_cascade_only_verdict_implicates_no_survivor() -> None:
    """A watchdog timeout is printed by a rank that survived: its host is not the cause."""
    got = classify_text(
        "node7: [rank1]:[E ProcessGroupNCCL.cpp:821] [Rank 1] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=1, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1806789 milliseconds "
        "before timing out."
    )
    assert got.category == "nccl_timeout" and got.fatal
    assert got.nodes == []


def test_cascade_only_finding_with_a_host_decides_no_node() -> None:
    timeout = Finding(
        source=FindingSource.LOG,
        pattern_id="nccl_watchdog_timeout",
        category=Category.NCCL_TIMEOUT,
        attribution=Attribution.SYSTEM_SOFTWARE,
        cascade=True,
        nodes=("node7",),
        line_no=1,
    )
    verdict = attribute([timeout])
    assert verdict.category == Category.NCCL_TIMEOUT
    assert verdict.nodes == ()


def test_kubectl_describe_pod_node_is_the_lost_pods_node() -> None:
    """`kubectl describe pod` names the pod's node (`Node: <name>/<host IP>`); the taint manager's eviction
    event does not: the node failure implicates the one node the pod's own record names."""
    log = "\n".join(
        [
            "Name:         trainer-worker-3",
            "Namespace:    default",
            "Node:         gpu-node-7/10.0.3.17",
            "Status:       Failed",
            "Events:",
            "  Normal  TaintManagerEviction  2m  taint-eviction-controller  Marking for deletion Pod "
            "default/trainer-worker-3",
        ]
    )
    got = classify_text(log)
    assert got.category == "slurm_node_failure"
    assert got.nodes == ["gpu-node-7"]


def test_kubectl_node_record_does_not_make_an_application_error_a_node() -> None:
    log = "\n".join(
        [
            "Node:         gpu-node-7/10.0.3.17",
            "Traceback (most recent call last):",
            '  File "t.py", line 1',
            "ValueError: x",
        ]
    )
    got = classify_text(log)
    assert got.category == "python_exception" and got.nodes == []


def test_root_cause_host_behind_a_launcher_prefix_is_read() -> None:
    """torchelastic's Root Cause block (torch/distributed/elastic/multiprocessing/errors/__init__.py,
    `host      : ${hostname}`) behind a pdsh prefix: the findings in the block carry the host."""
    log = "\n".join(
        [
            "node3: Root Cause (first observed failure):",
            "node3: [0]:",
            "node3:   time      : 2024-01-01_00:00:00",
            "node3:   host      : gpu21.cluster.local",
            "node3:   rank      : 5 (local_rank: 1)",
            "node3:   exitcode  : -9 (pid: 1234)",
            "node3:   error_file: <N/A>",
            "node3:   traceback : Signal 9 (SIGKILL) received by PID 1234",
        ]
    )
    analyzer = LogAnalyzer()
    findings = analyzer.feed(log.encode() + b"\n", now=0.0) + analyzer.flush(now=0.0)
    killed = [f for f in findings if f.fatal]
    assert killed
    assert "gpu21.cluster.local" in killed[0].nodes


def test_short_name_keeps_an_address_whole() -> None:
    assert short_name("node2.cluster.local") == "node2"
    assert short_name("10.0.0.1") == "10.0.0.1"
    assert match_node("10.0.0.1", ["10.0.0.2"]) is None  # was "10.0.0.2": both shortened to "10"
    assert same_host("gpu21.cluster.local", "GPU21")
    assert not same_host("10.0.0.1", "10.0.0.2")


def _outcome(label: tuple[str, ...], got: list[str]) -> Outcome:
    sample = Sample(
        id="t",
        category="interconnect",
        attribution="infrastructure",
        fatal=True,
        source="",
        log="",
        nodes=label,
    )
    return Outcome(sample, classify_text("").model_copy(update={"nodes": got}))


def test_scorer_counts_a_host_by_full_or_short_name() -> None:
    assert _outcome(("dgx-a100-02.cse.iith.ac.in",), ["dgx-a100-02"]).nodes_ok
    assert _outcome(("10-192-80-132",), ["10-192-80-132.cls.example.com"]).nodes_ok
    assert not _outcome(("172.28.0.12",), ["172.28.0.13"]).nodes_ok


def test_application_verdict_in_a_node_category_implicates_no_node() -> None:
    """NCCL's own usage check (init.cc: two ranks on one GPU) is the program's launch, not the node's."""
    got = classify_text(
        "qgpu2018:59522:59993 [0] init.cc:795 NCCL WARN Duplicate GPU detected : rank 6 and rank 4 both on "
        "CUDA device 31000"
    )
    assert got.category == "nccl_error" and got.attribution == "application"
    assert got.nodes == []  # was ["qgpu2018"]

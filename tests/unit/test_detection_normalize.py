"""Launcher and collector prefixes are stripped once and kept as evidence; hosts are found in every common
collected-log layout and matched to Slurm's node names (safety contract clause 6, issue 12 section 1)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainguard.attribution.rules import attribute
from trainguard.detection.analyzer import LogAnalyzer
from trainguard.detection.classify import classify_text
from trainguard.detection.normalize import match_node, normalize
from trainguard.models import Category, JobSnapshot

XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."

# (layout, line, host the line names)
LAYOUTS = [
    ("pdsh/clush", f"node2: {XID}", "node2"),
    ("dmesg -T after the host", f"node2: [Mon Nov 30 12:00:00 2026] {XID}", "node2"),
    ("dmesg after the host", f"node2: [ 1234.567890] {XID}", "node2"),
    ("host after an ISO stamp", f"2026-11-30T12:00:00Z node2 kernel: {XID}", "node2"),
    ("syslog", f"Nov 30 12:00:00 node2 kernel: {XID}", "node2"),
    ("syslog with dmesg stamp", f"Nov 30 12:00:00 node2 kernel: [ 1234.567890] {XID}", "node2"),
    ("journald short-precise", f"Nov 30 12:00:00.123456 node2 kernel: {XID}", "node2"),
    ("journald short-iso", f"2026-11-30T12:00:00+0000 node2 kernel: {XID}", "node2"),
    ("journald short-iso-precise", f"2026-11-30T12:00:00.123456+00:00 node2 kernel: {XID}", "node2"),
    ("syslog FQDN", f"Nov 30 12:00:00 node2.cluster.example.org kernel: {XID}", "node2.cluster.example.org"),
    ("pdsh then syslog", f"node2: Nov 30 12:00:00 node2 kernel: {XID}", "node2"),
    ("timestamp then pdsh", f"[Mon Nov 30 12:00:00 2026] node2: {XID}", "node2"),
    ("ANSI coloured", f"\x1b[1;31mnode2: \x1b[0m{XID}", "node2"),
    ("hyphenated name", f"gpu-a17: [Mon Nov 30 12:00:00 2026] {XID}", "gpu-a17"),
]


@pytest.mark.parametrize(("layout", "line", "host"), LAYOUTS, ids=[x[0] for x in LAYOUTS])
def test_every_layout_names_the_host_and_leaves_the_kernel_text(layout: str, line: str, host: str) -> None:
    norm = normalize(line)
    assert norm.host == host, layout
    assert norm.text == XID, layout


@pytest.mark.parametrize(("layout", "line", "host"), LAYOUTS, ids=[x[0] for x in LAYOUTS])
def test_every_layout_implicates_the_slurm_node(layout: str, line: str, host: str) -> None:
    """Through the whole detector: the verdict names the node as Slurm spells it (short name)."""
    a = LogAnalyzer()
    findings = a.feed((line + "\n").encode(), now=1.0)
    job = JobSnapshot(job_id="1", state="FAILED", nodes=("node1", "node2", "gpu-a17"))
    verdict = attribute(findings, job)
    assert verdict.fatal and verdict.category == Category.GPU_HARDWARE, layout
    assert verdict.nodes == (host.split(".")[0],), layout


@pytest.mark.parametrize(
    ("line", "text", "host", "rank", "local_rank"),
    [
        ("15: RuntimeError: boom", "RuntimeError: boom", None, 15, None),
        ("[rank3]: RuntimeError: boom", "RuntimeError: boom", None, 3, None),
        ("[rank3]:[E ProcessGroupNCCL.cpp:1316] x", "[E ProcessGroupNCCL.cpp:1316] x", None, 3, None),
        ("[default0]:RuntimeError: boom", "RuntimeError: boom", None, None, 0),
        (
            "[1,26]<stdout>:Traceback (most recent call last):",
            "Traceback (most recent call last):",
            None,
            26,
            None,
        ),
        ("[0,3]<stderr>: ValueError: x", "ValueError: x", None, 3, None),
        ("gpu-07: 12: [rank12]: KeyError: 'x'", "KeyError: 'x'", "gpu-07", 12, None),
        ("\x1b[31m3: [rank3]: \x1b[0mRuntimeError: x", "RuntimeError: x", None, 3, None),
        (
            "RuntimeError: CUDA error: out of memory",
            "RuntimeError: CUDA error: out of memory",
            None,
            None,
            None,
        ),
        ("srun: error: node2: task 2: Killed", "srun: error: node2: task 2: Killed", None, None, None),
        (
            "torch.distributed.elastic.api: [WARNING] x",
            "torch.distributed.elastic.api: [WARNING] x",
            None,
            None,
            None,
        ),
        ("Error: something failed: here", "Error: something failed: here", None, None, None),
        ("(RayTrainWorker pid=4242, ip=10.0.0.7) RuntimeError: x", "RuntimeError: x", None, None, None),
        ("(pid=9) [rank2]: ValueError: x", "ValueError: x", None, 2, None),
        ("[2024-05-01 10:00:00,123] 3: KeyError: 'x'", "KeyError: 'x'", None, 3, None),
    ],
)
def test_launcher_prefixes(
    line: str, text: str, host: str | None, rank: int | None, local_rank: int | None
) -> None:
    norm = normalize(line)
    assert (norm.text, norm.host, norm.rank, norm.local_rank) == (text, host, rank, local_rank)
    if norm.text != line and "\x1b" not in line:
        assert line.endswith(norm.text) and norm.prefix == line[: len(line) - len(norm.text)]


def test_prefixed_tracebacks_are_classified_like_plain_ones() -> None:
    plain = (
        'Traceback (most recent call last):\n  File "t.py", line 1\n'
        "RuntimeError: CUDA error: an illegal memory access was encountered\n"
    )
    for prefix in ("", "3: ", "[rank3]: ", "[default3]:", "[1,3]<stdout>:", "node7: 3: [rank3]: "):
        text = "".join(prefix + line + "\n" for line in plain.splitlines())
        r = classify_text(text)
        assert (r.fatal, r.category, r.attribution) == (True, "cuda_illegal_access", "application"), prefix


def test_torchrun_localhost_is_not_a_node() -> None:
    block = (
        "Root Cause (first observed failure):\n[0]:\n  time      : 2024-03-05_07:01:51\n"
        "  host      : localhost\n  rank      : 1 (local_rank: 1)\n  exitcode  : 1 (pid: 14750)\n"
        "  error_file: <N/A>\n  traceback : To enable traceback see: https://pytorch.org/docs\n"
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n"
    )
    r = classify_text(block)
    assert "localhost" not in r.nodes


@pytest.mark.parametrize("program", ["python3", "python3.10", "python2.7", "pypy3"])
def test_an_interpreter_before_a_host_assert_is_not_a_node(program: str) -> None:
    r = classify_text(
        f"{program}: ../csrc/index.cc:57: void take(int): Assertion `idx < size' failed.\n"
        "Aborted (core dumped)\n"
    )
    assert r.fatal and program not in r.nodes
    assert normalize(f"{program}: message").host is None


def test_a_node_named_with_digits_still_prefixes_a_line() -> None:
    assert normalize("gpu3: message").host == "gpu3"


@pytest.mark.parametrize(
    ("name", "nodes", "expected"),
    [
        ("node2", ("node1", "node2"), "node2"),
        ("node2.cluster.local", ("node1", "node2"), "node2"),
        ("node2", ("node1.cluster.local", "node2.cluster.local"), "node2.cluster.local"),
        ("NODE2", ("node2",), "node2"),
        ("node3", ("node1", "node2"), None),
        ("node22", ("node2",), None),
    ],
)
def test_node_names_match_fqdn_and_short(name: str, nodes: tuple[str, ...], expected: str | None) -> None:
    assert match_node(name, nodes) == expected


# -- noise never changes a verdict's nodes -----------------------------------------------------------------

FATAL_BLOCKS = [
    (f"node2: [Mon Nov 30 12:00:00 2026] {XID}", ("node2",)),
    (f"Nov 30 12:00:00 node3 kernel: {XID}", ("node3",)),
    ("srun: error: Node failure on node4", ("node4",)),
    (f"2026-11-30T12:00:00+0000 node1.cluster.local kernel: {XID}", ("node1",)),
]
NOISE_TEMPLATES = [
    "{host}: NCCL INFO Channel 00/0{n} : {n} -> {m} via P2P/IPC",
    "{host}:{n}:{m} [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB",
    "[rank{n}]: ConnectionError: connection reset by peer, retrying ({n}/9)",
    "{n}: WARNING:root:caught RuntimeError: transient, continuing",
    " iteration {n:8d}/  100000 | elapsed time per iteration (ms): 410.{m} | lm loss: 2.{m}",
    "Nov 30 12:00:0{d} {host} systemd[1]: Started Session {n} of user slurm.",
    "{host}: [Mon Nov 30 12:00:0{d} 2026] mlx5_core 0000:5e:00.0: mlx5_fw_tracer_handle_traces:{n}",
    "[default{d}]:UserWarning: TypedStorage is deprecated",
    "[1,{n}]<stdout>: step {m} done",
]
noise_line = st.builds(
    lambda tpl, host, n, m, d, junk: tpl.format(host=host, n=n, m=m, d=d) + junk,
    st.sampled_from(NOISE_TEMPLATES),
    st.sampled_from(["node1", "node2", "node3", "node4", "node9", "login1", "node5.cluster.local"]),
    st.integers(0, 999),
    st.integers(0, 999),
    st.integers(0, 9),
    st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), max_size=20),
)


@settings(max_examples=60, deadline=None)
@given(
    block=st.sampled_from(FATAL_BLOCKS),
    before=st.lists(noise_line, max_size=12),
    after=st.lists(noise_line, max_size=12),
)
def test_noise_around_a_fatal_line_never_changes_its_nodes(
    block: tuple[str, tuple[str, ...]], before: list[str], after: list[str]
) -> None:
    fatal, nodes = block
    text = "\n".join([*before, fatal, *after]) + "\n"
    job = JobSnapshot(job_id="1", state="FAILED", nodes=("node1", "node2", "node3", "node4"))
    a = LogAnalyzer()
    verdict = attribute(a.feed(text.encode(), now=1.0) + a.flush(now=2.0), job)
    alone = LogAnalyzer()
    expected = attribute(alone.feed((fatal + "\n").encode(), now=1.0), job)
    assert verdict.fatal and verdict.nodes == expected.nodes == nodes
    assert verdict.category == expected.category


@pytest.mark.parametrize(
    ("line", "node"),
    [
        (
            "(pid=9) 2024-05-11 14:10:52.227 gpu-12:2657:2658 [0] alloc.h:102 NCCL WARN Cuda failure 1",
            "gpu-12",
        ),
        (
            "[g07r1n14:27251:0:27251] ib_mlx5_log.c:143  Transport retry count exceeded on mlx5_0:1/IB",
            "g07r1n14",
        ),
        (
            "[1506866470.74] [clx-065:1411 :0]  dc_verbs.c:633  UCX  ERROR Send completion with error",
            "clx-065",
        ),
        ("srun: error: nid04277: task 1: Segmentation fault (core dumped)", "nid04277"),
    ],
)
def test_hosts_inside_library_prefixes(line: str, node: str) -> None:
    from trainguard.detection.locate import locate

    assert locate(line).nodes == (node,)

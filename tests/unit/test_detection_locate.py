"""Which node a log line names, from the prefixes launchers, NCCL and node-log collectors put on it."""

from __future__ import annotations

import pytest

from trainguard.detection.locate import locate


@pytest.mark.parametrize(
    ("line", "nodes", "rank"),
    [
        ("node2: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.", ("node2",), None),
        (
            "gpu07: [ 1234.5678] NVRM: Xid (PCI:0000:3b:00): 48, An uncorrectable double bit error",
            ("gpu07",),
            None,
        ),
        ("gpu-a17:12345:12399 [3] NCCL WARN NET/IB : Got completion from peer", ("gpu-a17",), None),
        (
            "[rank3]:[E ProcessGroupNCCL.cpp:1316] [Rank 3] Watchdog caught collective operation timeout",
            (),
            3,
        ),
        ("  12: Traceback (most recent call last):", (), 12),
        ("Error: something failed: here", (), None),  # a word and a colon is not a host prefix
        ("rm -rf /; echo: NVRM: Xid 79", (), None),  # not a valid node name
    ],
)
def test_locate(line: str, nodes: tuple[str, ...], rank: int | None) -> None:
    where = locate(line)
    assert where.nodes == nodes
    assert where.rank == rank

"""NVIDIA's Xid catalog as data: every documented code has its resolution bucket and a class, and the
detector applies it to real driver lines (issue 12 section 1)."""

from __future__ import annotations

import pytest

from trainguard.attribution.rules import attribute
from trainguard.detection.analyzer import LogAnalyzer
from trainguard.detection.catalog import load_catalog
from trainguard.detection.classify import classify_text
from trainguard.detection.xid import BUCKET_CLASSES, CLASSES, classify_xid, xid_table
from trainguard.models import Attribution, Category, JobSnapshot

TABLE = xid_table()
CATALOG = load_catalog()
FAILED = JobSnapshot(job_id="1", state="FAILED", nodes=("node1", "node2"))


def test_the_table_lists_every_code_nvidia_documents() -> None:
    assert sorted(TABLE) == list(range(1, 163))  # 1..162, no gaps
    assert all(
        entry.bucket in BUCKET_CLASSES or entry.bucket == "FOLLOW_PREVIOUS_XID" for entry in TABLE.values()
    )
    assert {e.klass.name for e in TABLE.values()} == set(CLASSES)


@pytest.mark.parametrize("code", sorted(TABLE))
def test_every_code_is_detected_with_its_class(code: int) -> None:
    entry = TABLE[code]
    line = f"NVRM: Xid (PCI:0000:3b:00): {code}, pid=1234, name=python, {entry.mnemonic}"
    m = CATALOG.match_line(line)
    assert m is not None and m.signature.id == f"xid_{entry.klass.name}"
    assert m.groups["xid"] == str(code) and m.groups["pci"] == "0000:3b:00"
    assert m.signature.fatal == (entry.klass.name != "informational")
    found = LogAnalyzer().feed(f"node2: {line}\n".encode(), now=1.0)
    assert bool(found) == m.signature.fatal
    if found:
        assert found[0].nodes == ("node2",) and f"xid={code}" in found[0].detail


@pytest.mark.parametrize(
    ("code", "klass"),
    [
        (13, "application"),  # graphics exception: restart the application
        (31, "application"),  # MMU fault
        (43, "informational"),
        (45, "cascade"),  # preemptive channel removal follows another fault
        (48, "hardware"),  # double-bit ECC
        (63, "informational"),  # page retirement event: not fatal by itself
        (64, "hardware"),
        (74, "hardware"),  # NVLink
        (79, "hardware"),  # fallen off the bus
        (92, "informational"),
        (94, "contained"),
        (95, "hardware"),
        (119, "hardware"),  # GSP RPC timeout
        (121, "informational"),  # C2C: NVIDIA says ignore
        (140, "hardware"),
        *((c, "hardware") for c in range(144, 151)),  # NVLink5 (Blackwell) errors
        (154, "cascade"),  # recovery action changed: applies to the earlier Xid
        (999, "hardware"),  # newer than the table: NVIDIA's usual reset
    ],
)
def test_published_buckets_become_the_expected_class(code: int, klass: str) -> None:
    assert classify_xid(code).klass.name == klass


def test_nvlink5_xids_that_say_nonfatal_are_informational() -> None:
    line = "NVRM: Xid (PCI:0018:01:00): 145, RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2 0x00000008)"
    assert classify_xid(145, line).klass.name == "informational"
    assert not classify_text(line + "\n").fatal
    assert (
        classify_xid(145, "NVRM: Xid (PCI:0018:01:00): 145, RLW_RXPIPE Fatal XC0 i0 Link 13").klass.name
        == "hardware"
    )


def test_caused_by_previous_xid_is_a_cascade() -> None:
    assert classify_xid(13, "Xid 13 ... (caused by previous Xid)").klass.name == "cascade"


def test_a_cascade_points_back_to_the_earlier_xid() -> None:
    text = (
        "node2: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n"
        "node2: NVRM: Xid (PCI:0000:3b:00): 154, GPU recovery action changed from 0x0 (None) "
        "to 0x2 (Node Reboot Required)\n"
    )
    a = LogAnalyzer()
    verdict = attribute(a.feed(text.encode(), now=1.0), FAILED)
    assert verdict.pattern_ids[0] == "xid_hardware" and verdict.nodes == ("node2",)
    assert verdict.confidence >= 0.9


def test_a_cascade_alone_decides_with_low_confidence() -> None:
    r = classify_text("node2: NVRM: Xid (PCI:0000:3b:00): 154, GPU recovery action changed\n")
    assert r.fatal and r.category == "gpu_hardware" and r.confidence < 0.5


def test_informational_codes_alone_are_not_fatal() -> None:
    for code in (43, 63, 92, 121):
        r = classify_text(f"NVRM: Xid (PCI:0000:3b:00): {code}, informational\n")
        assert not r.fatal, code


def test_application_xids_do_not_blame_the_node() -> None:
    a = LogAnalyzer()
    verdict = attribute(a.feed(b"node2: NVRM: Xid (PCI:0000:3b:00): 31, pid=9, MMU Fault\n", now=1.0), FAILED)
    assert verdict.category == Category.CUDA_ILLEGAL_ACCESS and verdict.attribution == Attribution.APPLICATION
    assert verdict.nodes == ()

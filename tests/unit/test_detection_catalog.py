from __future__ import annotations

import subprocess

import pytest

from trainguard.detection.catalog import CatalogError, load_catalog, parse_catalog, to_ere
from trainguard.detection.prefilter import ENGINES, Prefilter

CATALOG = load_catalog()


def test_catalog_covers_the_required_families() -> None:
    categories = {s.category.value for s in CATALOG.signatures}
    for needed in (
        "nccl_timeout",
        "nccl_error",
        "cuda_oom",
        "cuda_illegal_access",
        "gpu_hardware",
        "interconnect",
        "python_exception",
        "segfault",
        "killed_oom_host",
        "signal_kill",
        "data_loader",
        "storage_io",
        "slurm_node_failure",
        "preemption_or_timelimit",
        "hang",
    ):
        assert needed in categories
    assert CATALOG.version >= 1
    assert any(s.cascade for s in CATALOG.signatures)


@pytest.mark.parametrize("sig", CATALOG.signatures, ids=lambda s: s.id)
def test_examples_match_their_own_signature_first(sig) -> None:  # type: ignore[no-untyped-def]
    assert sig.examples, f"{sig.id} has no examples"
    for line in sig.examples:
        m = CATALOG.match_line(line)
        assert m is not None and sig.id in (m.signature.id, m.signature.parent), (line, m and m.signature.id)
    for line in sig.counter_examples:
        assert sig.match(line) is None, line


def test_benign_look_alikes_match_nothing() -> None:
    benign = [
        "host-a:1:2 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.0.0.1<0>",
        "node2:14159:14159 [0] NCCL INFO NET/Plugin : Plugin load (libnccl-net.so) returned 2 : "
        "libnccl-net.so: cannot open shared object file: No such file or directory",
        "host:1:1 [0] NCCL WARN NCCL_SOCKET_IFNAME set to eth0",
        "Namespace(timeout=1800, ddp_timeout=1800, init_method='env://')",
        "[deepscale] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 1048576.0, reducing to 524288.0",
        "Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to 32768.0",
        "eval | error_rate: 0.0132 | wer: 4.1",
        "WARNING: retrying (Retry(total=4, connect=None)) after connection broken",
        "UserWarning: TypedStorage is deprecated",
    ]
    for line in benign:
        assert CATALOG.match_line(line) is None, line


def test_grep_export_matches_the_same_examples() -> None:
    for sig in CATALOG.signatures:
        for line in sig.examples:
            proc = subprocess.run(
                ["grep", "-E", "-c", "-e", to_ere(sig.pattern)], input=line, capture_output=True, text=True
            )
            assert proc.stdout.strip() == "1", (sig.id, line, proc.stderr)


def test_bad_catalogs_are_refused_with_the_entry_named() -> None:
    with pytest.raises(CatalogError, match="x1"):
        parse_catalog(
            "signatures:\n - {id: x1, regex: '(', keywords: [a], category: hang, attribution: none}\n"
        )
    with pytest.raises(CatalogError, match="missing field"):
        parse_catalog("signatures:\n - {id: x2, keywords: [a], category: hang, attribution: none}\n")
    with pytest.raises(CatalogError, match="duplicate"):
        entry = " - {id: d, regex: a, keywords: [a], category: hang, attribution: none}\n"
        parse_catalog("signatures:\n" + entry + entry)
    with pytest.raises(CatalogError):
        parse_catalog(
            "signatures:\n - {id: x3, regex: a, keywords: [a], category: nope, attribution: none}\n"
        )


@pytest.mark.parametrize("engine", ENGINES)
def test_prefilter_engines_agree(engine: str) -> None:
    chunk = (
        b"plain line\n"
        b"node-1:1:2 [0] NCCL INFO Watchdog caught collective operation timeout\n"
        b"\xff\xfe garbage \x00 bytes\n"
        b"checkpoint saving checkpoint and Xid\n"
        b"tail\n"
    )
    pf = Prefilter(["Watchdog caught", "Xid", "saving checkpoint", "checkpoint"], engine=engine)
    if engine != "python" and pf.engine != engine:
        pytest.fail(f"{engine} is a declared dependency but is not installed")
    assert [chunk[s:e] for s, e in pf.lines(chunk)] == [
        b"node-1:1:2 [0] NCCL INFO Watchdog caught collective operation timeout",
        b"checkpoint saving checkpoint and Xid",
    ]
    assert pf.present(b"saving checkpoint and Xid") == {1, 2, 3}

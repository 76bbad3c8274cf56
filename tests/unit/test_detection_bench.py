from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "scanner_bench.py"


def test_scanner_bench_smoke(capsys: pytest.CaptureFixture[str]) -> None:
    spec = importlib.util.spec_from_file_location("scanner_bench", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--size-mb", "2", "--nodes", "4"]) == 0
    out = capsys.readouterr().out
    assert "trainguard LogAnalyzer" in out and "MB/s" in out and "peak RSS" in out
    assert " 3 findings" in out  # the Xid, watchdog and SIGKILL lines of the generated tail

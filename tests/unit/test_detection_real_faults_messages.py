"""Real faults in real PyTorch jobs that TrainGuard misread, found by tests/e2e/test_real_torch_faults.py.

That test injects real faults into real torchrun jobs (PyTorch 2.13, CPU, gloo) and requires each captured log
to read as docs/detection.md's Categories table says. One misread had a general fix in the catalog:

- torch.save of a checkpoint to a full device (/dev/full, ENOSPC on every write): PyTorch 2.13's archive
  writer writes through a C++ std::ofstream (caffe2/serialize/inline_container.cc) and the failure surfaced
  as libstdc++'s `RuntimeError: basic_ios::clear: iostream error` (libstdc++-v3/include/bits/basic_ios.tcc,
  src/c++11/cxx11-ios_failure.cc), with no errno and no PytorchStreamWriter message. The catch-all
  python_exception_line read it as the program's own exception (python_exception, application). The new
  entry cxx_iostream_failure reads it as storage_io (infrastructure), like PyTorch's other checkpoint write
  failures.

Each positive case below fails on the code before this change (it read python_exception / application); the
look-alike does not read fatal; the entry names its source files.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.catalog_sources import assert_names_source, assert_not_fatal, assert_read_as
from trainguard.attribution.rules import attribute
from trainguard.detection.analyzer import LogAnalyzer
from trainguard.detection.classify import classify_text

STORAGE = ("storage_io", "infrastructure")

# Captured from the real run (torchrun --standalone, 2 ranks; FAULT=enospc), from rank 0's traceback on; only
# the paths are shortened (/venv for the virtual environment, /job for the test's directory).
ENOSPC_TORCHRUN_LOG = (
    Path(__file__).resolve().parents[1] / "fixtures" / "pytorch" / "torchrun_save_dev_full_rank0.out"
).read_text()

LINES = [
    "[rank0]: RuntimeError: basic_ios::clear: iostream error",  # torchrun's per-rank prefix
    "RuntimeError: basic_ios::clear: iostream error",
    # any C++ program whose stream throws on a full disk (libstdc++'s terminate handler prints what())
    "terminate called after throwing an instance of 'std::__ios_failure'\n"
    "  what():  basic_ios::clear: iostream error",
]

LOOK_ALIKES = [
    "basic_ios::clear() resets the stream state flags",
    "see basic_ios::clear and basic_ios::exceptions for the stream's error handling",
]


@pytest.mark.parametrize("text", LINES)
def test_iostream_failure_reads_as_storage(text: str) -> None:
    assert_read_as(text, STORAGE, "cxx_iostream_failure")


def test_real_enospc_torchrun_log_reads_as_storage_statically_and_streamed() -> None:
    assert_read_as(ENOSPC_TORCHRUN_LOG, STORAGE, "cxx_iostream_failure")
    r = classify_text(ENOSPC_TORCHRUN_LOG)
    assert r.evidence and "basic_ios::clear: iostream error" in r.evidence[0]
    analyzer = LogAnalyzer()
    data = ENOSPC_TORCHRUN_LOG.encode()
    findings = analyzer.feed(data[:4096], now=0.0) + analyzer.feed(data[4096:], now=1.0)
    findings += analyzer.flush(now=2.0)
    verdict = attribute(findings)
    assert (verdict.category.value, verdict.attribution.value) == STORAGE


@pytest.mark.parametrize("text", LOOK_ALIKES)
def test_look_alikes_are_not_fatal(text: str) -> None:
    assert_not_fatal(text)


def test_the_entry_names_its_sources() -> None:
    assert_names_source("cxx_iostream_failure")

"""Real faults in real PyTorch jobs that TrainGuard misread, found by tests/e2e/test_real_torch_faults.py.

That test injects real faults into real torchrun jobs (PyTorch 2.13, CPU, gloo) and requires each captured log
to read as docs/detection.md's Categories table says. Two misreads had a general fix in the catalog:

- torch.save of a checkpoint to a full device (/dev/full, ENOSPC on every write): PyTorch 2.13's archive
  writer writes through a C++ std::ofstream (caffe2/serialize/inline_container.cc) and the failure surfaced
  as libstdc++'s `RuntimeError: basic_ios::clear: iostream error` (libstdc++-v3/include/bits/basic_ios.tcc,
  src/c++11/cxx11-ios_failure.cc), with no errno and no PytorchStreamWriter message. The catch-all
  python_exception_line read it as the program's own exception (python_exception, application). The new
  entry cxx_iostream_failure reads it as storage_io (infrastructure), like PyTorch's other checkpoint write
  failures.
- a worker SIGTERMed from outside: torchrun logs its first failed worker once, `failed (exitcode: -15)
  local_rank: N ...` (torch/distributed/elastic/multiprocessing/api.py, SubprocessContext._poll); only
  cascades read the log (sigterm_received, elastic_child_failed) and the survivor's gloo `Connection reset by
  peer` (gloo_peer_lost) decided: nccl_error / infrastructure, the network blamed for a kill. The new entry
  elastic_first_failure_sigterm reads that line as signal_kill / unknown, as sigkill reads `exitcode: -9`;
  the -15 rows of torchrun's root-cause table, also printed for the workers torchrun tears down itself, are
  not read by it.

Each positive case below fails on the code before this change (it read python_exception / application, or
nccl_error / infrastructure for the SIGTERM log); the look-alikes do not read fatal through the new entries
(and a torchrun log whose first failure is another rank's keeps its verdict); the entries name their sources.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.catalog_sources import assert_names_source, assert_not_fatal, assert_read_as
from trainguard.attribution.rules import attribute
from trainguard.detection.analyzer import LogAnalyzer
from trainguard.detection.classify import classify_text

STORAGE = ("storage_io", "infrastructure")
SIGNAL = ("signal_kill", "unknown")
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "pytorch"

# Captured from the real run (torchrun --standalone, 2 ranks; FAULT=enospc), from rank 0's traceback on; only
# the paths are shortened (/venv for the virtual environment, /job for the test's directory).
ENOSPC_TORCHRUN_LOG = (FIXTURES / "torchrun_save_dev_full_rank0.out").read_text()
# The whole real run (FAULT=sigterm: rank 1 SIGTERMed by the test at step 3 or later), paths shortened alike.
SIGTERM_TORCHRUN_LOG = (FIXTURES / "torchrun_sigterm_rank1.out").read_text()

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


SIGTERM_FIRST_FAILURE = [
    "E1202 04:37:58.374000 16151 torch/distributed/elastic/multiprocessing/api.py:1002] "
    "failed (exitcode: -15) local_rank: 1 (pid: 16955) of binary: /venv/bin/python3",
    "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -15) local_rank: 0 (pid: 1234) of "
    "binary: /usr/bin/python",  # the older logger format
]

# torchrun's root-cause table prints -15 for the workers it terminated itself too; its SIGTERMs are notices.
SIGTERM_LOOK_ALIKES = [
    "  exitcode  : -15 (pid: 6869)  (SIGTERM)",
    "W1202 04:31:35.457000 6312 /venv/lib/python3.11/site-packages/torch/distributed/elastic/multiprocessing/"
    "api.py:1028] Sending process 6869 closing signal SIGTERM",
    "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -150) local_rank: 0 (pid: 1) of x",
]


@pytest.mark.parametrize("text", SIGTERM_FIRST_FAILURE)
def test_torchrun_first_failure_by_sigterm_reads_as_a_signal_kill(text: str) -> None:
    assert_read_as(text, SIGNAL, "elastic_first_failure_sigterm")


def test_real_sigterm_torchrun_log_reads_as_a_signal_kill_not_the_gloo_cascade() -> None:
    assert_read_as(SIGTERM_TORCHRUN_LOG, SIGNAL, "elastic_first_failure_sigterm")
    r = classify_text(SIGTERM_TORCHRUN_LOG)
    assert "gloo_peer_lost" in r.pattern_ids  # still recorded, no longer deciding
    analyzer = LogAnalyzer()
    data = SIGTERM_TORCHRUN_LOG.encode()
    findings = []
    for i in range(0, len(data), 4096):
        findings += analyzer.feed(data[i : i + 4096], now=float(i // 4096))
    findings += analyzer.flush(now=100.0)
    verdict = attribute(findings)
    assert (verdict.category.value, verdict.attribution.value) == SIGNAL


@pytest.mark.parametrize("text", SIGTERM_LOOK_ALIKES)
def test_sigterm_look_alikes_are_not_read_by_the_new_entry(text: str) -> None:
    assert "elastic_first_failure_sigterm" not in classify_text(text).pattern_ids
    assert classify_text(text).category != "signal_kill"


def test_a_torchrun_teardown_sigterm_does_not_take_the_verdict() -> None:
    # the ENOSPC run: rank 1 was SIGTERMed by torchrun after rank 0 failed; its -15 rows stay unread
    assert "elastic_first_failure_sigterm" not in classify_text(ENOSPC_TORCHRUN_LOG).pattern_ids
    assert "exitcode  : -15" in ENOSPC_TORCHRUN_LOG


def test_the_sigterm_entry_names_its_source() -> None:
    assert_names_source("elastic_first_failure_sigterm")

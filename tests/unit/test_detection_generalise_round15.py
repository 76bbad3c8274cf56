"""Fifteenth corpus round (issue 12 section 1): generalised from the round's tuning misses only.

Round 15 added 28 excerpts, found by the kinds the held-out part reads worst after round 13 (interconnect,
slurm_node_failure, python_exception, segfault: kind-informed, like rounds 8, 11 and 13), split by the stored
rule and committed before the classifier ran on them. Its tuning misses, each generalised from the program
that prints the text, not from an excerpt:
- an RDMA error completion as perftest reports it (pub651, soft-iWARP's ib_send_bw, read healthy):
  ` Completion with error at client|server`, `Failed status N: wr_id N syndrom 0x..`, `Failed to complete
  run_iter_* function successfully` (perftest_resources.c);
- ParaStation MPI's InfiniBand errors (pub660, FESOM2 on JUWELS, read healthy): pscom's psoib plugin
  printing `<PSP:r<rank>:ib:ibv_poll_cq(): ...wrong Opcode>` / `Failed send request (status N : ...)`;
- a Flux job-manager prolog that fails (pub670, flux-core#7003, read healthy): the fatal (severity 0)
  `type=prolog` job exception and perilog's `prolog exited with code=N` / `Failed to drain ranks with
  failed prolog`.
Every positive case below fails on the round-13 code (the look-alikes and guards pass on both).
"""

from __future__ import annotations

import pytest

from trainguard.detection.classify import classify_text

# ---------------------------------------------------------------- perftest's error completions


@pytest.mark.parametrize(
    "text",
    [
        " Completion with error at server:\n Failed status 5: wr_id 0 syndrom 0xf9\n",
        "Completion with error at client\n  Failed status 12: wr_id 0 syndrom 0x81\nscnt=64, ccnt=0\n",
        " Failed to complete run_iter_lat_write function successfully\n",
    ],
)
def test_an_rdma_error_completion_as_perftest_prints_it(text: str) -> None:
    r = classify_text(text)
    assert (r.fatal, r.category, r.attribution) == (True, "interconnect", "infrastructure"), text
    assert "rdma_benchmark_or_provider_error_cqe" in r.pattern_ids


@pytest.mark.parametrize(
    "text",
    [
        " Completion with error rate 0.0 %\n",
        " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n",
        "Failed status check: retrying\n",
    ],
)
def test_perftest_look_alikes_are_not_error_completions(text: str) -> None:
    assert "rdma_benchmark_or_provider_error_cqe" not in classify_text(text).pattern_ids


# ---------------------------------------------------------------- ParaStation MPI (pscom) over InfiniBand


@pytest.mark.parametrize(
    "text",
    [
        "12: <PSP:r0000012:ib:ibv_poll_cq(): Infiniband returned the wrong Opcode 5408>\n",
        "456: <PSP:r0000456:ib:Failed send request (status 10 : remote access error). Connection broken!>\n",
        "<PSP:r0000003:ib:Failed recv request (status 5 : Work Request Flushed Error)>\n",
    ],
)
def test_parastation_mpi_infiniband_errors_are_the_fabric_s(text: str) -> None:
    r = classify_text(text)
    assert (r.fatal, r.category, r.attribution) == (True, "interconnect", "infrastructure"), text
    assert "parastation_pscom_ib_error" in r.pattern_ids


def test_parastation_connect_notes_are_not_errors() -> None:
    text = (
        "<PSP:r0000001:CONNECT (10.0.0.1,20811,0x2,r0000001) to (10.0.0.2,20812,0x3,r0000002) via openib>\n"
    )
    assert "parastation_pscom_ib_error" not in classify_text(text).pattern_ids


# ---------------------------------------------------------------- Flux's job-manager prolog failing


@pytest.mark.parametrize(
    "text",
    [
        "0.878s: job.exception fA1b2C type=prolog severity=0 prolog exited with code=1 on node12 (rank 3)\n",
        "job-manager.err[0]: Failed to drain ranks with failed prolog for fA1b2C: idset is empty\n",
        "1.204s: job.exception fA1b2C type=prolog severity=0 prolog killed by signal 9\n",
    ],
)
def test_a_flux_prolog_that_fails_is_the_site_s(text: str) -> None:
    r = classify_text(text)
    assert (r.fatal, r.category, r.attribution) == (True, "slurm_node_failure", "system_software"), text
    assert "flux_prolog_failed" in r.pattern_ids


@pytest.mark.parametrize(
    "text",
    [
        "0.101s: job.exception fA1b2C type=cancel severity=0 interrupted by ctrl-C\n",
        "job-manager.info[0]: prolog exited with code=0\n",
        "0.300s: job.exception fA1b2C type=exec severity=1 task 3: exited with exit code 1\n",
    ],
)
def test_other_flux_exceptions_and_a_clean_prolog_are_not_it(text: str) -> None:
    assert "flux_prolog_failed" not in classify_text(text).pattern_ids

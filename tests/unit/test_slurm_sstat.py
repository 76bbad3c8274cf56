"""The batch host probe: sstat's own words (captured from Slurm 22.05.8 and 24.11.5 here, the batch host's
slurmd and steps killed) say which node's slurmd could not be reached; anything else is no claim."""

from __future__ import annotations

from collections.abc import Sequence

import httpx
import pytest
from pydantic import SecretStr

from trainguard.slurm.client import SlurmClient
from trainguard.slurm.commands import sstat_batch
from trainguard.slurm.formats.sstat_text import node_not_answering
from trainguard.slurm.restd import SlurmRestClient
from trainguard.slurm.restd_token import TokenSource
from trainguard.slurm.runner import CommandError, CommandResult

DEAD = (
    "sstat: error: slurm_job_step_stat: unknown return given from node1: 9001 rc = Communication connection "
    "failure\nsstat: error: problem getting step_layout for StepId=1.batch: Communication connection "
    "failure\n"
)


def test_a_slurmd_that_does_not_answer_is_named() -> None:
    assert node_not_answering(DEAD) == ("node1", "Communication connection failure")
    timed_out = (
        "sstat: error: slurm_job_step_stat: unknown return given from gpu-a17.cl: 5004 rc = Socket timed out"
    )
    assert node_not_answering(timed_out) == ("gpu-a17.cl", "Socket timed out")


@pytest.mark.parametrize(
    "stderr",
    [
        "",  # it answered (stdout `1.batch|node1`)
        "sstat: error: No steps running for job 1\n",  # Slurm already ended the step
        "sstat: error: StepId=1.batch not found running.\n",  # 24.11's words for the same
        "sstat: error: slurm_job_step_stat: unknown return given from node1: 2017 rc = Invalid job id",
        "sstat: error: couldn't get steps for job 1\n",
    ],
)
def test_an_answer_or_any_other_error_is_no_claim(stderr: str) -> None:
    assert node_not_answering(stderr) is None


def test_the_probe_asks_only_the_batch_step_and_validates_the_job_id() -> None:
    assert sstat_batch("123_4") == ["sstat", "-j", "123_4.batch", "--noheader", "-P", "-o", "JobID"]
    with pytest.raises(ValueError):
        sstat_batch("1; scancel 2")


class Sstat:
    def __init__(self, stderr: str = "", fail: bool = False) -> None:
        self.stderr, self.fail = stderr, fail
        self.calls: list[tuple[str, ...]] = []

    async def run(self, argv: Sequence[str], *, timeout: float = 30.0, check: bool = False) -> CommandResult:
        self.calls.append(tuple(argv))
        if self.fail:
            raise CommandError(argv, None, "ssh: connection timed out", retryable=True)
        return CommandResult(tuple(argv), 0, "" if self.stderr else "7.batch\n", self.stderr)


async def test_the_client_reports_a_silent_batch_host_and_nothing_when_it_cannot_tell() -> None:
    silent = Sstat(DEAD)
    assert await SlurmClient(silent, "lab").silent_batch_host("7") == (
        "node1",
        "Communication connection failure",
    )  # type: ignore[arg-type]
    assert silent.calls == [("sstat", "-j", "7.batch", "--noheader", "-P", "-o", "JobID")]
    assert await SlurmClient(Sstat(), "lab").silent_batch_host("7") is None  # type: ignore[arg-type]
    assert await SlurmClient(Sstat(fail=True), "lab").silent_batch_host("7") is None  # type: ignore[arg-type]


async def test_slurmrestd_access_makes_no_claim() -> None:
    """slurmrestd has no step-stat request: the stall then decides as before, after the hang detector."""

    def refuse(request: httpx.Request) -> httpx.Response:
        raise AssertionError(f"no request expected, got {request.url}")

    rest = SlurmRestClient(
        "http://slurmrestd:6820",
        "trainguard",
        TokenSource(token=SecretStr("t")),
        "lab",
        transport=httpx.MockTransport(refuse),
    )
    assert await rest.silent_batch_host("7") is None

"""VictoriaLogsLogSource against a fake VictoriaLogs served over real HTTP on loopback.

VictoriaLogs cannot be installed here: tests/fakes/victorialogs.py reproduces the documented
`/select/logsql/query` answer (JSON lines with `_msg`, `_stream`, `_time`, fields) and its `limit`
argument's "newest N" behaviour, which is why the source sorts and limits with pipes instead.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fakes.victorialogs import FakeVictoriaLogs
from trainguard.logsources.base import close_source
from trainguard.logsources.factory import make_log_source
from trainguard.logsources.victorialogs import format_rfc3339_ns, parse_rfc3339_ns
from trainguard.models import JobSnapshot, LogCursor
from trainguard.settings import LogSettings
from trainguard.slurm.runner import LocalRunner

NS = 1_000_000_000
T0 = 1_700_000_000
JOB = JobSnapshot(job_id="42", submit_time=T0)


@pytest.fixture
def vlogs() -> Iterator[FakeVictoriaLogs]:
    with FakeVictoriaLogs(bearer="tok") as server:
        yield server


def _settings(url: str, **extra: object) -> LogSettings:
    base = {"backend": "victorialogs", "url": url, "bearer_token": "tok", "tenant": "3:7"}
    return LogSettings.model_validate({**base, **extra})


def test_rfc3339_nanoseconds_round_trip() -> None:
    for ns in (0, T0 * NS + 1, T0 * NS + 999_999_999):
        assert parse_rfc3339_ns(format_rfc3339_ns(ns)) == ns
    assert parse_rfc3339_ns("2023-11-14T23:13:20.5+01:00") == T0 * NS + 500_000_000


async def test_reads_oldest_first_in_pages_exactly_once(vlogs: FakeVictoriaLogs) -> None:
    lines = [(T0 * NS + i // 3, f"line {i}") for i in range(25)]  # three lines share each ns
    vlogs.push({"job_id": "42"}, lines, tenant="3:7")
    vlogs.push({"job_id": "4"}, [(T0 * NS, "prefix-lookalike job")], tenant="3:7")
    vlogs.push({"job_id": "42"}, [(T0 * NS, "other tenant")], tenant="0:0")
    source = make_log_source(_settings(vlogs.url), LocalRunner(), JOB, clock=lambda: T0 + 10)
    source._page = 4  # type: ignore[attr-defined]
    got: list[bytes] = []
    cursor = LogCursor()
    for _ in range(12):
        chunk = await source.read(cursor, 1000)
        got += chunk.data.splitlines()
        cursor = chunk.cursor
    await close_source(source)
    assert got == [line.encode() for _, line in lines]
    request = vlogs.requests[-1]
    assert request.headers["accountid"] == "3" and request.headers["projectid"] == "7"
    assert request.headers["authorization"] == "Bearer tok"


async def test_mapping_prefix_and_quoting(vlogs: FakeVictoriaLogs) -> None:
    weird = 'x" OR *'
    vlogs.push({"slurm.job": weird, "cluster": "lab"}, [(T0 * NS, "mine")], tenant="3:7")
    vlogs.push({"slurm.job": "x", "cluster": "lab"}, [(T0 * NS, "not mine")], tenant="3:7")
    settings = _settings(vlogs.url, labels={"job_id": "slurm.job"}, query_prefix='cluster:="lab"')
    source = make_log_source(
        settings, LocalRunner(), JobSnapshot(job_id=weird, submit_time=T0), clock=lambda: T0 + 5
    )
    chunk = await source.read(LogCursor(), 1000)
    await close_source(source)
    assert chunk.data == b"mine\n"

"""LokiLogSource against a fake Loki served over real HTTP on loopback.

Loki cannot be installed here: tests/fakes/loki.py reproduces the documented `query_range` answer
shape: `{"status":"success","data":{"resultType":"streams",
"result":[{"stream":{..},"values":[[ns, line]]}]}}`.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fakes.loki import FakeLoki
from trainguard.logsources.base import close_source
from trainguard.logsources.factory import make_log_source
from trainguard.logsources.http import LogBackendError
from trainguard.models import JobSnapshot, LogCursor
from trainguard.settings import LogSettings
from trainguard.slurm.runner import LocalRunner

NS = 1_000_000_000
T0 = 1_700_000_000


@pytest.fixture
def loki() -> Iterator[FakeLoki]:
    with FakeLoki(require_tenant=True, username="ops", password="s3cret") as server:
        yield server


def _settings(url: str, **extra: object) -> LogSettings:
    base: dict[str, object] = {
        "backend": "loki",
        "url": url,
        "tenant": "team-a",
        "username": "ops",
        "password": "s3cret",
    }
    return LogSettings.model_validate({**base, **extra})


JOB = JobSnapshot(job_id="42", submit_time=T0)


async def test_reads_forward_across_streams_without_duplicates(loki: FakeLoki) -> None:
    loki.push({"job_id": "42", "filename": "/o/a.out"}, [(T0 * NS + 5, "b1"), (T0 * NS + 9, "b2")], "team-a")
    loki.push({"job_id": "42", "filename": "/o/a.err"}, [(T0 * NS + 5, "a1"), (T0 * NS + 7, "a2")], "team-a")
    loki.push({"job_id": "43"}, [(T0 * NS + 6, "other job")], "team-a")
    loki.push({"job_id": "42"}, [(T0 * NS + 6, "other tenant")], "team-b")
    source = make_log_source(_settings(loki.url), LocalRunner(), JOB, clock=lambda: T0 + 10)
    try:
        seen: list[bytes] = []
        cursor = LogCursor()
        for _ in range(6):
            chunk = await source.read(cursor, 3)  # one line per read: exercises the ns dedupe
            seen += chunk.data.splitlines()
            cursor = chunk.cursor
        assert seen == [b"a1", b"b1", b"a2", b"b2"]
        loki.push({"job_id": "42", "filename": "/o/a.out"}, [(T0 * NS + 9, "b3 same ns")], "team-a")
        chunk = await source.read(cursor, 1000)
        assert chunk.data == b"b3 same ns\n" and not chunk.reset
    finally:
        await close_source(source)


async def test_many_lines_in_one_nanosecond_widen_the_page(loki: FakeLoki) -> None:
    loki.push({"job_id": "42"}, [(T0 * NS, f"line {i}") for i in range(30)], "team-a")
    source = make_log_source(_settings(loki.url), LocalRunner(), JOB, clock=lambda: T0 + 10)
    source._page = 4  # type: ignore[attr-defined]
    got: list[bytes] = []
    cursor = LogCursor()
    for _ in range(20):
        chunk = await source.read(cursor, 1000)
        got += chunk.data.splitlines()
        cursor = chunk.cursor
    await close_source(source)
    assert got == [f"line {i}".encode() for i in range(30)]


async def test_sends_tenant_and_auth_and_fails_clearly_without(loki: FakeLoki) -> None:
    loki.push({"job_id": "42"}, [(T0 * NS, "x")], "team-a")
    source = make_log_source(_settings(loki.url), LocalRunner(), JOB, clock=lambda: T0 + 10)
    await source.read(LogCursor(), 100)
    await close_source(source)
    request = loki.requests[-1]
    assert request.headers["x-scope-orgid"] == "team-a"
    assert request.headers["authorization"].startswith("Basic ")
    assert request.param("direction") == "forward"
    bad = make_log_source(_settings(loki.url, password="wrong"), LocalRunner(), JOB, clock=lambda: T0 + 10)
    with pytest.raises(LogBackendError) as info:
        await bad.read(LogCursor(), 100)
    await close_source(bad)
    assert "401" in str(info.value) and not info.value.retryable


async def test_label_mapping_and_prefix_and_hostile_job_id(loki: FakeLoki) -> None:
    weird = 'a"b\\c'
    loki.push({"slurm_job_id": weird, "cluster": "lab"}, [(T0 * NS, "found")], "team-a")
    loki.push({"slurm_job_id": weird, "cluster": "other"}, [(T0 * NS, "wrong cluster")], "team-a")
    settings = _settings(loki.url, labels={"job_id": "slurm_job_id"}, query_prefix='cluster="lab"')
    job = JobSnapshot(job_id=weird, submit_time=T0)
    source = make_log_source(settings, LocalRunner(), job, clock=lambda: T0 + 5)
    chunk = await source.read(LogCursor(), 100)
    await close_source(source)
    assert chunk.data == b"found\n"


async def test_filename_selection_when_no_job_label(loki: FakeLoki) -> None:
    loki.push({"filename": "/o/slurm-7.out"}, [(T0 * NS, "out line")], "team-a")
    loki.push({"filename": "/o/slurm-7.err"}, [(T0 * NS + 1, "err line")], "team-a")
    loki.push({"filename": "/o/slurm-70.out"}, [(T0 * NS, "not mine")], "team-a")
    job = JobSnapshot(job_id="7", submit_time=T0, stdout_path="/o/slurm-7.out", stderr_path="/o/slurm-7.err")
    settings = _settings(loki.url, labels={"job_id": "", "filename": "filename"})
    source = make_log_source(settings, LocalRunner(), job, clock=lambda: T0 + 5)
    chunk = await source.read(LogCursor(), 100)
    await close_source(source)
    assert chunk.data == b"out line\nerr line\n"


async def test_changed_query_resets(loki: FakeLoki) -> None:
    loki.push({"job_id": "42"}, [(T0 * NS, "x")], "team-a")
    source = make_log_source(_settings(loki.url), LocalRunner(), JOB, clock=lambda: T0 + 5)
    chunk = await source.read(LogCursor(source='{job_id="41"}', offset=T0 * NS + 50, identity="1"), 100)
    await close_source(source)
    assert chunk.reset and chunk.data == b"x\n"

"""Job output files read incrementally through the real LocalRunner on a temporary directory."""

from __future__ import annotations

import os
from pathlib import Path

from trainguard.logsources.combined import CombinedLogSource
from trainguard.logsources.files import FileLogSource
from trainguard.models import LogCursor
from trainguard.slurm.runner import LocalRunner


async def test_reads_incrementally_and_respects_max_bytes(tmp_path: Path) -> None:
    log = tmp_path / "slurm-1.out"
    log.write_bytes(b"iteration 1/ 10\niteration 2/ 10\n")
    source = FileLogSource(LocalRunner(), str(log))
    first = await source.read(LogCursor(), 10)
    assert first.data == b"iteration "
    assert not first.reset
    rest = await source.read(first.cursor, 1000)
    assert first.data + rest.data == log.read_bytes()
    assert rest.cursor.offset == log.stat().st_size
    with log.open("ab") as handle:
        handle.write(b"iteration 3/ 10\n")
    more = await source.read(rest.cursor, 1000)
    assert more.data == b"iteration 3/ 10\n"
    idle = await source.read(more.cursor, 1000)
    assert idle.data == b"" and idle.cursor == more.cursor


async def test_missing_file_is_empty_not_an_error(tmp_path: Path) -> None:
    source = FileLogSource(LocalRunner(), str(tmp_path / "not-yet.out"))
    chunk = await source.read(LogCursor(), 100)
    assert chunk.data == b"" and chunk.cursor == LogCursor() and not chunk.reset
    (tmp_path / "not-yet.out").write_bytes(b"hello\n")
    chunk = await source.read(chunk.cursor, 100)
    assert chunk.data == b"hello\n" and not chunk.reset


async def test_truncation_restarts_at_zero_with_reset(tmp_path: Path) -> None:
    log = tmp_path / "job.out"
    log.write_bytes(b"a long first attempt line\n")
    source = FileLogSource(LocalRunner(), str(log))
    chunk = await source.read(LogCursor(), 1000)
    log.write_bytes(b"short\n")  # same inode, smaller size
    chunk = await source.read(chunk.cursor, 1000)
    assert chunk.reset and chunk.data == b"short\n" and chunk.cursor.offset == 6


async def test_rotation_detected_by_identity(tmp_path: Path) -> None:
    log = tmp_path / "job.out"
    log.write_bytes(b"attempt 0 line one\n")
    source = FileLogSource(LocalRunner(), str(log))
    chunk = await source.read(LogCursor(), 1000)
    os.rename(log, tmp_path / "job.out.1")
    # The new file is *longer* than the old offset: only the inode says it is another file.
    log.write_bytes(b"attempt 1 line one, which is longer\n")
    chunk2 = await source.read(chunk.cursor, 1000)
    assert chunk2.reset
    assert chunk2.data == b"attempt 1 line one, which is longer\n"
    assert chunk2.cursor.identity != chunk.cursor.identity


async def test_truncated_and_regrown_past_the_offset_between_reads(tmp_path: Path) -> None:
    # Slurm truncates a requeued job's output in place: same inode, and by the next read the new
    # attempt may already have written more than the old offset.
    log = tmp_path / "job.out"
    log.write_bytes(b"attempt 0: iteration 1\n")
    source = FileLogSource(LocalRunner(), str(log))
    chunk = await source.read(LogCursor(), 1000)
    with log.open("r+b") as handle:
        handle.truncate(0)
        handle.write(b"attempt 1: starting up again, iteration 1\n")
    chunk = await source.read(chunk.cursor, 1000)
    assert chunk.reset and chunk.data == b"attempt 1: starting up again, iteration 1\n"
    again = await source.read(chunk.cursor, 1000)
    assert again.data == b"" and not again.reset


async def test_unlinked_and_recreated_may_reuse_the_inode(tmp_path: Path) -> None:
    log = tmp_path / "job.out"
    log.write_bytes(b"old\n")
    source = FileLogSource(LocalRunner(), str(log))
    chunk = await source.read(LogCursor(), 1000)
    log.unlink()
    log.write_bytes(b"new!\nmore\n")
    chunk = await source.read(chunk.cursor, 1000)
    assert chunk.reset and chunk.data == b"new!\nmore\n"


async def test_cursor_for_another_path_starts_over(tmp_path: Path) -> None:
    log = tmp_path / "b.out"
    log.write_bytes(b"0123456789\n")
    chunk = await FileLogSource(LocalRunner(), str(log)).read(LogCursor(source="/x/a.out", offset=5), 100)
    assert chunk.reset and chunk.data == b"0123456789\n"


async def test_combined_delivers_whole_lines_from_both_files(tmp_path: Path) -> None:
    out, err = tmp_path / "job.out", tmp_path / "job.err"
    out.write_bytes(b"iteration 1\niteration 2 partial")
    err.write_bytes(b"warning: x\n")
    runner = LocalRunner()
    source = CombinedLogSource([FileLogSource(runner, str(out)), FileLogSource(runner, str(err))])
    chunk = await source.read(LogCursor(), 1000)
    assert sorted(chunk.data.splitlines()) == [b"iteration 1", b"warning: x"]
    with out.open("ab") as handle:
        handle.write(b" done\n")
    chunk = await source.read(chunk.cursor, 1000)
    assert chunk.data == b"iteration 2 partial done\n"


async def test_combined_flushes_a_tail_that_stays_unfinished(tmp_path: Path) -> None:
    out, err = tmp_path / "job.out", tmp_path / "job.err"
    out.write_bytes(b"ok\nSegmentation fault")
    err.write_bytes(b"")
    runner = LocalRunner()
    source = CombinedLogSource([FileLogSource(runner, str(out)), FileLogSource(runner, str(err))])
    first = await source.read(LogCursor(), 1000)
    assert first.data == b"ok\n"
    second = await source.read(first.cursor, 1000)
    assert second.data == b"Segmentation fault\n"
    third = await source.read(second.cursor, 1000)
    assert third.data == b""


async def test_combined_reset_when_a_part_rotates(tmp_path: Path) -> None:
    out, err = tmp_path / "job.out", tmp_path / "job.err"
    out.write_bytes(b"one\n")
    err.write_bytes(b"e\n")
    runner = LocalRunner()
    source = CombinedLogSource([FileLogSource(runner, str(out)), FileLogSource(runner, str(err))])
    chunk = await source.read(LogCursor(), 1000)
    out.rename(tmp_path / "job.out.1")
    out.write_bytes(b"two\n")
    chunk = await source.read(chunk.cursor, 1000)
    assert chunk.reset and chunk.data == b"two\n"

"""Job output files, read incrementally through a Runner (this host, or the login node over SSH).

The cursor keeps the byte offset and an identity `dev:ino#crc`: the file's device and inode plus a
checksum of the bytes just before the offset. A file smaller than the offset was truncated; another
inode means it was rotated or recreated; other bytes before the offset mean it was truncated and
rewritten past our offset between two reads (Slurm truncates the output of a requeued job, and the
filesystem may hand the same inode to a recreated file). All three restart at byte 0 with
`reset=True`. The checksum costs no extra round trip: the read starts a few bytes early.
A missing file is not an error: the job may not have started yet, so the read is empty.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from trainguard.logsources.base import LogChunk
from trainguard.models import LogCursor
from trainguard.slurm.runner import Runner

CHECK_BYTES = 64


@dataclass(frozen=True)
class _Raw:
    data: bytes
    offset: int  # where `data` starts in the file
    before: bytes  # up to CHECK_BYTES bytes just before `offset`
    inode: str
    reset: bool


def _split(identity: str) -> tuple[str, str]:
    inode, _, crc = identity.partition("#")
    return inode, crc


def _crc(data: bytes) -> str:
    return f"{zlib.crc32(data):08x}"


class FileLogSource:
    def __init__(self, runner: Runner, path: str) -> None:
        self._runner = runner
        self.path = path

    async def read(self, cursor: LogCursor, max_bytes: int) -> LogChunk:
        raw = await self._read_raw(cursor, max_bytes)
        if raw is None:
            return LogChunk(b"", cursor, reset=False)
        return self._chunk(raw, len(raw.data))

    async def end_cursor(self) -> LogCursor:
        """A cursor at the file's current end (nothing before it will be read); an empty cursor
        when the file does not exist yet."""
        stat = await self._runner.stat(self.path)
        if stat is None:
            return LogCursor()
        back = min(CHECK_BYTES, stat.size)
        before = await self._read(stat.size - back, back) if back else b""
        if before is None or len(before) != back:
            return LogCursor()
        identity = f"{stat.identity}#{_crc(before)}" if stat.size else stat.identity
        return LogCursor(source=self.path, offset=stat.size, identity=identity)

    async def read_lines(self, cursor: LogCursor, max_bytes: int, *, flush_at: int = -1) -> LogChunk:
        """Like `read`, but stops after the last newline; `pending` says how much was held back.

        An unfinished last line is delivered (with a newline added) when it still ends at
        `flush_at`, i.e. when it did not grow since the previous read; a line longer than
        `max_bytes` is delivered in pieces.
        """
        raw = await self._read_raw(cursor, max_bytes)
        if raw is None:
            return LogChunk(b"", cursor, reset=False)
        data = raw.data
        cut = data.rfind(b"\n") + 1
        if not data or cut == len(data) or (cut == 0 and len(data) >= max_bytes):
            return self._chunk(raw, len(data))
        if cut == 0 and raw.offset + len(data) == flush_at and not raw.reset:
            chunk = self._chunk(raw, len(data))
            return LogChunk(data + b"\n", chunk.cursor, chunk.reset)
        chunk = self._chunk(raw, cut)
        return LogChunk(chunk.data, chunk.cursor, chunk.reset, pending=len(data) - cut)

    async def _read_raw(self, cursor: LogCursor, max_bytes: int) -> _Raw | None:
        if max_bytes <= 0:
            raise ValueError("max_bytes must be > 0")
        stat = await self._runner.stat(self.path)
        if stat is None:
            return None
        inode, crc = _split(cursor.identity)
        offset = cursor.offset
        other_file = cursor.source not in ("", self.path)
        restart = other_file or (bool(inode) and inode != stat.identity) or stat.size < offset
        if not restart and offset > 0 and crc:
            back = min(CHECK_BYTES, offset)
            data = await self._read(offset - back, back + min(max_bytes, stat.size - offset))
            if data is None:
                return None
            if len(data) >= back and _crc(data[:back]) == crc:
                return _Raw(data[back:], offset, data[:back], stat.identity, reset=False)
            restart = True
        # A first read (offset 0, no identity) is a start, not a reset.
        reset = restart and (offset > 0 or bool(inode) or other_file)
        start = 0 if restart else offset
        data = await self._read(start, min(max_bytes, stat.size - start))
        if data is None:
            return None  # removed between stat and read; the next read sees the new file (or none)
        return _Raw(data, start, b"", stat.identity, reset)

    async def _read(self, offset: int, size: int) -> bytes | None:
        if size <= 0:
            return b""
        try:
            return await self._runner.read_file(self.path, offset, size)
        except FileNotFoundError:
            return None

    def _chunk(self, raw: _Raw, take: int) -> LogChunk:
        data = raw.data[:take]
        end = raw.offset + len(data)
        tail = (raw.before + data)[-min(CHECK_BYTES, end) :] if end else b""
        identity = f"{raw.inode}#{_crc(tail)}" if end else raw.inode
        return LogChunk(data, LogCursor(source=self.path, offset=end, identity=identity), raw.reset)

"""Where Slurm commands run: on this host (`LocalRunner`) or on a login node over SSH (`SSHRunner`).

Both take argv lists. Nothing is ever handed to a local shell; over SSH the remote shell receives
`shlex.join(argv)`, so every argument arrives as one word whatever it contains.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shlex
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import asyncssh

from trainguard.models import clip

if TYPE_CHECKING:
    from trainguard.settings import ClusterSettings, SSHSettings

STDERR_CLIP = 2000
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class CommandResult:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


class CommandError(Exception):
    """A command could not run or failed. `retryable` says whether trying again later may succeed."""

    def __init__(self, argv: Sequence[str], returncode: int | None, stderr: str, *, retryable: bool) -> None:
        self.argv = tuple(argv)
        self.returncode = returncode
        self.stderr = clip(stderr.strip(), STDERR_CLIP)
        self.retryable = retryable
        name = self.argv[0] if self.argv else "?"
        sub = f" {self.argv[1]}" if len(self.argv) > 1 else ""
        super().__init__(f"{name}{sub} failed (rc={returncode}, retryable={retryable}): {self.stderr}")


@dataclass(frozen=True)
class FileStat:
    size: int
    identity: str  # "st_dev:st_ino": changes when a log file is rotated or recreated


class Runner(Protocol):
    async def run(
        self, argv: Sequence[str], *, timeout: float = 30.0, check: bool = False
    ) -> CommandResult: ...

    async def stat(self, path: str) -> FileStat | None: ...

    async def read_file(self, path: str, offset: int, max_bytes: int) -> bytes: ...

    async def close(self) -> None: ...


def _decode(data: bytes | str | None) -> str:
    if data is None:
        return ""
    if isinstance(data, str):
        return data
    return data.decode("utf-8", errors="replace")


def _checked(result: CommandResult, check: bool) -> CommandResult:
    if check and result.returncode != 0:
        raise CommandError(result.argv, result.returncode, result.stderr, retryable=False)
    return result


def _validate_argv(argv: Sequence[str]) -> tuple[str, ...]:
    args = tuple(argv)
    if not args or not args[0]:
        raise ValueError("empty argv")
    for arg in args:
        if not isinstance(arg, str) or "\x00" in arg:
            raise ValueError(f"argv elements must be strings without NUL bytes: {arg!r}")
    return args


class LocalRunner:
    """Runs commands on this host; `env` is merged over os.environ (e.g. SLURM_CONF)."""

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self._env = {**os.environ, **(env or {})}

    async def run(self, argv: Sequence[str], *, timeout: float = 30.0, check: bool = False) -> CommandResult:
        args = _validate_argv(argv)
        try:
            proc = await asyncio.create_subprocess_exec(
                *args,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=self._env,
                start_new_session=True,  # own process group, so a timeout kills its children too
            )
        except FileNotFoundError:
            raise CommandError(args, 127, f"command not found: {args[0]}", retryable=False) from None
        except OSError as err:
            raise CommandError(args, None, f"cannot start: {err}", retryable=True) from None
        try:
            out, err_bytes = await asyncio.wait_for(proc.communicate(), timeout)
        except (TimeoutError, asyncio.CancelledError) as exc:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(proc.wait(), 5)
            if isinstance(exc, asyncio.CancelledError):
                raise
            raise CommandError(args, None, f"timed out after {timeout:g} s", retryable=True) from None
        result = CommandResult(args, proc.returncode or 0, _decode(out), _decode(err_bytes))
        return _checked(result, check)

    async def stat(self, path: str) -> FileStat | None:
        try:
            st = await asyncio.to_thread(os.stat, path)
        except FileNotFoundError:
            return None
        return FileStat(size=st.st_size, identity=f"{st.st_dev}:{st.st_ino}")

    async def read_file(self, path: str, offset: int, max_bytes: int) -> bytes:
        if offset < 0 or max_bytes < 0:
            raise ValueError("offset and max_bytes must be >= 0")

        def _read() -> bytes:
            with open(path, "rb") as handle:
                handle.seek(offset)
                return handle.read(max_bytes)

        return await asyncio.to_thread(_read)

    async def close(self) -> None:
        return None


class _Slot:
    """One pooled SSH connection (created lazily, replaced when it drops)."""

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.conn: asyncssh.SSHClientConnection | None = None
        self.sftp: asyncssh.SFTPClient | None = None

    def alive(self) -> asyncssh.SSHClientConnection | None:
        if self.conn is not None and not self.conn.is_closed():
            return self.conn
        return None

    def drop(self) -> None:
        if self.conn is not None:
            self.conn.close()
        self.conn = None
        self.sftp = None


_CONNECTION_ERRORS = (OSError, asyncssh.Error, TimeoutError)


class SSHRunner:
    """Runs commands on a remote login node with asyncssh.

    Key authentication only; the host key is checked against `known_hosts` unless that is None.
    Up to `pool_size` connections are opened lazily and used round-robin; a dropped connection is
    replaced on next use, retrying with exponential backoff. A command that fails because the
    connection broke raises CommandError(retryable=True) and is *not* re-sent: callers decide,
    since scheduler actions must not run twice.
    """

    CONNECT_ATTEMPTS = 4
    BACKOFF_START_S = 0.25
    BACKOFF_MAX_S = 4.0

    def __init__(self, settings: SSHSettings) -> None:
        self._settings = settings
        bad = [k for k in settings.slurm_env if not _ENV_NAME.fullmatch(k)]
        if bad:
            raise ValueError(f"invalid environment variable name(s) in ssh.slurm_env: {bad}")
        self._slots = [_Slot() for _ in range(settings.pool_size)]
        self._next = 0
        self._closed = False

    def _pick(self) -> _Slot:
        slot = self._slots[self._next % len(self._slots)]
        self._next += 1
        return slot

    async def _connect(self) -> asyncssh.SSHClientConnection:
        s = self._settings
        known_hosts: object = None if s.known_hosts is None else os.path.expanduser(s.known_hosts)
        client_keys = [os.path.expanduser(s.key_file)] if s.key_file else ()
        delay = self.BACKOFF_START_S
        last: BaseException | None = None
        for attempt in range(self.CONNECT_ATTEMPTS):
            if attempt:
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.BACKOFF_MAX_S)
            try:
                return await asyncio.wait_for(
                    asyncssh.connect(
                        s.host,
                        port=s.port,
                        username=s.user,
                        known_hosts=known_hosts,
                        client_keys=client_keys,
                        password=None,
                        kbdint_auth=False,
                        agent_path=None,
                        config=None,
                        connect_timeout=s.connect_timeout_s,
                        keepalive_interval=15,
                        keepalive_count_max=3,
                    ),
                    s.connect_timeout_s + 1,
                )
            except asyncssh.HostKeyNotVerifiable as err:
                # A wrong host key is an attack or a misconfiguration, never a transient fault.
                raise CommandError(
                    ("ssh", s.host), None, f"host key not verifiable: {err}", retryable=False
                ) from None
            except asyncssh.PermissionDenied as err:
                raise CommandError(
                    ("ssh", s.host), None, f"authentication refused: {err}", retryable=False
                ) from None
            except _CONNECTION_ERRORS as err:
                last = err
        raise CommandError(
            ("ssh", f"{s.user}@{s.host}:{s.port}"),
            None,
            f"cannot connect after {self.CONNECT_ATTEMPTS} attempts: {last!r}",
            retryable=True,
        )

    async def _conn(self, slot: _Slot) -> asyncssh.SSHClientConnection:
        if self._closed:
            raise CommandError(("ssh",), None, "runner is closed", retryable=False)
        async with slot.lock:
            conn = slot.alive()
            if conn is None:
                slot.drop()
                slot.conn = conn = await self._connect()
            return conn

    def remote_command(self, argv: Sequence[str], timeout: float) -> str:
        """The exact string the remote shell receives (exposed for tests and audit)."""
        args = _validate_argv(argv)
        env = [f"{k}={v}" for k, v in self._settings.slurm_env.items()]
        # `timeout` on the remote side kills the command even if our channel close is ignored.
        prefix = ["timeout", "-s", "KILL", f"{max(1, int(timeout + 1))}"]
        if env:
            prefix += ["env", *env]
        return shlex.join([*prefix, *args])

    async def run(self, argv: Sequence[str], *, timeout: float = 30.0, check: bool = False) -> CommandResult:
        args = _validate_argv(argv)
        command = self.remote_command(args, timeout)
        slot = self._pick()
        conn = await self._conn(slot)
        try:
            completed = await asyncio.wait_for(conn.run(command, check=False, encoding=None), timeout)
        except TimeoutError:
            msg = f"timed out after {timeout:g} s (over SSH)"
            raise CommandError(args, None, msg, retryable=True) from None
        except _CONNECTION_ERRORS as err:
            slot.drop()
            raise CommandError(args, None, f"SSH connection failed: {err!r}", retryable=True) from None
        returncode = completed.exit_status if completed.exit_status is not None else -1
        if completed.exit_signal:
            returncode = -1
        result = CommandResult(args, returncode, _decode(completed.stdout), _decode(completed.stderr))
        return _checked(result, check)

    async def _sftp(self, slot: _Slot) -> asyncssh.SFTPClient:
        conn = await self._conn(slot)
        async with slot.lock:
            if slot.sftp is None or slot.conn is not conn:
                slot.sftp = await conn.start_sftp_client()
            return slot.sftp

    async def stat(self, path: str) -> FileStat | None:
        # SFTP attributes carry no inode, so rotation detection needs the remote stat(1).
        result = await self.run(["stat", "-L", "-c", "%d:%i:%s", "--", path], timeout=15)
        if result.returncode != 0:
            if "No such file" in result.stderr:
                return None
            raise CommandError(result.argv, result.returncode, result.stderr, retryable=False)
        try:
            dev, ino, size = result.stdout.strip().split(":")
            return FileStat(size=int(size), identity=f"{int(dev)}:{int(ino)}")
        except ValueError:
            raise CommandError(
                result.argv, 0, f"unexpected stat output {result.stdout!r}", retryable=False
            ) from None

    async def read_file(self, path: str, offset: int, max_bytes: int) -> bytes:
        if offset < 0 or max_bytes < 0:
            raise ValueError("offset and max_bytes must be >= 0")
        slot = self._pick()
        try:
            sftp = await self._sftp(slot)
            async with sftp.open(path, "rb") as handle:
                await handle.seek(offset)
                data = await handle.read(max_bytes)
        except asyncssh.SFTPNoSuchFile as err:
            raise FileNotFoundError(path) from err
        except asyncssh.SFTPError as err:
            raise CommandError(("sftp-read", path), None, str(err), retryable=False) from None
        except _CONNECTION_ERRORS as err:
            slot.drop()
            msg = f"SSH connection failed: {err!r}"
            raise CommandError(("sftp-read", path), None, msg, retryable=True) from None
        return data if isinstance(data, bytes) else data.encode()

    async def close(self) -> None:
        self._closed = True
        for slot in self._slots:
            conn = slot.conn
            slot.drop()
            if conn is not None:
                with contextlib.suppress(Exception):
                    await conn.wait_closed()


def make_runner(cluster: ClusterSettings) -> Runner:
    if cluster.runner == "ssh":
        return SSHRunner(cluster.ssh)
    return LocalRunner(cluster.slurm_env)

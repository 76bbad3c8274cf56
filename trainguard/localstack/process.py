"""Background processes of the local stack, started in their own session and stopped by pid file."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path


class BackgroundProcess:
    def __init__(
        self,
        name: str,
        base_dir: Path,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        marker: str | None = None,
    ) -> None:
        self.name = name
        self.base_dir = Path(base_dir)
        self.argv = list(argv)
        self.env = dict(env or {})
        # text that must appear in /proc/PID/cmdline, so a recycled pid is never signalled
        self.marker = marker or Path(self.argv[0]).name
        self.pid_file = self.base_dir / f"{name}.pid"
        self.log_file = self.base_dir / f"{name}.log"
        self._proc: subprocess.Popen[bytes] | None = None

    def pid(self) -> int | None:
        try:
            pid = int(self.pid_file.read_text().strip())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            stat = Path(f"/proc/{pid}/stat").read_text()
        except (OSError, ValueError):
            return None
        if self.marker not in cmdline or ") Z " in stat:
            return None
        return pid

    def start(self) -> int:
        running = self.pid()
        if running is not None:
            return running
        self.base_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_file, "ab") as out:
            proc = subprocess.Popen(
                self.argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **self.env},
                start_new_session=True,
            )
        self._proc = proc
        self.pid_file.write_text(str(proc.pid))
        return proc.pid

    def exit_status(self) -> str:
        """How the process this object started ended (`exit status 1`, `killed by SIGKILL`), for an error
        message when a daemon exits without logging why; empty while it runs or when another object started
        it."""
        code = self._proc.poll() if self._proc is not None else None
        if code is None:
            return ""
        if code >= 0:
            return f"exit status {code}"
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"

    def stop(self, timeout: float = 10.0, sig: int = signal.SIGTERM) -> None:
        pid = self.pid()
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, sig)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and self.pid() is not None:
                time.sleep(0.1)
            if self.pid() is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
        self.pid_file.unlink(missing_ok=True)

    def kill(self) -> None:
        """SIGKILL, as a crash would (crash-safety tests)."""
        self.stop(timeout=5.0, sig=signal.SIGKILL)

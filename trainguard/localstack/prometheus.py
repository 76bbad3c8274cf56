"""A real Prometheus (the Debian package's /usr/bin/prometheus) on a loopback port, for tests and demos.

It gets its own config (rendered from deploy/local/prometheus.yml.in), its own TSDB directory and a pid
file under `base_dir`; it is stopped by that pid file, never by process name.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from string import Template

TEMPLATE = Path(__file__).resolve().parents[2] / "deploy" / "local" / "prometheus.yml.in"
DEFAULT_BINARY = "/usr/bin/prometheus"


class PrometheusStartError(RuntimeError):
    pass


def prometheus_binary() -> str:
    if Path(DEFAULT_BINARY).exists():
        return DEFAULT_BINARY
    found = shutil.which("prometheus")
    if found is None:
        raise PrometheusStartError("prometheus is not installed (Debian: apt-get install prometheus)")
    return found


def _duration(seconds: float) -> str:
    return f"{max(1, round(seconds * 1000))}ms"


def render_config(
    scrape_targets: list[str],
    scrape_interval_s: float,
    template: Path = TEMPLATE,
    rule_files: Sequence[Path] = (),
) -> str:
    for target in scrape_targets:
        host, sep, port = target.rpartition(":")
        if not sep or not host or not port.isdigit() or any(c in target for c in " \"'\n{}[]"):
            raise ValueError(f"scrape target must be host:port, got {target!r}")
    config = Template(template.read_text()).substitute(
        scrape_interval=_duration(scrape_interval_s),
        # A scrape may not outlast its interval; stay just below it.
        scrape_timeout=_duration(scrape_interval_s * 0.9),
        targets=json.dumps(scrape_targets),  # a JSON list is a YAML flow sequence
    )
    if rule_files:  # alerting rules, evaluated every scrape interval (no Alertmanager here)
        config += "\nrule_files: " + json.dumps([str(Path(p).resolve()) for p in rule_files]) + "\n"
    return config


class LocalPrometheus:
    def __init__(
        self,
        base_dir: Path,
        *,
        port: int,
        scrape_targets: list[str],
        scrape_interval_s: float = 1.0,
        rule_files: Sequence[Path] = (),
    ) -> None:
        self.base_dir = Path(base_dir)
        self.port = port
        self.scrape_targets = list(scrape_targets)
        self.scrape_interval_s = scrape_interval_s
        self.rule_files = list(rule_files)
        self.config_file = self.base_dir / f"prometheus-{port}.yml"
        self.data_dir = self.base_dir / f"prometheus-{port}-data"
        self.pid_file = self.base_dir / f"prometheus-{port}.pid"
        self.log_file = self.base_dir / f"prometheus-{port}.log"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def argv(self) -> list[str]:
        return [
            prometheus_binary(),
            f"--config.file={self.config_file}",
            f"--storage.tsdb.path={self.data_dir}",
            "--storage.tsdb.retention.time=1d",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--log.level=warn",
        ]

    def pid(self) -> int | None:
        """The pid from the pid file, if that process is still a live prometheus (pids get reused)."""
        try:
            pid = int(self.pid_file.read_text().strip())
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
            stat = Path(f"/proc/{pid}/stat").read_text()
        except (OSError, ValueError):
            return None
        if comm != "prometheus" or ") Z " in stat:
            return None
        return pid

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1.0) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def start(self, timeout: float = 30.0) -> LocalPrometheus:
        if self.pid() is not None and self.ready():
            return self
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.config_file.write_text(
            render_config(self.scrape_targets, self.scrape_interval_s, rule_files=self.rule_files)
        )
        with open(self.log_file, "ab") as out:
            self._proc = subprocess.Popen(
                self.argv(),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.pid_file.write_text(str(self._proc.pid))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                self.pid_file.unlink(missing_ok=True)
                tail = self.log_file.read_text(errors="replace")[-600:]
                raise PrometheusStartError(f"prometheus exited with {self._proc.returncode}: {tail}")
            if self.ready():
                return self
            time.sleep(0.1)
        self.stop()
        raise PrometheusStartError(f"prometheus not ready after {timeout:.0f}s; see {self.log_file}")

    def stop(self, timeout: float = 10.0) -> None:
        pid = self.pid()
        if pid is not None:
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and self.pid() is not None:
                if self._proc is not None:
                    self._proc.poll()  # reap our own child so it does not linger as a zombie
                time.sleep(0.05)
            if self.pid() is not None:
                os.kill(pid, signal.SIGKILL)
        if self._proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(timeout=timeout)
            self._proc = None
        self.pid_file.unlink(missing_ok=True)

    def __enter__(self) -> LocalPrometheus:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

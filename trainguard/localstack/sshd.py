"""A private OpenSSH server on 127.0.0.1 for testing SSH mode (login-node access) on one machine.

Own config, host key, authorized_keys and client key under `base_dir`; key login only. The
known_hosts file written for the client pins this server's host key.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

from trainguard.localstack.slurm import (
    LabError,
    descendants,
    pid_if_running,
    signal_pids,
    terminate,
    wait_dead,
)
from trainguard.settings import SSHSettings

SSHD = "/usr/sbin/sshd"
CONFIG = """\
Port {port}
ListenAddress 127.0.0.1
HostKey {host_key}
PidFile {pid_file}
AuthorizedKeysFile {authorized_keys}
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PermitUserEnvironment no
Subsystem sftp internal-sftp
LogLevel INFO
MaxStartups 50:30:100
"""


class LocalSSHD:
    def __init__(self, base_dir: Path, port: int, *, user: str = "root") -> None:
        self.base_dir = Path(base_dir).resolve()
        self.port = port
        self.user = user
        self.config = self.base_dir / "sshd_config"
        self.host_key = self.base_dir / "ssh_host_ed25519_key"
        self.client_key = self.base_dir / "client_ed25519"
        self.authorized_keys = self.base_dir / "authorized_keys"
        self.known_hosts = self.base_dir / "known_hosts"
        self.pid_file = self.base_dir / "sshd.pid"
        self.log_file = self.base_dir / "sshd.log"

    def settings(self, slurm_env: Mapping[str, str] | None = None, **overrides: object) -> SSHSettings:
        """SSHSettings that reach this server with the generated client key and pinned host key."""
        values: dict[str, object] = {
            "host": "127.0.0.1",
            "port": self.port,
            "user": self.user,
            "key_file": str(self.client_key),
            "known_hosts": str(self.known_hosts),
            "slurm_env": dict(slurm_env or {}),
            "connect_timeout_s": 5.0,
        }
        values.update(overrides)
        return SSHSettings.model_validate(values)

    def _keygen(self, path: Path, comment: str) -> None:
        if path.exists():
            return
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
            check=True,
            capture_output=True,
            stdin=subprocess.DEVNULL,
        )

    def _prepare(self) -> None:
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self.base_dir.chmod(0o700)
        self._keygen(self.host_key, "trainguard-test-host")
        self._keygen(self.client_key, "trainguard-test-client")
        self.authorized_keys.write_text(Path(f"{self.client_key}.pub").read_text())
        self.authorized_keys.chmod(0o600)
        host_pub = Path(f"{self.host_key}.pub").read_text().split()
        self.known_hosts.write_text(f"[127.0.0.1]:{self.port} {host_pub[0]} {host_pub[1]}\n")
        self.config.write_text(
            CONFIG.format(
                port=self.port,
                host_key=self.host_key,
                pid_file=self.pid_file,
                authorized_keys=self.authorized_keys,
            )
        )
        # sshd refuses to start without its privilege-separation directory.
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)

    def pid(self) -> int | None:
        return pid_if_running(self.pid_file, "sshd")

    def is_running(self) -> bool:
        return self.pid() is not None

    def start(self, timeout: float = 10.0) -> None:
        """Start sshd (idempotent) and wait until it accepts TCP connections."""
        if self.is_running():
            return
        self._prepare()
        proc = subprocess.run(
            [SSHD, "-f", str(self.config), "-E", str(self.log_file)],
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            check=False,
        )
        if proc.returncode != 0:
            raise LabError(f"sshd failed to start (rc={proc.returncode}): {proc.stderr.strip()[:400]}")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.is_running():
                try:
                    with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                        return
                except OSError:
                    pass
            time.sleep(0.05)
        raise LabError(f"sshd did not listen on 127.0.0.1:{self.port} within {timeout:g} s ({self.log_file})")

    def stop(self, *, drop_connections: bool = True) -> None:
        """Stop the listener; with drop_connections also the per-connection sshd processes."""
        pid = self.pid()
        if pid is None:
            return
        sessions = descendants(pid) if drop_connections else []
        terminate(self.pid_file, "sshd")
        signal_pids(sessions, signal.SIGKILL)
        wait_dead(sessions, 5.0)

    def restart(self) -> None:
        self.stop()
        self.start()

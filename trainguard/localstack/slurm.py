"""A real multi-node Slurm cluster on one host, for tests and the local quick start.

munged (own socket and key), slurmctld and N slurmd daemons in multiple-slurmd mode, all under one
base directory with their own ports, so several clusters (test suite, quick start) can coexist.
Synchronous on purpose: this is a fixture, not service code. No shell is ever involved.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import signal
import socket
import string
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from trainguard.localstack.process import BackgroundProcess
from trainguard.localstack.slurm_rootfs import (
    REPO,
    RootfsError,
    check_rootfs,
    check_version,
    default_rootfs,
    default_version,
    host_version,
    write_wrappers,
)

TEMPLATE = REPO / "deploy" / "local" / "slurm.conf.in"
# Per-version departures from slurm.conf.in. 24.11: the moment a node's slurmd dies, slurmctld also
# marked the healthy nodes "not responding" (and requeued their jobs "due to failure of node X"),
# answering again a few ms later; with SlurmdTimeout=5 that happened in most node-crash runs here.
VERSION_SETTINGS: dict[str, dict[str, str]] = {"24.11": {"SlurmdTimeout": "10"}}
# The unprivileged user slurmrestd runs as (it refuses root and SlurmUser); exists on every Debian.
REST_USER = "nobody"


SOCKET_PATH_MAX = 107  # sizeof(sockaddr_un.sun_path) - 1 on Linux


class LabError(RuntimeError):
    """The local cluster could not be started or driven; the message says what to look at."""


@dataclass(frozen=True)
class RestEndpoint:
    """A running slurmrestd: base URL, the user its requests act as, and a JWT for that user.

    Send `X-SLURM-USER-NAME: <user>` and `X-SLURM-USER-TOKEN: <token>` with each request.
    """

    url: str
    user: str
    token: str
    version: str  # the Slurm version serving it ("22.05", "24.11")


# --- process helpers (also used by localstack.sshd) -------------------------------------------
def read_pid(pid_file: Path) -> int | None:
    try:
        text = pid_file.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _stat_fields(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # comm may contain spaces and parentheses; fields after the last ')' are well formed.
    return raw[raw.rfind(")") + 2 :].split()


def is_alive(pid: int) -> bool:
    """True for a running process; a zombie counts as dead (PID 1 here reaps slowly)."""
    fields = _stat_fields(pid)
    return fields is not None and fields[0] != "Z"


def comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def pid_if_running(pid_file: Path, expected_comm: str) -> int | None:
    """The pid from `pid_file` if that process is alive and really is `expected_comm`."""
    pid = read_pid(pid_file)
    if pid is None or not is_alive(pid) or comm(pid) != expected_comm[:15]:
        return None
    return pid


def children(pid: int) -> list[int]:
    result: list[int] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = _stat_fields(int(entry))
        if fields is not None and len(fields) > 1 and fields[1] == str(pid):
            result.append(int(entry))
    return result


def descendants(pid: int) -> list[int]:
    found: list[int] = []
    todo = [pid]
    while todo:
        kids = children(todo.pop())
        found.extend(kids)
        todo.extend(kids)
    return found


def signal_pids(pids: list[int], sig: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def wait_dead(pids: list[int], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(is_alive(p) for p in pids):
            return True
        time.sleep(0.05)
    return not any(is_alive(p) for p in pids)


def terminate(pid_file: Path, expected_comm: str, timeout: float = 5.0) -> bool:
    """SIGTERM the process named in `pid_file` (only if it is `expected_comm`), SIGKILL if it lingers."""
    pid = pid_if_running(pid_file, expected_comm)
    if pid is None:
        return False
    signal_pids([pid], signal.SIGTERM)
    if not wait_dead([pid], timeout):
        signal_pids([pid], signal.SIGKILL)
        wait_dead([pid], 2.0)
    with contextlib.suppress(OSError):
        pid_file.unlink()
    return True


def pids_listening_under(directory: Path) -> list[int]:
    """Processes holding a Unix socket bound to a path inside `directory` (from /proc/net/unix)."""
    prefix = str(directory.resolve()).rstrip("/") + "/"
    inodes: set[str] = set()
    try:
        lines = Path("/proc/net/unix").read_text().splitlines()[1:]
    except OSError:
        return []
    for line in lines:
        fields = line.split()
        if len(fields) >= 8 and fields[7].startswith(prefix):
            inodes.add(fields[6])
    if not inodes:
        return []
    targets = {f"socket:[{inode}]" for inode in inodes}
    pids: list[int] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fd_dir = f"/proc/{entry}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"{fd_dir}/{fd}") in targets:
                    pids.append(int(entry))
                    break
            except OSError:
                continue
    return pids


# --- the cluster -----------------------------------------------------------------------------


class LocalSlurmCluster:
    """munged + slurmctld + `nodes` slurmd daemons (node1..nodeN) under `base_dir`.

    `version` ("22.05" or "24.11"; default: the one `base_dir` was last started with, else
    TG_LAB_SLURM_VERSION, else 22.05) picks the Slurm. The host's own packages serve the version they
    carry; any other runs from `rootfs` (see slurm_rootfs), with `shared_paths` (plus the repo,
    `base_dir` and /tmp) visible at the same paths inside it so job scripts, working directories and
    output files are the same for Slurm and for the host. `rest_port` (or `jwt=True`) enables JWT
    authentication so `start_rest()` can run slurmrestd there. `settings` replaces slurm.conf lines of
    this cluster only (e.g. {"MinJobAge": "2"}), after the per-version ones; a key the template lacks
    is added.
    """

    def __init__(
        self,
        base_dir: Path,
        *,
        cluster: str = "lab",
        nodes: int = 4,
        ctld_port: int = 16817,
        node_port_base: int = 17001,
        cpus_per_node: int = 2,
        template: Path | None = None,
        version: str | None = None,
        rootfs: Path | None = None,
        shared_paths: Sequence[Path] = (),
        rest_port: int | None = None,
        jwt: bool = False,
        settings: Mapping[str, str] | None = None,
    ) -> None:
        if nodes < 1:
            raise ValueError("a cluster needs at least one node")
        if not cluster.replace("-", "").replace("_", "").isalnum():
            raise ValueError(f"invalid cluster name {cluster!r}")
        self.base_dir = Path(base_dir).resolve()
        self.cluster = cluster
        self.node_names = [f"node{i}" for i in range(1, nodes + 1)]
        self.ctld_port = ctld_port
        self.node_port_base = node_port_base
        self.cpus_per_node = cpus_per_node
        self.template = template or TEMPLATE
        self.conf = self.base_dir / "etc" / "slurm.conf"
        self.munge_dir = self.base_dir / "munge"
        self.munge_socket = self.munge_dir / "sock" / "munge.socket"
        self.run_dir = self.base_dir / "run"
        self.log_dir = self.base_dir / "log"
        self.state_dir = self.base_dir / "state"
        self.spool_dir = self.base_dir / "spool"
        self.bin_dir = self.base_dir / "bin"
        # Without an explicit version, a cluster directory keeps the version it was started with.
        self.version_file = self.base_dir / "etc" / "slurm-version"
        recorded = self.version_file.read_text().strip() if self.version_file.is_file() else None
        self.version = check_version(version or recorded or default_version())
        self.host_version = host_version()
        # None: the host's binaries; else the root filesystem the commands run from.
        self.rootfs: Path | None = (
            None if self.host_version == self.version else (rootfs or default_rootfs(self.version)).resolve()
        )
        self.shared_paths = [REPO, self.base_dir, Path("/tmp"), *shared_paths]
        self.rest_port = rest_port
        self.jwt = jwt or rest_port is not None  # auth/jwt in slurm.conf (slurmrestd needs it)
        self.settings = dict(settings or {})
        self.jwt_key = self.base_dir / "etc" / "jwt.key"
        self._rest = BackgroundProcess(
            "slurmrestd", self.run_dir, [self._exe("slurmrestd")], marker="slurmrestd"
        )

    # -- environment ---------------------------------------------------------------------------

    @property
    def env(self) -> dict[str, str]:
        """Variables a Slurm client needs to talk to this cluster (merge over os.environ).

        For a Slurm run from a root filesystem, PATH starts with the wrappers' directory, so `squeue`
        etc. are that version's commands for whoever uses this environment (TrainGuard's LocalRunner).
        """
        env = {"SLURM_CONF": str(self.conf)}
        if self.rootfs is not None:
            env["PATH"] = f"{self.bin_dir}:{os.environ.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}"
        return env

    def _full_env(self) -> dict[str, str]:
        return {**os.environ, **self.env}

    def _exe(self, name: str) -> str:
        """The executable to run for Slurm/munge command `name` (a wrapper when run from a rootfs)."""
        return name if self.rootfs is None else str(self.bin_dir / name)

    def _run(self, argv: Sequence[str], timeout: float = 30.0, check: bool = True) -> str:
        argv = [self._exe(argv[0]), *argv[1:]]
        try:
            proc = subprocess.run(
                list(argv),
                env=self._full_env(),
                capture_output=True,
                text=True,
                errors="replace",
                timeout=timeout,
                check=False,
                stdin=subprocess.DEVNULL,
            )
        except (OSError, subprocess.TimeoutExpired) as err:
            raise LabError(f"{argv[0]} could not run: {err}") from None
        if check and proc.returncode != 0:
            raise LabError(f"{' '.join(argv[:3])} failed (rc={proc.returncode}): {proc.stderr.strip()[:500]}")
        return proc.stdout

    def run(self, argv: Sequence[str], timeout: float = 30.0, check: bool = True) -> str:
        """Run a Slurm command of this cluster's version against it; stdout (LabError on failure)."""
        return self._run(argv, timeout=timeout, check=check)

    def node_spool(self, node: str) -> Path:
        return self.spool_dir / node

    def _node_pid_file(self, node: str) -> Path:
        return self.run_dir / f"slurmd-{node}.pid"

    def _check_node(self, node: str) -> None:
        if node not in self.node_names:
            raise ValueError(f"unknown node {node!r}; this cluster has {', '.join(self.node_names)}")

    # -- configuration -------------------------------------------------------------------------

    def render_config(self) -> str:
        last_port = self.node_port_base + len(self.node_names) - 1
        ports = (
            str(self.node_port_base)
            if last_port == self.node_port_base
            else (f"{self.node_port_base}-{last_port}")
        )
        node_list = "node1" if len(self.node_names) == 1 else f"node[1-{len(self.node_names)}]"
        values = {
            "cluster": self.cluster,
            "ctld_port": str(self.ctld_port),
            "slurmd_port": str(self.ctld_port + 1),
            "munge_socket": str(self.munge_socket),
            "state_dir": str(self.state_dir),
            "spool_dir": str(self.spool_dir),
            "run_dir": str(self.run_dir),
            "log_dir": str(self.log_dir),
            "node_list": node_list,
            "node_ports": ports,
            "cpus": str(self.cpus_per_node),
        }
        text = string.Template(self.template.read_text()).substitute(values)
        for key, value in {**VERSION_SETTINGS.get(self.version, {}), **self.settings}.items():
            if not re.fullmatch(r"[A-Za-z]+", key) or "\n" in value:
                raise ValueError(f"invalid slurm.conf setting {key}={value!r}")
            lines = text.splitlines()
            found = any(line.startswith(f"{key}=") for line in lines)
            lines = [f"{key}={value}" if line.startswith(f"{key}=") else line for line in lines]
            text = "\n".join(lines if found else [*lines, f"{key}={value}"]) + "\n"
        if self.jwt:
            # slurmrestd passes each request's JWT (X-SLURM-USER-TOKEN) on to slurmctld, which checks it.
            text += f"AuthAltTypes=auth/jwt\nAuthAltParameters=jwt_key={self.jwt_key}\n"
        return text

    def _check_socket_paths(self) -> None:
        """slurmd and slurmstepd listen on unix sockets in the node's spool (`<node>_<job>.<step>`), munged
        in its socket directory. The kernel caps such a path at 107 bytes; past it jobs never finish and
        Slurm says nothing useful, so a too-deep base directory is refused here, by name."""
        longest = max(
            [self.node_spool(n) / f"{n}_{'9' * 8}.4294967291" for n in self.node_names] + [self.munge_socket],
            key=lambda path: len(os.fsencode(path)),
        )
        if len(os.fsencode(longest)) > SOCKET_PATH_MAX:
            raise LabError(
                f"{self.base_dir}: too deep for Slurm's unix sockets ({longest} is "
                f"{len(os.fsencode(longest))} bytes, at most {SOCKET_PATH_MAX}); use a shorter base directory"
            )

    def _prepare(self) -> None:
        self._check_socket_paths()
        for directory in (self.conf.parent, self.run_dir, self.log_dir, self.state_dir, self.spool_dir):
            directory.mkdir(parents=True, exist_ok=True)
        for node in self.node_names:
            self.node_spool(node).mkdir(exist_ok=True)
        self.munge_dir.mkdir(parents=True, exist_ok=True)
        self.munge_dir.chmod(0o700)
        # munged insists its socket directory is reachable by clients, its key private.
        self.munge_socket.parent.mkdir(exist_ok=True)
        self.munge_socket.parent.chmod(0o755)
        self.munge_dir.chmod(0o711)
        if self.jwt and not self.jwt_key.exists():
            self.jwt_key.write_bytes(secrets.token_bytes(32))
            self.jwt_key.chmod(0o600)
        self.conf.write_text(self.render_config())
        self.version_file.write_text(self.version + "\n")
        if self.rootfs is not None:
            try:
                check_rootfs(self.rootfs, self.version)
            except RootfsError as err:
                raise LabError(str(err)) from None
            write_wrappers(self.bin_dir, self.rootfs, self.shared_paths)

    # -- lifecycle -----------------------------------------------------------------------------

    def _munged_pid(self) -> int | None:
        return pid_if_running(self.munge_dir / "munged.pid", "munged")

    def _ctld_pid(self) -> int | None:
        return pid_if_running(self.run_dir / "slurmctld.pid", "slurmctld")

    def _slurmd_pid(self, node: str) -> int | None:
        return pid_if_running(self._node_pid_file(node), "slurmd")

    def is_running(self) -> bool:
        return (
            self._munged_pid() is not None
            and self._ctld_pid() is not None
            and all(self._slurmd_pid(n) is not None for n in self.node_names)
        )

    def _start_munged(self) -> None:
        if self._munged_pid() is not None:
            return
        key = self.munge_dir / "munge.key"
        if not key.exists():
            self._run(["mungekey", "-c", "-k", str(key)])
            key.chmod(0o600)
        with contextlib.suppress(FileNotFoundError):
            self.munge_socket.unlink()
        self._run(
            [
                "munged",
                f"--socket={self.munge_socket}",
                f"--key-file={key}",
                f"--pid-file={self.munge_dir / 'munged.pid'}",
                f"--log-file={self.log_dir / 'munged.log'}",
                f"--seed-file={self.munge_dir / 'munged.seed'}",
                "--force",
            ]
        )
        self._wait(lambda: self.munge_socket.exists(), 10, "munged did not create its socket")

    def _start_slurmd(self, node: str) -> None:
        if self._slurmd_pid(node) is None:
            self._run(["slurmd", "-N", node])

    def describe(self) -> str:
        """e.g. "Slurm 24.11 from var/slurm-24.11/rootfs" or "Slurm 22.05 (host packages)"."""
        where = "host packages" if self.rootfs is None else f"from {self.rootfs}"
        return f"Slurm {self.version} ({where})"

    def start(self, timeout: float = 30.0) -> None:
        """Start every daemon that is not running and wait until every node has registered.

        Users' jobs may be running: a node that is allocated, mixed, drained or down by an operator is
        ready. Only a daemon that has not answered yet (`*`, `unknown`) is waited for, so restarting the
        stack never waits on what users' jobs do. A fresh cluster is all `idle` when this returns.
        """
        self._prepare()
        self._start_munged()
        if self._ctld_pid() is None:
            self._run(["slurmctld", "-i"])
            self._wait(lambda: self._ctld_pid() is not None, 10, "slurmctld did not start")
        for node in self.node_names:
            self._start_slurmd(node)
        self.wait_registered(timeout)

    def wait_registered(self, timeout: float = 30.0) -> None:
        def registered(state: str) -> bool:
            return bool(state) and not state.endswith("*") and not state.startswith("unk")

        self._wait(
            lambda: (
                (s := self.node_states()) != {} and all(registered(s.get(n, "")) for n in self.node_names)
            ),
            timeout,
            "nodes did not all register with slurmctld",
        )

    def node_states(self) -> dict[str, str]:
        """Node name -> sinfo's compact state (`idle`, `idle*`, `down*`, `drained`, ...)."""
        out = self._run(["sinfo", "-h", "-N", "-o", "%N %T"], timeout=10, check=False)
        states: dict[str, str] = {}
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 2:
                states[parts[0]] = parts[1]
        return states

    def wait_idle(self, timeout: float = 30.0) -> None:
        self._wait(
            lambda: (s := self.node_states()) != {} and all(s.get(n) == "idle" for n in self.node_names),
            timeout,
            "nodes did not all become idle",
        )

    def wait_node_state(self, node: str, states: Sequence[str], timeout: float = 30.0) -> str:
        self._check_node(node)
        found = ""

        def matches() -> bool:
            nonlocal found
            found = self.node_states().get(node, "")
            return found.rstrip("*~#!%$@^-") in states or found in states

        self._wait(matches, timeout, f"{node} did not reach {'/'.join(states)}")
        return found

    def _wait(self, check: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if check():
                return
            if time.monotonic() >= deadline:
                raise LabError(f"{what} within {timeout:g} s (logs: {self.log_dir})")
            time.sleep(0.1)

    def active_job_ids(self) -> list[str]:
        out = self._run(["squeue", "-h", "-o", "%A"], timeout=10, check=False)
        return [line.strip() for line in out.splitlines() if line.strip().isdigit()]

    def stop(self, timeout: float = 15.0) -> None:
        """Cancel all jobs (so steps exit cleanly), then stop every daemon by its pid file."""
        self.stop_rest()
        if self._ctld_pid() is not None:
            jobs = self.active_job_ids()
            if jobs:
                self._run(["scancel", *jobs], timeout=10, check=False)
                with contextlib.suppress(LabError):
                    self._wait(lambda: not self.active_job_ids(), timeout, "jobs did not end")
        for node in self.node_names:
            terminate(self._node_pid_file(node), "slurmd")
            # Steps that survived (e.g. of a node killed earlier) must not outlive the cluster.
            self._kill_steps(node)
        terminate(self.run_dir / "slurmctld.pid", "slurmctld")
        terminate(self.munge_dir / "munged.pid", "munged")

    # -- fault injection -----------------------------------------------------------------------

    def _step_processes(self, node: str) -> list[int]:
        """The node's slurmstepd processes and, before them, their tasks."""
        stepds = [p for p in pids_listening_under(self.node_spool(node)) if comm(p) == "slurmstepd"]
        return [d for p in stepds for d in descendants(p)] + stepds

    def _kill_steps(self, node: str) -> list[int]:
        victims = self._step_processes(node)
        signal_pids(victims, signal.SIGKILL)
        wait_dead(victims, 5.0)
        return victims

    def kill_node(self, node: str) -> list[int]:
        """Simulate a node crash: SIGKILL its slurmd, its slurmstepd processes and their tasks.

        A crashed node stops all of them at once, so none can report the others' deaths: every process is
        stopped (SIGSTOP) before any is killed. Killed one after the other, a slurmstepd that outlived its
        tasks by a moment told srun they were `Killed`, which a dead node never says.
        Returns the pids killed. Slurm marks the node DOWN ~10-12 s later.
        """
        self._check_node(node)
        pid = self._slurmd_pid(node)
        victims = ([pid] if pid is not None else []) + self._step_processes(node)
        signal_pids(victims, signal.SIGSTOP)
        signal_pids(victims, signal.SIGKILL)
        wait_dead(victims, 5.0)
        return victims

    def restart_node(self, node: str, timeout: float = 30.0) -> None:
        """Start the node's slurmd again and wait until Slurm no longer reports it as not responding."""
        self._check_node(node)
        self._start_slurmd(node)
        self._wait(
            lambda: (s := self.node_states().get(node, "")) != "" and not s.endswith("*"),
            timeout,
            f"{node} did not come back",
        )

    # -- jobs ----------------------------------------------------------------------------------

    def sbatch(
        self, argv_tail: list[str], env: Mapping[str, str] | None = None, cwd: Path | None = None
    ) -> str:
        """Submit with `sbatch --parsable <argv_tail>` (from `cwd`: SLURM_SUBMIT_DIR); returns the job id."""
        argv = [self._exe("sbatch"), "--parsable", *argv_tail]
        try:
            proc = subprocess.run(
                argv,
                env={**self._full_env(), **(env or {})},
                capture_output=True,
                text=True,
                errors="replace",
                timeout=30,
                check=False,
                stdin=subprocess.DEVNULL,
                cwd=cwd,
            )
        except (OSError, subprocess.TimeoutExpired) as err:
            raise LabError(f"sbatch could not run: {err}") from None
        job_id = proc.stdout.strip().split(";")[0]
        if proc.returncode != 0 or not job_id.isdigit():
            raise LabError(f"sbatch failed (rc={proc.returncode}): {proc.stderr.strip()[:500]}")
        return job_id

    def scontrol_job(self, job_id: str) -> str:
        return self._run(["scontrol", "show", "job", "-d", "-o", job_id], timeout=10)

    # -- slurmrestd ----------------------------------------------------------------------------

    @property
    def rest_url(self) -> str:
        if self.rest_port is None:
            raise LabError("this cluster was created without rest_port; slurmrestd needs it (and JWT)")
        return f"http://127.0.0.1:{self.rest_port}"

    def rest_token(self, user: str = "root", lifespan_s: int = 86400) -> str:
        """A JWT from `scontrol token` for `user` (what X-SLURM-USER-TOKEN carries)."""
        out = self._run(["scontrol", "token", f"username={user}", f"lifespan={lifespan_s}"], timeout=10)
        for line in out.splitlines():
            if line.startswith("SLURM_JWT="):
                return line.split("=", 1)[1].strip()
        raise LabError(f"scontrol token printed no SLURM_JWT= line: {out.strip()[:200]!r}")

    def start_rest(self, timeout: float = 20.0, user: str = "root") -> RestEndpoint:
        """Start slurmrestd on 127.0.0.1:`rest_port` (idempotent); returns its URL and a token for `user`.

        It serves the slurmctld endpoints of every API version its Slurm has (22.05: v0.0.36-v0.0.38;
        24.11: v0.0.40-v0.0.42; no slurmdbd ones, there is no accounting storage). It runs as an
        unprivileged user with SLURM_JWT=daemon, i.e. it forwards each request's token to slurmctld.
        """
        url = self.rest_url
        if self._ctld_pid() is None:
            raise LabError("start the cluster before slurmrestd")
        argv = [self._exe("slurmrestd"), "-a", "rest_auth/jwt", "-u", REST_USER]
        # Only the slurmctld endpoints: the slurmdbd ones fail to load without accounting storage.
        if self.version == "22.05":
            argv += ["-s", "openapi/v0.0.38,openapi/v0.0.37,openapi/v0.0.36"]
        else:
            argv += ["-g", "nogroup", "-s", "openapi/slurmctld"]  # drop root's group too (22.05 has no -g)
        self._rest.argv = [*argv, f"127.0.0.1:{self.rest_port}"]
        self._rest.env = {"SLURM_CONF": str(self.conf), "SLURM_JWT": "daemon"}
        self._rest.log_file = self.log_dir / "slurmrestd.log"
        self._rest.start()
        token = self.rest_token(user)
        self._wait(lambda: self._rest_answers(url, user, token), timeout, "slurmrestd did not answer")
        return RestEndpoint(url=url, user=user, token=token, version=self.version)

    def _rest_answers(self, url: str, user: str, token: str) -> bool:
        if self._rest.pid() is None:
            how = self._rest.exit_status() or "how is not known"
            raise LabError(f"slurmrestd exited ({how}); see {self._rest.log_file}")
        with socket.socket() as sock:
            sock.settimeout(1.0)
            if sock.connect_ex(("127.0.0.1", int(self.rest_port or 0))) != 0:
                return False
        request = urllib.request.Request(
            f"{url}/openapi/v3", headers={"X-SLURM-USER-NAME": user, "X-SLURM-USER-TOKEN": token}
        )
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                return int(response.status) == 200
        except (urllib.error.URLError, OSError):
            return False

    def stop_rest(self) -> None:
        self._rest.stop()

    # The names the slurmrestd client's tests use (same behaviour as start_rest / rest_token).
    def start_slurmrestd(self, port: int) -> str:
        if not self.jwt:
            raise LabError("slurmrestd needs a cluster created with jwt=True or rest_port=")
        self.rest_port = port
        return self.start_rest().url

    def token(self, user: str = "root", lifespan: int = 600) -> str:
        return self.rest_token(user, lifespan)

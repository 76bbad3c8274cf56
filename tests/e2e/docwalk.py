"""The operator guide and the runbook as executable truth.

A block in docs/*.md preceded by `<!-- walk: NAME -->` is what an operator types or writes; the walk
runs it as written. What stands for the test machine is explicit and small (`Site`):
- paths: /etc/trainguard, /etc/systemd/system, /var/lib/trainguard live under one directory (`root`),
  in commands and in every file the walk writes there, as if the walk ran in a chroot;
- `/opt/trainguard/venv/bin/trainguard` is this checkout (`python -m trainguard`);
- the guide's example host, ports and job id become the test's (`text` replacements, `ports`);
- `sudo` (and `-u trainguard`) is dropped, and the lines that make accounts or install packages are
  skipped (`SKIPPED`): the test runs the checkout as the current user.
`systemctl` lines act on the unit files the walk installed: each unit's `ExecStart` runs as a process
with its `EnvironmentFile`'s variables as its environment (no login environment), from an empty
working directory, stopped with SIGTERM then SIGKILL as systemd's KillMode=mixed does.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.e2e.stack import REPO, free_port

DOCS = REPO / "docs"
WALK = re.compile(r"^[ \t]*<!-- walk: ([\w-]+) -->[ \t]*\n([ \t]*)```(\w+)\n(.*?)\n[ \t]*```", re.S | re.M)
BINARY = "/opt/trainguard/venv/bin/trainguard"
# Paths of the guide that live under Site.root; not after a word character or a slash, so a path that
# is already under root is never rewritten twice.
DOC_PATHS = re.compile(r"(?<![\w/.-])(/etc/trainguard|/etc/systemd/system|/var/lib/trainguard)")
SKIPPED = ("useradd", "-m venv", "pip install", "chown")
# systemd's environment for a system service before EnvironmentFile= (no login shell, no user variables).
SYSTEMD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def walk_blocks(*docs: str) -> dict[str, tuple[str, str]]:
    """name -> (language, text) of every `walk:` block in the named docs; a name is used once."""
    blocks: dict[str, tuple[str, str]] = {}
    for doc in docs:
        for m in WALK.finditer((DOCS / doc).read_text()):
            name, _indent, lang, body = m.groups()
            if name in blocks:
                raise AssertionError(f"walk block {name!r} twice")
            blocks[name] = (lang, textwrap.dedent(body))
    return blocks


def read_env_file(path: Path) -> dict[str, str]:
    """systemd's EnvironmentFile=: KEY=VALUE lines, # and ; comments, one pair of quotes removed;
    a later line wins."""
    env: dict[str, str] = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        key, sep, value = line.partition("=")
        if not sep:
            continue
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        env[key.strip()] = value
    return env


@dataclass(frozen=True)
class Unit:
    name: str
    exec_start: tuple[str, ...]
    environment_files: tuple[str, ...]


def read_unit(path: Path) -> Unit:
    section = ""
    exec_start: tuple[str, ...] = ()
    env_files: list[str] = []
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            section = line
            continue
        key, _, value = line.partition("=")
        if section != "[Service]":
            continue
        if key == "ExecStart":
            exec_start = tuple(shlex.split(value))
        elif key == "EnvironmentFile":
            env_files.append(value)
    if not exec_start:
        raise AssertionError(f"{path}: no ExecStart")
    return Unit(path.stem, exec_start, tuple(env_files))


@dataclass
class Site:
    """What stands for the guide's machine on this one."""

    root: Path
    text: dict[str, str] = field(default_factory=dict)
    ports: dict[int, int] = field(default_factory=dict)

    def port(self, documented: int) -> int:
        if documented not in self.ports:
            self.ports[documented] = free_port()
        return self.ports[documented]

    def path(self, documented: str) -> str:
        return DOC_PATHS.sub(lambda m: str(self.root) + m.group(1), documented)

    def shell(self, command: str, extra: Mapping[str, str] | None = None) -> str:
        command = self.path(command).replace(BINARY, f"{shlex.quote(sys.executable)} -m trainguard")
        for old, new in {**self.text, **(extra or {})}.items():
            command = command.replace(old, new)
        return command

    def rewrite_files(self) -> None:
        """Files the walk wrote under root name the guide's paths: they mean root's."""
        for path in (self.root / "etc").rglob("*"):
            if (
                path.is_file()
                and path.suffix in {".env", ".yaml", ".service", ""}
                and "ssh" not in path.parts
            ):
                text = path.read_text()
                if self.path(text) != text:
                    path.write_text(self.path(text))

    def yaml_paths(self, doc: Any) -> Any:
        if isinstance(doc, dict):
            return {k: self.yaml_paths(v) for k, v in doc.items()}
        if isinstance(doc, list):
            return [self.yaml_paths(v) for v in doc]
        return self.path(doc) if isinstance(doc, str) else doc


def base_env(site: Site) -> dict[str, str]:
    """The environment systemd gives a unit (User=trainguard), plus the checkout as the installed
    package (the guide's `pip install trainguard`)."""
    return {
        "PATH": SYSTEMD_PATH,
        "LANG": "C.UTF-8",
        "HOME": site.path("/var/lib/trainguard"),
        "PYTHONPATH": str(REPO),
        "PYTHONUNBUFFERED": "1",
    }


class Units:
    """systemctl for the walk: the installed unit files' ExecStart as processes."""

    def __init__(self, site: Site) -> None:
        self.site = site
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.deaths: list[str] = []
        self.stop_s: list[float] = []  # how long each restart waited for the old process to stop
        self.cwd = site.root / "cwd"
        self.cwd.mkdir(parents=True, exist_ok=True)
        self.logs = site.root / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)

    def unit(self, name: str) -> Unit:
        return read_unit(Path(self.site.path("/etc/systemd/system")) / f"{name}.service")

    def argv(self, unit: Unit) -> list[str]:
        argv = list(unit.exec_start)
        if argv[0] != BINARY:
            raise AssertionError(f"{unit.name}: ExecStart runs {argv[0]}, the guide installs {BINARY}")
        argv[:1] = [sys.executable, "-m", "trainguard"]
        for i, word in enumerate(argv[:-1]):
            if word == "--metrics-port":
                argv[i + 1] = str(self.site.port(int(argv[i + 1])))
        return argv

    def env(self, unit: Unit) -> dict[str, str]:
        env = base_env(self.site)
        for name in unit.environment_files:
            env.update(read_env_file(Path(name)))
        return env

    def start(self, name: str) -> None:
        self.check()
        if name in self.procs:
            return
        unit = self.unit(name)
        with open(self.logs / f"{name}.log", "ab") as out:
            self.procs[name] = subprocess.Popen(
                self.argv(unit),
                cwd=self.cwd,
                env=self.env(unit),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def stop(self, name: str, timeout: float = 30.0) -> None:
        proc = self.procs.pop(name, None)
        if proc is None:
            return
        if proc.poll() is not None:
            self.deaths.append(f"{name} exited {proc.returncode} before it was stopped")
            return
        proc.send_signal(signal.SIGTERM)  # KillMode=mixed: SIGTERM to the main process first
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)

    def restart(self, name: str) -> None:
        began = time.monotonic()
        self.stop(name)
        self.stop_s.append(time.monotonic() - began)
        self.start(name)

    def check(self) -> None:
        """A unit that exited on its own: systemd would restart it (Restart=always), hiding a crash."""
        for name, proc in list(self.procs.items()):
            if proc.poll() is not None:
                self.deaths.append(f"{name} exited {proc.returncode}")
                del self.procs[name]

    def stop_all(self) -> None:
        for name in list(self.procs):
            self.stop(name)

    def log(self, name: str) -> str:
        path = self.logs / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def systemctl(self, argv: list[str]) -> None:
        verb, names = argv[0], [a for a in argv[1:] if not a.startswith("-")]
        if verb == "daemon-reload":
            return
        actions: dict[str, Callable[[str], None]] = {
            "enable": self.start if "--now" in argv else (lambda _n: None),
            "start": self.start,
            "restart": self.restart,
            "stop": self.stop,
        }
        if verb not in actions:
            raise AssertionError(f"systemctl {verb}: not part of the walk")
        for name in names:
            actions[verb](name.removesuffix(".service"))


@dataclass
class Operator:
    """Types a `walk:` bash block: systemctl through `units`, everything else through bash."""

    site: Site
    units: Units
    env: dict[str, str] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)

    def run(self, block: str, extra: Mapping[str, str] | None = None) -> list[str]:
        """Each command of the block in turn (a failing one fails the walk); their outputs."""
        outputs: list[str] = []
        for command in _commands(block):
            command = re.sub(r"^sudo (-u \S+ )?", "", command)
            if any(word in command for word in SKIPPED):
                self.skipped.append(command)
                continue
            words = command.split()
            if words[0] == "systemctl":
                self.units.systemctl(words[1:])
                continue
            if words[0] == "install":
                command = command.replace(" -o trainguard", "")
            text = self.site.shell(command, extra)
            proc = subprocess.run(
                ["bash", "-c", text],
                cwd=REPO,
                env={**base_env(self.site), **self.env},
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            if proc.returncode != 0:
                raise AssertionError(f"`{text}` exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
            outputs.append(proc.stdout)
            self.site.rewrite_files()
        return outputs


def _commands(block: str) -> list[str]:
    """Commands of a bash block: comments dropped, continuation lines joined, a for loop kept whole."""
    joined = block.replace("\\\n", " ")
    commands: list[str] = []
    loop: list[str] = []
    for raw in joined.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if loop or line.startswith("for "):
            loop.append(line)
            if line == "done":
                commands.append("\n".join(loop))
                loop = []
            continue
        commands.append(line)
    if loop:
        raise AssertionError("unterminated for loop in a walk block")
    return commands


def sbatch_comment(block: str) -> str:
    """The opt-in of a `#SBATCH --comment=...` line in a walk block."""
    for line in block.splitlines():
        if line.strip().startswith("#SBATCH --comment="):
            (arg,) = shlex.split(line.strip().removeprefix("#SBATCH "))
            return arg.removeprefix("--comment=")
    raise AssertionError("no #SBATCH --comment= line")


def wait_until(check: Callable[[], bool], what: str, timeout: float, on_timeout: Callable[[], str]) -> float:
    """Poll `check`; returns the seconds it took."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if check():
            return time.monotonic() - started
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}\n{on_timeout()}")

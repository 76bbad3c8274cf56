"""`trainguard temporal`: the local dev server and search-attribute registration on any namespace."""

from __future__ import annotations

import argparse
import os
import subprocess
from pathlib import Path
from typing import Any

from trainguard.cli import settings_from
from trainguard.localstack.temporal import SEARCH_ATTRIBUTES, LocalTemporal, temporal_binary


def register(sub: Any) -> None:
    p = sub.add_parser("temporal", help="local Temporal dev server; register search attributes")
    tsub = p.add_subparsers(dest="temporal_command", metavar="ACTION", required=True)
    up = tsub.add_parser("up", help="start the dev server (Web UI included) with a SQLite file")
    up.add_argument("--dir", default="var/temporal", help="state directory (default var/temporal)")
    up.add_argument("--port", type=int, default=7233)
    up.add_argument("--ui-port", type=int, default=8233)
    up.add_argument("--in-memory", action="store_true", help="no database file (state lost on stop)")
    up.set_defaults(handler=_up)
    down = tsub.add_parser("down", help="stop the dev server started by `up`")
    down.add_argument("--dir", default="var/temporal")
    down.add_argument("--port", type=int, default=7233)
    down.set_defaults(handler=_down)
    reg = tsub.add_parser(
        "register",
        help="register TrainGuard's search attributes on the configured namespace (production)",
        description="Runs `temporal operator search-attribute create` for each attribute against "
        "temporal.address / temporal.namespace from the settings.",
    )
    reg.set_defaults(handler=_register)


def _local(args: argparse.Namespace) -> LocalTemporal:
    base = Path(args.dir)
    db = None if getattr(args, "in_memory", False) else base / "temporal.db"
    return LocalTemporal(base, port=args.port, ui_port=getattr(args, "ui_port", None), db_file=db)


def _up(args: argparse.Namespace) -> int:
    server = _local(args)
    server.start()
    print(f"Temporal dev server at {server.address}; Web UI {server.ui_url}")
    return 0


def _down(args: argparse.Namespace) -> int:
    _local(args).stop()
    return 0


def _register(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    t = settings.temporal
    failed = 0
    for name, kind in SEARCH_ATTRIBUTES.items():
        argv = [
            temporal_binary(),
            "operator",
            "search-attribute",
            "create",
            "--name",
            name,
            "--type",
            kind,
            "--address",
            t.address,
            "--namespace",
            t.namespace,
        ]
        env = dict(os.environ)
        if t.api_key:  # through the environment: argv is visible to every user in `ps`
            env["TEMPORAL_API_KEY"] = t.api_key.get_secret_value()
        if t.tls or t.tls_cert:
            argv.append("--tls")
            for flag, value in (
                ("--tls-cert-path", t.tls_cert),
                ("--tls-key-path", t.tls_key),
                ("--tls-ca-path", t.tls_ca),
            ):
                if value:
                    argv += [flag, value]
        proc = subprocess.run(argv, capture_output=True, text=True, check=False, env=env)
        already = "already" in (proc.stderr + proc.stdout).lower()
        ok = proc.returncode == 0 or already
        failed += not ok
        print(f"{name:<22} {kind:<8} {'ok' if ok else 'FAILED: ' + proc.stderr.strip()[:200]}")
    return 1 if failed else 0

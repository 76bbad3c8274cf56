"""`trainguard quickstart` and `trainguard local up|down|status`: the whole stack on one machine."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

DEFAULT_ROOT = "var/quickstart"


def register(sub: Any) -> None:
    q = sub.add_parser(
        "quickstart",
        help="start the local stack and run a demo job that fails and is recovered",
        description="Starts a 4-node Slurm cluster, the Temporal dev server (Web UI :8233), the worker and "
        "the API/console (:8088) with SQLite audit, then submits a demo training job whose GPU on node2 "
        "fails; prints the audit trail until it is recovered. Everything keeps running afterwards.",
    )
    q.add_argument("--dir", default=DEFAULT_ROOT, help=f"state directory (default {DEFAULT_ROOT})")
    q.set_defaults(handler=_quickstart)
    p = sub.add_parser("local", help="manage the local stack started by `quickstart`")
    lsub = p.add_subparsers(dest="local_command", metavar="ACTION", required=True)
    for name, fn, text in (
        ("up", _up, "start everything (no demo job)"),
        ("down", _down, "stop everything"),
        ("status", _status, "show what is running"),
    ):
        a = lsub.add_parser(name, help=text)
        a.add_argument("--dir", default=DEFAULT_ROOT)
        a.set_defaults(handler=fn)


def _layout(args: argparse.Namespace) -> Any:
    from trainguard.quickstart import Layout

    return Layout(Path(args.dir).resolve())


def _quickstart(args: argparse.Namespace) -> int:
    from trainguard.quickstart import run_quickstart

    return run_quickstart(Path(args.dir))


def _up(args: argparse.Namespace) -> int:
    from trainguard.quickstart import up

    up(_layout(args))
    return 0


def _down(args: argparse.Namespace) -> int:
    from trainguard.quickstart import down

    down(_layout(args))
    return 0


def _status(args: argparse.Namespace) -> int:
    from trainguard.quickstart import status

    state = status(_layout(args))
    print(json.dumps(state, indent=2))
    return 0 if all(state.values()) else 1

"""The `trainguard` command. Each module in this package adds its own subcommands via `register`."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Callable, Sequence

from trainguard import __version__
from trainguard.audit.store import AuditStoreUnavailable
from trainguard.settings import Settings, SettingsError, load_settings

Handler = Callable[[argparse.Namespace], int]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trainguard",
        description="Keeps distributed training on Slurm running: detect, attribute, isolate, recover.",
    )
    parser.add_argument("--version", action="version", version=f"trainguard {__version__}")
    parser.add_argument("--config", help="settings file (YAML); default: $TRAINGUARD_CONFIG")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        register = getattr(module, "register", None)
        if register is not None:
            register(sub)
    return parser


def settings_from(args: argparse.Namespace) -> Settings:
    return load_settings(getattr(args, "config", None))


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Handler | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    try:
        return handler(args)
    except SettingsError as err:
        print(f"trainguard: {err}", file=sys.stderr)
        return 2
    except AuditStoreUnavailable as err:
        print(f"trainguard: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())

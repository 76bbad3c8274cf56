"""`trainguard signals check`: verify the log backend and Prometheus before the first workload."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from trainguard.settings import load_settings
from trainguard.signals.check import CheckRequest, run_checks
from trainguard.slurm.runner import make_runner


def register(subparsers: Any) -> None:
    signals = subparsers.add_parser("signals", help="check the signal sources the detectors need")
    sub = signals.add_subparsers(dest="signals_command", metavar="SUBCOMMAND")
    check = sub.add_parser(
        "check",
        help="check logs and metrics for one job; exit 1 on failure",
        description=(
            "Connects to the configured log backend (files, Loki, VictoriaLogs) and Prometheus, checks "
            "what the detectors need for one job, proposes a label mapping where names differ, and "
            "prints a pass/fail table. Exit status: 0 when nothing failed, 1 otherwise."
        ),
    )
    check.add_argument("--job-id", required=True, help="a running or recently finished opted-in job")
    check.add_argument("--marker", help="a string known to be in that job's output")
    check.add_argument("--json", action="store_true", help="machine-readable output")
    check.add_argument(
        "--since-hours", type=float, default=24.0, help="look-back when the job's time is unknown"
    )
    check.add_argument("--no-slurm", action="store_true", help="skip the Slurm lookups (job, node names)")
    check.set_defaults(handler=_check)
    signals.set_defaults(handler=lambda _args: _usage(signals))


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


async def _run(args: argparse.Namespace) -> int:
    settings = load_settings(getattr(args, "config", None))
    runner = make_runner(settings.cluster)
    request = CheckRequest(
        job_id=args.job_id, marker=args.marker, since_s=args.since_hours * 3600, use_slurm=not args.no_slurm
    )
    try:
        report = await run_checks(settings, runner, request)
    finally:
        await runner.close()
    print(report.to_json() if args.json else report.to_table())
    return 0 if report.ok else 1


def _check(args: argparse.Namespace) -> int:
    return asyncio.run(_run(args))

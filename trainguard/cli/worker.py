"""`trainguard worker`: run the control-plane and/or cluster worker."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from trainguard.cli import settings_from
from trainguard.logconfig import configure_logging

QUEUES = ("control", "cluster")


def register(sub: Any) -> None:
    p = sub.add_parser(
        "worker",
        help="run TrainGuard's Temporal worker(s)",
        description="Run the control-plane worker (workflows, attribution, audit) and/or the cluster worker "
        "(Slurm commands and job logs; run it beside Slurm or in SSH mode).",
    )
    p.add_argument(
        "--queues",
        default="control,cluster",
        help="comma-separated: control, cluster (default: both, as in the quick start)",
    )
    p.add_argument("--no-cluster-watch", action="store_true", help="do not start the ClusterWatch workflow")
    p.add_argument("--metrics-port", type=int, default=0, help="serve TrainGuard's /metrics on this port")
    p.add_argument(
        "--metrics-host",
        default="127.0.0.1",
        help="address for --metrics-port (0.0.0.0 in a container so Prometheus can scrape it)",
    )
    p.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    queues = [q.strip() for q in args.queues.split(",") if q.strip()]
    bad = [q for q in queues if q not in QUEUES]
    if bad or not queues:
        raise SystemExit(f"trainguard worker: unknown queue(s) {bad}; choose from {', '.join(QUEUES)}")
    settings = settings_from(args)
    configure_logging(settings.logging)
    if args.metrics_port:
        from trainguard.telemetry import serve_metrics

        serve_metrics(args.metrics_port, addr=args.metrics_host)
    from workers.worker import run_worker

    asyncio.run(run_worker(settings, queues, start_cluster_watch=not args.no_cluster_watch))
    return 0

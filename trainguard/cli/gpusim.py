"""`trainguard gpusim`: serve simulated dcgm-exporter metrics for a set of nodes (local demos and tests)."""

from __future__ import annotations

import argparse
import sys

from trainguard.gpumetrics.sim_exporter import MAX_GPUS, GpuFleet, SimExporter
from trainguard.slurm.hostlist import expand_hostlist


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "gpusim",
        help="serve simulated DCGM GPU metrics (inject faults with POST /inject)",
        description=(
            "Simulated dcgm-exporter. Inject: curl -d "
            """'{"node":"node2","gpu":0,"kind":"xid","value":79}' http://127.0.0.1:PORT/inject ; """
            "clear: curl -d '{}' http://127.0.0.1:PORT/clear"
        ),
    )
    parser.add_argument("--port", type=int, default=9400, help="listen port (default 9400, dcgm-exporter's)")
    parser.add_argument("--host", default="127.0.0.1", help="listen address (default loopback)")
    parser.add_argument("--nodes", default="node[1-4]", help="Slurm hostlist of simulated nodes")
    parser.add_argument("--gpus", type=int, default=8, help=f"GPUs per node (1..{MAX_GPUS})")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    try:
        fleet = GpuFleet(expand_hostlist(args.nodes), args.gpus)
    except ValueError as err:
        print(f"trainguard gpusim: {err}", file=sys.stderr)
        return 2
    try:
        exporter = SimExporter(fleet, host=args.host, port=args.port)
    except OSError as err:
        print(f"trainguard gpusim: cannot listen on {args.host}:{args.port}: {err.strerror}", file=sys.stderr)
        return 1
    size = f"{len(fleet.nodes)} nodes x {fleet.gpus_per_node} GPUs"
    print(f"gpusim: {size} at {exporter.url}/metrics", flush=True)
    try:
        exporter.serve_forever()
    finally:
        exporter.stop()
    return 0

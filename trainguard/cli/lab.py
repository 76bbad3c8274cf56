"""`trainguard lab ...`: drive the local multi-node Slurm cluster (quick start, fault injection)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from trainguard.localstack.slurm import LabError, LocalSlurmCluster
from trainguard.localstack.slurm_rootfs import SUPPORTED_VERSIONS, VERSION_ENV

DEFAULT_DIR = "var/slurm"


def _cluster(args: argparse.Namespace) -> LocalSlurmCluster:
    return LocalSlurmCluster(
        Path(args.dir),
        cluster=args.cluster,
        nodes=args.nodes,
        ctld_port=args.ctld_port,
        node_port_base=args.node_port_base,
        version=args.slurm,
    )


def _up(args: argparse.Namespace) -> int:
    cluster = _cluster(args)
    cluster.start()
    print(f"cluster {cluster.cluster!r} up ({cluster.describe()}): {', '.join(cluster.node_names)} idle")
    for name, value in cluster.env.items():
        print(f"export {name}={value}")
    return 0


def _down(args: argparse.Namespace) -> int:
    _cluster(args).stop()
    print("cluster stopped")
    return 0


def _status(args: argparse.Namespace) -> int:
    cluster = _cluster(args)
    if not cluster.is_running():
        print(f"not running (dir {cluster.base_dir})")
        return 1
    print(f"running {cluster.describe()}; SLURM_CONF={cluster.conf}")
    if cluster.rootfs is not None:
        print(f"  client commands: {cluster.bin_dir} (put it first on PATH)")
    for node, state in cluster.node_states().items():
        print(f"  {node:10} {state}")
    return 0


def _kill_node(args: argparse.Namespace) -> int:
    killed = _cluster(args).kill_node(args.node)
    print(f"killed {args.node}: {len(killed)} process(es); Slurm marks it DOWN in ~10-12 s (24.11: ~15-20 s)")
    return 0


def _restart_node(args: argparse.Namespace) -> int:
    _cluster(args).restart_node(args.node)
    print(f"{args.node} is back")
    return 0


def _wrap(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        try:
            return fn(args)
        except (LabError, ValueError) as err:
            print(f"trainguard lab: {err}", file=sys.stderr)
            return 1

    return run


def register(subparsers: argparse._SubParsersAction) -> None:
    lab = subparsers.add_parser(
        "lab",
        help="run a local multi-node Slurm cluster for trials and tests",
        description="A real Slurm (munged, slurmctld, N slurmd) on this host, under one directory.",
    )

    def _help(_args: argparse.Namespace) -> int:
        lab.print_help()
        return 2

    lab.set_defaults(handler=_help)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--dir", default=DEFAULT_DIR, help=f"cluster directory (default {DEFAULT_DIR})")
    common.add_argument("--cluster", default="lab", help="Slurm ClusterName (default lab)")
    common.add_argument("--nodes", type=int, default=4, help="number of nodes (default 4)")
    common.add_argument("--ctld-port", type=int, default=16817, help="slurmctld port (default 16817)")
    common.add_argument(
        "--node-port-base", type=int, default=17001, help="first slurmd port; one per node (default 17001)"
    )
    common.add_argument(
        "--slurm",
        choices=SUPPORTED_VERSIONS,
        default=None,
        help=f"Slurm version (default ${VERSION_ENV}, else 22.05); the one the host's packages lack "
        "runs from var/slurm-<version>/rootfs (scripts/slurm-rootfs.sh)",
    )
    sub = lab.add_subparsers(dest="lab_command", metavar="ACTION")
    commands = [
        ("up", "start the cluster (idempotent) and wait until every node is idle", _up, False),
        ("down", "cancel all jobs and stop every daemon of the cluster", _down, False),
        ("status", "show whether the cluster runs and each node's state", _status, False),
        ("kill-node", "simulate a node crash: kill its slurmd, steps and job processes", _kill_node, True),
        (
            "restart-node",
            "start a killed node's slurmd again and wait until it responds",
            _restart_node,
            True,
        ),
    ]
    for name, text, fn, takes_node in commands:
        parser = sub.add_parser(name, help=text, description=text, parents=[common])
        if takes_node:
            parser.add_argument("node", metavar="NODE", help="node name, e.g. node2")
        parser.set_defaults(handler=_wrap(fn))

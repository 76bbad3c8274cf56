"""`trainguard mode` and `trainguard monitoring`: steer workloads at run time (audited by the workflows)."""

from __future__ import annotations

import argparse
import asyncio
import getpass
import sys
from typing import Any

from trainguard.api.temporal_control import ClientTemporalControl, TemporalControlError
from trainguard.cli import settings_from
from trainguard.models import Mode, ModeChange, PauseRequest, WorkloadId


def register(sub: Any) -> None:
    p = sub.add_parser(
        "mode",
        help="switch a workload or a cluster between observe and action mode",
        description="Sends the change to the workload's (or cluster's) workflow as a Temporal update; the "
        "workflow audits it. A job's own comment can only be more conservative than its cluster.",
    )
    p.add_argument("mode", choices=[m.value for m in Mode])
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--workload", metavar="KEY", help="workload key CLUSTER/JOB_ID/SUBMIT_TIME")
    target.add_argument("--cluster", metavar="NAME", help="every workload of this cluster, and new ones")
    p.add_argument("--reason", default="", help="why (kept in the audit trail)")
    p.set_defaults(handler=_mode)
    m = sub.add_parser("monitoring", help="pause or resume monitoring of a workload")
    m.add_argument("action", choices=["pause", "resume"])
    m.add_argument("--workload", metavar="KEY", required=True)
    m.add_argument("--reason", default="")
    m.set_defaults(handler=_monitoring)


def _workflow_id(key: str) -> str:
    parts = key.split("/")
    if len(parts) != 3 or not parts[2].isdigit():
        raise SystemExit(f"trainguard: workload key must be CLUSTER/JOB_ID/SUBMIT_TIME, got {key!r}")
    return WorkloadId(cluster=parts[0], job_id=parts[1], submit_time=int(parts[2])).workflow_id


def _mode(args: argparse.Namespace) -> int:
    control = ClientTemporalControl(settings_from(args).temporal)
    change = ModeChange(mode=Mode(args.mode), who=getpass.getuser(), reason=args.reason)
    try:
        if args.workload:
            status = asyncio.run(control.set_workload_mode(_workflow_id(args.workload), change))
            print(f"{status.workload_key}: mode {status.mode.value} (state {status.state.value})")
        else:
            asyncio.run(control.set_cluster_mode(args.cluster, change))
            print(f"cluster {args.cluster}: mode {args.mode}")
    except TemporalControlError as err:
        print(f"trainguard: {err}", file=sys.stderr)
        return 1
    return 0


def _monitoring(args: argparse.Namespace) -> int:
    control = ClientTemporalControl(settings_from(args).temporal)
    req = PauseRequest(paused=args.action == "pause", who=getpass.getuser(), reason=args.reason)
    try:
        asyncio.run(control.set_workload_paused(_workflow_id(args.workload), req))
    except TemporalControlError as err:
        print(f"trainguard: {err}", file=sys.stderr)
        return 1
    print(f"{args.workload}: monitoring {'paused' if req.paused else 'resumed'}")
    return 0

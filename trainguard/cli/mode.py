"""`trainguard mode` and `trainguard monitoring`: steer workloads at run time (audited by the workflows)."""

from __future__ import annotations

import argparse
import asyncio
import gc
import getpass
import sys
from collections.abc import Awaitable, Callable
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
    change = ModeChange(mode=Mode(args.mode), who=getpass.getuser(), reason=args.reason)
    workflow_id = _workflow_id(args.workload) if args.workload else ""

    async def send(control: ClientTemporalControl) -> str:
        if workflow_id:
            status = await control.set_workload_mode(workflow_id, change)
            return f"{status.workload_key}: mode {status.mode.value} (state {status.state.value})"
        await control.set_cluster_mode(args.cluster, change)
        return f"cluster {args.cluster}: mode {args.mode}"

    return _with_control(args, send)


def _monitoring(args: argparse.Namespace) -> int:
    req = PauseRequest(paused=args.action == "pause", who=getpass.getuser(), reason=args.reason)
    workflow_id = _workflow_id(args.workload)

    async def send(control: ClientTemporalControl) -> str:
        await control.set_workload_paused(workflow_id, req)
        return f"{args.workload}: monitoring {'paused' if req.paused else 'resumed'}"

    return _with_control(args, send)


def _with_control(args: argparse.Namespace, send: Callable[[ClientTemporalControl], Awaitable[str]]) -> int:
    settings = settings_from(args).temporal

    async def go() -> int:
        control = ClientTemporalControl(settings)
        try:
            print(await send(control))
        except TemporalControlError as err:
            print(f"trainguard: {err}", file=sys.stderr)
            return 1
        finally:
            # A Temporal client still alive at interpreter exit can abort the process (rc -6,
            # PyGILState_Release during finalization): release it while its event loop still runs.
            del control
            gc.collect()
        return 0

    return asyncio.run(go())

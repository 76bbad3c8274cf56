"""`trainguard audit`: read the audit trail from the terminal."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from trainguard.audit import AuditStore, InvalidCursor, iter_all_events
from trainguard.audit.schemas import AuditEventOut
from trainguard.models import EventType, WorkloadStatus


def register(sub: Any) -> None:
    audit = sub.add_parser("audit", help="query the audit trail")
    audit_sub = audit.add_subparsers(dest="audit_command", metavar="SUBCOMMAND", required=True)

    listing = audit_sub.add_parser("list", help="events of one workload or job, oldest first")
    who = listing.add_mutually_exclusive_group(required=True)
    who.add_argument("--workload", metavar="KEY", help="workload key CLUSTER/JOB_ID/SUBMIT_TIME")
    who.add_argument("--job-id", metavar="ID")
    listing.add_argument("--attempt", type=int)
    listing.add_argument("--type", choices=[t.value for t in EventType], dest="event_type")
    listing.add_argument("--limit", type=int, default=0, help="stop after N events (0 = all)")
    listing.add_argument("--json", action="store_true", help="one JSON object per line")
    listing.set_defaults(handler=_list)

    workloads = audit_sub.add_parser("workloads", help="known workloads, most recently updated first")
    workloads.add_argument("--cluster")
    workloads.add_argument("--state")
    workloads.add_argument("--mode")
    workloads.add_argument("--limit", type=int, default=100)
    workloads.add_argument("--json", action="store_true")
    workloads.set_defaults(handler=_workloads)


def _store(args: argparse.Namespace) -> AuditStore:
    from trainguard.cli import settings_from

    return AuditStore.open_existing(settings_from(args).audit.url)


def _fmt_ts(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts)) + f".{int(ts % 1 * 1000):03d}"


def _printable(text: str) -> str:
    """Log text is untrusted: escape control characters so it cannot drive the terminal."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def format_event(e: AuditEventOut) -> str:
    parts = [_fmt_ts(e.ts), f"attempt={e.attempt}", e.event_type.value, f"by={e.actor.value}"]
    for label, value in (("category", e.category), ("action", e.action), ("mode", e.mode)):
        if value:
            parts.append(f"{label}={value}")
    if e.nodes:
        parts.append("nodes=" + ",".join(e.nodes))
    line = " ".join(_printable(p) for p in parts)
    if e.message:
        line += f"  {_printable(e.message)}"
    return line + "".join(f"\n    | {_printable(ev)}" for ev in e.evidence)


def _list(args: argparse.Namespace) -> int:
    store = _store(args)
    try:
        count = 0
        events = iter_all_events(
            store,
            workload_key=args.workload,
            job_id=args.job_id,
            attempt=args.attempt,
            event_type=args.event_type,
        )
        for e in events:
            print(e.model_dump_json() if args.json else format_event(e))
            count += 1
            if args.limit and count >= args.limit:
                break
        if count == 0 and not args.json:
            print("no events", file=sys.stderr)
        return 0
    except InvalidCursor as err:
        print(f"trainguard: {err}", file=sys.stderr)
        return 1
    finally:
        store.close()


def format_workload(w: WorkloadStatus) -> str:
    cells = [
        w.workload_key,
        w.state.value + (" (paused)" if w.paused else ""),
        w.mode.value,
        f"attempts={w.attempts}",
        f"last={w.last_category or '-'}",
        "excluded=" + (",".join(w.excluded_nodes) or "-"),
        w.name,
    ]
    return "  ".join(_printable(c) for c in cells)


def _workloads(args: argparse.Namespace) -> int:
    store = _store(args)
    try:
        rows = store.list_workloads(cluster=args.cluster, state=args.state, mode=args.mode, limit=args.limit)
        for w in rows:
            print(w.model_dump_json() if args.json else format_workload(w))
        return 0
    finally:
        store.close()

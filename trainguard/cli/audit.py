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

    prune = audit_sub.add_parser(
        "prune",
        help="delete audit rows older than an age (default: audit.retention_days)",
        description="Deletes events, advice and operator decisions older than the age, and workloads in a "
        "final state not updated since; records an audit_pruned event. The control worker does the same "
        "every audit.prune_interval_s when audit.retention_days is set.",
    )
    prune.add_argument("--older-than", metavar="AGE", help="90d, 12h, 2w (default: retention_days)")
    prune.set_defaults(handler=_prune)

    mig = audit_sub.add_parser(
        "migrate",
        help="upgrade the audit store's schema to this release (also done when a unit opens it)",
    )
    mig.add_argument("--status", action="store_true", help="only print the current and newest revision")
    mig.set_defaults(handler=_migrate)


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


def _prune(args: argparse.Namespace) -> int:
    from trainguard.audit.retention import parse_age, prune
    from trainguard.cli import settings_from

    settings = settings_from(args)
    try:
        if args.older_than:
            age = parse_age(args.older_than)
        elif settings.audit.retention_days > 0:
            age = settings.audit.retention_days * 86400
        else:
            print("trainguard: give --older-than or set audit.retention_days", file=sys.stderr)
            return 2
    except ValueError as err:
        print(f"trainguard: {err}", file=sys.stderr)
        return 2
    store = AuditStore.open_existing(settings.audit.url)
    try:
        result = prune(store, older_than_s=age, source="trainguard audit prune")
    finally:
        store.close()
    counts = ", ".join(f"{k}={v}" for k, v in result.deleted.items())
    print(f"deleted rows older than {_fmt_ts(result.cutoff)}: {counts}")
    return 0


def _migrate(args: argparse.Namespace) -> int:
    from sqlalchemy import create_engine

    from trainguard.audit import migrate
    from trainguard.cli import settings_from

    engine = create_engine(settings_from(args).audit.url)
    try:
        if args.status:
            print(f"current: {migrate.current_revision(engine) or '(none)'}  head: {migrate.head_revision()}")
            return 0
        report = migrate.upgrade(engine)
    finally:
        engine.dispose()
    if not report.changed:
        print(f"audit store already at {report.after}")
    else:
        stamped = " (created before migrations: stamped at the baseline first)" if report.stamped else ""
        print(f"audit store upgraded {report.before or '(empty)'} -> {report.after}{stamped}")
    return 0

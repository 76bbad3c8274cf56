"""`trainguard decide`: an operator records agreement or disagreement with an advice."""

from __future__ import annotations

import argparse
import getpass
import sys
from typing import Any

from trainguard.audit import AdviceNotFound, AuditStore


def register(sub: Any) -> None:
    parser = sub.add_parser("decide", help="record your decision on an advice (builds trust in observe mode)")
    parser.add_argument("advice_id")
    parser.add_argument("decision", choices=["agree", "disagree"])
    parser.add_argument("--did", default="", help="what you did instead (for a disagreement)")
    parser.add_argument("--who", default=None, help="your name (default: login name)")
    parser.set_defaults(handler=_decide)


def _decide(args: argparse.Namespace) -> int:
    from trainguard.cli import settings_from

    store = AuditStore.open_existing(settings_from(args).audit.url)
    who = args.who if args.who is not None else getpass.getuser()
    try:
        decision = store.record_operator_decision(
            args.advice_id, agree=args.decision == "agree", did_instead=args.did, who=who
        )
    except AdviceNotFound:
        print(f"trainguard: no advice with id {args.advice_id!r}", file=sys.stderr)
        return 1
    finally:
        store.close()
    verb = "agreed with" if decision.agree else "disagreed with"
    print(f"recorded: {decision.who or 'operator'} {verb} {decision.advice_id} ({decision.category})")
    return 0

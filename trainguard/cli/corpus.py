"""`trainguard corpus-report`: classification accuracy on the labelled corpus of real log excerpts."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from trainguard.detection.evaluation import CorpusError, evaluate, load_corpus


def _handle(args: argparse.Namespace) -> int:
    dirs = [Path(d) for d in args.corpus] if args.corpus else []
    try:
        samples = load_corpus(dirs, include_shared=not args.no_shared)
    except (CorpusError, OSError) as err:
        print(f"trainguard corpus-report: {err}", file=sys.stderr)
        return 2
    if not samples:
        print("trainguard corpus-report: no samples found", file=sys.stderr)
        return 2
    report = evaluate(samples)
    if args.json:
        print(
            json.dumps(
                {
                    "samples": report.total,
                    "fatal_accuracy": report.fatal_accuracy,
                    "category_accuracy": report.category_accuracy,
                    "attribution_accuracy": report.attribution_accuracy,
                    "healthy_classified_fatal": [o.sample.id for o in report.healthy_classified_fatal],
                    "per_category": {k: list(v) for k, v in report.per_category().items()},
                    "confusions": [
                        {
                            "id": o.sample.id,
                            "expected": [o.sample.category, o.sample.attribution, o.sample.fatal],
                            "got": [o.result.category, o.result.attribution, o.result.fatal],
                        }
                        for o in report.confusions()
                    ],
                }
            )
        )
    else:
        print(report.render())
    return 0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "corpus-report",
        help="accuracy of the classifier on the labelled corpus of real log excerpts",
    )
    parser.add_argument(
        "--corpus",
        action="append",
        metavar="DIR",
        help="directory of *.jsonl (default: tests/fixtures/corpus)",
    )
    parser.add_argument(
        "--no-shared", action="store_true", help="leave out ../shared/corpus/public-sample.jsonl"
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(handler=_handle)

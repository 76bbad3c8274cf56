"""`trainguard corpus-report`: classification accuracy on the labelled corpus of real log excerpts,
reported separately for the tuning part and the held-out part of the split."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from trainguard.detection.evaluation import SPLITS, CorpusError, Report, evaluate_parts, load_corpus

_TITLES = {
    "tuning": "tuning part (signatures may be fitted to it)",
    "heldout": "held-out part (never tuned on)",
}


def _doc(report: Report) -> dict[str, Any]:
    return {
        "samples": report.total,
        "fatal_accuracy": report.fatal_accuracy,
        "category_accuracy": report.category_accuracy,
        "attribution_accuracy": report.attribution_accuracy,
        "node_accuracy": report.node_accuracy,
        "node_labelled": len(report.node_labelled),
        "healthy_classified_fatal": [o.sample.id for o in report.healthy_classified_fatal],
        "per_category": {k: list(v) for k, v in report.per_category().items()},
        "calibration": [{"bucket": b, "verdicts": n, "right": r} for b, n, r in report.calibration()],
        "confusions": [
            {
                "id": o.sample.id,
                "expected": [o.sample.category, o.sample.attribution, o.sample.fatal],
                "got": [o.result.category, o.result.attribution, o.result.fatal],
                "confidence": o.result.confidence,
            }
            for o in report.confusions()
        ],
    }


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
    parts = evaluate_parts(samples)
    if args.json:
        doc: dict[str, Any] = {"samples": len(samples)}
        doc.update({part: _doc(parts[part]) for part in SPLITS})
        print(json.dumps(doc))
        return 0
    repos = {part: len({s.repo for s in samples if s.split == part}) for part in SPLITS}
    print(
        f"corpus: {len(samples)} real excerpts; "
        + ", ".join(f"{part} {parts[part].total} from {repos[part]} sources" for part in SPLITS)
    )
    for part in SPLITS:
        print()
        print(f"== {_TITLES[part]} ==")
        print(parts[part].render(calibration=True))
    return 0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "corpus-report",
        help="accuracy of the classifier on the labelled corpus (tuning and held-out parts)",
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

"""`trainguard classify PATH [PATH ...]`: one JSON verdict per input log, in input order."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from trainguard.detection.classify import classify_bytes

MAX_INPUT_BYTES = 256 * 1024 * 1024  # a static classification reads the whole input


def _read(name: str) -> bytes:
    if name == "-":
        return sys.stdin.buffer.read(MAX_INPUT_BYTES)
    with Path(name).open("rb") as fh:
        return fh.read(MAX_INPUT_BYTES)


def _handle(args: argparse.Namespace) -> int:
    status = 0
    for name in args.paths:
        try:
            data = _read(name)
        except OSError as err:
            print(f"trainguard classify: {name}: {err.strerror or err}", file=sys.stderr)
            # Keep one object per input so consumers can zip outputs with inputs.
            unreadable = {
                "fatal": False,
                "category": "healthy",
                "attribution": "none",
                "nodes": [],
                "evidence": [],
                "confidence": 0.0,
            }
            print(json.dumps({"input": name, **unreadable, "error": err.strerror or str(err)}), flush=True)
            status = 1
            continue
        result = classify_bytes(data)
        doc: dict[str, Any] = {"input": name, **result.model_dump()}
        print(json.dumps(doc, ensure_ascii=False), flush=True)
    return status


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "classify",
        help="classify training log excerpts (fatal?, category, attribution, nodes, evidence)",
        description="Print one JSON object per input, in input order. '-' reads standard input.",
    )
    parser.add_argument("paths", nargs="+", metavar="PATH", help="log file, or '-' for standard input")
    parser.set_defaults(handler=_handle)

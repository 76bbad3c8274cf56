"""Counting the progress lines the hang and straggler detectors rely on.

Uses the detection package's LogAnalyzer when it is importable; otherwise a default that
recognises Megatron-style `iteration N/ M` lines (and `step N` / `global_step=N`).
"""

from __future__ import annotations

import importlib
import re
from typing import Any

DEFAULT_PROGRESS = re.compile(
    rb"(?:\biteration\s+\d+\s*/\s*\d+|\bglobal[_ ]step\s*[=:]?\s*\d+|\bstep\s*[=:]?\s*\d+\s*/\s*\d+)",
    re.IGNORECASE,
)


def _analyzer() -> Any | None:
    try:
        module = importlib.import_module("trainguard.detection.analyzer")
    except ImportError:
        return None
    factory = getattr(module, "LogAnalyzer", None)
    try:
        return factory() if factory is not None else None
    except Exception:  # a half-written analyzer must not break the onboarding check
        return None


def count_progress_lines(data: bytes, now: float) -> tuple[int, str]:
    """Return (progress lines recognised, which recogniser was used)."""
    analyzer = _analyzer()
    if analyzer is not None and hasattr(analyzer, "progress_lines"):
        try:
            analyzer.feed(data, now=now)
            return int(analyzer.progress_lines), "LogAnalyzer"
        except Exception:
            pass
    return sum(1 for line in data.splitlines() if DEFAULT_PROGRESS.search(line)), "default regex"

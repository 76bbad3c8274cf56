"""The verdict triple the detection round tests compare: one classifier call, read the same way."""

from __future__ import annotations

from trainguard.detection.classify import classify_text


def verdict(text: str) -> tuple[bool, str, str]:
    r = classify_text(text)
    return r.fatal, r.category, r.attribution

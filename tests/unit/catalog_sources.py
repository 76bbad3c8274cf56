"""What the "messages from their sources" tests (docs/detection.md) check, read one way: a printer's message
reads fatal through its entry, a look-alike does not, and every entry those passes added or extended names the
source file of the program that prints its message (in the comments inside the catalog entry)."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

from trainguard.detection.catalog import load_catalog
from trainguard.detection.classify import classify_text

CATALOG_PATH = Path(__file__).resolve().parents[2] / "trainguard" / "detection" / "catalog.yaml"
# `<dir>/<file>.<ext>` as the passes cite them (src/srun/launch.c, mm/oom_kill.c, Lib/.../process.py), or a
# bare C / Python file name where the printer's tree is flat (time.c).
SOURCE_FILE = re.compile(r"[A-Za-z0-9_]+/[A-Za-z0-9_/.-]*\.(c|cc|cpp|h|py|go|txt|awk)\b|\b[a-z_]+\.(c|py)\b")


@cache
def entry_comments() -> dict[str, str]:
    """Entry id -> the comment lines of its block, joined without their `#`."""
    out: dict[str, str] = {}
    text = CATALOG_PATH.read_text()
    for m in re.finditer(r"^  - id: (\S+)\n(.*?)(?=^  - id: |\Z)", text, re.M | re.S):
        comments = [raw.strip() for raw in m.group(2).splitlines() if raw.lstrip().startswith("#")]
        out[m.group(1)] = " ".join(line.lstrip("#").strip() for line in comments)
    return out


def source_comment(sig_id: str) -> str:
    """The comment of `sig_id`'s entry; fails when the catalog has no such entry."""
    comments = entry_comments()
    assert sig_id in comments, sig_id
    return comments[sig_id]


def assert_names_source(sig_id: str, pattern: re.Pattern[str] = SOURCE_FILE) -> None:
    """`sig_id` is a catalog entry whose comment names a source file (`pattern`)."""
    text = source_comment(sig_id)
    assert pattern.search(text), (sig_id, text)
    assert load_catalog().get(sig_id) is not None


def assert_read_as(text: str, expected: tuple[str, str], entry: str) -> None:
    """`text` reads fatal with `expected` (category, attribution), and `entry` is among its findings."""
    r = classify_text(text)
    assert (r.fatal, r.category, r.attribution) == (True, *expected), (text, r.pattern_ids)
    assert entry in r.pattern_ids, (text, r.pattern_ids)


def assert_not_fatal(text: str) -> None:
    r = classify_text(text)
    assert not r.fatal, (text, r.pattern_ids)

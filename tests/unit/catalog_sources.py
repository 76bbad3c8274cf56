"""The comments inside each catalog entry, for the "messages from their sources" tests (docs/detection.md):
every entry those passes added or extended names the source file of the program that prints its message."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

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

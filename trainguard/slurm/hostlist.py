"""Slurm hostlist expressions: `gpu-[01-04,07],login1` <-> ["gpu-01", ..., "login1"].

Node names come from Slurm output and user input, so expansion is bounded and strict: anything
that is not a well-formed hostlist raises ValueError instead of producing surprising names.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

MAX_EXPANDED = 100_000
"""Largest cluster we expect is far below this; the bound stops `n[0-999999999]` eating memory."""

_NAME_CHARS = re.compile(r"[A-Za-z0-9._-]+")
_RANGE = re.compile(r"(\d+)(?:-(\d+))?")
_TRAILING_DIGITS = re.compile(r"^(.*?)(\d+)$")


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside brackets."""
    parts: list[str] = []
    depth = 0
    current: list[str] = []
    for pos, char in enumerate(text):
        if char == "[":
            if depth:
                raise ValueError(f"invalid hostlist {text!r}: nested '[' at position {pos}")
            depth = 1
        elif char == "]":
            if not depth:
                raise ValueError(f"invalid hostlist {text!r}: unmatched ']' at position {pos}")
            depth = 0
        elif char == "," and not depth:
            parts.append("".join(current))
            current = []
            continue
        current.append(char)
    if depth:
        raise ValueError(f"invalid hostlist {text!r}: unclosed '['")
    parts.append("".join(current))
    return parts


def _expand_range_list(body: str, whole: str) -> list[str]:
    values: list[str] = []
    for item in body.split(","):
        match = _RANGE.fullmatch(item)
        if match is None:
            raise ValueError(f"invalid hostlist {whole!r}: bad range {item!r} (expected N or N-M)")
        lo_text, hi_text = match.group(1), match.group(2)
        if hi_text is None:
            values.append(lo_text)
            continue
        lo, hi = int(lo_text), int(hi_text)
        if hi < lo:
            raise ValueError(f"invalid hostlist {whole!r}: range {item!r} runs backwards")
        if hi - lo + 1 > MAX_EXPANDED:
            raise ValueError(f"invalid hostlist {whole!r}: range {item!r} exceeds {MAX_EXPANDED} names")
        width = len(lo_text)  # Slurm pads to the width of the range's first bound
        values.extend(str(n).zfill(width) for n in range(lo, hi + 1))
    return values


def _expand_one(part: str, whole: str) -> list[str]:
    names = [""]
    rest = part
    while rest:
        open_at = rest.find("[")
        literal = rest if open_at < 0 else rest[:open_at]
        if literal and not _NAME_CHARS.fullmatch(literal):
            raise ValueError(f"invalid hostlist {whole!r}: unexpected character in {literal!r}")
        names = [n + literal for n in names]
        if open_at < 0:
            break
        close_at = rest.index("]", open_at)  # brackets were balanced by _split_top_level
        values = _expand_range_list(rest[open_at + 1 : close_at], whole)
        if len(names) * len(values) > MAX_EXPANDED:
            raise ValueError(f"invalid hostlist {whole!r}: expands to more than {MAX_EXPANDED} names")
        names = [n + v for n in names for v in values]
        rest = rest[close_at + 1 :]
    return names


def expand_hostlist(text: str) -> list[str]:
    """Expand a hostlist expression in order, dropping repeats. Empty text -> []."""
    text = text.strip()
    if not text or text == "(null)":
        return []
    result: list[str] = []
    seen: set[str] = set()
    for part in _split_top_level(text):
        if not part:
            raise ValueError(f"invalid hostlist {text!r}: empty name between commas")
        for name in _expand_one(part, text):
            if name not in seen:
                seen.add(name)
                result.append(name)
                if len(result) > MAX_EXPANDED:
                    raise ValueError(f"invalid hostlist: expands to more than {MAX_EXPANDED} names")
    return result


def _ranges(numbers: list[int], width: int) -> str:
    spans: list[str] = []
    start = prev = numbers[0]
    for n in [*numbers[1:], None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        first, last = str(start).zfill(width), str(prev).zfill(width)
        spans.append(first if start == prev else f"{first}-{last}")
        if n is not None:
            start = prev = n
    return ",".join(spans)


def compress_hostlist(nodes: Iterable[str]) -> str:
    """Compress names into a hostlist expression that `expand_hostlist` turns back into the same set.

    Names are grouped by prefix and zero-padded width; groups keep the order they first appear in.
    """
    groups: dict[tuple[str, int], set[int]] = {}
    for name in nodes:
        if not name:
            continue
        if not _NAME_CHARS.fullmatch(name):
            raise ValueError(f"invalid node name {name!r}")
        match = _TRAILING_DIGITS.match(name)
        if match is None:
            groups.setdefault((name, -1), set())
            continue
        prefix, digits = match.group(1), match.group(2)
        # Unpadded numbers (no leading zero) share one group; padded ones keep their width.
        width = len(digits) if digits.startswith("0") and len(digits) > 1 else 0
        groups.setdefault((prefix, width), set()).add(int(digits))
    # gpu10 belongs with gpu[01-09]: an unpadded number as wide as a padded group joins it.
    for (prefix, width), numbers in groups.items():
        unpadded = groups.get((prefix, 0))
        if width > 0 and unpadded:
            moving = {n for n in unpadded if len(str(n)) == width}
            numbers.update(moving)
            unpadded.difference_update(moving)
    parts: list[str] = []
    for (prefix, width), numbers in groups.items():
        if width >= 0 and not numbers:
            continue
        if width < 0:
            parts.append(prefix)
            continue
        ordered = sorted(numbers)
        if len(ordered) == 1:
            parts.append(f"{prefix}{str(ordered[0]).zfill(width)}")
        else:
            parts.append(f"{prefix}[{_ranges(ordered, width)}]")
    return ",".join(parts)

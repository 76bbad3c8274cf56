"""The failure-signature catalog: data (catalog.yaml), loaded and compiled once.

Matching is two-staged for speed: a line is only tried against a signature's regex when it holds one
of the signature's literal keywords. The analyzer finds such lines with one combined keyword search
over big chunks (see prefilter.py), so most of a healthy log is never split into lines at all.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from trainguard.detection.xid import classify_xid
from trainguard.models import Attribution, Category

PRIORITY_GENERIC = 1
PRIORITY_SPECIFIC = 2
PRIORITY_PLATFORM = 3

_IMPLICATING_GROUPS = ("node", "rank", "pci", "xid")


class CatalogError(ValueError):
    """The catalog file is malformed; the message names the entry."""


@dataclass(frozen=True)
class Signature:
    id: str
    pattern: str
    regex: re.Pattern[str]
    keywords: tuple[str, ...]
    category: Category
    attribution: Attribution
    fatal: bool = True
    cascade: bool = False
    priority: int = PRIORITY_SPECIFIC
    requires_traceback: bool = False
    # Only a failure when the main process's Python traceback follows shortly after (a worker's own
    # report of its death: the parent decides whether the job goes down with it).
    confirmed_by_traceback: bool = False
    # A non-fatal entry whose line is kept as a non-fatal finding for the rules to read (a native crash's
    # frames: whose code crashed); other non-fatal entries only keep their lines from the catch-alls.
    evidence: bool = False
    # The launcher line announces that it kills (or has killed) the job's other processes because of the
    # process this line or an earlier one reports: signal kills printed after it are its teardown
    # (attribution.rules.teardown_kills_as_cascades). None: not such a line; for an entry read for several
    # printers' lines, a pattern the teardown printer's lines also match (`tears_down: '<regex>'`).
    teardown: re.Pattern[str] | None = None
    examples: tuple[str, ...] = ()
    counter_examples: tuple[str, ...] = ()
    table: str = ""  # "xid": category, severity and id come from NVIDIA's Xid catalog per code
    parent: str = ""  # for a signature derived from a table entry: the catalog entry that matched

    def match(self, line: str) -> re.Match[str] | None:
        if not any(k in line for k in self.keywords):
            return None
        return self.regex.search(line)

    def tears_down(self, line: str) -> bool:
        """Whether `line`, which this signature matched, announces the launcher's teardown of the job."""
        return self.teardown is not None and self.teardown.search(line) is not None


@dataclass(frozen=True)
class SignatureMatch:
    signature: Signature
    groups: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Catalog:
    version: int
    signatures: tuple[Signature, ...]

    @property
    def keywords(self) -> tuple[str, ...]:
        seen: dict[str, None] = {}
        for sig in self.signatures:
            for kw in sig.keywords:
                seen.setdefault(kw, None)
        return tuple(seen)

    def match_line(self, line: str, candidates: Sequence[int] | None = None) -> SignatureMatch | None:
        """The first signature (file order) that matches `line`; `candidates` are sorted signature
        indices known to have a keyword in the line (from the prefilter)."""
        sigs = self.signatures if candidates is None else [self.signatures[i] for i in candidates]
        for sig in sigs:
            m = sig.match(line)
            if m is not None:
                groups = {k: v for k, v in m.groupdict().items() if v and k in _IMPLICATING_GROUPS}
                if sig.table == "xid" and groups.get("xid"):
                    return SignatureMatch(_xid_signature(sig, int(groups["xid"]), line), groups)
                return SignatureMatch(sig, groups)
        return None

    def get(self, signature_id: str) -> Signature | None:
        return next((s for s in self.signatures if s.id == signature_id), None)

    def grep_patterns(self) -> list[str]:
        """The regexes as POSIX ERE, for `grep -E -f` (benchmark baseline, ad-hoc greps by operators)."""
        return [to_ere(sig.pattern) for sig in self.signatures]


@lru_cache(maxsize=1024)
def _derived(sig: Signature, klass: str) -> Signature:
    from trainguard.detection.xid import CLASSES

    k = CLASSES[klass]
    return replace(
        sig,
        id=f"{sig.id}_{klass}",
        category=k.category,
        attribution=k.attribution,
        fatal=k.fatal,
        cascade=k.cascade,
        priority=k.priority,
        parent=sig.id,
    )


def _xid_signature(sig: Signature, code: int, line: str) -> Signature:
    return _derived(sig, classify_xid(code, line).klass.name)


def to_ere(pattern: str) -> str:
    """Convert the restricted Python regex subset the catalog uses into GNU ERE."""
    out = re.sub(r"\(\?P<[A-Za-z_]+>", "(", pattern)
    out = out.replace("(?:", "(")
    out = out.replace(r"\d", "[0-9]").replace(r"\S", "[^[:space:]]").replace(r"\s", "[[:space:]]")
    return out


def _parse_entry(raw: Any, index: int) -> Signature:
    if not isinstance(raw, dict):
        raise CatalogError(f"entry {index}: must be a mapping")
    sig_id = str(raw.get("id") or f"#{index}")
    try:
        pattern = str(raw["regex"])
        keywords = tuple(str(k) for k in raw["keywords"])
        category = Category(raw["category"])
        attribution = Attribution(raw["attribution"])
    except KeyError as err:
        raise CatalogError(f"signature {sig_id}: missing field {err.args[0]!r}") from None
    except ValueError as err:
        raise CatalogError(f"signature {sig_id}: {err}") from None
    if raw.get("table") not in (None, "", "xid"):
        raise CatalogError(f"signature {sig_id}: unknown table {raw.get('table')!r}")
    if not keywords or any(not k for k in keywords):
        raise CatalogError(f"signature {sig_id}: needs at least one non-empty keyword (the prefilter)")
    try:
        regex = re.compile(pattern)
    except re.error as err:
        raise CatalogError(f"signature {sig_id}: bad regex: {err}") from None
    priority = int(raw.get("priority", PRIORITY_SPECIFIC))
    if priority not in (PRIORITY_GENERIC, PRIORITY_SPECIFIC, PRIORITY_PLATFORM):
        raise CatalogError(f"signature {sig_id}: priority must be 1, 2 or 3")
    evidence = bool(raw.get("evidence", False))
    if evidence and bool(raw.get("fatal", True)):
        raise CatalogError(f"signature {sig_id}: evidence entries must be fatal: false")
    teardown = _teardown(raw.get("tears_down", False), sig_id)
    if teardown is not None and not bool(raw.get("fatal", True)) and not evidence:
        # A non-fatal line reaches the rules only as evidence.
        raise CatalogError(f"signature {sig_id}: a non-fatal tears_down entry must be evidence: true")
    return Signature(
        id=sig_id,
        pattern=pattern,
        regex=regex,
        keywords=keywords,
        category=category,
        attribution=attribution,
        fatal=bool(raw.get("fatal", True)),
        cascade=bool(raw.get("cascade", False)),
        priority=priority,
        requires_traceback=bool(raw.get("requires_traceback", False)),
        confirmed_by_traceback=bool(raw.get("confirmed_by_traceback", False)),
        evidence=evidence,
        teardown=teardown,
        examples=tuple(str(e) for e in raw.get("examples", ()) or ()),
        counter_examples=tuple(str(e) for e in raw.get("counter_examples", ()) or ()),
        table=str(raw.get("table", "") or ""),
    )


_EVERY_LINE = re.compile("")


def _teardown(value: Any, sig_id: str) -> re.Pattern[str] | None:
    """`tears_down`: true (every line the entry matches), false, or a regex narrowing it to one printer's."""
    if value is True:
        return _EVERY_LINE
    if value is False or value is None:
        return None
    if not isinstance(value, str) or not value:
        raise CatalogError(f"signature {sig_id}: tears_down must be true, false or a regex")
    try:
        return re.compile(value)
    except re.error as err:
        raise CatalogError(f"signature {sig_id}: bad tears_down regex: {err}") from None


def parse_catalog(text: str) -> Catalog:
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise CatalogError(f"catalog is not valid YAML: {err}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("signatures"), list):
        raise CatalogError("catalog must be a mapping with a `signatures` list")
    sigs = tuple(_parse_entry(raw, i) for i, raw in enumerate(doc["signatures"]))
    ids = [s.id for s in sigs]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise CatalogError(f"duplicate signature ids: {', '.join(dupes)}")
    return Catalog(version=int(doc.get("version", 1)), signatures=sigs)


@lru_cache(maxsize=1)
def _builtin() -> Catalog:
    text = resources.files("trainguard.detection").joinpath("catalog.yaml").read_text(encoding="utf-8")
    return parse_catalog(text)


def load_catalog(path: Path | None = None) -> Catalog:
    """The built-in catalog (cached), or one from `path` (an operator's extended copy)."""
    if path is None:
        return _builtin()
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise CatalogError(f"cannot read catalog {path}: {err.strerror}") from None
    return parse_catalog(text)

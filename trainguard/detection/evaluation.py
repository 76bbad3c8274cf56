"""Accuracy of `classify` on a labelled corpus of real log excerpts.

JSONL records: id, category, attribution, fatal, source, log; optionally repo (the split unit), split
(`tuning` or `heldout`), nodes (hosts the text implicates) and why (label rationale). The split is
stored in the data so it cannot drift; records without one predate the split and were tuned on, so
they belong to the tuning part.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path

from trainguard.detection.classify import ClassifyResult, classify_text
from trainguard.detection.normalize import same_host

DEFAULT_CORPUS_DIR = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "corpus"
SHARED_SAMPLE_NAMES = ("shared/corpus/public-sample.jsonl",)
TUNING = "tuning"
HELDOUT = "heldout"
SPLITS = (TUNING, HELDOUT)
# Share of new source repositories that go to the held-out part (decided before any scoring).
HELDOUT_PERCENT = 65
SPLIT_SALT = "trainguard-corpus-split-v1"
# Lower edges of the confidence buckets `corpus-report` calibrates.
CONFIDENCE_EDGES = (0.0, 0.5, 0.6, 0.7, 0.8, 0.9)
# Renamed repositories: one project is one split unit whatever name a thread was filed under.
_RENAMED = {
    "microsoft/deepspeed": "deepspeedai/deepspeed",
    "pytorchlightning/pytorch-lightning": "lightning-ai/pytorch-lightning",
    "lightning-ai/lightning": "lightning-ai/pytorch-lightning",
    "nvidia/nemo-megatron-launcher": "nvidia/nemo-framework-launcher",
    # moved to new owners; the corpus files them under the new names, an old address must land there too
    "google/maxtext": "ai-hypercomputer/maxtext",
    "pytorch/torchtune": "meta-pytorch/torchtune",
    "volcengine/verl": "verl-project/verl",
}
_GITHUB = re.compile(r"(?:https?://)?github\.com/([^/#?\s]+/[^/#?\s]+)")


def source_repo(source: str) -> str:
    """The unit of the tuning/held-out split: `owner/name` for GitHub, host + thread path elsewhere."""
    m = _GITHUB.match(source.strip())
    if m:
        repo = m.group(1).removesuffix(".git").lower()
        return _RENAMED.get(repo, repo)
    rest = re.sub(r"^https?://", "", source.strip()).split()[0] if source.strip() else ""
    return rest.split("#", 1)[0].split("?", 1)[0].rstrip("/").lower()


def split_for(repo: str, tuned_before: frozenset[str] = frozenset()) -> str:
    """Deterministic split of a source repository.

    Repositories the signatures were already fitted to (`tuned_before`: every repository of the
    excerpts that predate the split) stay in the tuning part; any other one is held out when
    sha256(salt + repo) falls in the first HELDOUT_PERCENT of 100 buckets.
    """
    if repo in tuned_before:
        return TUNING
    bucket = int(hashlib.sha256(f"{SPLIT_SALT}:{repo}".encode()).hexdigest()[:8], 16) % 100
    return HELDOUT if bucket < HELDOUT_PERCENT else TUNING


class CorpusError(ValueError):
    pass


@dataclass(frozen=True)
class Sample:
    id: str
    category: str
    attribution: str
    fatal: bool
    source: str
    log: str
    origin: str = ""
    repo: str = ""
    split: str = TUNING
    nodes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Outcome:
    sample: Sample
    result: ClassifyResult

    @property
    def fatal_ok(self) -> bool:
        return self.result.fatal == self.sample.fatal

    @property
    def category_ok(self) -> bool:
        return self.result.category == self.sample.category

    @property
    def attribution_ok(self) -> bool:
        return self.result.attribution == self.sample.attribution

    @property
    def right(self) -> bool:
        """The whole verdict is right: fatal-vs-healthy, category and attribution."""
        return self.fatal_ok and self.category_ok and self.attribution_ok

    @property
    def nodes_ok(self) -> bool:
        """A labelled implicated host is among the verdict's nodes (only meaningful when labelled). A host
        counts by full or short name, as the policy matches it to Slurm's names (`normalize.match_node`):
        torchelastic's `host :` line is socket.getfqdn(), a label may be the short name."""
        return any(same_host(n, got) for n in self.sample.nodes for got in self.result.nodes)


@dataclass
class Report:
    outcomes: list[Outcome] = field(default_factory=list)

    def _rate(self, flags: Iterable[bool]) -> float:
        values = list(flags)
        return sum(values) / len(values) if values else 1.0

    @property
    def total(self) -> int:
        return len(self.outcomes)

    @property
    def fatal_accuracy(self) -> float:
        return self._rate(o.fatal_ok for o in self.outcomes)

    @property
    def category_accuracy(self) -> float:
        return self._rate(o.category_ok for o in self.outcomes)

    @property
    def attribution_accuracy(self) -> float:
        return self._rate(o.attribution_ok for o in self.outcomes)

    @property
    def healthy_classified_fatal(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.sample.fatal and o.result.fatal]

    @property
    def node_labelled(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.sample.nodes and o.sample.fatal]

    @property
    def node_accuracy(self) -> float:
        return self._rate(o.nodes_ok for o in self.node_labelled)

    def calibration(self, edges: Sequence[float] = CONFIDENCE_EDGES) -> list[tuple[str, int, float]]:
        """(bucket, verdicts, share right) for each confidence bucket that holds a verdict."""
        rows: list[tuple[str, int, float]] = []
        bounds = [*edges, 1.0000001]
        for lo, hi in pairwise(bounds):
            inside = [o for o in self.outcomes if lo <= o.result.confidence < hi]
            if inside:
                label = f"{lo:.2f}-{min(hi, 1.0):.2f}"
                rows.append((label, len(inside), self._rate(o.right for o in inside)))
        return rows

    def per_category(self) -> dict[str, tuple[int, int, int]]:
        """category -> (samples, category correct, attribution correct)."""
        table: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
        for o in self.outcomes:
            row = table[o.sample.category]
            row[0] += 1
            row[1] += o.category_ok
            row[2] += o.attribution_ok
        return {k: (v[0], v[1], v[2]) for k, v in sorted(table.items())}

    def confusions(self) -> list[Outcome]:
        return [o for o in self.outcomes if not (o.category_ok and o.attribution_ok and o.fatal_ok)]

    def render(self, *, calibration: bool = False) -> str:
        lines = [f"{'category':<26}{'n':>4}{'category':>10}{'attribution':>13}"]
        for cat, (n, c_ok, a_ok) in self.per_category().items():
            lines.append(f"{cat:<26}{n:>4}{c_ok / n:>10.0%}{a_ok / n:>13.0%}")
        lines.append("")
        lines.append(f"samples               {self.total}")
        lines.append(f"fatal-vs-healthy      {self.fatal_accuracy:.1%}")
        lines.append(f"category              {self.category_accuracy:.1%}")
        lines.append(f"attribution           {self.attribution_accuracy:.1%}")
        lines.append(f"healthy called fatal  {len(self.healthy_classified_fatal)}")
        if self.node_labelled:
            lines.append(
                f"implicated node       {self.node_accuracy:.1%} of {len(self.node_labelled)} labelled"
            )
        if calibration:
            lines.append("")
            lines.append("confidence calibration (share of verdicts fully right):")
            for label, n, share in self.calibration():
                lines.append(f"  {label}  n={n:<4} right {share:.0%}")
        wrong = self.confusions()
        if wrong:
            lines.append("")
            lines.append("confusions (expected -> got):")
            pairs = Counter(
                (o.sample.category, o.sample.attribution, o.result.category, o.result.attribution)
                for o in wrong
            )
            for (ec, ea, gc, ga), n in pairs.most_common():
                ids = ", ".join(
                    o.sample.id
                    for o in wrong
                    if (o.sample.category, o.sample.attribution, o.result.category, o.result.attribution)
                    == (ec, ea, gc, ga)
                )
                lines.append(f"  {n}x {ec}/{ea} -> {gc}/{ga}  [{ids}]")
        return "\n".join(lines)


def read_samples(path: Path) -> list[Sample]:
    samples: list[Sample] = []
    with path.open(encoding="utf-8") as fh:
        for n, raw in enumerate(fh, 1):
            if not raw.strip():
                continue
            try:
                doc = json.loads(raw)
                source = str(doc.get("source", ""))
                split = str(doc.get("split", TUNING))
                if split not in SPLITS:
                    raise ValueError(f"split {split!r} is not one of {SPLITS}")
                samples.append(
                    Sample(
                        id=str(doc["id"]),
                        category=str(doc["category"]),
                        attribution=str(doc["attribution"]),
                        fatal=bool(doc["fatal"]),
                        source=source,
                        log=str(doc["log"]),
                        origin=path.name,
                        repo=str(doc.get("repo") or source_repo(source)),
                        split=split,
                        nodes=tuple(str(x) for x in doc.get("nodes", ())),
                    )
                )
            except (ValueError, KeyError, TypeError) as err:
                raise CorpusError(f"{path}:{n}: not a corpus record ({err})") from None
    return samples


def shared_sample_paths(start: Path | None = None) -> list[Path]:
    """The shared public sample next to the checkout (../shared/corpus), read in place when present."""
    here = (start or Path(__file__)).resolve()
    found: list[Path] = []
    for parent in here.parents:
        for name in SHARED_SAMPLE_NAMES:
            candidate = parent / name
            if candidate.is_file() and candidate not in found:
                found.append(candidate)
    return found


def load_corpus(dirs: Sequence[Path] = (), *, include_shared: bool = True) -> list[Sample]:
    paths: list[Path] = []
    for d in dirs or (DEFAULT_CORPUS_DIR,):
        paths.extend(sorted(d.glob("*.jsonl")) if d.is_dir() else [d])
    if include_shared:
        paths.extend(p for p in shared_sample_paths() if p not in paths)
    samples: list[Sample] = []
    for p in paths:
        samples.extend(read_samples(p))
    return samples


def evaluate(samples: Sequence[Sample]) -> Report:
    return Report([Outcome(s, classify_text(s.log)) for s in samples])


def evaluate_parts(samples: Sequence[Sample]) -> dict[str, Report]:
    """One report per part of the split (tuning, heldout), each classifying only its own excerpts."""
    return {part: evaluate([s for s in samples if s.split == part]) for part in SPLITS}

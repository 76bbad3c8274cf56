from __future__ import annotations

from trainguard.detection.evaluation import DEFAULT_CORPUS_DIR, evaluate, load_corpus, read_samples
from trainguard.models import Attribution, Category

PUBLIC = {c.value for c in Category} - {"straggler"}
ATTRIBUTIONS = {a.value for a in Attribution}


def test_own_corpus_is_large_sourced_and_labelled() -> None:
    own = [s for p in sorted(DEFAULT_CORPUS_DIR.glob("*.jsonl")) for s in read_samples(p)]
    assert len(own) >= 100
    assert len({s.id for s in own}) == len(own)
    for s in own:
        assert s.source.startswith("https://github.com/"), s.id
        assert s.category in PUBLIC and s.attribution in ATTRIBUTIONS, s.id
        assert s.fatal == (s.category != "healthy"), s.id
        assert (s.attribution == "none") == (s.category == "healthy"), s.id
        assert s.log.strip(), s.id
    assert sum(1 for s in own if not s.fatal) >= 25
    assert len({s.category for s in own}) >= 14


def test_accuracy_targets_hold_on_the_corpus() -> None:
    report = evaluate(load_corpus())
    assert report.total >= 100
    assert report.healthy_classified_fatal == []
    assert report.fatal_accuracy >= 0.97
    assert report.category_accuracy >= 0.90
    assert report.attribution_accuracy >= 0.80

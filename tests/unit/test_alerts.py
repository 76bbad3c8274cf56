"""TrainGuard's alerting rules: checked and unit-tested by Prometheus's own promtool, each rule on a metric
TrainGuard really exports, each with a runbook section that exists."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import yaml
from prometheus_client import REGISTRY

import trainguard.telemetry  # noqa: F401  (registers the process metrics)
from trainguard.api.metrics import store_registry
from trainguard.audit import AuditStore

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "alerts.yaml"
RULE_TESTS = ROOT / "tests" / "alerts" / "alerts_test.yaml"
RUNBOOK = ROOT / "docs" / "runbook.md"
RUNBOOK_URL = "https://github.com/trainguard/trainguard/blob/main/docs/runbook.md#"
# Not TrainGuard's: the scrape health series Prometheus writes itself.
PROMETHEUS_OWN = {"up"}


def promtool() -> str:
    path = shutil.which("promtool")
    assert path, "promtool not found: install Debian's prometheus package (scripts/bootstrap.sh does)"
    return path


def rules() -> list[dict[str, object]]:
    doc = yaml.safe_load(RULES.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def test_promtool_checks_the_rules() -> None:
    out = subprocess.run([promtool(), "check", "rules", str(RULES)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(rules())} rules found" in out.stdout


def test_promtool_unit_tests_pass() -> None:
    out = subprocess.run(
        [promtool(), "test", "rules", RULE_TESTS.name],
        capture_output=True,
        text=True,
        cwd=RULE_TESTS.parent,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout


def test_every_rule_has_a_case_that_fires() -> None:
    doc = yaml.safe_load(RULE_TESTS.read_text())
    fired = {
        case["alertname"] for test in doc["tests"] for case in test["alert_rule_test"] if case["exp_alerts"]
    }
    silent = {
        case["alertname"]
        for test in doc["tests"]
        for case in test["alert_rule_test"]
        if not case["exp_alerts"]
    }
    names = {str(r["alert"]) for r in rules()}
    assert names - fired == set(), "rules without a firing test case"
    assert names - silent == set(), "rules without a case where they must stay silent"


def _slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_every_rule_links_to_an_existing_runbook_section() -> None:
    anchors = {_slug(m.group(1)) for m in re.finditer(r"^#+ (.+)$", RUNBOOK.read_text(), re.MULTILINE)}
    for rule in rules():
        annotations = rule["annotations"]
        assert isinstance(annotations, dict)
        url = str(annotations["runbook_url"])
        assert url.startswith(RUNBOOK_URL), url
        assert url.removeprefix(RUNBOOK_URL) in anchors, f"{rule['alert']}: no runbook section for {url}"


def _exported_names(tmp_path: Path) -> set[str]:
    names: set[str] = set()
    store = AuditStore.from_url(f"sqlite:///{tmp_path / 'audit.db'}")
    for registry in (REGISTRY, store_registry(store)):
        for family in registry.collect():
            names.add(family.name)
            names.update(s.name for s in family.samples)
            # A labelled metric has no samples before its first use: name its series by type.
            suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum")}
            names.update(family.name + sfx for sfx in suffixes.get(family.type, ()))
    return names


def test_rules_use_only_metrics_trainguard_exports(tmp_path: Path) -> None:
    exported = _exported_names(tmp_path)
    used: set[str] = set()
    for rule in rules():
        expr = re.sub(r'"[^"]*"', '""', str(rule["expr"]))  # label values are not metric names
        used.update(re.findall(r"\b(trainguard_[a-z_]+)\b", expr))
        used.update(n for n in re.findall(r"\b([a-z_]+)\{", expr) if n in PROMETHEUS_OWN)
    missing = {n for n in used - PROMETHEUS_OWN if n not in exported}
    assert missing == set(), f"rules on metrics nothing exports: {sorted(missing)}"
    assert "trainguard_advice_total" in used and "trainguard_discovery_last_success_timestamp_seconds" in used

"""The Grafana dashboard only queries metrics that TrainGuard actually exposes."""

from __future__ import annotations

import json
import re
from pathlib import Path

from fastapi.testclient import TestClient

from tests.fakes.temporal_control import StoreTemporalControl
from trainguard.api.app import create_app
from trainguard.audit import AuditStore
from trainguard.settings import Settings

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "trainguard.json"


def test_dashboard_metrics_exist_in_metrics_endpoint(tmp_path: Path) -> None:
    doc = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in doc["panels"] for t in p["targets"]]
    used = {m for e in exprs for m in re.findall(r"\btrainguard_[a-z_]+", e)}
    base = {re.sub(r"_(bucket|sum|count)$", "", m) for m in used}
    store = AuditStore.from_url(f"sqlite:///{tmp_path / 'a.db'}")
    text = (
        TestClient(create_app(Settings(), store=store, temporal=StoreTemporalControl(store)))
        .get("/metrics")
        .text
    )
    exposed = set(re.findall(r"^# TYPE (trainguard_[a-z_]+) ", text, re.M))
    # prometheus-client names a counter's family without the `_total` suffix.
    exposed |= {f"{m}_total" for m in exposed}
    assert base - exposed == set()
    assert len(doc["panels"]) >= 10
    assert all(p["datasource"]["uid"] == "${datasource}" for p in doc["panels"])

"""Safety contract clause 7 through the API: inputs are strict (booleans are booleans), and one operator
action gives one audit row. Temporal is replaced (StoreTemporalControl stands in for the workflows: it
writes the one row the workflow's update handler writes); the real workflow path is in
tests/e2e/test_safety_detection.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.fakes.temporal_control import StoreTemporalControl
from trainguard.api.app import create_app
from trainguard.audit import AuditStore
from trainguard.audit.demo import seed_demo
from trainguard.models import EventType, ModeChange, WorkloadId, WorkloadStatus
from trainguard.settings import APISettings, AuditSettings, Settings

TOKEN = "t0ken"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


class WorkflowsWriteNothing(StoreTemporalControl):
    """Answers like the workflow but writes no row: whatever row appears is the API's own."""

    async def set_workload_mode(self, workflow_id: str, change: ModeChange) -> WorkloadStatus:
        current = self._find(workflow_id)
        return current.model_copy(update={"mode": change.mode})


@pytest.fixture
def store(tmp_path: Path) -> Iterator[AuditStore]:
    s = AuditStore.from_url(f"sqlite:///{tmp_path / 'audit.db'}")
    yield s
    s.close()


@pytest.fixture
def seeded(store: AuditStore) -> list[WorkloadId]:
    return seed_demo(store)


def client_for(store: AuditStore, temporal: StoreTemporalControl) -> TestClient:
    settings = Settings(api=APISettings(token=TOKEN), audit=AuditSettings(url="sqlite://"))
    return TestClient(create_app(settings, store=store, temporal=temporal))


def path_of(w: WorkloadId) -> str:
    return f"/api/v1/workloads/{w.cluster}/{w.job_id}/{w.submit_time}"


@pytest.mark.parametrize("value", ["yes", "true", "True", 1, 0, "1", None, [], {}, 1.0])
def test_paused_must_be_a_json_boolean(store: AuditStore, seeded: list[WorkloadId], value: object) -> None:
    fake = StoreTemporalControl(store)
    resp = client_for(store, fake).put(path_of(seeded[0]) + "/paused", json={"paused": value}, headers=AUTH)
    assert resp.status_code == 422, resp.text
    assert resp.json()["error"] == "invalid_request"
    assert fake.calls == []  # nothing reached the workflow


@pytest.mark.parametrize("value", [True, False])
def test_real_booleans_are_accepted(store: AuditStore, seeded: list[WorkloadId], value: bool) -> None:
    resp = client_for(store, StoreTemporalControl(store)).put(
        path_of(seeded[0]) + "/paused", json={"paused": value}, headers=AUTH
    )
    assert resp.status_code == 202 and resp.json()["paused"] is value


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/mode", {"mode": "action", "reason": 7}),
        ("/mode", {"mode": "action", "reason": ["x"]}),
        ("/paused", {"paused": True, "reason": 1}),
    ],
)
def test_text_fields_must_be_strings(
    store: AuditStore, seeded: list[WorkloadId], path: str, body: dict
) -> None:  # type: ignore[type-arg]
    resp = client_for(store, StoreTemporalControl(store)).put(
        path_of(seeded[0]) + path, json=body, headers=AUTH
    )
    assert resp.status_code == 422


def test_advice_reports_take_integers_not_strings(store: AuditStore, seeded: list[WorkloadId]) -> None:
    client = client_for(store, StoreTemporalControl(store))
    advice_id = f"{seeded[0].key}:0:1"
    for generation in ("1", 1.5, True):
        body = {"disposition": "converged", "observedGeneration": generation}
        assert client.put(f"/api/v1/advice/{advice_id}/status", json=body, headers=AUTH).status_code == 422
    ok = client.put(
        f"/api/v1/advice/{advice_id}/status",
        json={"disposition": "converged", "observedGeneration": 1},
        headers=AUTH,
    )
    assert ok.status_code == 200, ok.text


def _mode_rows(store: AuditStore, **where: str) -> list:  # type: ignore[type-arg]
    return list(store.list_events(event_type=EventType.MODE_CHANGED, **where).items)


def test_the_api_itself_writes_no_second_row_for_a_workload_mode_change(
    store: AuditStore, seeded: list[WorkloadId]
) -> None:
    """The cause of the two rows: the API wrote one and the workflow's update handler another."""
    observed = seeded[1]
    before = len(_mode_rows(store))
    resp = client_for(store, WorkflowsWriteNothing(store)).put(
        path_of(observed) + "/mode", json={"mode": "action"}, headers=AUTH
    )
    assert resp.status_code == 200
    assert len(_mode_rows(store)) == before


def test_one_workload_mode_change_one_row(store: AuditStore, seeded: list[WorkloadId]) -> None:
    observed = seeded[1]
    resp = client_for(store, StoreTemporalControl(store)).put(
        path_of(observed) + "/mode", json={"mode": "action", "reason": "trusted"}, headers=AUTH
    )
    assert resp.status_code == 200
    rows = _mode_rows(store, workload_key=observed.key)
    assert len(rows) == 1 and rows[0].actor == "operator" and rows[0].data["who"] == "api-token"


def test_one_cluster_mode_change_one_operator_row(store: AuditStore, seeded: list[WorkloadId]) -> None:
    resp = client_for(store, StoreTemporalControl(store)).put(
        "/api/v1/clusters/lab/mode", json={"mode": "observe"}, headers=AUTH
    )
    assert resp.status_code == 200
    operator_rows = [e for e in _mode_rows(store, cluster="lab") if e.actor == "operator"]
    assert len(operator_rows) == 1 and operator_rows[0].data["scope"] == "cluster"

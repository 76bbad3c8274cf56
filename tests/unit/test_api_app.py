"""Advisor API over a temp SQLite store seeded with a realistic recovery, with Temporal replaced."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine

from tests.fakes.temporal_control import StoreTemporalControl
from trainguard import telemetry
from trainguard.api.app import create_app
from trainguard.api.temporal_control import TemporalUnavailable, UpdateRejected
from trainguard.audit import AuditStore
from trainguard.audit.demo import seed_demo
from trainguard.models import EventType, Mode, ModeChange, PauseRequest, WorkloadId, WorkloadStatus
from trainguard.settings import APISettings, AuditSettings, Settings

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def store(tmp_path: Path) -> Iterator[AuditStore]:
    s = AuditStore.from_url(f"sqlite:///{tmp_path / 'audit.db'}")
    yield s
    s.close()


@pytest.fixture
def seeded(store: AuditStore) -> list[WorkloadId]:
    return seed_demo(store)


def make_settings(store_path: str = "sqlite://", **api: object) -> Settings:
    return Settings(api=APISettings(**{"token": TOKEN, **api}), audit=AuditSettings(url=store_path))


@pytest.fixture
def fake(store: AuditStore) -> StoreTemporalControl:
    return StoreTemporalControl(store)


@pytest.fixture
def client(store: AuditStore, fake: StoreTemporalControl, seeded: list[WorkloadId]) -> TestClient:
    return TestClient(create_app(make_settings(), store=store, temporal=fake))


def path_of(w: WorkloadId) -> str:
    return f"/api/v1/workloads/{w.cluster}/{w.job_id}/{w.submit_time}"


def test_health_and_openapi(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok", "checks": {}}
    assert client.get("/readyz").json()["checks"] == {"audit": "ok"}
    paths = client.get("/openapi.json").json()["paths"]
    for p in ("/api/v1/workloads", "/api/v1/events", "/api/v1/advice", "/api/v1/agreement", "/metrics"):
        assert p in paths


def test_readyz_reports_unreachable_store() -> None:
    dead = AuditStore(
        create_engine("mysql+pymysql://root@127.0.0.1:1/x", connect_args={"connect_timeout": 1})
    )
    app = create_app(make_settings(), store=dead, temporal=StoreTemporalControl(dead))
    resp = TestClient(app).get("/readyz")
    assert resp.status_code == 503
    assert resp.json()["status"] == "unavailable"
    assert TestClient(app).get("/api/v1/workloads").status_code == 503


def test_list_workloads_with_filters_and_pages(client: TestClient, seeded: list[WorkloadId]) -> None:
    recovered, observed, done = seeded
    body = client.get("/api/v1/workloads").json()
    assert {w["workload_key"] for w in body["items"]} == {recovered.key, observed.key, done.key}
    assert body["next_offset"] is None
    assert [w["workload_key"] for w in client.get("/api/v1/workloads?state=completed").json()["items"]] == [
        done.key
    ]
    assert [w["workload_key"] for w in client.get("/api/v1/workloads?mode=action").json()["items"]] == [
        recovered.key
    ]
    page = client.get("/api/v1/workloads?limit=2").json()
    assert len(page["items"]) == 2 and page["next_offset"] == 2
    assert len(client.get("/api/v1/workloads?limit=2&offset=2").json()["items"]) == 1


@pytest.mark.parametrize(
    "query",
    [
        "state=exploded",
        "limit=0",
        "limit=1001",
        "offset=-1",
        "mode=",
        "limit=abc",
        "offset=99999999999999999999",
    ],
)
def test_bad_workload_queries_are_422_with_json(client: TestClient, query: str) -> None:
    resp = client.get(f"/api/v1/workloads?{query}")
    assert resp.status_code == 422
    assert resp.json()["error"] == "invalid_request"
    assert resp.json()["detail"][0]["loc"][0] == "query"


def test_workload_detail_summarises_attempts(client: TestClient, seeded: list[WorkloadId]) -> None:
    recovered = seeded[0]
    detail = client.get(path_of(recovered)).json()
    assert detail["status"]["name"] == "llama-70b-pretrain"
    assert detail["excluded_nodes"] == ["gpu-03"]
    first, second = detail["attempts"]
    assert first["attempt"] == 0 and first["detections"] == 1 and first["categories"] == ["gpu_hardware"]
    assert first["actions"] == ["requeue_hold", "exclude", "release"]
    assert first["advice_ids"] == [f"{recovered.key}:0:1"]
    assert second["allocation_restarted"] and second["training_resumed"] and not second["completed"]
    assert detail["current_advice"]["disposition"] == "converged"
    assert detail["current_advice"]["exclude_nodes"] == ["gpu-03"]
    assert client.get("/api/v1/workloads/lab/999/1").status_code == 404
    assert client.get("/api/v1/workloads/lab/bad;id/1").status_code == 422


def test_events_filters_order_and_cursor(client: TestClient, seeded: list[WorkloadId]) -> None:
    recovered = seeded[0]
    key = recovered.key
    every = client.get("/api/v1/events", params={"workload": key, "limit": 1000}).json()["items"]
    types = [e["event_type"] for e in every]
    assert types == [
        "workload_discovered", "detection", "advice", "action", "action", "action",
        "allocation_restarted", "training_resumed",
    ]  # fmt: skip
    # Paging 3 at a time walks the same sequence.
    walked: list[str] = []
    params: dict[str, str | int] = {"workload": key, "limit": 3}
    while True:
        page = client.get("/api/v1/events", params=params).json()
        walked += [e["event_id"] for e in page["items"]]
        if not page["next_cursor"]:
            break
        params["cursor"] = page["next_cursor"]
    assert walked == [e["event_id"] for e in every]
    desc = client.get("/api/v1/events", params={"workload": key, "order": "desc", "limit": 1}).json()
    assert desc["items"][0]["event_type"] == "training_resumed"
    resumed = client.get("/api/v1/events", params={"jobId": recovered.job_id, "attempt": 1}).json()["items"]
    assert [e["event_type"] for e in resumed] == ["allocation_restarted", "training_resumed"]
    policy = client.get("/api/v1/events", params={"actor": "policy", "type": "action"}).json()["items"]
    assert [e["action"] for e in policy] == ["requeue_hold", "exclude", "release"]
    assert client.get("/api/v1/events", params={"level": "error"}).json()["items"][0]["nodes"] == ["gpu-03"]


def test_events_bad_input_is_4xx_json(client: TestClient) -> None:
    bad = client.get("/api/v1/events", params={"cursor": "not-a-cursor"})
    assert bad.status_code == 400 and "cursor" in bad.json()["detail"]
    first = client.get("/api/v1/events", params={"limit": 1}).json()["next_cursor"]
    wrong_way = client.get("/api/v1/events", params={"cursor": first, "order": "desc"})
    assert wrong_way.status_code == 400
    for params in ({"type": "nope"}, {"since": "nan"}, {"since": "inf"}, {"attempt": -1}, {"limit": 5000}):
        resp = client.get("/api/v1/events", params=params)
        assert resp.status_code == 422, params
        assert resp.headers["content-type"] == "application/json"


def test_advice_list_detail_and_reconciliation(client: TestClient, seeded: list[WorkloadId]) -> None:
    observed = seeded[1]
    active = client.get("/api/v1/advice", params={"onlyActive": "true"}).json()
    assert [a["advice_id"] for a in active] == [f"{observed.key}:0:1"]
    advice_id = f"{observed.key}:0:1"
    got = client.get(f"/api/v1/advice/{advice_id}").json()
    assert got["active"] is True and got["advice"]["desired_state"] == "requeued"
    assert got["advice"]["verdict"]["pattern_ids"] == ["xid_79", "nccl_watchdog_timeout"]
    report = {"observedGeneration": 1, "disposition": "abandoned", "reason": "operator drained the node"}
    assert client.put(f"/api/v1/advice/{advice_id}/status", json=report).status_code == 401
    assert (
        client.put(
            f"/api/v1/advice/{advice_id}/status", json=report, headers={"Authorization": "Bearer wrong"}
        ).status_code
        == 401
    )
    done = client.put(f"/api/v1/advice/{advice_id}/status", json=report, headers=AUTH)
    assert done.status_code == 200
    assert (done.json()["disposition"], done.json()["observed_generation"]) == ("abandoned", 1)
    assert client.get("/api/v1/advice", params={"onlyActive": True}).json() == []
    snake = {"observed_generation": 2, "disposition": "converged"}
    assert (
        client.put(f"/api/v1/advice/{advice_id}/status", json=snake, headers=AUTH).json()[
            "observed_generation"
        ]
        == 2
    )
    for body in (
        {"disposition": "done"},
        {"disposition": "converged", "extra": 1},
        {"observedGeneration": -1},
    ):
        assert client.put(f"/api/v1/advice/{advice_id}/status", json=body, headers=AUTH).status_code == 422
    assert client.put("/api/v1/advice/none/status", json=report, headers=AUTH).status_code == 404
    assert client.get("/api/v1/advice/none").status_code == 404


def test_operator_decisions_feed_agreement(client: TestClient, seeded: list[WorkloadId]) -> None:
    recovered, observed, _ = seeded
    ok = client.post(f"/api/v1/advice/{recovered.key}:0:1/decision", json={"decision": "agree"}, headers=AUTH)
    assert ok.status_code == 201 and ok.json()["agree"] is True
    no = client.post(
        f"/api/v1/advice/{observed.key}:0:1/decision",
        json={"decision": "disagree", "didInstead": "drained gpu-03 and resubmitted"},
        headers=AUTH,
    )
    assert no.status_code == 201
    rows = client.get("/api/v1/agreement").json()["rows"]
    by = {(r["scope"], r["key"]): (r["decisions"], r["agreed"]) for r in rows}
    assert by == {("category", "gpu_hardware"): (2, 1), ("cluster", "lab"): (2, 1)}
    assert (
        client.get(f"/api/v1/advice/{observed.key}:0:1")
        .json()["decision"]["did_instead"]
        .startswith("drained")
    )
    assert (
        client.post("/api/v1/advice/x/decision", json={"decision": "maybe"}, headers=AUTH).status_code == 422
    )
    assert (
        client.post("/api/v1/advice/x/decision", json={"decision": "agree"}, headers=AUTH).status_code == 404
    )
    assert client.post("/api/v1/advice/x/decision", content=b"{not json", headers=AUTH).status_code == 422


def test_workload_mode_switch_goes_to_workflow_and_audit(
    client: TestClient, fake: StoreTemporalControl, store: AuditStore, seeded: list[WorkloadId]
) -> None:
    observed = seeded[1]
    resp = client.put(
        path_of(observed) + "/mode",
        json={"mode": "action", "reason": "trusted now"},
        headers=AUTH,
    )
    assert resp.status_code == 200 and resp.json()["mode"] == "action"
    assert fake.calls == [
        (
            "set_mode",
            observed.workflow_id,
            ModeChange(mode=Mode.ACTION, who="api-token", reason="trusted now", role="admin", via="token"),
        )
    ]
    status = store.get_workload(observed.key)
    assert status is not None and status.mode == Mode.ACTION
    events = store.list_events(workload_key=observed.key, event_type=EventType.MODE_CHANGED).items
    assert len(events) == 1 and events[0].actor == "operator" and events[0].mode == "action"
    assert events[0].data["who"] == "api-token"
    assert client.put(path_of(observed) + "/mode", json={"mode": "chaos"}, headers=AUTH).status_code == 422
    assert (
        client.put("/api/v1/workloads/lab/77/1/mode", json={"mode": "action"}, headers=AUTH).status_code
        == 404
    )
    assert client.put(path_of(observed) + "/mode", json={"mode": "action"}).status_code == 401


def test_pause_and_cluster_mode(
    client: TestClient, fake: StoreTemporalControl, store: AuditStore, seeded: list[WorkloadId]
) -> None:
    recovered = seeded[0]
    resp = client.put(path_of(recovered) + "/paused", json={"paused": True}, headers=AUTH)
    assert resp.status_code == 202 and resp.json() == {"workload_key": recovered.key, "paused": True}
    assert fake.calls[-1] == ("set_paused", recovered.workflow_id, PauseRequest(paused=True, who="api-token"))
    status = store.get_workload(recovered.key)
    assert status is not None and status.paused
    resp = client.put("/api/v1/clusters/lab/mode", json={"mode": "action"}, headers=AUTH)
    assert resp.status_code == 200 and fake.cluster_modes == {"lab": Mode.ACTION}
    assert fake.calls[-1][1] == "trainguard-cluster-lab"
    cluster_events = store.list_events(cluster="lab", event_type=EventType.MODE_CHANGED).items
    assert cluster_events[-1].data["scope"] == "cluster" and cluster_events[-1].workload_key == ""
    assert (
        client.put("/api/v1/clusters/bad name/mode", json={"mode": "action"}, headers=AUTH).status_code == 422
    )
    clusters = client.get("/api/v1/clusters").json()
    assert clusters[0]["cluster"] == "lab" and clusters[0]["workloads"] == 3


class BrokenTemporal(StoreTemporalControl):
    def __init__(self, store: AuditStore, error: Exception) -> None:
        super().__init__(store)
        self.error = error

    async def set_workload_mode(self, workflow_id: str, change: ModeChange) -> WorkloadStatus:
        raise self.error


@pytest.mark.parametrize(
    ("error", "code"), [(TemporalUnavailable("down"), 503), (UpdateRejected("workflow is completing"), 409)]
)
def test_temporal_failures_map_to_clear_statuses(
    store: AuditStore, seeded: list[WorkloadId], error: Exception, code: int
) -> None:
    app = create_app(make_settings(), store=store, temporal=BrokenTemporal(store, error))
    resp = TestClient(app).put(path_of(seeded[0]) + "/mode", json={"mode": "observe"}, headers=AUTH)
    assert resp.status_code == code and resp.json()["detail"] == str(error)
    # A change that did not happen is not audited as if it had.
    assert store.list_events(event_type=EventType.MODE_CHANGED).items == []


def test_token_settings(store: AuditStore, seeded: list[WorkloadId]) -> None:
    no_token = TestClient(
        create_app(make_settings(token=None), store=store, temporal=StoreTemporalControl(store))
    )
    resp = no_token.put(path_of(seeded[0]) + "/mode", json={"mode": "action"}, headers=AUTH)
    assert resp.status_code == 403 and "no credentials are configured" in resp.json()["detail"]
    locked = TestClient(
        create_app(make_settings(read_requires_token=True), store=store, temporal=StoreTemporalControl(store))
    )
    assert locked.get("/api/v1/workloads").status_code == 401
    assert locked.get("/api/v1/workloads").headers["www-authenticate"] == "Bearer"
    assert locked.get("/api/v1/workloads", headers=AUTH).status_code == 200
    assert locked.get("/healthz").status_code == 200


def test_metrics_expose_store_gauges_and_telemetry(client: TestClient) -> None:
    telemetry.observe_detection_latency(2.5, "gpu_hardware")
    telemetry.count_watchdog()
    text = client.get("/metrics").text
    assert 'trainguard_monitored_workloads{cluster="lab",mode="action",state="watching"} 1.0' in text
    assert 'trainguard_monitored_workloads{cluster="lab",mode="observe",state="completed"} 1.0' in text
    assert "trainguard_pending_advice 1.0" in text
    assert "trainguard_audit_up 1.0" in text
    assert 'trainguard_detection_latency_seconds_bucket{category="gpu_hardware",le="5.0"}' in text
    assert "trainguard_watchdog_firings_total" in text


def test_console_is_served_with_a_strict_csp(client: TestClient) -> None:
    page = client.get("/")
    assert page.status_code == 200 and "TrainGuard console" in page.text
    assert "script-src 'self'" in page.text
    js = client.get("/static/console.js").text
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
        assert sink not in js


def test_api_over_mariadb() -> None:
    """The same calls against MariaDB, the production backend (skipped only when it is unreachable)."""
    from tests.fakes.mysql import DatabaseUnavailable, temporary_mysql_database

    try:
        with temporary_mysql_database() as url:
            store = AuditStore.from_url(url)
            recovered, observed, _ = seed_demo(store)
            client = TestClient(
                create_app(make_settings(url), store=store, temporal=StoreTemporalControl(store))
            )
            detail = client.get(path_of(recovered)).json()
            assert [a["attempt"] for a in detail["attempts"]] == [0, 1]
            page = client.get("/api/v1/events", params={"workload": recovered.key, "limit": 5}).json()
            rest = client.get(
                "/api/v1/events",
                params={"workload": recovered.key, "limit": 5, "cursor": page["next_cursor"]},
            ).json()
            assert len(page["items"]) + len(rest["items"]) == 8 and rest["next_cursor"] is None
            resp = client.post(
                f"/api/v1/advice/{observed.key}:0:1/decision",
                json={"decision": "disagree", "didInstead": "🚀 <b>drained</b>"},
                headers=AUTH,
            )
            assert resp.status_code == 201
            assert client.get("/api/v1/agreement").json()["rows"][0]["rate"] == 0.0
            got = client.get(f"/api/v1/advice/{observed.key}:0:1").json()["decision"]
            assert got["did_instead"] == "🚀 <b>drained</b>"
            store.close()
    except DatabaseUnavailable as err:
        pytest.fail(f"MariaDB unreachable (scripts/bootstrap.sh installs and starts it): {err}")

"""Who did what: named credentials with roles, through the API (viewer, operator, admin), the trusted
proxy header, the audit's actor taken from the credential, secrets never shown; security headers and
offline API docs; /metrics on its own port."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from tests.fakes.temporal_control import StoreTemporalControl
from trainguard.api.app import create_app, create_metrics_app
from trainguard.audit import AuditStore
from trainguard.audit.demo import seed_demo
from trainguard.models import EventType, Mode, ModeChange, PauseRequest, WorkloadId
from trainguard.settings import APISettings, AuditSettings, Settings, load_settings

TOKENS = {
    "vera": ("viewer", "vera-viewer-token-0001"),
    "otto": ("operator", "otto-operator-token-02"),
    "ada": ("admin", "ada-admin-token-000003"),
}
OPERATORS = [{"name": n, "role": r, "token": t} for n, (r, t) in TOKENS.items()]


def auth(name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[name][1]}"}


def settings(**api: Any) -> Settings:
    return Settings(
        api=APISettings(**{"operators": OPERATORS, "read_requires_token": True, **api}),
        audit=AuditSettings(url="sqlite://"),
    )


@pytest.fixture
def store(tmp_path: Path) -> Iterator[AuditStore]:
    s = AuditStore.from_url(f"sqlite:///{tmp_path / 'audit.db'}")
    yield s
    s.close()


@pytest.fixture
def seeded(store: AuditStore) -> list[WorkloadId]:
    return seed_demo(store)


@pytest.fixture
def fake(store: AuditStore) -> StoreTemporalControl:
    return StoreTemporalControl(store)


def client_for(store: AuditStore, fake: StoreTemporalControl, **api: Any) -> TestClient:
    return TestClient(create_app(settings(**api), store=store, temporal=fake))


def path_of(w: WorkloadId) -> str:
    return f"/api/v1/workloads/{w.cluster}/{w.job_id}/{w.submit_time}"


def test_each_role_may_do_what_it_should_and_no_more(
    store: AuditStore, fake: StoreTemporalControl, seeded: list[WorkloadId]
) -> None:
    client = client_for(store, fake)
    recovered, observed, _ = seeded
    mode = path_of(observed) + "/mode"
    decision = f"/api/v1/advice/{recovered.key}:0:1/decision"
    cluster = "/api/v1/clusters/lab/mode"

    # Reads need a credential (the chart's default): any role reads.
    assert client.get("/api/v1/workloads").status_code == 401
    for name in TOKENS:
        assert client.get("/api/v1/workloads", headers=auth(name)).status_code == 200
    # viewer: no changes at all.
    for url, body in ((mode, {"mode": "action"}), (decision, {"decision": "agree"})):
        resp = client.request("PUT" if url == mode else "POST", url, json=body, headers=auth("vera"))
        assert resp.status_code == 403 and "vera is viewer; this needs operator" in resp.json()["detail"]
    # operator: a workload's mode, pause and decisions, but not a whole cluster.
    assert client.put(mode, json={"mode": "action"}, headers=auth("otto")).status_code == 200
    assert (
        client.put(path_of(recovered) + "/paused", json={"paused": True}, headers=auth("otto")).status_code
        == 202
    )
    assert client.post(decision, json={"decision": "agree"}, headers=auth("otto")).status_code == 201
    resp = client.put(cluster, json={"mode": "action"}, headers=auth("otto"))
    assert resp.status_code == 403 and "needs admin" in resp.json()["detail"]
    assert fake.cluster_modes == {}
    # admin: the cluster too.
    assert client.put(cluster, json={"mode": "observe"}, headers=auth("ada")).status_code == 200
    assert fake.cluster_modes == {"lab": Mode.OBSERVE}
    # An unknown token is refused, whatever it asks.
    bad = {"Authorization": "Bearer not-a-known-token-at-all"}
    assert client.get("/api/v1/workloads", headers=bad).status_code == 401


def test_the_audit_names_the_credential_never_the_body(
    store: AuditStore, fake: StoreTemporalControl, seeded: list[WorkloadId]
) -> None:
    client = client_for(store, fake)
    recovered, observed, _ = seeded
    # A body that claims to be someone is refused outright (no `who` field exists any more).
    spoof = client.put(
        path_of(observed) + "/mode", json={"mode": "action", "who": "ada"}, headers=auth("otto")
    )
    assert spoof.status_code == 422
    assert (
        client.put(
            path_of(observed) + "/mode", json={"mode": "action", "reason": "canary"}, headers=auth("otto")
        ).status_code
        == 200
    )
    events = store.list_events(workload_key=observed.key, event_type=EventType.MODE_CHANGED).items
    assert len(events) == 1
    assert events[0].data["who"] == "otto" and events[0].data["role"] == "operator"
    assert events[0].data["via"] == "token" and events[0].message.startswith(
        "otto (operator) set workload mode"
    )
    assert (
        "set_mode",
        observed.workflow_id,
        ModeChange(mode=Mode.ACTION, who="otto", reason="canary", role="operator", via="token"),
    ) in fake.calls
    client.put(path_of(recovered) + "/paused", json={"paused": True}, headers=auth("ada"))
    assert fake.calls[-1] == ("set_paused", recovered.workflow_id, PauseRequest(paused=True, who="ada"))
    resp = client.post(
        f"/api/v1/advice/{recovered.key}:0:1/decision", json={"decision": "disagree"}, headers=auth("otto")
    )
    assert resp.json()["who"] == "otto"
    client.put("/api/v1/clusters/lab/mode", json={"mode": "observe"}, headers=auth("ada"))
    cluster_event = store.list_events(cluster="lab", event_type=EventType.MODE_CHANGED).items[-1]
    assert cluster_event.data["who"] == "ada" and cluster_event.data["scope"] == "cluster"


def test_trusted_proxy_header_maps_users_to_roles(
    store: AuditStore, fake: StoreTemporalControl, seeded: list[WorkloadId]
) -> None:
    header = {
        "header": "X-Forwarded-User",
        "trusted_proxies": ["127.0.0.1/32", "10.0.0.0/8"],
        "roles": {"grace": "admin", "linus": "operator"},
        "default_role": "viewer",
    }
    observed = seeded[1]
    # TestClient's own peer ("testclient") is not the proxy: the header is refused, whoever it names.
    direct = client_for(store, fake, operators=[], trusted_header=header)
    resp = direct.put(
        path_of(observed) + "/mode", json={"mode": "action"}, headers={"X-Forwarded-User": "grace"}
    )
    assert resp.status_code == 401 and "only from the authenticating proxy" in resp.json()["detail"]
    assert direct.get("/api/v1/workloads", headers={"X-Forwarded-User": "grace"}).status_code == 401

    trusted = TestClient(
        create_app(settings(operators=[], trusted_header=header), store=store, temporal=fake),
        client=("127.0.0.1", 50000),
    )
    resp = trusted.put(
        path_of(observed) + "/mode", json={"mode": "action"}, headers={"X-Forwarded-User": "linus"}
    )
    assert resp.status_code == 200
    events = store.list_events(workload_key=observed.key, event_type=EventType.MODE_CHANGED).items
    assert events[-1].data["who"] == "linus" and events[-1].data["via"] == "header"
    assert (
        trusted.put(
            "/api/v1/clusters/lab/mode", json={"mode": "action"}, headers={"X-Forwarded-User": "linus"}
        ).status_code
        == 403
    )
    assert (
        trusted.put(
            "/api/v1/clusters/lab/mode", json={"mode": "action"}, headers={"X-Forwarded-User": "grace"}
        ).status_code
        == 200
    )
    assert trusted.get("/api/v1/workloads", headers={"X-Forwarded-User": "<script>"}).status_code == 401
    no_default = {**header, "default_role": None}
    strict = TestClient(
        create_app(settings(operators=[], trusted_header=no_default), store=store, temporal=fake),
        client=("127.0.0.1", 50000),
    )
    assert strict.get("/api/v1/workloads", headers={"X-Forwarded-User": "stranger"}).status_code == 403
    # Without the header and without a token: no credential, and reads need one.
    assert trusted.get("/api/v1/workloads").status_code == 401


def test_the_header_needs_the_proxy_addresses() -> None:
    with pytest.raises(ValidationError, match="trusted_proxies"):
        APISettings(trusted_header={"header": "X-Forwarded-User"})
    with pytest.raises(ValidationError, match="not an address"):
        APISettings(trusted_header={"header": "X-Forwarded-User", "trusted_proxies": ["proxy.local"]})


def test_credential_settings_are_validated() -> None:
    with pytest.raises(ValidationError):
        APISettings(operators=[{"name": "x", "role": "root", "token": "a" * 20}])
    with pytest.raises(ValidationError):
        APISettings(operators=[{"name": "x", "role": "viewer", "token": "short"}])
    with pytest.raises(ValidationError, match="each name once"):
        APISettings(operators=[OPERATORS[0], {**OPERATORS[1], "name": "vera"}])
    with pytest.raises(ValidationError, match="share a token"):
        APISettings(operators=[OPERATORS[0], {**OPERATORS[1], "token": TOKENS["vera"][1]}])


def test_tokens_never_show_in_settings_or_logs(
    store: AuditStore,
    fake: StoreTemporalControl,
    seeded: list[WorkloadId],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = tmp_path / "trainguard.yaml"
    config.write_text("api:\n  read_requires_token: true\n")
    monkeypatch.setenv(
        "TRAINGUARD_API__OPERATORS",
        json.dumps([{"name": "otto", "role": "operator", "token": TOKENS["otto"][1]}]),
    )
    monkeypatch.setenv("TRAINGUARD_API__TOKEN", "shared-legacy-token-xyz")
    monkeypatch.setenv("TRAINGUARD_TEMPORAL__API_KEY", "temporal-cloud-key-abc")
    loaded = load_settings(config)
    assert loaded.api.operators[0].token.get_secret_value() == TOKENS["otto"][1]
    shown = repr(loaded) + str(loaded) + loaded.model_dump_json()
    for secret in (TOKENS["otto"][1], "shared-legacy-token-xyz", "temporal-cloud-key-abc"):
        assert secret not in shown
    caplog.set_level(logging.DEBUG)
    client = TestClient(create_app(loaded, store=store, temporal=fake))
    assert client.get("/api/v1/workloads", headers=auth("otto")).status_code == 200
    assert (
        client.get("/api/v1/workloads", headers={"Authorization": "Bearer wrong-token-0000000"}).status_code
        == 401
    )
    legacy = client.put(
        path_of(seeded[1]) + "/mode",
        json={"mode": "action"},
        headers={"Authorization": "Bearer shared-legacy-token-xyz"},
    )
    assert legacy.status_code == 200  # the one shared token of older setups still works, as "api-token"
    assert store.list_events(event_type=EventType.MODE_CHANGED).items[-1].data["who"] == "api-token"
    logged = "\n".join(r.getMessage() for r in caplog.records)
    for secret in (TOKENS["otto"][1], "wrong-token-0000000", "shared-legacy-token-xyz"):
        assert secret not in logged


def test_security_headers_on_pages_api_and_errors(
    store: AuditStore, fake: StoreTemporalControl, seeded: list[WorkloadId]
) -> None:
    client = client_for(store, fake)
    for url in ("/", "/api/v1/workloads", "/static/console.js", "/docs", "/healthz", "/nowhere"):
        headers = client.get(url).headers
        csp = headers["content-security-policy"]
        assert "frame-ancestors 'none'" in csp and "default-src 'self'" in csp and "script-src 'self'" in csp
        assert headers["x-content-type-options"] == "nosniff"
        assert headers["referrer-policy"] == "no-referrer"


def test_api_docs_are_served_offline_or_off(
    store: AuditStore, fake: StoreTemporalControl, seeded: list[WorkloadId]
) -> None:
    client = client_for(store, fake)
    page = client.get("/docs")
    assert page.status_code == 200 and "swagger-ui" in page.text
    assert "http://" not in page.text and "https://" not in page.text  # no CDN
    for asset in ("/docs-assets/swagger-ui-bundle.js", "/docs-assets/swagger-ui.css", "/static/docs.js"):
        resp = client.get(asset)
        assert resp.status_code == 200 and len(resp.content) > 100, asset
    assert client.get("/openapi.json").json()["info"]["title"] == "TrainGuard advisor API"
    assert client.get("/redoc").status_code == 404
    off = client_for(store, fake, docs="off")
    assert off.get("/docs").status_code == 404 and off.get("/docs-assets/swagger-ui.css").status_code == 404


def test_metrics_on_their_own_port(
    store: AuditStore, fake: StoreTemporalControl, seeded: list[WorkloadId]
) -> None:
    main = client_for(store, fake, metrics_port=9102)
    assert main.get("/metrics").status_code == 404
    metrics = TestClient(create_metrics_app(store))
    text = metrics.get("/metrics").text  # no credential: Prometheus scrapes this port
    assert "trainguard_audit_up 1.0" in text and "trainguard_monitored_workloads" in text
    assert metrics.get("/api/v1/workloads").status_code == 404
    together = client_for(store, fake, read_requires_token=False)
    assert "trainguard_audit_up 1.0" in together.get("/metrics").text

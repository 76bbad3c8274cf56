"""The console's chart aggregates: pure logic over hand-written events, and the API over real SQLite
stores filled with events (the demo recovery and a seeded fleet)."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.fakes.temporal_control import StoreTemporalControl
from trainguard.api import charts
from trainguard.api.app import create_app
from trainguard.audit import AuditStore, iter_all_events
from trainguard.audit.demo import seed_demo
from trainguard.audit.demo_fleet import seed_fleet
from trainguard.audit.schemas import AuditEventOut
from trainguard.models import EventType, WorkloadState, WorkloadStatus
from trainguard.settings import APISettings, AuditSettings, Settings, TemporalSettings

VIEWER = {"Authorization": "Bearer vera-viewer-token-0001"}
OPERATORS = [{"name": "vera", "role": "viewer", "token": "vera-viewer-token-0001"}]
DAY = 86400.0


def ev(
    n: int, event_type: EventType, ts: float, *, key: str = "lab/1/100", attempt: int = 0, **kw: Any
) -> AuditEventOut:
    return AuditEventOut.model_validate(
        {
            "id": n,
            "event_id": f"e{n}",
            "event_type": event_type,
            "workload_key": key,
            "cluster": "lab",
            "job_id": key.split("/")[1],
            "submit_time": 100,
            "attempt": attempt,
            "ts": ts,
            **kw,
        }
    )


def detection(n: int, ts: float, **kw: Any) -> AuditEventOut:
    return ev(n, EventType.DETECTION, ts, **{"category": "gpu_hardware", "attribution": "hardware", **kw})


# ---- pure logic -------------------------------------------------------------------------------------


def test_percentile_is_nearest_rank() -> None:
    assert charts.percentile([], 50) is None
    assert charts.percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert charts.percentile([float(i) for i in range(1, 101)], 95) == 95.0
    assert charts.percentile([7.0], 95) == 7.0


@pytest.mark.parametrize(
    ("after", "outcome"),
    [
        ([ev(2, EventType.TRAINING_RESUMED, 20, attempt=1, data={"time_to_productive_s": 9.0})], "resumed"),
        ([ev(2, EventType.WATCHDOG_FIRED, 20)], "watchdog released"),
        ([ev(2, EventType.ACTION_FAILED, 20, action="release_job")], "action failed"),
        ([ev(2, EventType.STOPPED, 20)], "stopped"),
        ([ev(2, EventType.COMPLETED, 20)], "completed"),
        (
            [ev(2, EventType.ADVICE, 11, action="wait", data={"execute": True, "advice_id": "x/a0/1"})],
            "waiting for operator",
        ),
        (
            [ev(2, EventType.ADVICE, 11, action="requeue", data={"execute": False, "advice_id": "x/a0/1"})],
            "advice only",
        ),
        # The containment hold is not the decision: the requeue after it is, and it is still running.
        (
            [
                ev(2, EventType.ADVICE, 11, action="hold", data={"execute": True, "advice_id": "x/a0/hold"}),
                ev(3, EventType.ADVICE, 12, action="requeue", data={"execute": True, "advice_id": "x/a0/1"}),
            ],
            "in progress",
        ),
        # Progress lines of the same attempt, with no fault before them, are not a recovery.
        ([ev(2, EventType.TRAINING_RESUMED, 20, attempt=0)], "in progress"),
    ],
)
def test_outcome_of_a_detection(after: list[AuditEventOut], outcome: str) -> None:
    assert charts.outcome_of(detection(1, 10.0), after) == outcome


def test_recoveries_per_day_split_by_next_detection() -> None:
    day1, day2 = 1_750_032_000.0, 1_750_032_000.0 + DAY  # both at noon UTC
    events = [
        detection(1, day1),
        ev(2, EventType.TRAINING_RESUMED, day1 + 60, attempt=1, data={"time_to_productive_s": 70.0}),
        detection(3, day2, attempt=1),  # its outcome must not borrow the first one's resumption
        ev(4, EventType.STOPPED, day2 + 5, attempt=1),
        detection(5, day2, key="lab/2/100", category="cuda_oom"),
        detection(6, day1 - 30 * DAY, key="lab/3/100"),  # before the window
    ]
    rows = charts.recoveries(events, since=day1 - DAY)
    assert [(r.day, r.category, r.outcome, r.count) for r in rows] == [
        ("2025-06-16", "gpu_hardware", "resumed", 1),
        ("2025-06-17", "cuda_oom", "in progress", 1),
        ("2025-06-17", "gpu_hardware", "stopped", 1),
    ]


def test_latency_distributions_read_the_recorded_values() -> None:
    events = [
        detection(1, 10, data={"detection_latency_s": 2.5}),
        detection(2, 11, data={"detection_latency_s": "n/a"}),  # not a number: ignored
        ev(3, EventType.ACTION, 12, action="recovery_requested", data={"action_latency_s": 4.0}),
        ev(4, EventType.ACTION, 12, action="exclude", data={"performed": True}),
        ev(5, EventType.TRAINING_RESUMED, 99, data={"time_to_productive_s": 88.0}),
        ev(6, EventType.TRAINING_RESUMED, 1, data={"time_to_productive_s": 5.0}),  # before `since`
    ]
    got = charts.latencies(events, since=5)
    assert got["detection"].values == [2.5] and got["detection"].p95 == 2.5
    assert got["action"].values == [4.0]
    assert got["back_to_training"].values == [88.0] and got["back_to_training"].count == 1


def test_node_report_counts_incidents_exclusions_drains_with_evidence() -> None:
    events = [
        detection(1, 10, nodes=("gpu-03",), evidence=("Xid 79 on gpu-03",)),
        ev(2, EventType.ADVICE, 11, nodes=("gpu-03",), data={"advice_id": "w/a0/1", "implicated": "gpu-03"}),
        ev(3, EventType.ACTION, 12, action="exclude", nodes=("gpu-03",), data={"performed": True}),
        ev(4, EventType.ACTION, 12, action="exclude", nodes=("gpu-03",), data={"performed": False}),
        detection(5, 20, key="lab/2/100", nodes=("gpu-03", "gpu-04")),
        ev(6, EventType.NODE_DRAINED, 21, key="lab/2/100", nodes=("gpu-03",)),
        detection(7, 1, key="lab/9/100", nodes=("gpu-09",)),  # before the window
    ]
    report = charts.node_report(events, since=5, until=30, days=7)
    assert [n.node for n in report.nodes] == ["gpu-03", "gpu-04"]
    lemon = report.nodes[0]
    assert (lemon.incidents, lemon.exclusions, lemon.advised_exclusions, lemon.drains) == (2, 1, 1, 1)
    assert lemon.workloads == ["lab/2/100", "lab/1/100"]  # newest first
    assert [e.id for e in lemon.evidence] == [6, 5, 3, 2, 1]  # a no-op exclusion is no evidence
    assert lemon.evidence[-1].evidence == ["Xid 79 on gpu-03"]


def test_timeline_attempts_faults_lost_time_and_steps() -> None:
    status = WorkloadStatus(
        workload_key="lab/1/100",
        cluster="lab",
        job_id="1",
        submit_time=100,
        first_seen_at=0.0,
        state=WorkloadState.COMPLETED,
        lost_s=50.0,
    )
    events = [
        ev(1, EventType.WORKLOAD_DISCOVERED, 0),
        detection(2, 100, data={"detection_latency_s": 1.0}),
        ev(3, EventType.ADVICE, 101, action="requeue", data={"advice_id": "a", "execute": True}),
        ev(4, EventType.ACTION, 102, action="exclude", nodes=("gpu-03",)),
        ev(5, EventType.ALLOCATION_RESTARTED, 130, attempt=1, nodes=("gpu-01",)),
        ev(6, EventType.TRAINING_RESUMED, 150, attempt=1, data={"time_to_productive_s": 50.0}),
        ev(7, EventType.COMPLETED, 400, attempt=1),
    ]
    t = charts.workload_timeline(status, events, now=1000.0, temporal_url="http://ui/x")
    assert [(a.label, a.start, a.end, a.nodes) for a in t.attempts] == [
        ("attempt 0", 0.0, 130.0, []),
        ("attempt 1", 130.0, 400.0, ["gpu-01"]),  # ended: the bar stops at the last event, not now
    ]
    assert [(f.ts, f.label, f.evidence.id) for f in t.faults] == [(100.0, "gpu_hardware (hardware)", 2)]
    assert [(s.start, s.end, s.evidence_id) for s in t.lost] == [(100.0, 150.0, 6)]
    assert [(s.kind, s.label) for s in t.steps] == [
        ("advice", "advice: requeue"),
        ("action", "exclude gpu-03"),
        ("restart", "allocation restarted"),
        ("resumed", "training resumed"),
        ("end", "completed"),
    ]
    assert t.temporal_url == "http://ui/x"


# ---- the API over real SQLite stores ---------------------------------------------------------------


@pytest.fixture
def store(tmp_path: Path) -> Iterator[AuditStore]:
    s = AuditStore.from_url(f"sqlite:///{tmp_path / 'audit.db'}")
    yield s
    s.close()


def client(store: AuditStore, *, ui_url: str = "", **api: Any) -> TestClient:
    settings = Settings(
        api=APISettings(**{"operators": OPERATORS, "read_requires_token": True, **api}),
        audit=AuditSettings(url="sqlite://"),
        temporal=TemporalSettings(namespace="prod ns", ui_url=ui_url),
    )
    return TestClient(create_app(settings, store=store, temporal=StoreTemporalControl(store)))


def test_fleet_endpoints_need_a_viewer_credential(store: AuditStore) -> None:
    recovered, _, _ = seed_demo(store, start=time.time() - 7200)
    api = client(store)
    paths = [
        "/api/v1/fleet/summary",
        "/api/v1/fleet/nodes?days=30",
        f"/api/v1/workloads/lab/{recovered.job_id}/{recovered.submit_time}/timeline",
    ]
    for path in paths:
        assert api.get(path).status_code == 401
        assert api.get(path, headers={"Authorization": "Bearer wrong-token-00000000"}).status_code == 401
        assert api.get(path, headers=VIEWER).status_code == 200
    assert api.get("/api/v1/fleet/summary?days=0", headers=VIEWER).status_code == 422
    assert api.get("/api/v1/fleet/nodes?cluster=a;b", headers=VIEWER).status_code == 422
    assert api.get("/api/v1/workloads/lab/999/1/timeline", headers=VIEWER).status_code == 404


def test_fleet_summary_over_the_demo_recovery(store: AuditStore) -> None:
    seed_demo(store, start=time.time() - 7200)
    body = client(store).get("/api/v1/fleet/summary", headers=VIEWER).json()
    outcomes = {(r["category"], r["outcome"]): r["count"] for r in body["recoveries"]}
    assert outcomes == {("gpu_hardware", "resumed"): 1, ("gpu_hardware", "advice only"): 1}
    assert body["latencies"]["detection"]["values"] == [2.4, 2.4]
    assert body["latencies"]["back_to_training"]["values"] == [155.0]
    assert body["goodput"] == []  # the demo rows record no lost time


def test_fleet_views_over_a_seeded_fleet(store: AuditStore) -> None:
    now = time.time()
    workloads = seed_fleet(store, now=now, days=14)
    api = client(store)
    summary = api.get("/api/v1/fleet/summary?days=14", headers=VIEWER).json()
    detections = [e for e in iter_all_events(store, event_type=EventType.DETECTION)]
    assert sum(r["count"] for r in summary["recoveries"]) == len(detections) > 10
    assert {"resumed", "advice only", "watchdog released"} <= {r["outcome"] for r in summary["recoveries"]}
    lat = summary["latencies"]
    assert lat["detection"]["count"] == len(detections)
    assert 0 < lat["action"]["p50"] <= lat["action"]["p95"] <= lat["action"]["max"] <= 12
    assert 90 <= lat["back_to_training"]["p50"] <= 900
    lost = [row["lost_s"] for row in summary["goodput"]]
    assert lost == sorted(lost, reverse=True) and lost[0] > 0
    assert all(0 <= row["goodput"] < 1 for row in summary["goodput"])

    week = api.get("/api/v1/fleet/nodes?days=7", headers=VIEWER).json()
    month = api.get("/api/v1/fleet/nodes?days=30", headers=VIEWER).json()
    top = [n["node"] for n in month["nodes"][:2]]
    assert set(top) == {"gpu-03", "ib-07"}  # the lemons lead
    gpu03 = next(n for n in month["nodes"] if n["node"] == "gpu-03")
    assert gpu03["drains"] >= 1 and gpu03["exclusions"] >= 1
    assert all(e["workload_key"] in gpu03["workloads"] for e in gpu03["evidence"])
    assert sum(n["incidents"] for n in week["nodes"]) <= sum(n["incidents"] for n in month["nodes"])
    assert len(workloads) == 18


def test_timeline_links_to_the_temporal_ui(store: AuditStore) -> None:
    recovered, _, _ = seed_demo(store, start=time.time() - 7200)
    path = f"/api/v1/workloads/lab/{recovered.job_id}/{recovered.submit_time}/timeline"
    body = client(store, ui_url="https://temporal.example/").get(path, headers=VIEWER).json()
    assert body["temporal_url"] == (
        f"https://temporal.example/namespaces/prod%20ns/workflows/{recovered.workflow_id}"
    )
    assert [a["label"] for a in body["attempts"]] == ["attempt 0", "attempt 1"]
    assert body["faults"][0]["evidence"]["evidence"][0].startswith("[rank12]:gpu-03: NVRM: Xid")
    assert [s["end"] - s["start"] for s in body["lost"]] == [155.0]
    assert client(store).get(path, headers=VIEWER).json()["temporal_url"] is None


def test_charting_library_is_served_by_the_app_with_caching(store: AuditStore) -> None:
    api = client(store)
    js = api.get("/vendor/plotly.min.js")  # a static asset: no credential needed, like the console
    assert js.status_code == 200 and js.headers["content-type"].startswith("text/javascript")
    assert js.headers["cache-control"] == "public, max-age=86400" and js.headers["etag"]
    assert b"plotly.js v" in js.content[:200]
    again = api.get("/vendor/plotly.min.js", headers={"If-None-Match": js.headers["etag"]})
    assert again.status_code == 304
    # compressed for a browser that accepts it (the client decodes it), whole for one that does not
    assert js.headers["content-encoding"] == "gzip" and js.headers["vary"] == "Accept-Encoding"
    assert int(js.headers["content-length"]) < len(js.content) / 2
    plain = api.get("/vendor/plotly.min.js", headers={"Accept-Encoding": "identity"})
    assert "content-encoding" not in plain.headers and plain.content == js.content
    refused = api.get("/vendor/plotly.min.js", headers={"Accept-Encoding": "gzip;q=0, br"})
    assert "content-encoding" not in refused.headers
    page = api.get("/").text
    assert '<script src="/vendor/plotly.min.js" defer></script>' in page
    assert not re.search(r'(src|href)="(https?:)?//', page)  # nothing from another origin
    # plotly.js would add maplibre's CSS as an inline <style> (refused by the CSP) unless its id exists.
    assert '<template id="9f215cf04c5486422605d13261cb87401f4e7763b6296af81e98efbc0130da53">' in page

"""The console's pictures in a real browser (Debian's chromium driven by Playwright): fleet view, node
view and a workload's timeline, drawn by plotly.js that the app serves from the installed plotly wheel,
under the app's CSP (no inline script or style, nothing from another origin).

Serves the API on a free loopback port over a real SQLite store seeded with two weeks of a fleet's
recoveries (trainguard/audit/demo_fleet.py), Temporal replaced by the store-backed control.

Screenshots, 1280 px wide, are written to test-artifacts/console/ (gitignored):
  fleet.png             fleet view: recoveries per day by category and by outcome, latency
                        distributions, time lost per workload
  nodes.png             node view over 30 days: lemon nodes first, with exclusions and drains, one
                        node's evidence listed below
  workload-timeline.png a workload's timeline bar (attempts, faults, time lost, recovery steps), one
                        fault's evidence opened by a click, the Temporal UI link in the facts
"""

from __future__ import annotations

import re
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import playwright.sync_api as playwright_sync
import pytest
import uvicorn
from playwright.sync_api import Page, expect

from tests.fakes.temporal_control import StoreTemporalControl
from trainguard.api.app import create_app
from trainguard.audit import AuditStore
from trainguard.audit.demo_fleet import seed_fleet
from trainguard.models import WorkloadId
from trainguard.settings import APISettings, AuditSettings, Settings, TemporalSettings

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "console"
TEMPORAL_UI = "http://temporal-ui.example:8080"
CHROMIUM_ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update", "--disable-extensions",
                 "--disable-sync", "--no-first-run"]  # fmt: skip
WIDTH = 1280


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Served:
    def __init__(self, store: AuditStore, url: str, workloads: list[WorkloadId]) -> None:
        self.store, self.url, self.workloads = store, url, workloads


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    url = f"sqlite:///{tmp_path / 'audit.db'}"
    store = AuditStore.from_url(url)
    workloads = seed_fleet(store, now=time.time(), days=14)
    settings = Settings(
        api=APISettings(token="console-token-000000"),
        audit=AuditSettings(url=url),
        temporal=TemporalSettings(ui_url=TEMPORAL_UI, namespace="default"),
    )
    app = create_app(settings, store=store, temporal=StoreTemporalControl(store))
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("API server did not start")
        time.sleep(0.05)
    try:
        yield Served(store, f"http://127.0.0.1:{port}", workloads)
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        store.close()


# Data points plotly actually drew as SVG: bar segments, box-plot points and scatter markers.
POINTS = ".bars .point path, .boxlayer .point, .scatterlayer .point"


def drawn_points(page: Page, chart: str) -> int:
    return int(page.locator(f"#{chart}").evaluate(f"d => d.querySelectorAll('{POINTS}').length"))


def wait_drawn(page: Page, chart: str, at_least: int = 1) -> int:
    page.wait_for_function(
        "([id, n]) => { const d = document.getElementById(id);"
        f" return d && d.querySelectorAll('{POINTS}').length >= n; }}",
        arg=[chart, at_least],
        timeout=20_000,
    )
    return drawn_points(page, chart)


def ticks_top_down(page: Page, chart: str) -> list[str]:
    """The y axis' labels as the operator reads them, top to bottom."""
    found = page.locator(f"#{chart}").evaluate(
        "d => [...d.querySelectorAll('.ytick text')].map(t => [t.getBoundingClientRect().top, t.textContent])"
    )
    return [text for _, text in sorted(found)]


def test_fleet_nodes_and_timeline_charts(served: Served) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with playwright_sync.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": WIDTH, "height": 1000})
            errors: list[str] = []
            foreign: list[str] = []
            page.on("console", lambda m: errors.append(m.text) if m.type in ("error", "warning") else None)
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.on("request", lambda r: None if r.url.startswith(served.url) else foreign.append(r.url))

            # ---- fleet view ----
            page.goto(served.url + "/#fleet")
            expect(page.get_by_test_id("fleet-view")).to_be_visible()
            for chart in ("chart-by-category", "chart-by-outcome", "chart-latency", "chart-goodput"):
                assert wait_drawn(page, chart) >= 3, chart
                assert int(page.locator(f"#{chart}").get_attribute("data-points") or 0) >= 3
                assert page.locator(f"#{chart} svg.main-svg").count() >= 1
            # The latency boxes carry one point per recorded value.
            lat = served.store.list_events(event_type="detection", limit=1000).items
            assert drawn_points(page, "chart-latency") >= len(lat)
            legend = page.locator("#chart-by-outcome .legendtext").all_text_contents()
            assert "resumed" in legend and "advice only" in legend
            expect(page.get_by_test_id("fleet-totals")).to_contain_text("recoveries")
            page.screenshot(path=str(ARTIFACTS / "fleet.png"), full_page=True)

            # ---- node view ----
            page.get_by_test_id("tab-nodes").click()
            expect(page.get_by_test_id("nodes-view")).to_be_visible()
            assert wait_drawn(page, "chart-nodes", 8) >= 8
            rows = page.get_by_test_id("node-row")
            top = {rows.nth(0).get_attribute("data-node"), rows.nth(1).get_attribute("data-node")}
            assert top == {"gpu-03", "ib-07"}  # the lemon nodes lead
            assert ticks_top_down(page, "chart-nodes")[0] in top  # drawn at the top of the chart
            # A click on the first node's incidents bar lists its evidence, each linked to its workload.
            page.locator("#chart-nodes .bars .point path").first.click(force=True)
            evidence = page.get_by_test_id("node-evidence").get_by_test_id("evidence-item")
            expect(evidence.first).to_be_visible()
            assert evidence.count() >= 3
            title = page.locator("#node-evidence-title")
            expect(title).to_have_text(re.compile(r"Evidence for (gpu-03|ib-07)"))
            gpu03 = page.locator('tr[data-node="gpu-03"] td')
            assert int(gpu03.nth(4).inner_text()) >= 1  # drained at least once
            page.screenshot(path=str(ARTIFACTS / "nodes.png"), full_page=True)

            # An evidence link opens that workload with its timeline.
            link = evidence.first.get_by_test_id("workload-link")
            key = link.inner_text()
            link.click()
            expect(page.get_by_test_id("detail-title")).to_contain_text(key)

            # ---- workload timeline: the workload that lost the most time, opened from the fleet chart ----
            page.get_by_test_id("tab-fleet").click()
            wait_drawn(page, "chart-goodput")
            page.locator("#chart-goodput .bars .point path").last.click(force=True)  # the top bar
            worst = max((w for w in served.store.list_workloads(limit=100)), key=lambda w: w.lost_s)
            expect(page.get_by_test_id("detail-title")).to_contain_text(worst.workload_key)
            points = wait_drawn(page, "workload-chart", worst.attempts + 1)
            attempts_drawn = page.locator("#workload-chart .bars .point path").count()
            assert attempts_drawn >= worst.attempts + 1  # one bar per attempt, plus time-lost bars
            assert points > attempts_drawn  # fault and step marks too
            bar_labels = page.locator("#workload-chart .bartext").all_text_contents()
            assert any(t.startswith("attempt ") for t in bar_labels)
            rows_top_down = ["attempts", "time lost", "faults", "recovery steps"]
            assert ticks_top_down(page, "workload-chart") == rows_top_down
            wid = WorkloadId(cluster=worst.cluster, job_id=worst.job_id, submit_time=worst.submit_time)
            link = page.get_by_test_id("temporal-link")
            assert link.get_attribute("href") == (
                f"{TEMPORAL_UI}/namespaces/default/workflows/{quote(wid.workflow_id, safe='')}"
            )
            assert link.get_attribute("rel") == "noopener noreferrer"
            # Hover on a fault shows its category; a click opens its evidence.
            fault = page.locator("#workload-chart .scatterlayer .trace").nth(0).locator(".point").first
            fault.hover(force=True)
            expect(page.locator("#workload-chart .hoverlayer .hovertext").first).to_be_visible()
            hover = page.locator("#workload-chart .hoverlayer").evaluate("n => n.textContent")
            assert re.search(r"\(hardware|infrastructure|application\)|\w+ \(", hover), hover
            fault.click(force=True)
            panel = page.get_by_test_id("workload-evidence")
            expect(panel.get_by_test_id("evidence-item")).to_have_count(1)
            expect(panel).to_contain_text("detection")
            page.mouse.move(5, 5)
            page.screenshot(path=str(ARTIFACTS / "workload-timeline.png"), full_page=False)

            assert errors == [], errors
            assert foreign == [], foreign
        finally:
            browser.close()
    for name in ("fleet.png", "nodes.png", "workload-timeline.png"):
        assert (ARTIFACTS / name).stat().st_size > 20_000, name

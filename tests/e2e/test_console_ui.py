"""The operator console in a real browser (Debian's chromium driven by Playwright).

Serves the API on a free loopback port over a store seeded with a realistic recovery, with Temporal
replaced by the store-backed control, and checks what an operator sees and can do.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import playwright.sync_api as playwright_sync
import pytest
import uvicorn

from tests.fakes.temporal_control import StoreTemporalControl
from trainguard.api.app import create_app
from trainguard.audit import AuditStore
from trainguard.audit.demo import seed_demo, seed_recovery
from trainguard.models import AuditEventIn, EventType, Mode, WorkloadId
from trainguard.settings import APISettings, AuditSettings, Settings

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
TOKEN = "console-token"
XSS_NAME = "<img src=x onerror=alert(1)>"
XSS_EVIDENCE = "<script>window.__pwned = 1</script> rank 3: NCCL error"
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-default-apps",
    "--disable-extensions",
    "--disable-sync",
    "--no-first-run",
    "--metrics-recording-only",
]

# A missing Debian chromium fails the launch: never a silent skip.


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Served:
    def __init__(self, store: AuditStore, fake: StoreTemporalControl, url: str, workloads: list[WorkloadId]):
        self.store = store
        self.fake = fake
        self.url = url
        self.workloads = workloads


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    url = f"sqlite:///{tmp_path / 'audit.db'}"
    store = AuditStore.from_url(url)
    workloads = seed_demo(store, start=time.time() - 7200)
    hostile = seed_recovery(store, job_id="1400", name=XSS_NAME, start=time.time() - 3600, mode=Mode.OBSERVE)
    store.record(
        AuditEventIn(
            event_id="xss-evidence",
            event_type=EventType.DETECTION,
            workload_key=hostile.key,
            cluster=hostile.cluster,
            job_id=hostile.job_id,
            ts=time.time() - 10,
            category="nccl_error",
            nodes=("<b>gpu-9</b>",),
            evidence=(XSS_EVIDENCE,),
            message=XSS_NAME,
        )
    )
    fake = StoreTemporalControl(store)
    app = create_app(
        Settings(api=APISettings(token=TOKEN), audit=AuditSettings(url=url)), store=store, temporal=fake
    )
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
        yield Served(store, fake, f"http://127.0.0.1:{port}", [*workloads, hostile])
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        store.close()


def test_console_shows_recovery_and_switches_mode(served: Served) -> None:
    recovered, observed, _done, hostile = served.workloads
    dialogs: list[str] = []
    ARTIFACTS.mkdir(exist_ok=True)
    with playwright_sync.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1500, "height": 1000})

            def on_dialog(dialog: object) -> None:
                dialogs.append(f"{dialog.type}:{dialog.message}")  # type: ignore[attr-defined]
                if dialog.type == "prompt":  # type: ignore[attr-defined]
                    dialog.accept(TOKEN)  # type: ignore[attr-defined]
                else:
                    dialog.dismiss()  # type: ignore[attr-defined]

            page.on("dialog", on_dialog)
            errors: list[str] = []
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(served.url + "/")
            rows = page.get_by_test_id("workload-row")
            playwright_sync.expect(rows).to_have_count(4)

            # Untrusted job name shows as text; nothing got parsed into markup or ran.
            hostile_row = page.locator(f'tr[data-key="{hostile.key}"]')
            playwright_sync.expect(hostile_row.get_by_test_id("name")).to_have_text(XSS_NAME)
            assert page.locator("img").count() == 0

            row = page.locator(f'tr[data-key="{recovered.key}"]')
            playwright_sync.expect(row.get_by_test_id("state")).to_have_text("watching")
            playwright_sync.expect(row.get_by_test_id("mode")).to_have_text("action")
            playwright_sync.expect(row.get_by_test_id("attempts")).to_have_text("1")
            playwright_sync.expect(row.get_by_test_id("category")).to_have_text("gpu_hardware")
            assert row.get_by_test_id("markers").locator(".marker").count() >= 1

            # The recovery timeline, in order, with who acted and the evidence lines.
            row.click()
            events = page.get_by_test_id("event")
            playwright_sync.expect(events).to_have_count(8)
            types = [events.nth(i).get_attribute("data-event-type") for i in range(8)]
            assert types == [
                "workload_discovered", "detection", "advice", "action", "action", "action",
                "allocation_restarted", "training_resumed",
            ]  # fmt: skip
            detection = page.locator('li[data-event-type="detection"]')
            playwright_sync.expect(detection.get_by_test_id("evidence")).to_contain_text("Xid")
            playwright_sync.expect(detection.get_by_test_id("evidence")).to_contain_text("Watchdog caught")
            actions = page.locator('li[data-event-type="action"]')
            for i in range(3):
                playwright_sync.expect(actions.nth(i).get_by_test_id("event-actor")).to_have_text("by policy")
            playwright_sync.expect(page.get_by_test_id("advice-action")).to_have_text("requeue")
            playwright_sync.expect(page.get_by_test_id("advice")).to_contain_text("converged")
            playwright_sync.expect(page.get_by_test_id("fact-excluded-nodes")).to_have_text("gpu-03")
            page.screenshot(path=str(ARTIFACTS / "console-recovery.png"), full_page=True)

            # Live update: an event recorded now appears without a reload.
            served.store.record(
                AuditEventIn(
                    event_id="live-completed",
                    event_type=EventType.COMPLETED,
                    workload_key=recovered.key,
                    cluster=recovered.cluster,
                    job_id=recovered.job_id,
                    attempt=1,
                    ts=time.time(),
                    message="training completed",
                )
            )
            playwright_sync.expect(page.locator('li[data-event-type="completed"]')).to_have_count(
                1, timeout=10000
            )

            # The hostile workload's timeline renders its evidence as text too.
            hostile_row.click()
            playwright_sync.expect(page.get_by_test_id("detail-title")).to_contain_text(XSS_NAME)
            hostile_evidence = page.get_by_test_id("evidence").filter(has_text="window.__pwned")
            playwright_sync.expect(hostile_evidence).to_have_text(XSS_EVIDENCE)
            assert page.evaluate("window.__pwned === undefined")
            assert page.locator("img").count() == 0

            # Switch the observed workload to action mode through the UI (asks for the token).
            page.locator(f'tr[data-key="{observed.key}"]').click()
            playwright_sync.expect(page.get_by_test_id("detail-title")).to_contain_text("gpt-moe-sweep")
            page.get_by_test_id("workload-mode-select").select_option("action")
            page.get_by_test_id("workload-mode-apply").click()
            playwright_sync.expect(page.get_by_test_id("message")).to_contain_text("now action")
            playwright_sync.expect(
                page.locator(f'tr[data-key="{observed.key}"]').get_by_test_id("mode")
            ).to_have_text("action")
            assert [c[0:2] for c in served.fake.calls] == [("set_mode", observed.workflow_id)]
            stored = served.store.get_workload(observed.key)
            assert stored is not None and stored.mode == Mode.ACTION

            # The operator agrees with the current advice: the agreement table shows it.
            page.get_by_test_id("agree").click()
            playwright_sync.expect(page.get_by_test_id("decision")).to_contain_text("agreed")
            playwright_sync.expect(page.get_by_test_id("agreement-row").first).to_contain_text("100 %")
            page.screenshot(path=str(ARTIFACTS / "console-mode-switch.png"), full_page=True)
        finally:
            browser.close()
    assert errors == []
    assert [d for d in dialogs if not d.startswith("prompt:")] == []
    assert sum(d.startswith("prompt:") for d in dialogs) == 1  # the token, asked once

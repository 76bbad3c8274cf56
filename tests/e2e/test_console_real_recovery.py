"""The console over a REAL recovery: a real sbatch job fails on node2 and is recovered by the worker on the
real stack; Debian's chromium (driven by Playwright, never `playwright install`) shows it, and an operator
switches a live workload's mode from the page — a real Temporal update on the real workflow.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn
from pydantic import SecretStr

from tests.e2e.stack import REPO, Stack, free_port
from trainguard.api.app import create_app
from trainguard.api.temporal_control import ClientTemporalControl
from trainguard.audit.store import AuditStore
from trainguard.models import EventType, Mode, WorkloadId, WorkloadStatus

playwright_async = pytest.importorskip("playwright.async_api")

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = REPO / "test-artifacts"
TOKEN = "e2e-console-token"
ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian chromium is not installed")


@pytest.fixture
def console(stack: Stack) -> Iterator[str]:
    settings = stack.settings.model_copy(
        update={"api": stack.settings.api.model_copy(update={"token": SecretStr(TOKEN), "port": free_port()})}
    )
    store = AuditStore.from_url(settings.audit.url)
    app = create_app(settings, store=store, temporal=ClientTemporalControl(settings.temporal))
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=settings.api.port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        threading.Event().wait(0.05)
    try:
        yield f"http://127.0.0.1:{settings.api.port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        store.close()


def comment(mode: str) -> str:
    return json.dumps({"trainguard": {"environment": "console", "mode": mode}})


async def test_console_shows_a_real_recovery_and_switches_a_live_workload(stack: Stack, console: str) -> None:
    recovered = stack.submit(
        comment=comment("action"),
        name="console-demo",
        env={
            "TRAINSIM_FAULT": "xid",
            "TRAINSIM_FAULT_NODE": "node2",
            "TRAINSIM_FAULT_AT": "10",
            "TRAINSIM_FAULT_ONCE": str(stack.workdir / "console-fired"),
        },
    )
    live = stack.submit(
        comment=comment("observe"),
        name="console-live",
        nodes=1,
        env={"TRAINSIM_ITERS": "100000", "TRAINSIM_STEP_S": "0.5"},
    )
    await stack.wait_for_event(recovered.job_id, EventType.COMPLETED, timeout=150)
    await stack.wait_for_event(live.job_id, EventType.WORKLOAD_DISCOVERED)
    recovered_key = stack.events(recovered.job_id)[0].workload_key
    live_key = stack.events(live.job_id)[0].workload_key

    ARTIFACTS.mkdir(exist_ok=True)
    async with playwright_async.async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS, headless=True)
        try:
            page = await browser.new_page(viewport={"width": 1500, "height": 1000})

            async def on_dialog(dialog: playwright_async.Dialog) -> None:
                await (dialog.accept(TOKEN) if dialog.type == "prompt" else dialog.dismiss())

            page.on("dialog", on_dialog)
            expect = playwright_async.expect
            await page.goto(console + "/")
            row = page.locator(f'tr[data-key="{recovered_key}"]')
            await expect(row.get_by_test_id("state")).to_have_text("completed")
            await expect(row.get_by_test_id("attempts")).to_have_text("1")
            await expect(row.get_by_test_id("category")).to_have_text("gpu_hardware")
            await row.click()
            await expect(page.locator('li[data-event-type="detection"]').first).to_contain_text("node2")
            for kind in ("advice", "action", "allocation_restarted", "training_resumed", "completed"):
                await expect(page.locator(f'li[data-event-type="{kind}"]').first).to_be_visible()
            await expect(page.get_by_test_id("fact-excluded-nodes")).to_have_text("node2")
            await page.screenshot(path=str(ARTIFACTS / "console-real-recovery.png"), full_page=True)

            live_row = page.locator(f'tr[data-key="{live_key}"]')
            await expect(live_row.get_by_test_id("mode")).to_have_text("observe")
            await live_row.click()
            await page.get_by_test_id("workload-mode-select").select_option("action")
            await page.get_by_test_id("workload-mode-apply").click()
            await expect(live_row.get_by_test_id("mode")).to_have_text("action", timeout=20_000)
            await page.screenshot(path=str(ARTIFACTS / "console-live-mode-switch.png"), full_page=True)
        finally:
            await browser.close()

    cluster, job_id, submit = live_key.split("/")
    workload = WorkloadId(cluster=cluster, job_id=job_id, submit_time=int(submit))
    status = await stack.client.get_workflow_handle(workload.workflow_id).query(
        "status", result_type=WorkloadStatus
    )
    assert status.mode == Mode.ACTION
    await asyncio.sleep(1)
    changes = [e for e in stack.events(live.job_id) if e.event_type == EventType.MODE_CHANGED]
    assert changes and any(e.actor == "operator" for e in changes)
    stack.cluster._run(["scancel", live.job_id], check=False)

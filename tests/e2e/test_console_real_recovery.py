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

import playwright.async_api as playwright_async
import pytest
import uvicorn
from pydantic import SecretStr
from temporalio.api.enums.v1 import EventType as HistoryEventType
from temporalio.api.sdk.v1 import WorkflowMetadata

from tests.e2e.stack import REPO, Stack, free_port
from trainguard.api.app import create_app
from trainguard.api.temporal_control import ClientTemporalControl
from trainguard.audit.store import AuditStore
from trainguard.models import EventType, Mode, WorkloadId, WorkloadStatus

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = REPO / "test-artifacts"
TOKEN = "e2e-console-token"
TEMPORAL_UI = "http://temporal-ui.invalid:8080"
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

# A missing Debian chromium fails the launch: never a silent skip.


@pytest.fixture
def console(stack: Stack) -> Iterator[str]:
    settings = stack.settings.model_copy(
        update={
            "api": stack.settings.api.model_copy(update={"token": SecretStr(TOKEN), "port": free_port()}),
            "temporal": stack.settings.temporal.model_copy(update={"ui_url": TEMPORAL_UI}),
        }
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
            # The timeline chart of the real recovery: two attempts, the fault, the lost time, the steps.
            chart = page.get_by_test_id("workload-chart")
            await expect(chart.locator(".scatterlayer .point").first).to_be_attached()
            assert await chart.locator(".bars .point path").count() >= 3  # attempts 0 and 1, time lost
            link = page.get_by_test_id("temporal-link")
            rc, rj, rs = recovered_key.split("/")
            wf_id = WorkloadId(cluster=rc, job_id=rj, submit_time=int(rs)).workflow_id
            namespace = stack.settings.temporal.namespace
            assert (
                await link.get_attribute("href") == f"{TEMPORAL_UI}/namespaces/{namespace}/workflows/{wf_id}"
            )
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

    # In Temporal itself the recovered workflow reads as a story (user metadata, workflows/story.py).
    handle = stack.client.get_workflow_handle(wf_id)
    desc = await handle.describe()
    summary = await desc.static_summary() or ""
    assert summary.startswith(f"job {recovered.job_id} on {rc} · console-demo") and summary.endswith(
        " · action"
    )
    assert f"**Job** {recovered.job_id} on cluster **{rc}**" in (await desc.static_details() or "")
    meta = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
    assert "**state** completed" in meta.current_details and "gpu_hardware (hardware)" in meta.current_details
    history = await handle.fetch_history()
    converter = stack.client.data_converter.payload_converter
    summaries = [
        converter.from_payload(e.user_metadata.summary, str)
        for e in history.events
        if e.event_type == HistoryEventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
    for expected in (
        f"requeue-hold job {recovered.job_id}",
        f"exclude job {recovered.job_id} (node2)",
        f"release job {recovered.job_id}",
        f"watch attempt 1 of job {recovered.job_id}",
    ):
        assert expected in summaries, (expected, summaries)

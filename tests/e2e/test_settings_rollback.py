"""The runbook's rollback, literally (docs/runbook.md, stage 5), on the real stack: a cluster in action mode
with a running opted-in job; set TRAINGUARD_CLUSTER__MODE=observe in the worker's environment and restart
the worker; then inject a fault. The running workload must only advise: Slurm's own record shows no
requeue, no hold, no exclusion. The change is audited with its source, for the cluster and the workload.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid

from tests.e2e.crash_stack import crash_stack, is_held, save_history
from trainguard.models import EventType


async def test_rollback_by_environment_and_restart_reaches_a_running_job() -> None:
    async with crash_stack("settings-rollback") as stack:
        trigger = stack.root / f"trigger-{uuid.uuid4().hex[:6]}"
        # no scripted fault: it fires when the test writes the trigger file, after the rollback
        job = stack.submit("action", fault=None, iters=3000, env={"TRAINSIM_TRIGGER": str(trigger)})
        await stack.wait_event(job, EventType.WORKLOAD_DISCOVERED, timeout=120)
        discovered = next(
            e for e in stack.events(job.job_id) if e.event_type == EventType.WORKLOAD_DISCOVERED
        )
        assert discovered.mode == "action", discovered

        await stack.worker.restart_with({}, env={"TRAINGUARD_CLUSTER__MODE": "observe"})

        def cluster_changed() -> bool:
            page = stack.store.list_events(event_type=EventType.SETTINGS_CHANGED, cluster="crash", limit=100)
            return any(e.workload_key == "" for e in page.items)

        await stack.wait_for(cluster_changed, "the cluster's settings_changed event", 120)
        await stack.wait_event(job, EventType.SETTINGS_CHANGED, timeout=120)
        page = stack.store.list_events(event_type=EventType.SETTINGS_CHANGED, cluster="crash", limit=100)
        cluster_event = next(e for e in page.items if e.workload_key == "")
        assert cluster_event.data["source"] == "worker restart", cluster_event
        assert cluster_event.data["mode"] == "action → observe", cluster_event.data
        workload_event = next(
            e for e in stack.events(job.job_id) if e.event_type == EventType.SETTINGS_CHANGED
        )
        assert workload_event.mode == "observe" and workload_event.data["source"] == "worker restart"
        assert "effective mode action → observe" in workload_event.message, workload_event.message
        assert stack.show(job.job_id)["JobState"] == "RUNNING"

        trigger.write_text("xid\n")
        await stack.wait_event(job, EventType.ADVICE, timeout=120)
        await stack.wait_state(job, {"FAILED"}, timeout=120)
        await asyncio.sleep(4)  # give a wrongly acting worker the chance to act

        record = stack.show(job.job_id)
        assert record["JobState"] == "FAILED", record
        assert record["Restarts"] == "0" and record["ExcNodeList"] == "(null)" and not is_held(record), record
        assert stack.recorder.untouched(job.job_id), stack.recorder.of(job.job_id)[-1]
        events = stack.events(job.job_id)
        advice = [e for e in events if e.event_type == EventType.ADVICE]
        assert advice and all(e.mode == "observe" for e in advice), advice
        assert not [e for e in events if e.event_type == EventType.ACTION]
        # `trainguard config reload` applies the file + environment without a restart, audited as such
        env = {**os.environ, **stack.worker.env, "TRAINGUARD_CLUSTER__MODE": "observe"}
        env["TRAINGUARD_POLICY__RETRY_BUDGET"] = "2"
        reload = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "trainguard", "--config", str(stack.worker.config), "config", "reload"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert reload.returncode == 0, reload.stderr
        assert "recovery.policy.retry_budget 5 → 2" in reload.stdout, reload.stdout
        page = stack.store.list_events(event_type=EventType.SETTINGS_CHANGED, cluster="crash", limit=100)
        sources = [e.data.get("source") for e in page.items if e.workload_key == ""]
        assert sources == ["worker restart", "config reload"], sources
        assert stack.worker.deaths == [], stack.worker.deaths  # one deliberate restart, no crash loop
        await save_history(stack.handle(job), "settings_rollback_observe")
        await save_history(
            stack.client.get_workflow_handle("trainguard-cluster-crash"), "cluster_watch_settings_reload"
        )

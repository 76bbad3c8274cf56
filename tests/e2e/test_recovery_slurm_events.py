"""Recovery from what Slurm itself reports, on Slurm 22.05 and 24.11: a node crash and a job-array task.

These are the paths where the two versions differ most (24.11's list-valued job_state, e.g.
["PENDING","COMPLETING"] during a node-failure requeue; array task ids), so each runs on both.
"""

from __future__ import annotations

import asyncio
import json
import re
import time

import pytest

from tests.e2e.stack import SBATCH, Stack, SubmittedJob
from trainguard.models import EventType

pytestmark = pytest.mark.slurm_versions("22.05", "24.11")


def comment(mode: str) -> str:
    return json.dumps({"trainguard": {"environment": "e2e", "mode": mode}})


async def wait_output(job: SubmittedJob, pattern: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if job.output.exists() and re.search(pattern, job.output.read_text(errors="replace")):
            return
        await asyncio.sleep(0.3)
    raise AssertionError(f"{pattern!r} not in {job.output} within {timeout} s")


async def test_a_node_crash_excludes_the_dead_node_and_the_job_completes(stack: Stack) -> None:
    job = stack.submit(comment=comment("action"), env={"TRAINSIM_ITERS": "100", "TRAINSIM_STEP_S": "0.25"})
    await wait_output(job, r"saved checkpoint")
    nodes = job.show()["NodeList"]
    victim = _hostnames(stack, nodes)[-1]
    try:
        assert stack.cluster.kill_node(victim)
        events = await stack.wait_for_event(job.job_id, EventType.COMPLETED, timeout=180)
    finally:
        stack.cluster.restart_node(victim)
    record = job.show()
    assert record["JobState"] == "COMPLETED"
    assert int(record["Restarts"]) >= 1
    assert victim in record["ExcNodeList"].split(",") and victim not in record["NodeList"]
    detection = next(e for e in events if e.event_type == EventType.DETECTION)
    assert detection.category == "slurm_node_failure" and victim in detection.nodes
    performed = [e.action for e in events if e.event_type == EventType.ACTION and e.data.get("performed")]
    assert "exclude" in performed and "release" in performed, performed
    out = job.output.read_text(errors="replace")
    assert re.search(r"loading checkpoint .* iteration\s+(\d+)", out), out[-2000:]


async def test_a_failed_array_task_is_recovered_on_its_own(stack: Stack) -> None:
    # Two tasks of two whole nodes each (--exclusive), so exactly one of them runs on node2, where the
    # Xid fires once. That task alone is held, gets node2 excluded and completes; the other is untouched.
    workdir = stack.workdir / f"array-{int(time.time() * 1000)}"
    workdir.mkdir(parents=True)
    env = {
        "TRAINSIM_PY": str(SBATCH.parent / "trainsim.py"),
        "TRAINSIM_ITERS": "30",
        "TRAINSIM_STEP_S": "0.1",
        "TRAINSIM_CKPT_EVERY": "5",
        "TRAINSIM_NCCL_DELAY_S": "1",
        "TRAINSIM_FAULT": "xid",
        "TRAINSIM_FAULT_NODE": "node2",
        "TRAINSIM_FAULT_AT": "12",
        "TRAINSIM_FAULT_ONCE": str(workdir / "fired"),
        # each task checkpoints to its own $SLURM_SUBMIT_DIR/ckpt-$SLURM_JOB_ID: submit from workdir
        "TRAINSIM_CKPT_DIR": "",
    }
    argv = ["--job-name=sweep", "--nodes=2", "--array=0-1", "--exclusive"]
    argv += [f"--output={workdir}/trainsim-%A_%a.out", f"--comment={comment('action')}", str(SBATCH)]
    array_id = stack.cluster.sbatch(argv, env=env, cwd=workdir)
    tasks: dict[str, str] = {}  # "<array>_<task>" -> the task's own job id

    states: dict[str, str] = {}

    def both_completed() -> bool:
        out = stack.cluster.run(["squeue", "-h", "-r", "-t", "all", "-j", array_id, "-o", "%i %A %T"])
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[0].startswith(f"{array_id}_") and parts[0][-1].isdigit():
                tasks[parts[0]] = parts[1]
                states[parts[0]] = parts[2]
        return len(states) == 2 and all(s == "COMPLETED" for s in states.values())

    deadline = time.monotonic() + 120
    while not both_completed():
        if time.monotonic() > deadline:
            trail = {t: [(e.event_type.value, e.message) for e in stack.events(j)] for t, j in tasks.items()}
            raise AssertionError(f"array {array_id}: tasks {states} did not both complete; audit: {trail}")
        await asyncio.sleep(0.5)
    records = {task: _show(stack, job_id) for task, job_id in tasks.items()}
    hit = [t for t, r in records.items() if r.get("ExcNodeList") == "node2"]
    assert len(hit) == 1, records
    (faulty,) = hit
    (healthy,) = [t for t in records if t != faulty]
    assert records[faulty]["JobState"] == "COMPLETED" and records[faulty]["Restarts"] == "1"
    assert "node2" not in _hostnames(stack, records[faulty]["NodeList"])
    assert records[healthy]["JobState"] == "COMPLETED" and records[healthy]["Restarts"] == "0"
    assert records[healthy].get("ExcNodeList") in ("(null)", None)
    faulty_events = await stack.wait_for_event(tasks[faulty], EventType.COMPLETED, timeout=30)
    performed = [
        e.action for e in faulty_events if e.event_type == EventType.ACTION and e.data.get("performed")
    ]
    assert performed[:3] == ["requeue_hold", "exclude", "release"], performed
    assert not [e for e in stack.events(tasks[healthy]) if e.event_type == EventType.ACTION]


def _show(stack: Stack, job_id: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    for token in stack.cluster.scontrol_job(job_id).split():
        key, sep, value = token.partition("=")
        if sep and key not in fields:
            fields[key] = value
    return fields


def _hostnames(stack: Stack, nodes: str) -> list[str]:
    return stack.cluster.run(["scontrol", "show", "hostnames", nodes]).split()

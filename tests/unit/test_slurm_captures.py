"""The format layer on the full real captures of each Slurm version (tests/fixtures/slurm/<version>/,
made by capture.py): every situation means the same thing whichever version, CLI or slurmrestd API
printed it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from trainguard.models import JobSnapshot
from trainguard.optin import parse_opt_in
from trainguard.slurm.formats import detect_format, parse_jobs, parse_nodes

CAPTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
VERSIONS = ("22.05", "24.11")
REST_APIS = {"22.05": ("v0.0.38",), "24.11": ("v0.0.40", "v0.0.41", "v0.0.42")}


def load(version: str, name: str) -> Any:
    return json.loads((CAPTURES / version / name).read_text())


def situations(version: str) -> dict[str, str]:
    return dict(load(version, "jobs.json")["jobs"])


def by_situation(version: str, document: str = "squeue_all.json") -> dict[str, JobSnapshot]:
    jobs = {j.job_id: j for j in parse_jobs(load(version, document))}
    return {name: jobs[job_id] for name, job_id in situations(version).items()}


@pytest.mark.parametrize("version", VERSIONS)
def test_the_capture_is_of_that_version(version: str) -> None:
    assert load(version, "jobs.json")["slurm"].startswith(f"slurm-wlm {version}.")
    expected = "openapi/v0.0.38" if version == "22.05" else "data_parser/v0.0.42"
    assert detect_format(load(version, "squeue_all.json")) == expected


@pytest.mark.parametrize("version", VERSIONS)
def test_every_situation_reads_as_slurm_meant_it(version: str) -> None:
    jobs = by_situation(version)
    assert (jobs["timeout"].state, jobs["timeout"].reason) == ("TIMEOUT", "TimeLimit")
    assert (jobs["completed"].state, jobs["completed"].exit_code) == ("COMPLETED", 0)
    assert (jobs["failed"].state, jobs["failed"].exit_code) == ("FAILED", 3)
    running = jobs["running"]
    assert running.state == "RUNNING" and running.nodes == ("node1", "node2") and not running.held
    assert running.name == "train; $(id)" and parse_opt_in(running.comment) is not None
    assert jobs["held_by_user"].state == "PENDING" and jobs["held_by_user"].held
    assert jobs["pending_begin"].state == "PENDING" and not jobs["pending_begin"].held
    assert jobs["pending_resources"].reason == "Resources"
    requeue_held = jobs["requeue_held"]
    assert (requeue_held.state, requeue_held.held, requeue_held.restart_count) == ("PENDING", True, 1)
    assert jobs["cancelled"].state == "CANCELLED"
    assert jobs["node_fail_no_requeue"].state == "NODE_FAIL"
    requeued = jobs["node_fail_requeued"]
    assert (requeued.state, requeued.restart_count, requeued.held) == ("PENDING", 1, False)
    assert jobs["user_excluded"].excluded_nodes == ("node3", "node4")


@pytest.mark.parametrize("version", VERSIONS)
def test_array_tasks_and_het_components_are_recognised(version: str) -> None:
    array_id = situations(version)["array"]
    het_id = situations(version)["hetjob"]
    jobs = parse_jobs(load(version, "squeue_all.json"))
    tasks = [j for j in jobs if j.array_job_id == array_id]
    # two tasks running on their own job ids, the pending rest as one record ("2-3%2")
    assert sorted(j.state for j in tasks) == ["PENDING", "RUNNING", "RUNNING"]
    assert {j.array_task_id for j in tasks if j.state == "RUNNING"} == {"0", "1"}
    components = sorted((j for j in jobs if j.het_job_id == het_id), key=lambda j: j.het_job_offset or 0)
    assert [(c.het_job_offset, c.nodes) for c in components] == [(0, ("node2",)), (1, ("node4",))]


@pytest.mark.parametrize("version", VERSIONS)
def test_a_requeue_after_a_node_crash_is_completing_not_pending(version: str) -> None:
    # 24.11 prints ["PENDING","COMPLETING"] here; scontrol says JobState=COMPLETING.
    jobs = by_situation(version, "squeue_node_fail_completing.json")
    assert jobs["node_fail_requeued"].state == "COMPLETING"
    assert jobs["node_fail_requeued"].restart_count == 1
    text = (CAPTURES / version / "scontrol_job_node_fail_completing.txt").read_text()
    assert "JobState=COMPLETING" in text and "Restarts=1" in text


@pytest.mark.parametrize("version", VERSIONS)
def test_node_states_from_every_node_document(version: str) -> None:
    documents = ["sinfo.json", *(f"rest/{api}_nodes.json" for api in REST_APIS[version])]
    if version != "22.05":
        documents.append("scontrol_nodes.json")
    for document in documents:
        nodes = {n.name: n for n in parse_nodes(load(version, document))}
        assert sorted(nodes) == ["node1", "node2", "node3", "node4"], document
        assert nodes["node3"].state == "down" and "NOT_RESPONDING" in nodes["node3"].flags, document
        assert nodes["node4"].state in ("draining", "drained"), document
        assert nodes["node4"].reason == "capture: bad gpu", document


@pytest.mark.parametrize("version", VERSIONS)
def test_slurmrestd_jobs_agree_with_squeue(version: str) -> None:
    cli = {j.job_id: (j.state, j.held, j.restart_count) for j in parse_jobs(load(version, "squeue_all.json"))}
    for api in REST_APIS[version]:
        rest = parse_jobs(load(version, f"rest/{api}_jobs.json"))
        assert {j.job_id: (j.state, j.held, j.restart_count) for j in rest} == cli, api

"""Reading only what is needed (24.05+): a state listing plus detail reads gives the full snapshot.

The state listings and full listings are real 24.11 captures of the same moments
(tests/fixtures/slurm/24.11/fmt_*_states.json and fmt_*_squeue.json). What `squeue -j` returns is
imitated by filtering the full capture by job id, as measured on 24.11: `-j <id>` returns that record,
an array's id returns every record of the array, unknown ids return nothing.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from trainguard.models import JobSnapshot
from trainguard.slurm import incremental
from trainguard.slurm.client import SlurmClient
from trainguard.slurm.errors import SlurmFormatError
from trainguard.slurm.formats import parse_jobs
from trainguard.slurm.runner import CommandResult, LocalRunner

DIR = Path(__file__).resolve().parents[1] / "fixtures" / "slurm" / "24.11"
MOMENTS = ["fmt_mixed", "fmt_requeuehold_now", "fmt_requeuehold_later", "fmt_node_fail_end"]


def doc(name: str) -> dict[str, Any]:
    loaded = json.loads((DIR / name).read_text())
    assert isinstance(loaded, dict)
    return loaded


def jobs_at(moment: str) -> list[JobSnapshot]:
    return parse_jobs(doc(f"{moment}_squeue.json"))


def select(full: dict[str, Any], ids: Sequence[str]) -> dict[str, Any]:
    wanted = {int(i) for i in ids}

    def number(value: Any) -> int:
        return int(value["number"]) if isinstance(value, dict) and value.get("set") else 0

    picked = dict(full)
    picked["jobs"] = [j for j in full["jobs"] if j["job_id"] in wanted or number(j["array_job_id"]) in wanted]
    return picked


def key(jobs: Sequence[JobSnapshot]) -> dict[tuple[str, str | None], JobSnapshot]:
    return {(j.job_id, j.array_task_id): j for j in jobs}


@pytest.mark.parametrize("moment", MOMENTS)
def test_every_record_has_the_ids_slurm_prints(moment: str) -> None:
    states = incremental.parse_job_states(doc(f"{moment}_states.json"))
    printed = {i for job in jobs_at(moment) for i in incremental.printed_ids(job)}
    assert printed == set(states)
    for job in jobs_at(moment):
        assert {states[i] for i in incremental.printed_ids(job)} == {job.state}


@pytest.mark.parametrize("before", MOMENTS)
@pytest.mark.parametrize("after", MOMENTS)
def test_states_plus_details_equal_a_full_read(before: str, after: str) -> None:
    states = incremental.parse_job_states(doc(f"{after}_states.json"))
    todo = incremental.plan(states, jobs_at(before), lambda job: "trainguard" in job.comment)
    details = parse_jobs(select(doc(f"{after}_squeue.json"), todo.refresh)) if todo.refresh else []
    merged = incremental.merge(todo.keep, details)
    assert key(merged) == key(jobs_at(after))
    if before == after:  # nothing changed: only the watched (opted-in) jobs are read again
        watched = {j.job_id for j in jobs_at(after) if "trainguard" in j.comment}
        assert set(todo.refresh) == {
            incremental.query_id(i)
            for j in jobs_at(after)
            if j.job_id in watched
            for i in incremental.printed_ids(j)
        }
        assert len(todo.keep) == len(jobs_at(after)) - len(watched)


def test_array_expressions() -> None:
    assert incremental.expand_tasks("1-3%1") == [1, 2, 3]
    assert incremental.expand_tasks("0,4-10:3") == [0, 4, 7, 10]
    assert incremental.expand_tasks("[2-3]") == [2, 3]
    assert incremental.expand_tasks("x") is None and incremental.expand_tasks("5-1") is None
    assert incremental.expand_tasks("0-99999999") is None  # bounded


@pytest.mark.parametrize(
    "bad", [{"jobs": [{"job_id": "1"}]}, {"jobs": [{"state": ["RUNNING"]}]}, {"jobs": 3}]
)
def test_unreadable_state_listing_is_an_error(bad: dict[str, Any]) -> None:
    with pytest.raises(SlurmFormatError):
        incremental.parse_job_states(bad)


class Moments(LocalRunner):
    """Answers the client's commands from two captured moments: the first full read, then the second."""

    def __init__(self, first: str, then: str) -> None:
        super().__init__()
        self.first, self.then = first, then
        self.calls: list[tuple[str, ...]] = []

    async def run(self, argv: Sequence[str], *, timeout: float = 30.0, check: bool = False) -> CommandResult:
        args = tuple(argv)
        self.calls.append(args)
        if args[:3] == ("squeue", "--json", "--only-job-state"):
            text = (DIR / f"{self.then}_states.json").read_text()
        elif args[:2] == ("squeue", "--json") and "-j" in args:
            ids = args[args.index("-j") + 1].split(",")
            text = json.dumps(select(doc(f"{self.then}_squeue.json"), ids))
        elif args[:2] == ("squeue", "--json"):
            text = (DIR / f"{self.first}_squeue.json").read_text()
        elif args[:4] == ("scontrol", "show", "node", "--json"):
            text = (DIR / f"{self.then}_nodes.json").read_text()
        else:
            return CommandResult(args, 1, "", "not captured")
        return CommandResult(args, 0, text, "")


def test_client_reads_states_then_details_only() -> None:
    runner = Moments("fmt_mixed", "fmt_node_fail_end")
    client = SlurmClient(runner, "lab", full_every=10)

    async def go() -> None:
        await client.snapshot()
        second = await client.snapshot()
        assert key(second.jobs) == key(jobs_at("fmt_node_fail_end"))

    asyncio.run(go())
    squeues = [c for c in runner.calls if c[0] == "squeue"]
    assert squeues[0] == ("squeue", "--json", "-t", "all")
    assert squeues[1] == ("squeue", "--json", "--only-job-state", "-t", "all")
    assert squeues[2][:5] == ("squeue", "--json", "-t", "all", "-j") and "3" not in squeues[2][5].split(",")


class Refusing(Moments):
    async def run(self, argv: Sequence[str], *, timeout: float = 30.0, check: bool = False) -> CommandResult:
        if "--only-job-state" in argv:
            self.calls.append(tuple(argv))
            return CommandResult(tuple(argv), 1, "", "squeue: unrecognized option '--only-job-state'")
        return await super().run(argv, timeout=timeout, check=check)


def test_a_squeue_without_the_state_listing_falls_back_to_full_reads() -> None:
    runner = Refusing("fmt_mixed", "fmt_node_fail_end")
    client = SlurmClient(runner, "lab")

    async def go() -> None:
        for _ in range(3):
            snap = await client.snapshot()
            assert key(snap.jobs) == key(jobs_at("fmt_mixed"))

    asyncio.run(go())
    assert client.incremental is False
    assert sum("--only-job-state" in call for call in runner.calls) == 1

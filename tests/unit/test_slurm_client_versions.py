"""SlurmClient picks its commands per Slurm version, and unreadable output never makes a job look gone.

The runner here answers with real captured output of Slurm 22.05 and 24.11 (tests/fixtures/slurm/);
it is a fake only in that no slurmctld runs (the e2e tests run the real one).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from pathlib import Path

import pytest

from activities.cluster import ClusterActivities, unsupported_reason
from activities.snapshot_cache import SnapshotCache
from activities.watch import JobWatcher
from trainguard import contracts as c
from trainguard.models import JobSnapshot, Mode, WorkloadId
from trainguard.slurm.client import SlurmClient
from trainguard.slurm.errors import SlurmFormatError
from trainguard.slurm.formats import parse_jobs
from trainguard.slurm.parsers import load_document
from trainguard.slurm.runner import CommandResult, LocalRunner

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"


class CapturedSlurm(LocalRunner):
    """Answers squeue/sinfo/scontrol JSON commands with one version's captured output."""

    def __init__(self, version: str, scenario: str = "fmt_node_fail_end") -> None:
        super().__init__()
        self.dir = FIXTURES / version
        self.scenario = scenario
        self.calls: list[tuple[str, ...]] = []
        self.squeue_override: str | None = None

    async def run(self, argv: Sequence[str], *, timeout: float = 30.0, check: bool = False) -> CommandResult:
        args = tuple(argv)
        self.calls.append(args)
        if args[:2] == ("squeue", "--json"):
            text = self.squeue_override or (self.dir / f"{self.scenario}_squeue.json").read_text()
        elif args[:2] == ("sinfo", "--json"):
            text = (self.dir / f"{self.scenario}_sinfo.json").read_text()
        elif args[:4] == ("scontrol", "show", "node", "--json"):
            path = self.dir / f"{self.scenario}_nodes.json"
            if not path.exists():  # 22.05's scontrol has no --json
                return CommandResult(args, 1, "", "scontrol: unrecognized option '--json'")
            text = path.read_text()
        else:
            return CommandResult(args, 1, "", "not captured")
        return CommandResult(args, 0, text, "")


@pytest.mark.parametrize(("version", "nodes_cmd"), [("22.05", "sinfo"), ("24.11", "scontrol")])
def test_snapshot_learns_the_version_and_reads_per_node_data(version: str, nodes_cmd: str) -> None:
    runner = CapturedSlurm(version)
    client = SlurmClient(runner, "lab", incremental=False)

    async def go() -> None:
        first = await client.snapshot()
        second = await client.snapshot()
        assert first == second.model_copy(update={"taken_at": first.taken_at})
        nodes = {n.name: n for n in first.nodes}
        assert nodes["node3"].state == "down" and "NOT_RESPONDING" in nodes["node3"].flags
        assert nodes["node4"].state == "drained" and nodes["node4"].reason.startswith("bad gpu")
        victim = next(j for j in first.jobs if j.job_id == "9")
        assert (victim.state, victim.restart_count) == ("PENDING", 1)

    asyncio.run(go())
    assert client.json_format == ("openapi/v0.0.38" if version == "22.05" else "data_parser/v0.0.42")
    assert [call[0] for call in runner.calls] == ["squeue", nodes_cmd, "squeue", nodes_cmd]


def test_unreadable_snapshot_raises_and_the_job_is_not_gone() -> None:
    """A document that cannot be understood must not read as "the job left squeue"."""
    runner = CapturedSlurm("24.11")
    client = SlurmClient(runner, "lab")
    runner.squeue_override = '{"meta": {"plugin": {"data_parser": "data_parser/v0.0.42"}}, "jobs": {"1": {}}}'
    cache = SnapshotCache(client.snapshot, max_age_s=0.0)
    watcher = JobWatcher(client, cache, lambda job, path: None)  # type: ignore[arg-type,return-value]
    inp = c.WatchInput(workload=WorkloadId(cluster="lab", job_id="9", submit_time=1), slice_s=1.0)

    async def go() -> None:
        with pytest.raises(SlurmFormatError):
            await watcher.watch(inp, lambda *a: None)

    asyncio.run(go())


def test_heterogeneous_components_are_reported_not_watched() -> None:
    het = JobSnapshot(job_id="7", het_job_id="6", het_job_offset=1)
    reason = unsupported_reason(het)
    assert reason is not None and "6+1" in reason and "heterogeneous" in reason
    assert unsupported_reason(JobSnapshot(job_id="6", het_job_id="6", het_job_offset=0)) is not None
    assert unsupported_reason(JobSnapshot(job_id="8", array_job_id="5", array_task_id="0")) is None
    assert unsupported_reason(JobSnapshot(job_id="12")) is None
    assert unsupported_reason(JobSnapshot(job_id="12+1")) is not None
    assert unsupported_reason(JobSnapshot(job_id="junk id")) is not None


class _Handle:
    def __init__(self, sent: list[tuple[str, object]]) -> None:
        self.sent = sent

    async def signal(self, name: str, arg: object) -> None:
        self.sent.append((name, arg))


class _Temporal:
    """Records what discovery asks of Temporal (no server: discovery's decisions are the subject)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, object]] = []
        self.started: list[str] = []
        self.summaries: list[object] = []

    def get_workflow_handle(self, workflow_id: str) -> _Handle:
        return _Handle(self.sent)

    async def start_workflow(self, *args: object, id: str, **kw: object) -> None:
        self.started.append(id)
        self.summaries.append(kw.get("static_summary"))


def test_discovery_reports_opted_in_het_jobs_once_and_starts_the_rest() -> None:
    text = (FIXTURES / "24.11" / "fmt_mixed_squeue.json").read_text()
    jobs = parse_jobs(load_document(text, "squeue --json"))
    temporal = _Temporal()
    acts = ClusterActivities("lab", None, None, None, temporal, search_attributes=False)  # type: ignore[arg-type]

    async def go() -> list[str | None]:
        d = c.DiscoverInput(cluster="lab", mode=Mode.OBSERVE, recovery=c.RecoveryConfig(cluster_queue="q"))
        env_re = re.compile(d.environment_pattern, re.DOTALL)
        first = [await acts._consider(job, d, env_re) for job in jobs]
        again = [await acts._consider(job, d, env_re) for job in jobs]
        assert all(outcome is None for outcome in again)  # reported once
        return first

    outcomes = dict(zip([j.job_id for j in jobs], asyncio.run(go()), strict=True))
    assert outcomes["6"] == outcomes["7"] == "unsupported"  # het leader and component (opted in)
    assert outcomes["1"] == "started" and outcomes["8"] == "started"  # plain job, array task
    assert len(temporal.sent) == 2 and all(name == "report_malformed" for name, _ in temporal.sent)
    started = {job_id for job_id, outcome in outcomes.items() if outcome == "started"}
    assert started == {"1", "5", "8"} and len(temporal.started) == 3  # train, array remainder, array task
    # The Temporal UI lists each workflow by its job (workflows/story.py).
    assert all(isinstance(s, str) and s.startswith("job ") and " on lab" in s for s in temporal.summaries)


# --- sacct fallback (jobs slurmctld forgot after MinJobAge) ---------------------------------------


def test_accounting_is_detected_from_scontrol_show_config() -> None:
    from trainguard.slurm.formats.sacct_text import accounting_configured

    # Real 24.11 lab output has "AccountingStorageType   = (null)" (no slurmdbd).
    assert not accounting_configured("AccountingStorageType   = (null)\nMinJobAge               = 600 sec\n")
    assert not accounting_configured("AccountingStorageType   = accounting_storage/none\n")
    assert accounting_configured("AccountingStorageType   = accounting_storage/slurmdbd\n")
    assert not accounting_configured("")


def test_sacct_line_becomes_a_finished_job() -> None:
    """Lines in sacct's documented -P (`|`-separated) form; no slurmdbd runs on this machine to capture."""
    from trainguard.slurm.formats.sacct_text import parse_sacct_job

    text = (
        "41|CANCELLED by 0|0:15|1796073608|1796073610|1796073700|node[1-2]|debug\n"
        "42|COMPLETED|0:0|1|2|3|node1|debug\n"
    )
    job = parse_sacct_job(text, "41")
    assert job is not None
    assert (job.state, job.exit_code, job.exit_signal, job.nodes) == ("CANCELLED", 0, 15, ("node1", "node2"))
    assert (job.submit_time, job.end_time) == (1796073608, 1796073700)
    assert parse_sacct_job(text, "43") is None
    with pytest.raises(SlurmFormatError):
        parse_sacct_job("41|COMPLETED|0:0\n", "41")


class _Accounted(LocalRunner):
    def __init__(self, storage: str) -> None:
        super().__init__()
        self.storage = storage
        self.calls: list[tuple[str, ...]] = []

    async def run(self, argv: Sequence[str], *, timeout: float = 30.0, check: bool = False) -> CommandResult:
        args = tuple(argv)
        self.calls.append(args)
        if "config" in args:
            return CommandResult(args, 0, f"AccountingStorageType   = {self.storage}\n", "")
        if "sacct" in args:
            return CommandResult(args, 0, "9|COMPLETED|0:0|100|110|200|node1|debug\n", "")
        return CommandResult(args, 1, "", "slurm_load_jobs error: Invalid job id specified")


def test_watch_reads_how_a_forgotten_job_ended_from_sacct_only_with_accounting() -> None:
    async def go(storage: str) -> tuple[c.WatchResult, list[tuple[str, ...]]]:
        runner = _Accounted(storage)
        client = SlurmClient(runner, "lab")

        async def empty() -> object:
            from trainguard.models import ClusterSnapshot

            return ClusterSnapshot(cluster="lab", taken_at=0.0)

        cache = SnapshotCache(empty, max_age_s=0.0)  # type: ignore[arg-type]
        watcher = JobWatcher(client, cache, lambda job, path: None)  # type: ignore[arg-type,return-value]
        inp = c.WatchInput(workload=WorkloadId(cluster="lab", job_id="9", submit_time=100), slice_s=1.0)
        return await watcher.watch(inp, lambda *a: None), runner.calls

    with_dbd, calls = asyncio.run(go("accounting_storage/slurmdbd"))
    assert with_dbd.observation.kind.value == "completed" and with_dbd.observation.job is not None
    assert any("sacct" in call for call in calls)
    without, calls = asyncio.run(go("(null)"))
    assert without.observation.kind.value == "gone"
    assert not any("sacct" in call for call in calls)

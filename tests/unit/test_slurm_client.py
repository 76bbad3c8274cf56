"""SlurmClient decisions against a fake scontrol that behaves as Slurm 22.05 did on the lab cluster."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from trainguard.models import ActionStep
from trainguard.slurm.client import JobGoneError, SlurmClient
from trainguard.slurm.runner import CommandError, CommandResult, FileStat

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"


@dataclass
class FakeJob:
    state: str = "RUNNING"
    restarts: int = 0
    held: bool = False
    excluded: str = ""
    requeue: bool = True
    reason: str = "JobHeldAdmin"  # Slurm's Reason while held


@dataclass
class FakeSlurm:
    jobs: dict[str, FakeJob] = field(default_factory=dict)
    calls: list[tuple[str, ...]] = field(default_factory=list)
    down: bool = False
    on_show: list[FakeJob | None] = field(default_factory=list)  # state changes injected before a show

    def line(self, job_id: str, job: FakeJob) -> str:
        reason = job.reason if job.held else "None"
        return (
            f"JobId={job_id} JobName=t UserId=root(0) Priority={0 if job.held else 100} JobState={job.state} "
            f"Reason={reason} Requeue={int(job.requeue)} Restarts={job.restarts} ExitCode=0:0 "
            f"SubmitTime=100 StartTime=0 EndTime=0 Partition=debug ExcNodeList={job.excluded or '(null)'} "
            f"NodeList=node[1-2] NumNodes=2 WorkDir=/w StdErr=/w/o StdIn=/dev/null StdOut=/w/o Power="
        )

    async def run(self, argv: Sequence[str], *, timeout: float = 30.0, check: bool = False) -> CommandResult:
        args = tuple(argv)
        core = args[2:] if args[0] == "env" else args
        self.calls.append(core)

        def res(rc: int = 0, out: str = "", err: str = "") -> CommandResult:
            return CommandResult(args, rc, out, err)

        if self.down:
            return res(1, err="slurm_load_jobs error: Unable to contact slurm controller (connect failure)")
        verb = core[1]
        job_id = core[-1] if verb != "update" else core[2].split("=", 1)[1]
        job = self.jobs.get(job_id)
        if job is None:
            return res(1, err=f"Invalid job id specified for job {job_id}")
        if verb == "show":
            if self.on_show:
                change = self.on_show.pop(0)
                if change is not None:
                    self.jobs[job_id] = job = change
            return res(out=self.line(job_id, job) + "\n")
        if verb == "requeuehold":
            if job.state == "PENDING":
                return res(1, err=f"Job is pending execution for job {job_id}")
            if not job.requeue:
                return res(1, err=f"Requested operation is presently disabled for job {job_id}")
            job.restarts += 1
            job.held = True
            job.reason = "job_requeued_in_held_state"
            job.state = "COMPLETING" if job.state == "RUNNING" else "PENDING"
        elif verb == "hold":
            job.held = True
            job.reason = "JobHeldAdmin"
        elif verb == "release":
            job.held = False
        elif verb == "update":
            if job.state not in ("PENDING", "COMPLETING"):
                return res(1, err=f"Job is no longer pending execution for job {job_id}")
            job.excluded = core[3].split("=", 1)[1]
        elif core[0] == "scancel":
            job.state = "CANCELLED"
        return res()

    async def stat(self, path: str) -> FileStat | None:
        return None

    async def read_file(self, path: str, offset: int, max_bytes: int) -> bytes:
        return b""

    async def close(self) -> None:
        return None


def actions(fake: FakeSlurm) -> list[str]:
    return [" ".join(c) for c in fake.calls if c[1] != "show"]


@pytest.mark.parametrize("state", ["RUNNING", "FAILED", "NODE_FAIL", "TIMEOUT"])
async def test_requeue_hold_same_attempt(state: str) -> None:
    fake = FakeSlurm({"7": FakeJob(state=state)})
    result = await SlurmClient(fake, "lab").requeue_hold("7", expected_restarts=0)
    assert result.performed and result.step == ActionStep.REQUEUE_HOLD
    assert (result.restart_count, result.held) == (1, True)
    assert actions(fake) == ["scontrol requeuehold 7"]
    assert fake.jobs["7"].restarts == 1 and fake.jobs["7"].held


async def test_requeue_hold_twice_runs_once() -> None:
    fake = FakeSlurm({"7": FakeJob()})
    client = SlurmClient(fake, "lab")
    await client.requeue_hold("7", expected_restarts=0)
    again = await client.requeue_hold("7", expected_restarts=0)
    assert not again.performed and "already requeued and held" in again.detail
    assert actions(fake) == ["scontrol requeuehold 7"]


async def test_requeue_hold_after_slurm_requeued_itself_only_holds() -> None:
    fake = FakeSlurm({"7": FakeJob(state="PENDING", restarts=1)})  # NODE_FAIL -> automatic requeue
    result = await SlurmClient(fake, "lab").requeue_hold("7", expected_restarts=0)
    assert result.performed and "held it" in result.detail
    assert actions(fake) == ["scontrol hold 7"]


async def test_requeue_hold_when_running_again_does_nothing() -> None:
    fake = FakeSlurm({"7": FakeJob(state="RUNNING", restarts=2)})
    result = await SlurmClient(fake, "lab").requeue_hold("7", expected_restarts=1)
    assert not result.performed and "RUNNING again" in result.detail
    assert actions(fake) == []


async def test_requeue_hold_pending_same_attempt_holds() -> None:
    fake = FakeSlurm({"7": FakeJob(state="PENDING")})
    result = await SlurmClient(fake, "lab").requeue_hold("7", expected_restarts=0)
    assert result.performed and actions(fake) == ["scontrol hold 7"]


async def test_requeue_hold_race_with_automatic_requeue() -> None:
    # show says RUNNING, but Slurm requeues it before our requeuehold lands.
    fake = FakeSlurm({"7": FakeJob(state="RUNNING")})
    fake.on_show = [None, FakeJob(state="PENDING", restarts=1)]
    original_run = fake.run

    async def run(argv: Sequence[str], *, timeout: float = 30.0, check: bool = False) -> CommandResult:
        if argv[1] == "requeuehold":
            fake.jobs["7"] = FakeJob(state="PENDING", restarts=1)
        return await original_run(argv, timeout=timeout, check=check)

    fake.run = run  # type: ignore[method-assign]
    result = await SlurmClient(fake, "lab").requeue_hold("7", expected_restarts=0)
    assert result.performed and "held it" in result.detail
    assert actions(fake) == ["scontrol requeuehold 7", "scontrol hold 7"]


@pytest.mark.parametrize("state", ["COMPLETED", "CANCELLED"])
async def test_requeue_hold_refuses_finished_by_choice(state: str) -> None:
    fake = FakeSlurm({"7": FakeJob(state=state)})
    with pytest.raises(CommandError) as info:
        await SlurmClient(fake, "lab").requeue_hold("7", expected_restarts=0)
    assert not info.value.retryable and actions(fake) == []


async def test_requeue_hold_no_requeue_job_is_permanent_error() -> None:
    fake = FakeSlurm({"7": FakeJob(requeue=False)})
    with pytest.raises(CommandError) as info:
        await SlurmClient(fake, "lab").requeue_hold("7", expected_restarts=0)
    assert not info.value.retryable and "disabled" in info.value.stderr


async def test_unknown_job() -> None:
    client = SlurmClient(FakeSlurm(), "lab")
    assert await client.job("9") is None
    with pytest.raises(JobGoneError):
        await client.requeue_hold("9", expected_restarts=0)
    assert not (await client.release("9")).performed
    assert not (await client.cancel("9")).performed


async def test_controller_unreachable_is_retryable() -> None:
    client = SlurmClient(FakeSlurm({"7": FakeJob()}, down=True), "lab")
    for call in (client.job("7"), client.snapshot(), client.requeue_hold("7", expected_restarts=0)):
        with pytest.raises(CommandError) as info:
            await call
        assert info.value.retryable


async def test_set_excluded_adds_and_is_idempotent() -> None:
    fake = FakeSlurm({"7": FakeJob(state="PENDING", held=True, restarts=1)})
    client = SlurmClient(fake, "lab")
    first = await client.set_excluded("7", ["node3", "node2"])
    assert first.performed and fake.jobs["7"].excluded == "node[2-3]"
    second = await client.set_excluded("7", ["node2", "node3"])
    assert not second.performed
    nothing = await client.set_excluded("7", [])  # never clears: TrainGuard only adds
    assert not nothing.performed and fake.jobs["7"].excluded == "node[2-3]"
    assert len(actions(fake)) == 1


async def test_set_excluded_keeps_the_users_own_exclusions() -> None:
    """Safety clause 4: the user's `-x node1` (re-read right before the update) stays."""
    fake = FakeSlurm({"7": FakeJob(state="PENDING", held=True, restarts=1, excluded="node1")})
    result = await SlurmClient(fake, "lab").set_excluded("7", ["node2"])
    assert result.performed and fake.jobs["7"].excluded == "node[1-2]"
    assert "kept the job's own node1" in result.detail
    # the user (or an admin) added node4 after TrainGuard's ledger was computed: still kept
    fake.jobs["7"].excluded = "node[1-2],node4"
    again = await SlurmClient(fake, "lab").set_excluded("7", ["node2", "node3"])
    assert fake.jobs["7"].excluded == "node[1-4]" and again.performed


async def test_set_excluded_verifies_what_slurm_reports() -> None:
    fake = FakeSlurm({"7": FakeJob(state="PENDING", held=True, restarts=1, excluded="node1")})
    # Slurm takes the update but then reports a list without the user's node1: not accepted as done
    fake.on_show = [None, FakeJob(state="PENDING", held=True, restarts=1, excluded="node2")]
    with pytest.raises(CommandError, match="reports") as info:
        await SlurmClient(fake, "lab").set_excluded("7", ["node2"])
    assert info.value.retryable


@pytest.mark.parametrize("state", ["CANCELLED", "COMPLETED", "RUNNING"])
async def test_set_excluded_leaves_a_job_that_is_not_pending_alone(state: str) -> None:
    fake = FakeSlurm({"7": FakeJob(state=state, held=True, restarts=1)})
    with pytest.raises(CommandError) as info:
        await SlurmClient(fake, "lab").set_excluded("7", ["node2"])
    assert not info.value.retryable and actions(fake) == []


async def test_requeue_hold_waits_until_a_completing_job_says_how_it_ended() -> None:
    """Safety clause 1: a scancel shows as COMPLETING first; requeueing then would revive it."""
    fake = FakeSlurm({"7": FakeJob(state="COMPLETING")})
    fake.on_show = [None, FakeJob(state="COMPLETING"), FakeJob(state="CANCELLED")]
    with pytest.raises(CommandError, match="CANCELLED") as info:
        await SlurmClient(fake, "lab").requeue_hold("7", expected_restarts=0)
    assert not info.value.retryable and actions(fake) == []
    failed = FakeSlurm({"7": FakeJob(state="COMPLETING")})
    failed.on_show = [None, FakeJob(state="FAILED")]
    result = await SlurmClient(failed, "lab").requeue_hold("7", expected_restarts=0)
    assert result.performed and actions(failed) == ["scontrol requeuehold 7"]


async def test_requeue_hold_of_a_job_completing_too_long_is_retried_later(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("trainguard.slurm.access.COMPLETING_WAIT_S", 0.0)
    fake = FakeSlurm({"7": FakeJob(state="COMPLETING")})
    with pytest.raises(CommandError, match="still COMPLETING") as info:
        await SlurmClient(fake, "lab").requeue_hold("7", expected_restarts=0)
    assert info.value.retryable and actions(fake) == []


async def test_release_lifts_only_trainguards_own_hold() -> None:
    """Safety clause 4: a user's or an admin's hold is never released."""
    ours = FakeSlurm({"7": FakeJob(state="PENDING", held=True, reason="job_requeued_in_held_state")})
    assert (await SlurmClient(ours, "lab").release("7", "job_requeued_in_held_state")).performed
    for reason in ("JobHeldUser", "JobHeldAdmin"):
        theirs = FakeSlurm({"7": FakeJob(state="PENDING", held=True, reason=reason)})
        result = await SlurmClient(theirs, "lab").release("7", "job_requeued_in_held_state")
        assert not result.performed and "held by someone else" in result.detail and reason in result.detail
        assert actions(theirs) == [] and theirs.jobs["7"].held
        # TrainGuard placed no hold at all (it found the job already held)
        none = await SlurmClient(theirs, "lab").release("7", "")
        assert not none.performed and actions(theirs) == []


async def test_a_release_bound_to_an_attempt_leaves_a_later_attempts_hold() -> None:
    """The fail-open release of a containment hold (Reason=JobHeldAdmin, like any admin's hold) lifts it
    only on the attempt TrainGuard saw pending and not held right before its hold."""
    requeued = FakeSlurm({"7": FakeJob(state="PENDING", held=True, reason="JobHeldAdmin", restarts=2)})
    result = await SlurmClient(requeued, "lab").release("7", "JobHeldAdmin", restarts=1)
    assert not result.performed and "requeued since" in result.detail and actions(requeued) == []
    same = FakeSlurm({"7": FakeJob(state="PENDING", held=True, reason="JobHeldAdmin", restarts=1)})
    assert (await SlurmClient(same, "lab").release("7", "JobHeldAdmin", restarts=1)).performed
    user = FakeSlurm({"7": FakeJob(state="PENDING", held=True, reason="JobHeldUser", restarts=1)})
    assert not (await SlurmClient(user, "lab").release("7", "JobHeldAdmin", restarts=1)).performed


async def test_release_never_touches_a_cancelled_job() -> None:
    fake = FakeSlurm({"7": FakeJob(state="CANCELLED", held=True, reason="job_requeued_in_held_state")})
    result = await SlurmClient(fake, "lab").release("7", "job_requeued_in_held_state")
    assert not result.performed and "CANCELLED" in result.detail and actions(fake) == []


async def test_set_excluded_while_running_explains() -> None:
    fake = FakeSlurm({"7": FakeJob(state="RUNNING")})  # (COMPLETING of a requeued attempt is accepted)
    with pytest.raises(CommandError, match="only while a job is pending") as info:
        await SlurmClient(fake, "lab").set_excluded("7", ["node1"])
    assert not info.value.retryable


async def test_release_and_cancel_are_idempotent() -> None:
    fake = FakeSlurm({"7": FakeJob(state="PENDING", held=True)})
    client = SlurmClient(fake, "lab")
    assert (await client.release("7")).performed
    assert not (await client.release("7")).performed
    assert (await client.cancel("7")).performed
    assert not (await client.cancel("7")).performed
    assert actions(fake) == ["scontrol release 7", "scancel 7"]


async def test_snapshot_uses_one_squeue_and_one_sinfo() -> None:
    squeue = (FIXTURES / "squeue_mixed.json").read_text()
    sinfo = (FIXTURES / "sinfo_drain.json").read_text()
    seen: list[tuple[str, ...]] = []

    class Canned(FakeSlurm):
        async def run(
            self, argv: Sequence[str], *, timeout: float = 30.0, check: bool = False
        ) -> CommandResult:
            seen.append(tuple(argv))
            return CommandResult(tuple(argv), 0, squeue if argv[0] == "squeue" else sinfo, "")

    snap = await SlurmClient(Canned(), "lab").snapshot()
    assert sorted(seen) == [("sinfo", "--json"), ("squeue", "--json", "-t", "all")]
    assert snap.cluster == "lab" and len(snap.jobs) == 7 and len(snap.nodes) == 4
    assert {n.name: n.state for n in snap.nodes}["node3"] == "drained"


async def test_drain_and_resume_check_node_state() -> None:
    nodes_text = (FIXTURES / "scontrol_nodes_drain.txt").read_text()
    calls: list[tuple[str, ...]] = []

    class Nodes(FakeSlurm):
        async def run(
            self, argv: Sequence[str], *, timeout: float = 30.0, check: bool = False
        ) -> CommandResult:
            calls.append(tuple(argv))
            return CommandResult(tuple(argv), 0, nodes_text if "show" in argv else "", "")

    client = SlurmClient(Nodes(), "lab")
    assert not (await client.drain("node3", "xid")).performed  # already drained in the fixture
    assert (await client.drain("node2", "xid 79")).performed
    assert (await client.resume_node("node3")).performed
    assert not (await client.resume_node("node2")).performed
    with pytest.raises(ValueError):
        await client.drain("node2;reboot", "x")
    updates = [c for c in calls if "update" in c]
    assert updates == [
        ("scontrol", "update", "NodeName=node2", "State=DRAIN", "Reason=xid 79"),
        ("scontrol", "update", "NodeName=node3", "State=RESUME"),
    ]


async def test_job_falls_back_to_json_when_scontrol_text_is_ambiguous() -> None:
    hostile = (
        (FIXTURES / "scontrol_job_1.txt")
        .read_text()
        .replace('JobName=train %x "quoted" $HOME', "JobName=evil JobState=COMPLETED NodeList=node9")
    )
    squeue = (FIXTURES / "squeue_mixed.json").read_text()

    class Hostile(FakeSlurm):
        async def run(
            self, argv: Sequence[str], *, timeout: float = 30.0, check: bool = False
        ) -> CommandResult:
            self.calls.append(tuple(argv))
            return CommandResult(tuple(argv), 0, squeue if argv[0] == "squeue" else hostile, "")

    fake = Hostile()
    job = await SlurmClient(fake, "lab").job("1")
    assert job is not None and job.state == "RUNNING" and job.nodes == ("node1", "node2")
    assert [c[0] for c in fake.calls] == ["env", "squeue"]


class SacctRunner(FakeSlurm):
    def __init__(self, rc: int, out: str, storage: str = "accounting_storage/slurmdbd") -> None:
        super().__init__()
        self.rc, self.out, self.storage = rc, out, storage

    async def run(self, argv: Sequence[str], *, timeout: float = 30.0, check: bool = False) -> CommandResult:
        self.calls.append(tuple(argv))
        if list(argv) == ["scontrol", "show", "config"]:
            return CommandResult(tuple(argv), 0, f"AccountingStorageType   = {self.storage}\n", "")
        assert list(argv) == ["sacct", "-j", "7", "-X", "-n", "-P", "-o", "State"]
        return CommandResult(tuple(argv), self.rc, self.out, "")


async def test_who_cancelled_comes_from_accounting_when_there_is_any() -> None:
    assert await SlurmClient(SacctRunner(0, "CANCELLED by 1000\n"), "lab").cancelled_by("7") == "1000"
    assert await SlurmClient(SacctRunner(0, "COMPLETED\n"), "lab").cancelled_by("7") == ""
    failing = SacctRunner(1, "sacct: error: Problem talking to the database\n")
    assert await SlurmClient(failing, "lab").cancelled_by("7") == ""
    none = SacctRunner(0, "", storage="accounting_storage/none")
    assert await SlurmClient(none, "lab").cancelled_by("7") == ""
    assert len(none.calls) == 1  # no sacct without accounting storage

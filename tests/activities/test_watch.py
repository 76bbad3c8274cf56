"""The watch loop with an in-memory scheduler and log: what it reports, and when."""

from __future__ import annotations

from dataclasses import dataclass, field

from activities.snapshot_cache import SnapshotCache
from activities.watch import JobWatcher
from trainguard import contracts as c
from trainguard.logsources.base import LogChunk
from trainguard.models import (
    Attribution,
    Category,
    ClusterSnapshot,
    Finding,
    FindingSource,
    JobSnapshot,
    LogCursor,
    NodeSnapshot,
    ObservationKind,
    WorkloadId,
)

W = WorkloadId(cluster="lab", job_id="5", submit_time=100)
PROGRESS = " iteration {i:8d}/     200 | elapsed time per iteration (ms): 100.0 | lm loss: 6.5E+00 |\n"


@dataclass
class World:
    job: JobSnapshot | None
    log: bytearray = field(default_factory=bytearray)
    nodes: tuple[NodeSnapshot, ...] = (
        NodeSnapshot(name="node1", state="allocated"),
        NodeSnapshot(name="node2", state="allocated"),
        NodeSnapshot(name="node3", state="down", flags=("NOT_RESPONDING",)),
    )

    async def snapshot(self) -> ClusterSnapshot:
        return ClusterSnapshot(
            cluster="lab", taken_at=0.0, jobs=(self.job,) if self.job else (), nodes=self.nodes
        )


class Client:
    def __init__(self, world: World) -> None:
        self.world = world

    async def job(self, job_id: str) -> JobSnapshot | None:
        return self.world.job

    async def finished_job(self, job_id: str) -> JobSnapshot | None:
        return None  # no slurmdbd in this world


class Source:
    def __init__(self, world: World) -> None:
        self.world = world

    async def read(self, cursor: LogCursor, max_bytes: int) -> LogChunk:
        data = bytes(self.world.log[cursor.offset : cursor.offset + max_bytes])
        return LogChunk(
            data=data, cursor=cursor.model_copy(update={"offset": cursor.offset + len(data)}), reset=False
        )


def watcher(world: World, **kw: object) -> JobWatcher:
    cache = SnapshotCache(world.snapshot, max_age_s=0.0)
    return JobWatcher(Client(world), cache, lambda job, path: Source(world), **kw)  # type: ignore[arg-type]


def running(**kw: object) -> JobSnapshot:
    base = {
        "job_id": "5",
        "submit_time": 100,
        "state": "RUNNING",
        "nodes": ("node1", "node2"),
        "stdout_path": "/x.out",
    }
    return JobSnapshot(**{**base, **kw})


def inp(**kw: object) -> c.WatchInput:
    fields: dict[str, object] = {"workload": W, "slice_s": 3.0, "poll_interval_s": 0.01, "settle_s": 0.05}
    return c.WatchInput.model_validate({**fields, **kw})


async def test_a_fatal_line_is_reported_with_the_rest_of_its_cascade() -> None:
    world = World(job=running())
    world.log += b"".join(PROGRESS.format(i=i).encode() for i in range(1, 4))
    world.log += b"node2: NVRM: Xid (PCI:0000:3b:00): 79, pid=7, name=python3, GPU has fallen off the bus.\n"
    result = await watcher(world).watch(inp(), lambda *a: None)
    obs = result.observation
    assert obs.kind == ObservationKind.FAILURE
    assert any(f.category == Category.GPU_HARDWARE and "node2" in f.nodes for f in obs.findings)
    assert obs.first_signal_at is not None and result.cursor.offset == len(world.log)
    assert obs.progress.last_iteration == 3
    assert obs.usable_nodes == ("node1", "node2")  # node3 is down


async def test_quiet_healthy_job_ends_the_slice_without_findings() -> None:
    world = World(job=running())
    world.log += PROGRESS.format(i=1).encode()
    result = await watcher(world).watch(inp(slice_s=0.1), lambda *a: None)
    assert result.observation.kind == ObservationKind.SLICE_END
    assert result.observation.findings == ()


async def test_failures_of_a_handled_attempt_are_not_reported_again() -> None:
    world = World(job=running())
    world.log += b"[rank1]: RuntimeError: CUDA error: an illegal memory access was encountered\n"
    result = await watcher(world).watch(
        inp(slice_s=0.1, phase=c.Phase(failure_handled=True)), lambda *a: None
    )
    assert result.observation.kind == ObservationKind.SLICE_END


async def test_completion_wins_over_old_error_lines() -> None:
    world = World(job=running(state="COMPLETED"))
    world.log += b"Traceback (most recent call last):\nKeyError: 'x'\n" + b"training complete\n"
    result = await watcher(world).watch(inp(), lambda *a: None)
    assert result.observation.kind == ObservationKind.COMPLETED
    assert result.observation.findings == ()


async def test_a_job_that_vanished_or_was_resubmitted_under_the_same_id_is_gone() -> None:
    world = World(job=running(submit_time=999))  # same id, a new job after a cluster reset
    result = await watcher(world).watch(inp(), lambda *a: None)
    assert result.observation.kind == ObservationKind.GONE


async def test_gpu_metrics_findings_name_the_node() -> None:
    world = World(job=running())
    world.log += PROGRESS.format(i=1).encode()
    xid = Finding(
        source=FindingSource.METRICS,
        pattern_id="dcgm.xid.79",
        category=Category.GPU_HARDWARE,
        attribution=Attribution.HARDWARE,
        fatal=True,
        nodes=("node2",),
        line="DCGM_FI_DEV_XID_ERRORS=79",
    )
    asked: list[tuple[str, ...]] = []

    async def probe(nodes: object) -> list[Finding]:
        asked.append(tuple(nodes))  # type: ignore[arg-type]
        return [xid]

    result = await watcher(world, gpu_probe=probe).watch(inp(), lambda *a: None)
    assert asked == [("node1", "node2")]
    assert result.observation.kind == ObservationKind.FAILURE
    assert xid in result.observation.findings


async def test_a_restarted_attempt_reports_its_first_progress_line() -> None:
    world = World(job=running(restart_count=1))
    world.log += b"loading checkpoint from /ckpt at iteration 20\n" + PROGRESS.format(i=21).encode()
    phase = c.Phase(attempt_restarts=1, awaiting_progress=True)
    result = await watcher(world).watch(inp(phase=phase, last_job=running(restart_count=1)), lambda *a: None)
    assert result.observation.kind == ObservationKind.PROGRESS
    assert result.observation.progress.last_iteration == 21


class CancelledByClient(Client):
    async def cancelled_by(self, job_id: str) -> str:
        return "1000"


async def test_slurms_cancelled_line_in_the_log_is_not_a_failure() -> None:
    """Safety clause 1: the line slurmstepd writes on scancel (and the time-limit/preemption variants)
    never decides anything; Slurm's state does."""
    world = World(job=running())
    world.log += PROGRESS.format(i=1).encode()
    world.log += b"slurmstepd-node1: error: *** JOB 5 ON node1 CANCELLED AT 2026-11-30T21:17:16 ***\n"
    world.log += (
        b"slurmstepd: error: *** STEP 5.0 ON node1 CANCELLED AT 2026-11-30T21:17:16 DUE TO TIME LIMIT ***\n"
    )
    world.log += (
        b"slurmstepd: error: *** JOB 5 ON node1 CANCELLED AT 2026-11-30T21:17:16 DUE TO PREEMPTION ***\n"
    )
    result = await watcher(world).watch(inp(slice_s=0.3), lambda *a: None)
    assert result.observation.kind == ObservationKind.SLICE_END
    assert result.observation.findings == ()


async def test_a_job_slurm_reports_cancelled_is_reported_with_who_cancelled_it() -> None:
    world = World(job=running(state="CANCELLED"))
    world.log += b"node2: NVRM: Xid (PCI:0000:3b:00): 79, pid=7, name=python3, GPU has fallen off the bus.\n"
    w = JobWatcher(
        CancelledByClient(world),  # type: ignore[arg-type]
        SnapshotCache(world.snapshot, max_age_s=0.0),
        lambda job, path: Source(world),  # type: ignore[arg-type,return-value]
    )
    result = await w.watch(inp(last_job=running()), lambda *a: None)
    obs = result.observation
    assert obs.kind == ObservationKind.STATE_CHANGE and obs.findings == ()
    assert obs.job is not None and obs.job.state == "CANCELLED" and obs.job.cancelled_by == "1000"


class Ticking:
    """A clock that moves one second per reading: the grace period passes in a few dozen polls."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        self.t += 1.0
        return self.t


APP_ERROR = b"[rank1]: Traceback (most recent call last):\n[rank1]: KeyError: 'input_ids'\n"


async def test_a_running_job_with_only_application_errors_is_given_time_to_stop() -> None:
    """Safety clause 2: the error alone may not touch a RUNNING job, so the watcher waits for Slurm to say
    the job stopped, and reports the log evidence together with the stop."""
    world = World(job=running())
    world.log += PROGRESS.format(i=1).encode() + APP_ERROR
    clock = Ticking()
    polls = 0
    w = watcher(world, clock=clock)

    def beat(*_: object) -> None:
        nonlocal polls
        polls += 1
        if polls == 10:  # well inside the grace period, Slurm reports the job failed
            world.job = running(state="FAILED", exit_code=1)

    result = await w.watch(inp(slice_s=1000.0), beat)
    obs = result.observation
    assert obs.kind == ObservationKind.FAILURE and obs.job is not None and obs.job.state == "FAILED"
    assert any(
        f.category == Category.PYTHON_EXCEPTION and f.line.endswith("'input_ids'") for f in obs.findings
    )


async def test_after_the_grace_a_still_running_job_is_reported_for_the_record() -> None:
    from activities.watch import RUNNING_GRACE_S

    world = World(job=running())
    world.log += PROGRESS.format(i=1).encode() + APP_ERROR
    clock = Ticking()
    result = await watcher(world, clock=clock).watch(inp(slice_s=1000.0), lambda *a: None)
    obs = result.observation
    assert obs.kind == ObservationKind.FAILURE and obs.job is not None and obs.job.state == "RUNNING"
    assert obs.first_signal_at is not None and obs.observed_at - obs.first_signal_at >= RUNNING_GRACE_S


async def test_hardware_grade_evidence_on_its_own_node_is_reported_at_once() -> None:
    world = World(job=running())
    world.log += b"node2: NVRM: Xid (PCI:0000:3b:00): 79, pid=7, GPU has fallen off the bus.\n"
    clock = Ticking()
    result = await watcher(world, clock=clock).watch(inp(slice_s=1000.0), lambda *a: None)
    obs = result.observation
    assert obs.kind == ObservationKind.FAILURE and obs.observed_at - (obs.first_signal_at or 0) < 10


async def test_watched_evidence_comes_back_when_the_job_stops() -> None:
    earlier = Finding(
        source=FindingSource.LOG,
        pattern_id="ib_completion_error",
        category=Category.INTERCONNECT,
        attribution=Attribution.INFRASTRUCTURE,
        line="NCCL WARN NET/IB : Got completion from peer node2 with error 12",
    )
    world = World(job=running(state="FAILED", exit_code=1))
    result = await watcher(world).watch(inp(context=(earlier,)), lambda *a: None)
    obs = result.observation
    assert obs.kind == ObservationKind.FAILURE and earlier in obs.findings

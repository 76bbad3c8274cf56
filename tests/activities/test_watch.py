"""The watch loop with an in-memory scheduler and log: what it reports, and when."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from activities.snapshot_cache import SnapshotCache
from activities.watch import CheckpointLocator, JobWatcher, _rank_to_node
from trainguard import contracts as c
from trainguard.attribution.rules import attribute
from trainguard.checkpoint_dir import FilesystemSpace
from trainguard.detection.progress import ProgressConfig
from trainguard.logsources.base import LogChunk
from trainguard.logsources.files import FileLogSource
from trainguard.models import (
    Attribution,
    Category,
    ClusterSnapshot,
    Finding,
    FindingSource,
    JobSnapshot,
    LogCursor,
    NodeSnapshot,
    Observation,
    ObservationKind,
    WorkloadId,
)
from trainguard.slurm.runner import LocalRunner

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
    silent_batch_host: tuple[str, str] | None = None  # what sstat says of the batch host's slurmd
    probes: int = 0

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

    async def silent_batch_host(self, job_id: str) -> tuple[str, str] | None:
        self.world.probes += 1
        return self.world.silent_batch_host


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
    """A watch of a workload whose allocation the workflow already knows (its last snapshot: running)."""
    fields: dict[str, object] = {
        "workload": W,
        "slice_s": 3.0,
        "poll_interval_s": 0.01,
        "settle_s": 0.05,
        "last_job": running(),
    }
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


async def test_a_kernel_log_xid_is_corroborated_by_the_gpu_metrics_at_once(tmp_path: Path) -> None:
    """The periodic GPU probe ran when the watch started; an Xid then appears in node2's kernel log: the
    metrics are read again right away (not 15 s later), so both sources are in the observation."""
    (tmp_path / "node2").mkdir()
    kern = tmp_path / "node2" / "kern.log"
    kern.write_bytes(b"")
    world = World(job=running())
    world.log += PROGRESS.format(i=1).encode()
    dcgm = Finding(
        source=FindingSource.METRICS,
        pattern_id="dcgm_xid_79",
        category=Category.GPU_HARDWARE,
        attribution=Attribution.HARDWARE,
        nodes=("node2",),
        line="DCGM_FI_DEV_XID_ERRORS=79",
    )
    probes: list[float] = []

    async def probe(nodes: object) -> list[Finding]:
        probes.append(time.monotonic())
        return [dcgm] if kern.stat().st_size else []

    async def fault() -> None:
        await asyncio.sleep(0.3)
        kern.write_bytes(
            b"Nov 30 12:00:00 node2 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=7, GPU has fallen off\n"
        )

    def node_source(node: str) -> FileLogSource:
        return FileLogSource(LocalRunner(), str(tmp_path / node / "kern.log"))

    writer = asyncio.create_task(fault())
    w = watcher(world, gpu_probe=probe, gpu_interval_s=600.0, node_sources=node_source)
    result = await w.watch(inp(slice_s=5.0, settle_s=0.3), lambda *a: None)
    await writer
    assert len(probes) == 2  # at the start, and once the failure began to settle
    sources = {f.source for f in result.observation.findings}
    assert sources == {FindingSource.LOG, FindingSource.METRICS}
    assert all(f.nodes == ("node2",) for f in result.observation.findings)


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


# -- real PyTorch gloo output (captured from examples/ddp_train.py on the local cluster) -----------------

_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "pytorch"


def _node_death_cascade() -> bytes:
    """The first attempt of a 2x2 DDP job whose node2 died: survivors' gloo errors, srun's teardown,
    but not yet srun's "Node failure" line (Slurm had not decided)."""
    data = (_FIXTURES / "srun_node2_killed.out").read_bytes()
    return data[: data.index(b"srun: error: Node failure")]


async def test_a_peer_loss_cascade_waits_for_slurms_verdict_on_the_node() -> None:
    world = World(job=running(num_tasks=4))
    world.nodes = (
        NodeSnapshot(name="node1", state="allocated"),
        NodeSnapshot(name="node2", state="allocated"),
    )
    world.log += _node_death_cascade()

    async def slurm_decides() -> None:
        await asyncio.sleep(0.4)
        world.nodes = (
            NodeSnapshot(name="node1", state="allocated"),
            NodeSnapshot(name="node2", state="down", flags=("NOT_RESPONDING",)),
        )

    decider = asyncio.create_task(slurm_decides())
    result = await watcher(world, slurm_verdict_wait_s=10.0).watch(inp(slice_s=20.0), lambda *a: None)
    await decider
    obs = result.observation
    assert obs.kind == ObservationKind.FAILURE
    down = [f for f in obs.findings if f.category == Category.SLURM_NODE_FAILURE]
    assert down and down[0].nodes == ("node2",)
    # the survivors' cascade lines do not implicate the survivors' node
    peer = [f for f in obs.findings if f.pattern_id == "gloo_peer_lost"]
    assert peer and all(f.nodes == () for f in peer)


async def test_a_peer_loss_wait_is_bounded() -> None:
    world = World(job=running(num_tasks=4))
    world.nodes = (
        NodeSnapshot(name="node1", state="allocated"),
        NodeSnapshot(name="node2", state="allocated"),
    )
    world.log += _node_death_cascade()
    started = time.monotonic()
    result = await watcher(world, slurm_verdict_wait_s=0.3).watch(inp(slice_s=20.0), lambda *a: None)
    waited = time.monotonic() - started
    assert result.observation.kind == ObservationKind.FAILURE
    assert 0.3 <= waited < 5.0
    assert all(f.cascade for f in result.observation.findings if f.fatal)


async def test_a_running_jobs_error_waits_only_until_slurm_ends_the_job() -> None:
    """srun prints a rank's death while the job is still RUNNING; the decision waits for the job to stop
    (a running job is only touched on evidence that it fails) and goes ahead as soon as it has. Without
    srun's own verdict lines (a launcher that prints none): srun's `task N: Exited` would decide at once."""
    world = World(job=running(num_tasks=4))
    cascade = b"".join(
        line for line in _node_death_cascade().splitlines(keepends=True) if not line.startswith(b"srun:")
    )
    world.log += cascade + b"[rank2]: ValueError: bad sample in batch at step 9\n"

    async def job_fails() -> None:
        await asyncio.sleep(0.4)
        world.job = running(num_tasks=4, state="FAILED", exit_code=1)

    ender = asyncio.create_task(job_fails())
    started = time.monotonic()
    result = await watcher(world, slurm_verdict_wait_s=30.0).watch(inp(slice_s=20.0), lambda *a: None)
    await ender
    assert 0.4 <= time.monotonic() - started < 5.0
    assert result.observation.kind == ObservationKind.FAILURE
    assert result.observation.job is not None and result.observation.job.state == "FAILED"


async def test_srun_reporting_a_rank_killed_decides_while_the_job_still_runs() -> None:
    """srun's `node2: task 2: Killed` is the launcher's word that a rank is dead: the decision does not
    wait for srun's teardown and Slurm's end of the job (real captured output of a 2x2 DDP job)."""
    world = World(job=running(num_tasks=4))
    world.log += (_FIXTURES / "srun_sigkill_rank2.out").read_bytes()
    started = time.monotonic()
    result = await watcher(world, slurm_verdict_wait_s=30.0).watch(inp(slice_s=20.0), lambda *a: None)
    assert time.monotonic() - started < 5.0
    obs = result.observation
    assert obs.kind == ObservationKind.FAILURE and obs.job is not None and obs.job.state == "RUNNING"
    assert any(f.pattern_id == "sigkill" and f.nodes == ("node2",) for f in obs.findings)


async def test_training_that_goes_on_after_srun_reports_a_dead_rank_waits_for_slurm() -> None:
    """A script that retries its failed step (or a step that is not the training) logs progress after
    srun's verdict: that verdict then does not show the job failing, and Slurm decides (bounded)."""
    world = World(job=running(num_tasks=4))
    world.log += PROGRESS.format(i=1).encode() + b"srun: error: node2: task 2: Exited with exit code 1\n"
    world.log += b"prep step failed, retrying the training step\n" + PROGRESS.format(i=2).encode()
    started = time.monotonic()
    result = await watcher(world, slurm_verdict_wait_s=0.5).watch(inp(slice_s=20.0), lambda *a: None)
    assert time.monotonic() - started >= 0.5
    obs = result.observation
    assert obs.kind == ObservationKind.FAILURE  # reported for the record once the wait ends
    # ... and only recorded and watched: the verdict line is marked as superseded by the training
    assert any(f.pattern_id == "srun_task_exited" and "superseded" in f.detail for f in obs.findings)
    assert not attribute(obs.findings, obs.job).fatal


async def test_an_error_of_a_stopped_job_does_not_wait() -> None:
    world = World(job=running(num_tasks=4, state="FAILED", exit_code=1))
    world.log += b"[rank2]: Traceback (most recent call last):\n[rank2]: ValueError: bad sample\n"
    started = time.monotonic()
    result = await watcher(world, slurm_verdict_wait_s=30.0).watch(inp(slice_s=20.0), lambda *a: None)
    assert time.monotonic() - started < 5.0
    assert result.observation.kind == ObservationKind.FAILURE


def test_ranks_map_to_nodes_by_slurms_block_distribution() -> None:
    two_per_node = _rank_to_node(running(nodes=("node1", "node2"), num_tasks=4))
    assert [two_per_node(r) for r in range(5)] == ["node1", "node1", "node2", "node2", None]
    uneven = _rank_to_node(running(nodes=("a", "b"), num_tasks=3))
    assert [uneven(r) for r in range(3)] == ["a", "a", "b"]
    unknown = _rank_to_node(running(nodes=("a", "b")))
    assert [unknown(r) for r in (-1, 0, 1, 2)] == [None, "a", "b", None]


async def test_a_rank_only_error_names_that_ranks_node_with_two_ranks_per_node() -> None:
    world = World(job=running(num_tasks=4))
    world.log += (
        b"[rank3]: Traceback (most recent call last):\n"
        b"[rank3]: torch.cuda.CudaError: CUDA error: uncorrectable ECC error encountered\n"
    )
    result = await watcher(world).watch(inp(), lambda *a: None)
    assert any(f.rank == 3 and f.nodes == ("node2",) for f in result.observation.findings)


async def test_the_newest_complete_checkpoint_on_disk_is_checkpoint_progress(tmp_path: Path) -> None:
    work = tmp_path / "home" / "alice" / "run"
    ckpt = work / "ckpt"
    ckpt.mkdir(parents=True)
    (ckpt / "step_0000020.pt").write_bytes(b"x")
    (ckpt / "step_0000040.pt").write_bytes(b"x")
    (ckpt / ".step_0000060.pt.tmp-7").write_bytes(b"x")  # a save in progress is not progress
    opt_in = f'{{"trainguard": {{"mode": "action", "checkpoint_dir": "{ckpt}"}}}}'
    world = World(job=running(comment=opt_in, work_dir=str(work)))
    world.log += PROGRESS.format(i=45).encode()
    locator = CheckpointLocator(interval_s=0.01)
    result = await watcher(world, checkpoints=locator).watch(inp(slice_s=0.2), lambda *a: None)
    assert result.observation.progress.last_checkpoint_iteration == 40


async def test_a_failed_checkpoint_write_on_a_full_filesystem_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch.save reports ENOSPC only as `unexpected pos N vs M`: while the failure settles the watch
    reads the checkpoint filesystem's free space, and a full one is a storage fault of the site."""
    import activities.watch as watch_module

    work = tmp_path / "home" / "alice" / "run"
    ckpt = work / "ckpt"
    ckpt.mkdir(parents=True)
    opt_in = f'{{"trainguard": {{"mode": "action", "checkpoint_dir": "{ckpt}"}}}}'
    world = World(job=running(comment=opt_in, work_dir=str(work), state="FAILED", exit_code=1))
    world.log += PROGRESS.format(i=15).encode()
    world.log += (
        b"[rank0]: RuntimeError: [enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534\n"
    )
    monkeypatch.setattr(watch_module, "filesystem_space", lambda d: FilesystemSpace(str(d), 0, 1 << 20))
    locator = CheckpointLocator(interval_s=0.01)
    result = await watcher(world, checkpoints=locator).watch(inp(slice_s=2.0), lambda *a: None)
    full = [f for f in result.observation.findings if f.pattern_id == "checkpoint_fs_full"]
    assert len(full) == 1 and full[0].category == Category.STORAGE_IO
    assert full[0].attribution == Attribution.INFRASTRUCTURE and full[0].nodes == ()
    assert "0 B free of 1.0 MiB" in full[0].line
    verdict = attribute(result.observation.findings, world.job)
    assert (verdict.category, verdict.attribution) == (Category.STORAGE_IO, Attribution.INFRASTRUCTURE)
    # with room left, the same failure says nothing about the filesystem
    monkeypatch.setattr(watch_module, "filesystem_space", lambda d: FilesystemSpace(str(d), 900_000, 1 << 20))
    result = await watcher(world, checkpoints=locator).watch(inp(slice_s=2.0), lambda *a: None)
    assert not [f for f in result.observation.findings if f.pattern_id == "checkpoint_fs_full"]


def test_a_filesystem_is_full_below_one_percent_and_one_gib() -> None:
    assert FilesystemSpace("/x", 10_000, 1 << 20).full
    assert not FilesystemSpace("/x", 20_000, 1 << 20).full
    assert not FilesystemSpace("/x", 5 << 30, 1 << 50).full  # 1 % of a petabyte is still room
    assert FilesystemSpace("/x", 500 << 20, 1 << 50).full


async def test_a_checkpoint_dir_outside_the_allowed_roots_is_not_read(tmp_path: Path) -> None:
    work = tmp_path / "home" / "alice" / "run"
    work.mkdir(parents=True)
    elsewhere = tmp_path / "other"
    elsewhere.mkdir()
    (elsewhere / "step_0000040.pt").write_bytes(b"x")
    opt_in = f'{{"trainguard": {{"checkpoint_dir": "{elsewhere}"}}}}'
    world = World(job=running(comment=opt_in, work_dir=str(work)))
    result = await watcher(world, checkpoints=CheckpointLocator(interval_s=0.01)).watch(
        inp(slice_s=0.2), lambda *a: None
    )
    assert result.observation.progress.last_checkpoint_iteration is None
    allowed = CheckpointLocator(roots=(str(tmp_path),), interval_s=0.01)
    result = await watcher(world, checkpoints=allowed).watch(inp(slice_s=0.2), lambda *a: None)
    assert result.observation.progress.last_checkpoint_iteration == 40


def test_the_cluster_pattern_names_the_dir_when_the_job_does_not() -> None:
    job = running(work_dir="/home/bob/exp", user="bob", comment='{"trainguard": {}}')
    assert CheckpointLocator(pattern="{work_dir}/ckpt-{job_id}").directory(job) == "/home/bob/exp/ckpt-5"
    assert CheckpointLocator(pattern="/lustre/{user}/{job_id}").directory(job) is None  # not under a root
    assert (
        CheckpointLocator(pattern="/lustre/{user}/{job_id}", roots=("/lustre",)).directory(job)
        == "/lustre/bob/5"
    )
    assert CheckpointLocator(pattern="{nope}").directory(job) is None
    assert CheckpointLocator().directory(job) is None


async def test_an_xid_in_a_nodes_kernel_log_is_that_nodes_and_that_jobs(tmp_path: Path) -> None:
    """Per-node kernel logs (files here, Loki {host=...} in production), read through the real
    FileLogSource: only lines written while the job runs there count, only hardware evidence counts,
    and a dmesg line that names no host is attributed to the node whose log it is in."""
    for node in ("node1", "node2"):
        (tmp_path / node).mkdir()
    kern1 = tmp_path / "node1" / "kern.log"
    kern2 = tmp_path / "node2" / "kern.log"
    # before the job: an old Xid of whatever ran earlier on node1
    kern1.write_bytes(
        b"[  100.1] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=old, GPU has fallen off the bus.\n"
    )
    kern2.write_bytes(b"")
    world = World(job=running())
    world.log += PROGRESS.format(i=1).encode()

    def node_source(node: str) -> FileLogSource:
        return FileLogSource(LocalRunner(), str(tmp_path / node / "kern.log"))

    async def faults() -> None:
        await asyncio.sleep(0.3)
        with kern1.open("ab") as fh:  # another job's process on a shared node: not hardware
            fh.write(b"[  200.0] Out of memory: Killed process 4242 (python) total-vm:1234kB\n")
        with kern2.open("ab") as fh:
            fh.write(
                b"[  201.5] NVRM: Xid (PCI:0000:86:00): 48, pid=9, name=python3, An uncorrectable "
                b"double bit error (DBE) has been detected on GPU in the framebuffer at 0x1.\n"
            )

    injector = asyncio.create_task(faults())
    result = await watcher(world, node_sources=node_source).watch(inp(slice_s=10.0), lambda *a: None)
    await injector
    obs = result.observation
    assert obs.kind == ObservationKind.FAILURE
    hardware = [f for f in obs.findings if f.category == Category.GPU_HARDWARE]
    assert hardware and {f.nodes for f in hardware} == {("node2",)}
    assert all("old" not in f.line for f in obs.findings)
    assert not [f for f in obs.findings if "Out of memory" in f.line]


async def test_a_stall_after_a_ranks_error_is_its_consequence_not_the_cause() -> None:
    """A rank raised; srun is slow to tear the step down and progress stops: the hang that follows is
    a cascade of the error (it shows the running job failing, so nothing waits longer)."""
    world = World(job=running(num_tasks=4))

    async def train_then_fail() -> None:
        for i in range(1, 8):
            world.log += f"step {i}/100 loss 0.5 (0.05 s/it)\n".encode()
            await asyncio.sleep(0.05)
        world.log += b"[rank1]: Traceback (most recent call last):\n[rank1]: ValueError: bad sample\n"

    job = asyncio.create_task(train_then_fail())
    config = ProgressConfig(hang_floor_s=0.3, hang_factor=2.0)
    result = await watcher(world, progress_config=config, slurm_verdict_wait_s=30.0).watch(
        inp(slice_s=10.0, settle_s=0.05), lambda *a: None
    )
    await job
    obs = result.observation
    assert obs.kind == ObservationKind.FAILURE
    hang = [f for f in obs.findings if f.category == Category.HANG]
    assert hang and all(f.cascade for f in hang)
    assert any(f.category == Category.PYTHON_EXCEPTION and not f.cascade for f in obs.findings)


async def test_a_stall_after_a_lost_peer_still_waits_for_slurms_verdict_on_the_node() -> None:
    """A node dies mid-step: the survivors' gloo peer loss, then progress stops. The hang that follows is
    the lost peer's consequence: it must not end the wait for Slurm to call the node dead (under load
    Slurm takes longer than the hang detector), so the verdict names the dead node."""
    world = World(job=running(num_tasks=4))
    world.nodes = (
        NodeSnapshot(name="node1", state="allocated"),
        NodeSnapshot(name="node2", state="allocated"),
    )

    async def train_then_lose_node2() -> None:
        for i in range(1, 8):
            world.log += f"step {i}/100 loss 0.5 (0.05 s/it)\n".encode()
            await asyncio.sleep(0.05)
        world.log += _node_death_cascade()
        await asyncio.sleep(1.5)  # well past the hang threshold (2 x 0.05 s, floor 0.3 s)
        world.nodes = (
            NodeSnapshot(name="node1", state="allocated"),
            NodeSnapshot(name="node2", state="down", flags=("NOT_RESPONDING",)),
        )

    job = asyncio.create_task(train_then_lose_node2())
    config = ProgressConfig(hang_floor_s=0.3, hang_factor=2.0)
    started = time.monotonic()
    result = await watcher(world, progress_config=config, slurm_verdict_wait_s=30.0).watch(
        inp(slice_s=20.0, settle_s=0.05), lambda *a: None
    )
    await job
    assert 1.5 <= time.monotonic() - started < 10.0
    obs = result.observation
    assert obs.kind == ObservationKind.FAILURE
    hang = [f for f in obs.findings if f.category == Category.HANG]
    assert hang and all(f.cascade for f in hang)
    down = [f for f in obs.findings if f.category == Category.SLURM_NODE_FAILURE]
    assert down and down[0].nodes == ("node2",)


async def _stall(
    silent: tuple[str, str] | None, node_dies_after_s: float | None, wait_s: float
) -> tuple[World, Observation, float]:
    """Steps, then the log stops with no line at all (srun died with its node, or every rank stalled);
    Slurm marks node1 (the batch host) not responding after `node_dies_after_s`, if given. Returns the
    world, the watch's observation and how long the watch took."""
    world = World(job=running(num_tasks=4), silent_batch_host=silent)
    world.nodes = world.nodes[:2]

    async def train_then_stop() -> None:
        for i in range(1, 8):
            world.log += f"step {i}/100 loss 0.5 (0.05 s/it)\n".encode()
            await asyncio.sleep(0.05)
        if node_dies_after_s is not None:
            await asyncio.sleep(node_dies_after_s)
            world.nodes = (
                NodeSnapshot(name="node1", state="down", flags=("NOT_RESPONDING",)),
                NodeSnapshot(name="node2", state="allocated"),
            )

    job = asyncio.create_task(train_then_stop())
    config = ProgressConfig(hang_floor_s=0.3, hang_factor=2.0)
    started = time.monotonic()
    result = await watcher(world, progress_config=config, slurm_verdict_wait_s=wait_s).watch(
        inp(slice_s=20.0, settle_s=0.05), lambda *a: None
    )
    await job
    return world, result.observation, time.monotonic() - started


SILENT = ("node1", "Communication connection failure")


async def test_a_silent_stall_whose_batch_host_does_not_answer_waits_for_slurms_verdict() -> None:
    """The node running srun dies: no line reaches the log, progress just stops, and the hang detector
    fires before Slurm calls the node dead. Its slurmd does not answer sstat, so the decision waits for
    Slurm's verdict, which names the node (and decides: a node failure, not a hang)."""
    world, obs, took = await _stall(SILENT, node_dies_after_s=1.5, wait_s=30.0)
    assert 1.5 <= took < 10.0  # it waited for Slurm, not the 30 s bound
    assert world.probes == 1 and obs.kind == ObservationKind.FAILURE
    down = [f for f in obs.findings if f.category == Category.SLURM_NODE_FAILURE]
    assert down and down[0].nodes == ("node1",)


async def test_a_silent_stall_with_an_answering_batch_host_is_a_hang_at_once() -> None:
    """A stopped rank (SIGSTOP): every slurmd answers, so the hang decides without waiting for Slurm."""
    world, obs, took = await _stall(None, node_dies_after_s=None, wait_s=30.0)
    assert took < 5.0 and world.probes == 1
    hang = [f for f in obs.findings if f.category == Category.HANG]
    assert obs.kind == ObservationKind.FAILURE and hang and not hang[0].cascade


async def test_the_wait_for_a_silent_batch_host_is_bounded() -> None:
    """Production Slurm may take SlurmdTimeout (300 s) to call the node dead: past slurm_verdict_wait_s
    the hang decides (a requeue without exclusion; Slurm's DOWN state keeps the job off the node)."""
    _, obs, took = await _stall(SILENT, node_dies_after_s=None, wait_s=1.0)
    assert 1.0 <= took < 6.0
    hang = [f for f in obs.findings if f.category == Category.HANG]
    assert obs.kind == ObservationKind.FAILURE and hang and not hang[0].cascade
    assert not [f for f in obs.findings if f.category == Category.SLURM_NODE_FAILURE]


async def test_a_stall_with_only_collective_timeouts_stays_a_hang() -> None:
    """A stopped rank: progress stops and the waiting ranks' gloo timeouts arrive. The timeouts are
    the stall seen from the waiting side, so the hang is still what decides."""
    world = World(job=running(num_tasks=4))

    async def train_then_stall() -> None:
        for i in range(1, 8):
            world.log += f"step {i}/100 loss 0.5 (0.05 s/it)\n".encode()
            await asyncio.sleep(0.05)
        world.log += (
            b"[rank0]: RuntimeError: [/x/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting "
            b"60000ms for recv operation to complete\n"
        )

    job = asyncio.create_task(train_then_stall())
    config = ProgressConfig(hang_floor_s=0.3, hang_factor=2.0)
    result = await watcher(world, progress_config=config, slurm_verdict_wait_s=30.0).watch(
        inp(slice_s=10.0, settle_s=0.05), lambda *a: None
    )
    await job
    hang = [f for f in result.observation.findings if f.category == Category.HANG]
    assert hang and not any(f.cascade for f in hang)


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


class FreshClient(Client):
    """Slurm answers a direct question with a newer state than the shared snapshot holds."""

    def __init__(self, world: World, now: JobSnapshot) -> None:
        super().__init__(world)
        self.now = now

    async def job(self, job_id: str) -> JobSnapshot | None:
        return self.now


async def test_a_failure_is_reported_with_slurms_state_now_not_a_stale_snapshot() -> None:
    """Issue 14 walk: over SSH the snapshot was seconds old; a job that started and failed in between
    still read PENDING without nodes, so it was held as if Slurm had requeued it and its Xid node was
    judged outside its allocation (requeued onto the bad node, nothing excluded)."""
    world = World(job=running(state="PENDING", nodes=()))
    world.log += b"node2: NVRM: Xid (PCI:0000:3b:00): 79, pid=7, name=python3, GPU has fallen off the bus.\n"
    failed = running(state="FAILED", nodes=("node2",), exit_code=1)
    cache = SnapshotCache(world.snapshot, max_age_s=0.0)
    client = FreshClient(world, failed)
    result = await JobWatcher(client, cache, lambda job, path: Source(world)).watch(  # type: ignore[arg-type]
        inp(), lambda *a: None
    )
    obs = result.observation
    assert obs.kind == ObservationKind.FAILURE
    assert obs.job is not None and obs.job.state == "FAILED" and obs.job.nodes == ("node2",)


async def test_a_first_watch_reports_the_allocation_at_once() -> None:
    """Until the workflow knows the job's nodes, a job Slurm requeues (pending, no nodes) could not have
    the node it failed on excluded: the first watch reports the allocation now, not at the slice's end."""
    world = World(job=running())
    result = await watcher(world).watch(inp(last_job=None, slice_s=10.0), lambda *a: None)
    assert result.observation.kind == ObservationKind.STATE_CHANGE
    assert result.observation.job is not None and result.observation.job.nodes == ("node1", "node2")


async def test_an_attempt_slurm_requeued_after_its_node_died_names_that_node() -> None:
    """The attempt we watched ran on node1,node2; Slurm requeued the job itself (NODE_FAIL, perhaps while
    no worker watched): the pending job lists no nodes, and Slurm reports node2 down."""
    world = World(job=running(state="PENDING", restart_count=1, nodes=()))
    world.nodes = (
        NodeSnapshot(name="node1", state="idle"),
        NodeSnapshot(name="node2", state="down", flags=("NOT_RESPONDING",), reason="Not responding"),
    )
    result = await watcher(world).watch(inp(), lambda *a: None)
    obs = result.observation
    assert obs.kind == ObservationKind.FAILURE, obs
    assert {n for f in obs.findings for n in f.nodes} == {"node2"}, obs.findings
    assert all(f.category == Category.SLURM_NODE_FAILURE for f in obs.findings)


async def test_our_own_requeue_is_not_taken_for_slurms() -> None:
    world = World(job=running(state="PENDING", restart_count=1, nodes=()))
    world.nodes = (NodeSnapshot(name="node2", state="down", flags=("NOT_RESPONDING",)),)
    phase = c.Phase(failure_handled=True, restart_requested_at=50.0)
    result = await watcher(world).watch(inp(phase=phase, slice_s=0.3), lambda *a: None)
    assert result.observation.kind != ObservationKind.FAILURE and not result.observation.findings


async def test_a_cancels_terminated_ranks_wait_while_the_job_is_completing() -> None:
    """scancel of a running job: srun prints `task N: Terminated` while Slurm shows the job COMPLETING (22.05
    says CANCELLED only once the steps are gone). The decision waits for Slurm's final word, so the
    observation carries the cancel, not a failure to advise on."""
    world = World(job=running(num_tasks=2, state="COMPLETING"))
    world.log += (
        b"slurmstepd-node1: error: *** STEP 7.0 ON node1 CANCELLED AT 2026-12-01T23:53:13 ***\n"
        b"srun: error: node2: task 1: Terminated\n"
    )

    async def slurm_says_cancelled() -> None:
        await asyncio.sleep(0.6)
        world.job = running(num_tasks=2, state="CANCELLED")

    ender = asyncio.create_task(slurm_says_cancelled())
    w = JobWatcher(
        CancelledByClient(world),  # type: ignore[arg-type]
        SnapshotCache(world.snapshot, max_age_s=0.0),
        lambda job, path: Source(world),
        slurm_verdict_wait_s=30.0,
    )
    started = time.monotonic()
    result = await w.watch(inp(slice_s=20.0), lambda *a: None)
    await ender
    assert time.monotonic() - started >= 0.6
    obs = result.observation
    assert obs.kind == ObservationKind.STATE_CHANGE and obs.findings == (), obs
    assert obs.job is not None and obs.job.state == "CANCELLED" and obs.job.cancelled_by == "1000"


async def test_a_job_stuck_completing_is_decided_once_the_wait_runs_out() -> None:
    world = World(job=running(num_tasks=2, state="COMPLETING"))
    world.log += b"srun: error: node2: task 1: Terminated\n"
    started = time.monotonic()
    result = await watcher(world, slurm_verdict_wait_s=0.4).watch(inp(slice_s=20.0), lambda *a: None)
    assert 0.4 <= time.monotonic() - started < 5.0
    obs = result.observation
    assert obs.job is not None and obs.job.state == "COMPLETING" and obs.findings

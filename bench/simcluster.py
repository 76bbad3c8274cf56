"""A simulated Slurm cluster for the scale benchmark: the SlurmClient interface over in-memory jobs.

`SimSlurm` answers `snapshot()`, `job()` and the scheduler steps (requeue_hold, set_excluded, release,
cancel, drain) the way Slurm does on the real lab cluster (a released job runs again after
`restart_delay_s`), and `SimFiles` is a Runner whose job output files live in memory, so TrainGuard's own
FileLogSource reads them incrementally by byte offset exactly as it reads real files. `SimWorkloads`
drives it: every running job prints a Megatron-style iteration line every `interval_s` (jittered), and
faults (an Xid on a node, then the CUDA error and the job's failure) arrive as a Poisson process.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from trainguard.models import ActionResult, ActionStep, ClusterSnapshot, JobSnapshot, NodeSnapshot
from trainguard.slurm import offload
from trainguard.slurm.client import SlurmClient, _parse_jobs_text
from trainguard.slurm.runner import CommandError, CommandResult, FileStat

Clock = Callable[[], float]
FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "slurm" / "22.05"


class SimFiles:
    """A Runner over in-memory files; it runs no commands (SimSlurm answers those itself)."""

    def __init__(self) -> None:
        self.files: dict[str, bytearray] = {}
        # Bytes dropped from the head of each file by trim(): offsets stay those of the whole file.
        self.base: dict[str, int] = {}

    async def run(self, argv: Sequence[str], *, timeout: float = 30.0, check: bool = False) -> CommandResult:
        raise CommandError(argv, None, "the simulated cluster runs no commands", retryable=False)

    async def stat(self, path: str) -> FileStat | None:
        data = self.files.get(path)
        size = self.base.get(path, 0) + len(data) if data is not None else 0
        return None if data is None else FileStat(size=size, identity=f"sim:{path}")

    async def read_file(self, path: str, offset: int, max_bytes: int) -> bytes:
        data = self.files.get(path)
        start = max(0, offset - self.base.get(path, 0))  # a reader behind a trim resumes at the kept head
        return b"" if data is None else bytes(data[start : start + max_bytes])

    def trim(self, path: str, keep: int) -> None:
        """Keep only the last `keep` bytes in memory (a soak's logs would otherwise grow without bound)."""
        data = self.files.get(path)
        if data is not None and len(data) > keep:
            drop = len(data) - keep
            del data[:drop]
            self.base[path] = self.base.get(path, 0) + drop

    def remove(self, path: str) -> None:
        self.files.pop(path, None)
        self.base.pop(path, None)

    @property
    def held_bytes(self) -> int:
        return sum(len(d) for d in self.files.values())

    async def close(self) -> None:
        return None

    def append(self, path: str, text: str) -> None:
        self.files.setdefault(path, bytearray()).extend(text.encode())


@dataclass
class SimJob:
    snap: JobSnapshot
    next_line_at: float
    iteration: int = 0
    interval_s: float = 10.0
    start_at: float | None = None  # a released job starts running at this time
    faulted_at: float | None = None  # the fault line of the current attempt was written at this time


class SqueueRenderer:
    """The jobs as Slurm 22.05 prints them (`squeue --json`, 2-space indent, ~3.5 KB a job): a real
    RUNNING job object of the captured fixture with the simulated job's fields written in. Rendered
    once per change of a job, joined per snapshot."""

    def __init__(self) -> None:
        doc = json.loads((FIXTURES / "fmt_mixed_squeue.json").read_text())
        self.meta = doc["meta"]
        self.template = next(j for j in doc["jobs"] if j["job_state"] == "RUNNING" and not j["array_job_id"])
        self._cache: dict[str, tuple[JobSnapshot, str]] = {}

    def job_text(self, snap: JobSnapshot) -> str:
        cached = self._cache.get(snap.job_id)
        if cached is not None and cached[0] is snap:
            return cached[1]
        job = dict(self.template)
        job.update(
            job_id=int(snap.job_id),
            name=snap.name,
            comment=snap.comment,
            job_state=snap.state,
            nodes=",".join(snap.nodes),
            excluded_nodes=",".join(snap.excluded_nodes),
            restart_cnt=snap.restart_count,
            submit_time=snap.submit_time,
            start_time=snap.start_time or 0,
            exit_code=(snap.exit_code or 0) << 8,
            priority=0 if snap.held else self.template["priority"],
            state_reason="JobHeldAdmin" if snap.held else "None",
            standard_output=snap.stdout_path,
            current_working_directory="/sim",
        )
        text = json.dumps(job, indent=2)
        self._cache[snap.job_id] = (snap, text)
        return text

    def forget(self, job_id: str) -> None:
        self._cache.pop(job_id, None)

    def render(self, jobs: Sequence[JobSnapshot]) -> str:
        body = ",\n".join(self.job_text(j) for j in jobs)
        meta = json.dumps(self.meta, indent=2)
        return f'{{\n"meta": {meta},\n"errors": [],\n"jobs": [\n{body}\n]\n}}\n'


class SimSlurm(SlurmClient):
    def __init__(
        self,
        cluster: str,
        files: SimFiles,
        *,
        restart_delay_s: float = 6.0,
        clock: Clock = time.time,
        parse: bool = True,
    ) -> None:
        super().__init__(files, cluster)
        # The snapshot as text through TrainGuard's real parser (not the objects), as Slurm serves it.
        self.renderer = SqueueRenderer() if parse else None
        self.snapshot_bytes = 0
        self.files = files
        self.clock = clock
        self.restart_delay_s = restart_delay_s
        self.jobs: dict[str, SimJob] = {}
        self.nodes = tuple(NodeSnapshot(name=f"gpu{i:04d}", state="allocated") for i in range(1, 129))
        self.calls: dict[str, int] = {}

    def _count(self, what: str) -> None:
        self.calls[what] = self.calls.get(what, 0) + 1

    def add_job(
        self,
        job_id: str,
        *,
        comment: str,
        interval_s: float,
        nodes: tuple[str, ...],
        submit_time: int | None = None,
    ) -> SimJob:
        now = self.clock()
        snap = JobSnapshot(
            job_id=job_id,
            name=f"sim-{job_id}",
            state="RUNNING",
            comment=comment,
            nodes=nodes,
            submit_time=int(now) - 60 if submit_time is None else submit_time,
            start_time=int(now) - 30,
            stdout_path=f"/sim/{job_id}.out",
        )
        job = SimJob(snap=snap, next_line_at=now + random.uniform(0, interval_s), interval_s=interval_s)
        self.jobs[job_id] = job
        self.files.append(snap.stdout_path, f"trainsim: job {job_id} attempt 0\ntraining ...\n")
        return job

    def _set(self, job: SimJob, **update: object) -> None:
        job.snap = job.snap.model_copy(update=update)

    # -- queries (the SlurmClient interface) ----------------------------------------------------

    async def snapshot(self) -> ClusterSnapshot:
        self._count("snapshot")
        taken_at = self.clock()
        snaps = [j.snap for j in self.jobs.values()]
        if self.renderer is not None:
            text = self.renderer.render(snaps)
            self.snapshot_bytes = len(text)
            parsed: list[JobSnapshot] = await offload.parse(_parse_jobs_text, text)
            snaps = parsed
        return ClusterSnapshot(cluster=self.cluster, taken_at=taken_at, jobs=tuple(snaps), nodes=self.nodes)

    async def job(self, job_id: str) -> JobSnapshot | None:
        self._count("job")
        found = self.jobs.get(job_id)
        return None if found is None else found.snap

    async def finished_job(self, job_id: str) -> JobSnapshot | None:
        return None  # no accounting (slurmdbd) in the simulation

    # -- scheduler steps --------------------------------------------------------------------------

    def _result(self, step: ActionStep, performed: bool, detail: str, job: SimJob | None) -> ActionResult:
        snap = job.snap if job else None
        return ActionResult(
            step=step,
            performed=performed,
            detail=detail,
            confirmed_at=self.clock(),
            job_state=snap.state if snap else "",
            held=bool(snap and snap.held),
            restart_count=snap.restart_count if snap else 0,
        )

    async def requeue_hold(self, job_id: str, *, expected_restarts: int) -> ActionResult:
        self._count("requeue_hold")
        job = self.jobs[job_id]
        if job.snap.restart_count > expected_restarts:
            performed = job.snap.state == "PENDING" and not job.snap.held
            if performed:
                self._set(job, held=True)
            return self._result(ActionStep.REQUEUE_HOLD, performed, "already requeued", job)
        self._set(
            job,
            state="PENDING",
            held=True,
            restart_count=job.snap.restart_count + 1,
            nodes=(),
            submit_time=int(self.clock()),
        )
        job.start_at = None
        return self._result(ActionStep.REQUEUE_HOLD, True, "requeued and held", job)

    async def set_excluded(self, job_id: str, nodes: Sequence[str]) -> ActionResult:
        self._count("set_excluded")
        job = self.jobs[job_id]
        self._set(job, excluded_nodes=tuple(sorted({*job.snap.excluded_nodes, *nodes})))
        return self._result(ActionStep.EXCLUDE, True, "excluded", job)

    async def release(
        self, job_id: str, our_hold: str | None = None, restarts: int | None = None
    ) -> ActionResult:
        self._count("release")
        job = self.jobs[job_id]
        if not job.snap.held:
            return self._result(ActionStep.RELEASE, False, "not held", job)
        self._set(job, held=False)
        job.start_at = self.clock() + self.restart_delay_s
        return self._result(ActionStep.RELEASE, True, "released", job)

    async def cancel(self, job_id: str) -> ActionResult:
        self._count("cancel")
        job = self.jobs[job_id]
        self._set(job, state="CANCELLED", held=False)
        return self._result(ActionStep.CANCEL, True, "cancelled", job)

    async def drain(self, node: str, reason: str) -> ActionResult:
        self._count("drain")
        return self._result(ActionStep.DRAIN, False, "the simulation does not drain", None)


@dataclass
class Fault:
    job_id: str
    at: float  # when the fault line was written
    node: str


@dataclass
class SimWorkloads:
    """Progress lines and faults for every simulated job; `tick()` advances them to now."""

    slurm: SimSlurm
    faults_per_hour: float = 0.0  # per workload
    fault_to_exit_s: float = 1.0  # the failing process exits (job FAILED) this long after its Xid line
    faults: list[Fault] = field(default_factory=list)
    faulting: bool = False  # off during start-up, so detection latency is measured under steady load
    # Which jobs this process may fault (None: all); e.g. only those whose watch runs here.
    may_fault: Callable[[SimJob], bool] | None = None
    on_fault: Callable[[Fault], None] | None = None  # told of each fault as it is written
    _last_tick: float = 0.0

    def tick(self) -> None:
        slurm, now = self.slurm, self.slurm.clock()
        dt = now - self._last_tick if self._last_tick else 0.0
        self._last_tick = now
        for job in slurm.jobs.values():
            snap = job.snap
            if snap.state == "PENDING" and not snap.held and job.start_at is not None and now >= job.start_at:
                slurm._set(job, state="RUNNING", nodes=self._nodes(job), start_time=int(now))
                job.start_at, job.faulted_at = None, None
                slurm.files.append(
                    snap.stdout_path,
                    f"trainsim: job {snap.job_id} attempt {snap.restart_count}\n"
                    f"loading checkpoint at iteration {job.iteration}\ntraining ...\n",
                )
                job.next_line_at = now + job.interval_s
            elif snap.state == "RUNNING" and job.faulted_at is not None:
                if now >= job.faulted_at + self.fault_to_exit_s:
                    slurm._set(job, state="FAILED", exit_code=1)
            elif snap.state == "RUNNING" and now >= job.next_line_at:
                job.iteration += 1
                ms = job.interval_s * 1000.0 * random.uniform(0.97, 1.03)
                slurm.files.append(snap.stdout_path, _iteration_line(job.iteration, ms))
                job.next_line_at = now + ms / 1000.0
        if self.faulting and self.faults_per_hour > 0 and dt > 0:
            draws = _poisson(len(slurm.jobs) * self.faults_per_hour * dt / 3600.0)
            if draws:
                jobs = list(slurm.jobs.values())
                for _ in range(draws):
                    # Thinning: a draw counts only on a job this process may fault, so the rate is the set
                    # one per workload over those jobs, without filtering every job on every tick.
                    if self.may_fault is None or self.may_fault(random.choice(jobs)):
                        self._inject(now)

    def _nodes(self, job: SimJob) -> tuple[str, ...]:
        names = [n.name for n in self.slurm.nodes if n.name not in job.snap.excluded_nodes]
        return tuple(random.sample(names, 2))

    def _inject(self, now: float) -> None:
        healthy = [
            j
            for j in self.slurm.jobs.values()
            if j.snap.state == "RUNNING"
            and j.faulted_at is None
            and j.snap.restart_count == 0
            and (self.may_fault is None or self.may_fault(j))
        ]
        if not healthy:
            return
        job = random.choice(healthy)
        node = job.snap.nodes[-1]
        job.faulted_at = now
        self.slurm.files.append(
            job.snap.stdout_path,
            (
                f"[rank1]: {node}: NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python3, "
                "GPU has fallen off the bus.\n"
                "[rank1]: Traceback (most recent call last):\n"
                "[rank1]: RuntimeError: CUDA error: uncorrectable ECC error encountered\n"
            ),
        )
        fault = Fault(job.snap.job_id, now, node)
        self.faults.append(fault)
        if self.on_fault is not None:
            self.on_fault(fault)

    async def run(self, every_s: float = 0.25) -> None:
        while True:
            self.tick()
            await asyncio.sleep(every_s)


def _iteration_line(it: int, ms: float) -> str:
    return (
        f" iteration {it:8d}/ 1000000 | consumed samples: {it * 512:12d} | elapsed time per iteration (ms): "
        f"{ms:.1f} | learning rate: 1.500E-04 | global batch size:   512 | lm loss: 2.345678E+00 | "
        "loss scale: 32768.0 | grad norm: 1.012 | number of skipped iterations:   0 |\n"
    )


def _poisson(mean: float) -> int:
    # Knuth's method: `mean` is small here (a tick covers a fraction of a second).
    limit, k, p = pow(2.718281828459045, -mean), 0, 1.0
    while True:
        p *= random.random()
        if p <= limit:
            return k
        k += 1


def opt_in_comment(mode: str = "action") -> str:
    return json.dumps({"trainguard": {"environment": "sim", "mode": mode}})

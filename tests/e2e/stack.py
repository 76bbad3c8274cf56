"""The real local stack for end-to-end tests: Slurm (4 slurmd), the Temporal dev server, TrainGuard's worker.

Nothing here is mocked. The cluster and dev server start once per test session; each test submits real
sbatch jobs and checks what Slurm itself reports.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from temporalio.client import Client

from trainguard.audit.store import AuditStore
from trainguard.localstack.slurm import LocalSlurmCluster
from trainguard.models import AuditEventIn, EventType, Mode
from trainguard.settings import (
    AuditSettings,
    ClusterSettings,
    LimitsSettings,
    LogSettings,
    MetricsSettings,
    PolicySettings,
    Settings,
    TemporalSettings,
    WatchdogSettings,
    WatchSettings,
)

REPO = Path(__file__).resolve().parents[2]
SBATCH = REPO / "examples" / "trainsim.sbatch"


# Several checkouts (worktrees) can run the real-stack tests at once when each sets its own offset.
# Under pytest-xdist each worker (gw0, gw1, ...) adds XDIST_PORT_STRIDE per index: own clusters, servers,
# directories. The fixed test ports shifted by the stride never meet the unshifted ones and stay below
# the kernel's ephemeral range, where free ports (Temporal dev servers) and client sockets live
# (tests/unit/test_e2e_ports.py checks both).
XDIST_PORT_STRIDE = 5000
PORT_OFFSET = int(os.environ.get("TG_TEST_PORT_OFFSET", "0")) + XDIST_PORT_STRIDE * int(
    os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or "0"
)
NODE_LOGS = REPO / "var" / f"e2e-nodelogs-{PORT_OFFSET}"
# The worker's Prometheus (DCGM metrics). Nothing listens there unless a test starts one (a down
# Prometheus gives no findings at once); tests/e2e/test_pytorch_recovery.py starts the real binary.
PROMETHEUS_PORT = 18790 + PORT_OFFSET
# The shared workers watch every opt-in environment but "solo-...": a test that runs its own worker (own
# settings, own ClusterWatch) on the same Slurm cluster submits its jobs under such an environment.
SHARED_ENVIRONMENTS = r"(?!solo-).*"
# The suite fails unrelated jobs on purpose, back to back: for its shared workers that is neither a storm
# nor a reason to run out of the hour's budget. The limits have their own tests (test_cluster_limits.py).
SUITE_LIMITS = LimitsSettings(
    requeues_per_hour=100_000,
    exclusions_per_hour=100_000,
    drains_per_hour=100_000,
    max_excluded_nodes=100_000,
    storm_jobs=100_000,
    storm_nodes=100_000,
    storm_settle_s=0,
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def make_settings(
    *,
    temporal_address: str,
    cluster: LocalSlurmCluster,
    audit_url: str,
    name: str = "e2e",
    mode: Mode = Mode.ACTION,
    acknowledged: bool = True,
    decision_timeout_s: float = 60.0,
    environment_pattern: str = SHARED_ENVIRONMENTS,
    limits: LimitsSettings = SUITE_LIMITS,
    policy: PolicySettings | None = None,
) -> Settings:
    return Settings(
        temporal=TemporalSettings(address=temporal_address, control_task_queue=f"trainguard-control-{name}"),
        cluster=ClusterSettings(
            name=name,
            mode=mode,
            acknowledge_scheduler_actions=acknowledged,
            slurm_env=cluster.env,
            snapshot_interval_s=0.5,
            environment_pattern=environment_pattern,
        ),
        audit=AuditSettings(url=audit_url),
        # per-node kernel logs, as files here (Loki {host=...} streams in production)
        logs=LogSettings(node_log_path=str(NODE_LOGS / "{node}" / "kern.log")),
        metrics=MetricsSettings(prometheus_url=f"http://127.0.0.1:{PROMETHEUS_PORT}", timeout_s=2.0),
        watch=WatchSettings(
            poll_interval_s=0.5,
            slice_s=120.0,
            heartbeat_timeout_s=10.0,
            hang_floor_s=4.0,
            slurm_verdict_wait_s=30.0,
        ),
        watchdog=WatchdogSettings(decision_timeout_s=decision_timeout_s),
        limits=limits,
        policy=policy or PolicySettings(),
    )


@dataclass
class SubmittedJob:
    job_id: str
    workdir: Path
    cluster: LocalSlurmCluster

    @property
    def output(self) -> Path:
        return self.workdir / f"trainsim-{self.job_id}.out"

    def show(self) -> dict[str, str]:
        """`scontrol show job -o` as key=value pairs: Slurm's own record of the job."""
        text = self.cluster.scontrol_job(self.job_id)
        fields: dict[str, str] = {}
        for token in text.split():
            key, sep, value = token.partition("=")
            if sep and key not in fields:
                fields[key] = value
        return fields


@dataclass
class Stack:
    cluster: LocalSlurmCluster
    client: Client
    store: AuditStore
    settings: Settings
    workdir: Path
    jobs: list[SubmittedJob] = field(default_factory=list)

    def submit(
        self,
        *,
        comment: str | None,
        env: dict[str, str] | None = None,
        name: str = "trainsim",
        nodes: int = 2,
        extra: list[str] | None = None,
    ) -> SubmittedJob:
        workdir = self.workdir / f"job-{len(self.jobs)}-{int(time.time() * 1000)}"
        workdir.mkdir(parents=True)
        argv = [
            f"--chdir={workdir}",
            f"--job-name={name}",
            f"--nodes={nodes}",
            f"--output={workdir}/trainsim-%j.out",
        ]
        if comment is not None:
            argv.append(f"--comment={comment}")
        argv += extra or []
        argv.append(str(SBATCH))
        defaults = {
            "TRAINSIM_PY": str(REPO / "examples" / "trainsim.py"),
            "TRAINSIM_ITERS": "30",
            "TRAINSIM_STEP_S": "0.1",
            "TRAINSIM_CKPT_EVERY": "5",
            "TRAINSIM_CKPT_DIR": str(workdir / "ckpt"),
            "TRAINSIM_NCCL_DELAY_S": "1",
        }
        job_id = self.cluster.sbatch(argv, env={**defaults, **(env or {})})
        job = SubmittedJob(job_id=job_id, workdir=workdir, cluster=self.cluster)
        self.jobs.append(job)
        return job

    def events(self, job_id: str) -> list[AuditEventIn]:
        page = self.store.list_events(job_id=job_id, limit=1000)
        return list(page.items)

    async def wait_for_event(
        self, job_id: str, event: EventType, timeout: float = 90.0
    ) -> list[AuditEventIn]:
        return await self.wait_until(
            lambda: event in {e.event_type for e in self.events(job_id)},
            f"{event.value} for job {job_id}",
            timeout,
            job_id,
        )

    async def wait_until(
        self, check: Callable[[], bool], what: str, timeout: float, job_id: str
    ) -> list[AuditEventIn]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if check():
                return self.events(job_id)
            await asyncio.sleep(0.5)
        trail = json.dumps([(e.event_type.value, e.message) for e in self.events(job_id)], indent=1)
        raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; audit trail:\n{trail}")

    async def wait_job_state(
        self, job: SubmittedJob, states: set[str], timeout: float = 90.0
    ) -> dict[str, str]:
        deadline = time.monotonic() + timeout
        record: dict[str, str] = {}
        while time.monotonic() < deadline:
            record = job.show()
            if record.get("JobState") in states:
                return record
            await asyncio.sleep(0.5)
        raise AssertionError(
            f"job {job.job_id} not in {states} after {timeout:.0f}s: {record.get('JobState')}"
        )

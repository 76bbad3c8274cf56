"""The local quick start: everything on embedded defaults, then a demo job that fails and is recovered.

Starts (each idempotently, state under var/): a 4-node Slurm cluster, the Temporal dev server with its
Web UI, TrainGuard's worker and API/console (SQLite audit), then submits a 2-node training simulation in
action mode whose GPU on node2 "falls off the bus". Prints the audit trail as it happens.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from trainguard.audit.store import AuditStore
from trainguard.localstack.process import BackgroundProcess
from trainguard.localstack.prometheus import LocalPrometheus
from trainguard.localstack.slurm import LocalSlurmCluster
from trainguard.localstack.temporal import LocalTemporal
from trainguard.models import EventType, WorkloadId

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Layout:
    root: Path
    port_offset: int = 0  # added to every port, so a second stack (a test's) can run beside the demo

    def port(self, base: int) -> int:
        return base + self.port_offset

    @property
    def config(self) -> Path:
        return self.root / "quickstart.yaml"

    @property
    def audit_db(self) -> Path:
        return self.root / "audit.db"

    def slurm(self) -> LocalSlurmCluster:
        return LocalSlurmCluster(
            self.root / "slurm",
            cluster="lab",
            nodes=4,
            ctld_port=self.port(16817),
            node_port_base=self.port(17001),
        )

    def temporal(self) -> LocalTemporal:
        return LocalTemporal(
            self.root / "temporal",
            port=self.port(7233),
            ui_port=self.port(8233),
            db_file=self.root / "temporal" / "temporal.db",
        )

    def gpusim(self) -> BackgroundProcess:
        return BackgroundProcess(
            "gpusim",
            self.root,
            [
                sys.executable,
                "-m",
                "trainguard",
                "gpusim",
                "--port",
                str(self.port(9400)),
                "--nodes",
                "node[1-4]",
                "--gpus",
                "2",
            ],
            marker="gpusim",
        )

    def prometheus(self) -> LocalPrometheus:
        return LocalPrometheus(
            self.root / "prometheus",
            port=self.port(9090),
            scrape_targets=[f"127.0.0.1:{self.port(9400)}"],
            scrape_interval_s=2.0,
        )

    def worker(self) -> BackgroundProcess:
        return BackgroundProcess(
            "worker",
            self.root,
            [
                sys.executable,
                "-m",
                "trainguard",
                "--config",
                str(self.config),
                "worker",
                "--metrics-port",
                str(self.port(9464)),
            ],
            marker="trainguard",
        )

    def api(self) -> BackgroundProcess:
        return BackgroundProcess(
            "api",
            self.root,
            [sys.executable, "-m", "trainguard", "--config", str(self.config), "api"],
            marker="trainguard",
        )


def write_config(layout: Layout, cluster: LocalSlurmCluster) -> None:
    doc = {
        "state_dir": str(layout.root),
        "temporal": {"address": f"127.0.0.1:{layout.port(7233)}"},
        # The demo acts on its own jobs; production clusters start in observe mode (the default).
        "cluster": {
            "name": "lab",
            "mode": "action",
            "acknowledge_scheduler_actions": True,
            "slurm_env": cluster.env,
            "snapshot_interval_s": 1.0,
        },
        "audit": {"url": f"sqlite:///{layout.audit_db}"},
        "watch": {"poll_interval_s": 0.5, "heartbeat_timeout_s": 30},
        "api": {
            "host": "127.0.0.1",
            "port": layout.port(8088),
            "token": os.environ.get("TRAINGUARD_API_TOKEN", "demo-token"),
        },
    }
    layout.config.write_text(yaml.safe_dump(doc, sort_keys=False))


def up(layout: Layout) -> None:
    """Start whatever is not running, each part on its own: nothing here waits on users' jobs (a worker
    that crashed while jobs run is back in seconds, and watches them again)."""
    layout.root.mkdir(parents=True, exist_ok=True)
    cluster = layout.slurm()
    step("Slurm: slurmctld + 4 slurmd (node1..node4)")
    cluster.start()
    write_config(layout, cluster)
    step(f"Temporal dev server (Web UI http://127.0.0.1:{layout.port(8233)})")
    layout.temporal().start()
    step(
        f"Prometheus (http://127.0.0.1:{layout.port(9090)}) scraping a simulated DCGM exporter "
        f"(:{layout.port(9400)})"
    )
    layout.gpusim().start()
    layout.prometheus().start()
    step(
        f"TrainGuard worker (control + cluster queues) and API/console (http://127.0.0.1:{layout.port(8088)})"
    )
    layout.worker().start()
    layout.api().start()


def down(layout: Layout) -> None:
    layout.api().stop()
    layout.worker().stop()
    layout.prometheus().stop()
    layout.gpusim().stop()
    layout.temporal().stop()
    layout.slurm().stop()


def status(layout: Layout) -> dict[str, bool]:
    return {
        "slurm": layout.slurm().is_running(),
        "temporal": layout.temporal().is_running(),
        "worker": layout.worker().pid() is not None,
        "api": layout.api().pid() is not None,
        "prometheus": layout.prometheus().pid() is not None,
        "gpusim": layout.gpusim().pid() is not None,
    }


def step(text: str) -> None:
    print(f"==> {text}", flush=True)


def submit_demo(layout: Layout) -> tuple[str, Path]:
    cluster = layout.slurm()
    workdir = layout.root / "demo" / time.strftime("%Y%m%d-%H%M%S")
    workdir.mkdir(parents=True, exist_ok=True)
    comment = json.dumps({"trainguard": {"environment": "demo", "mode": "action"}})
    env = {
        "TRAINSIM_PY": str(REPO / "examples" / "trainsim.py"),
        "TRAINSIM_ITERS": "60",
        "TRAINSIM_STEP_S": "0.25",
        "TRAINSIM_CKPT_EVERY": "10",
        "TRAINSIM_CKPT_DIR": str(workdir / "ckpt"),
        "TRAINSIM_FAULT": "xid",
        "TRAINSIM_FAULT_NODE": "node2",
        "TRAINSIM_FAULT_AT": "25",
        "TRAINSIM_FAULT_ONCE": str(workdir / "xid.fired"),
    }
    job_id = cluster.sbatch(
        [
            f"--chdir={workdir}",
            "--job-name=demo-train",
            f"--output={workdir}/demo-%j.out",
            f"--comment={comment}",
            str(REPO / "examples" / "trainsim.sbatch"),
        ],
        env=env,
    )
    return job_id, workdir / f"demo-{job_id}.out"


def follow(layout: Layout, job_id: str, timeout: float = 300.0) -> bool:
    store = AuditStore.from_url(f"sqlite:///{layout.audit_db}")
    seen: set[str] = set()
    started = time.monotonic()
    fault_at: float | None = None
    try:
        while time.monotonic() - started < timeout:
            for event in store.list_events(job_id=job_id, limit=1000).items:
                if event.event_id in seen:
                    continue
                seen.add(event.event_id)
                if event.event_type == EventType.DETECTION and fault_at is None:
                    fault_at = event.ts
                nodes = f" nodes={','.join(event.nodes)}" if event.nodes else ""
                extra = f" [{event.action}]" if event.action else ""
                print(
                    f"  {time.strftime('%H:%M:%S', time.localtime(event.ts))}  {event.event_type.value:<21}"
                    f"{extra}{nodes}  {event.message[:110]}",
                    flush=True,
                )
                if event.event_type == EventType.COMPLETED:
                    took = f" {event.ts - fault_at:.1f}s after detection" if fault_at else ""
                    print(f"\nRECOVERED: job {job_id} completed{took}.")
                    return True
                if event.event_type == EventType.STOPPED:
                    print(f"\nstopped: {event.message}")
                    return False
            time.sleep(0.5)
    finally:
        store.close()
    print(f"\ntimed out after {timeout:.0f}s; see {layout.root}/worker.log")
    return False


def run_quickstart(root: Path) -> int:
    layout = Layout(root.resolve())
    t0 = time.monotonic()
    up(layout)
    step("Submitting the demo job (2 nodes; node2's GPU fails at iteration 25)")
    job_id, out = submit_demo(layout)
    print(f"    job {job_id}, output {out}")
    ok = follow(layout, job_id)
    print(f"    quick start took {time.monotonic() - t0:.0f}s from command to outcome")
    record = layout.slurm().scontrol_job(job_id)
    fields = dict(t.split("=", 1) for t in record.split() if "=" in t)
    print(
        f"    Slurm says: JobState={fields.get('JobState')} Restarts={fields.get('Restarts')} "
        f"ExcNodeList={fields.get('ExcNodeList')} NodeList={fields.get('NodeList')}"
    )
    print("\nWhere to look:")
    wf = WorkloadId(cluster="lab", job_id=job_id, submit_time=0).workflow_id.rsplit("-", 1)[0]
    print(
        f"  Temporal UI : http://127.0.0.1:8233/namespaces/default/workflows?query=TrainGuardJobId%3D%22{job_id}%22"
        f"  (workflow id {wf}-<submit time>)"
    )
    print("  Console     : http://127.0.0.1:8088/   (API token for mode switches: see quickstart.yaml)")
    print("  Prometheus  : http://127.0.0.1:9090   (GPU health from the simulated DCGM exporter)")
    print(f"  Audit trail : .venv/bin/trainguard --config {layout.config} audit list --job-id {job_id}")
    print(f"  Job output  : {out}")
    print("  Stop all    : .venv/bin/trainguard local down")
    return 0 if ok else 1

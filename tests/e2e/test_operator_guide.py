"""The documented SSH-mode install, walked as a new operator would (issue 14 §6), on the real stack.

docs/operator-guide.md ("SSH mode, step by step") and docs/runbook.md (stages 3–5) hold `walk:` blocks;
this test runs them in order (tests/e2e/docwalk.py says how): install, SSH key and host key, settings
and env file as written, the systemd units' ExecStart lines as processes against a real sshd in front
of a real Slurm, Temporal and a fresh MariaDB database; first advice in observe mode; a canary
deployment in action mode (its own settings, env file, API port and units, one owner per job) that
recovers a faulty job; stage 4 (action) and the rollback (environment + restart) that leaves a running
job's failure advised only, Slurm untouched. Figures are printed (`-s`).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.e2e.crash_stack import MariaDBAudit, is_held, parse_record, save_history
from tests.e2e.docwalk import (
    Operator,
    Site,
    Units,
    base_env,
    read_env_file,
    sbatch_comment,
    wait_until,
    walk_blocks,
)
from tests.e2e.stack import PORT_OFFSET, REPO, SBATCH
from trainguard.audit.schemas import AuditEventOut
from trainguard.audit.store import AuditStore
from trainguard.localstack.slurm import LocalSlurmCluster
from trainguard.localstack.sshd import LocalSSHD
from trainguard.localstack.temporal import LocalTemporal
from trainguard.models import EventType, WorkloadId, WorkloadState
from trainguard.settings import Settings, TemporalSettings
from workers.worker import connect

pytestmark = [pytest.mark.e2e]

ROOT = Path(f"/tmp/tg-walk-{PORT_OFFSET}")
MAIN, CANARY = "a100-east", "a100-east-canary"
ETC = "/etc/trainguard"
# A GPU falls off the bus; the process lingers in CUDA teardown for a few seconds, then exits: TrainGuard
# decides while Slurm still says RUNNING (the evidence is hardware-grade), and Slurm says FAILED after.
XID_THEN_EXIT = (
    "#!/bin/bash\n"
    'echo "trainsim: job $SLURM_JOB_ID on $SLURMD_NODENAME"\n'
    'echo "$SLURMD_NODENAME: NVRM: Xid (PCI:0000:3b:00): 79, pid=$$, name=python3, '
    'GPU has fallen off the bus." >&2\n'
    "sleep 20\nexit 1\n"
)


def set_key(doc: dict[str, Any], dotted: str, value: object) -> None:
    """Replace a documented example value with this machine's; the key must be in the guide."""
    *parents, last = dotted.split(".")
    node = doc
    for part in parents:
        node = node[part]
    if last not in node:
        raise AssertionError(f"the guide's settings lack {dotted}")
    node[last] = value


def merged(base: dict[str, Any], overlay: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in overlay.items():
        out[key] = (
            merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
        )
    return out


class Walk:
    def __init__(self, slurm: LocalSlurmCluster, sshd: LocalSSHD, temporal: LocalTemporal, db: MariaDBAudit):
        self.slurm, self.sshd, self.temporal, self.db = slurm, sshd, temporal, db
        self.blocks = walk_blocks("operator-guide.md", "runbook.md")
        self.site = Site(ROOT / "root", text={"-p 22 login01.example.org": f"-p {sshd.port} 127.0.0.1"})
        Path(self.site.path("/etc/systemd/system")).mkdir(parents=True)  # there on any systemd host
        self.units = Units(self.site)
        self.op = Operator(self.site, self.units)
        self.store: AuditStore | None = None
        self.figures: dict[str, float] = {}
        self.site.text["127.0.0.1:8088"] = f"127.0.0.1:{self.site.port(8088)}"

    # -- the guide's files --
    def etc(self, name: str) -> Path:
        return Path(self.site.path(f"{ETC}/{name}"))

    def block(self, name: str, lang: str) -> str:
        found_lang, text = self.blocks[name]
        assert found_lang == lang, (name, found_lang)
        return text

    def yaml_block(self, name: str) -> dict[str, Any]:
        doc = yaml.safe_load(self.block(name, "yaml"))
        assert isinstance(doc, dict)
        return dict(self.site.yaml_paths(doc))

    def settings(self, name: str) -> dict[str, Any]:
        return dict(yaml.safe_load(self.etc(name).read_text()))

    def write_settings(self, name: str, doc: dict[str, Any]) -> None:
        self.etc(name).write_text(yaml.safe_dump(doc, sort_keys=False))

    def cli(self, name: str, job_id: str = "") -> list[str]:
        return self.op.run(self.block(name, "bash"), {"123456": job_id} if job_id else None)

    # -- audit --
    def open_store(self) -> AuditStore:
        if self.store is None:
            self.store = AuditStore.open_existing(self.db.root_url)
        return self.store

    def events(self, job_id: str, cluster: str) -> list[AuditEventOut]:
        return [
            e for e in self.open_store().list_events(job_id=job_id, limit=1000).items if e.cluster == cluster
        ]

    def trail(self, job_id: str) -> str:
        rows = self.open_store().list_events(job_id=job_id, limit=1000).items
        return json.dumps(
            [(e.cluster, e.event_type.value, e.action, e.message[:300]) for e in rows], indent=1
        )

    def wait_event(
        self, job_id: str, cluster: str, kind: EventType, timeout: float = 120, **match: object
    ) -> float:
        def seen() -> bool:
            return any(
                e.event_type == kind and all(getattr(e, k) == v for k, v in match.items())
                for e in self.events(job_id, cluster)
            )

        return wait_until(
            seen,
            f"{kind.value} {match} of job {job_id} ({cluster})",
            timeout,
            lambda: self.trail(job_id) + self.unit_logs(),
        )

    def wait_cluster_settings(self, cluster: str, key: str, timeout: float = 120) -> None:
        """The deployment's ClusterWatch took the restarted workers' settings (its own audit row)."""

        def took() -> bool:
            page = self.open_store().list_events(
                event_type=EventType.SETTINGS_CHANGED, cluster=cluster, limit=100
            )
            return any(e.workload_key == "" and key in e.data for e in page.items)

        wait_until(took, f"settings_changed ({key}) of {cluster}", timeout, self.unit_logs)

    def unit_logs(self) -> str:
        self.units.check()
        tails = [
            f"--- {p.name}\n" + "\n".join(p.read_text(errors="replace").splitlines()[-15:])
            for p in sorted(self.units.logs.glob("*.log"))
        ]
        return "\nunit deaths: " + repr(self.units.deaths) + "\n" + "\n".join(tails)

    def wait_ready(self, documented_port: int, timeout: float = 90) -> float:
        url = f"http://127.0.0.1:{self.site.port(documented_port)}/readyz"

        def ready() -> bool:
            try:
                return httpx.get(url, timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        return wait_until(ready, f"API ready at {url}", timeout, self.unit_logs)

    # -- Slurm (the users' side) --
    def submit(
        self, comment: str, *, script: Path = SBATCH, env: dict[str, str] | None = None
    ) -> tuple[str, Path]:
        workdir = ROOT / "jobs" / uuid.uuid4().hex[:8]
        workdir.mkdir(parents=True)
        job_env = {
            "TRAINSIM_PY": str(REPO / "examples" / "trainsim.py"),
            "TRAINSIM_STEP_S": "0.1",
            "TRAINSIM_CKPT_EVERY": "5",
            "TRAINSIM_CKPT_DIR": str(workdir / "ckpt"),
            "TRAINSIM_NCCL_DELAY_S": "1",
            **(env or {}),
        }
        argv = [
            f"--chdir={workdir}",
            "--nodes=1",
            f"--output={workdir}/train-%j.out",
            f"--comment={comment}",
            "--requeue",
            "--open-mode=append",
            str(script),
        ]
        return self.slurm.sbatch(argv, env=job_env), workdir

    def show(self, job_id: str) -> dict[str, str]:
        return parse_record(self.slurm.scontrol_job(job_id))

    def wait_slurm(self, job_id: str, states: set[str], timeout: float = 120) -> float:
        return wait_until(
            lambda: self.show(job_id).get("JobState") in states,
            f"job {job_id} in {states}",
            timeout,
            lambda: self.trail(job_id) + self.unit_logs(),
        )


async def record_history(w: Walk, job_id: str, name: str) -> None:
    """The observed workload's history, for the replay tests (TRAINGUARD_RECORD_HISTORIES=1)."""
    if os.environ.get("TRAINGUARD_RECORD_HISTORIES") != "1":
        return
    found = next(e for e in w.events(job_id, MAIN) if e.event_type == EventType.WORKLOAD_DISCOVERED)
    workload = WorkloadId(cluster=found.cluster, job_id=found.job_id, submit_time=found.submit_time)
    client = await connect(Settings(temporal=TemporalSettings(address=w.temporal.address)))
    await save_history(client.get_workflow_handle(workload.workflow_id), name)


@pytest.fixture
def walk(
    ssh_slurm: LocalSlurmCluster, login_sshd: LocalSSHD, temporal_server: LocalTemporal
) -> Iterator[Walk]:
    shutil.rmtree(ROOT, ignore_errors=True)
    ROOT.mkdir(parents=True)
    db = MariaDBAudit(name=f"tgwalk_{uuid.uuid4().hex[:8]}")
    db.create()  # an empty database: the three units create the tables together
    w = Walk(ssh_slurm, login_sshd, temporal_server, db)
    try:
        yield w
    finally:
        w.units.stop_all()
        for job in ssh_slurm.active_job_ids():
            ssh_slurm._run(["scancel", job], check=False)
        if w.store is not None:
            w.store.close()
        db.drop()


@pytest.mark.timeout(600)
def test_the_documented_ssh_install_observe_canary_and_rollback(walk: Walk) -> None:
    w, site, units = walk, walk.site, walk.units
    started = time.monotonic()

    # ---- operator guide: install, keys, settings, env file, units ------------------------------------
    w.op.run(w.block("ssh-install", "bash"))
    assert [s.split()[0] for s in w.op.skipped] == ["useradd", "python3", "/opt/trainguard/venv/bin/pip"]
    w.op.run(w.block("ssh-keys", "bash"))
    # on the login node: the new key may log in (the guide's manual step there)
    with w.sshd.authorized_keys.open("a") as keys:
        keys.write(Path(w.etc("ssh/id_ed25519.pub")).read_text())
    settings = w.yaml_block("ssh-settings")
    set_key(settings, "cluster.ssh.host", "127.0.0.1")
    set_key(settings, "cluster.ssh.port", w.sshd.port)
    set_key(settings, "cluster.ssh.user", w.sshd.user)
    assert set(settings["cluster"]["ssh"]["slurm_env"]) == {"SLURM_CONF"}
    set_key(settings, "cluster.ssh.slurm_env", dict(w.slurm.env))
    set_key(settings, "temporal.address", w.temporal.address)
    set_key(settings, "temporal.namespace", "default")  # the dev server's
    set_key(settings, "api.port", site.port(settings["api"]["port"]))
    w.write_settings("trainguard.yaml", settings)
    env_lines = [line for line in w.block("ssh-env", "bash").splitlines() if line.strip()]
    assert env_lines[0].startswith("TRAINGUARD_AUDIT__URL=")
    env_lines[0] = f"TRAINGUARD_AUDIT__URL={w.db.url}"
    with w.etc("trainguard.env").open("a") as env_file:
        env_file.write("\n".join(env_lines) + "\n")
    operators = json.loads(read_env_file(w.etc("trainguard.env"))["TRAINGUARD_API__OPERATORS"])
    w.op.env["TOKEN"] = operators[0]["token"]

    w.op.run(w.block("ssh-start", "bash"))  # temporal register, then the three units at once
    assert sorted(units.procs) == ["trainguard-api", "trainguard-cluster-worker", "trainguard-control-worker"]
    w.wait_ready(8088)
    w.figures["install to API ready (s)"] = time.monotonic() - started

    # ---- first advice, observe mode ----------------------------------------------------------------
    first_advice = w.block("first-advice", "bash")
    observe = sbatch_comment(first_advice)
    assert json.loads(observe) == {"trainguard": {"environment": "prod", "mode": "observe"}}
    script = ROOT / "xid-then-exit.sbatch"
    script.write_text(XID_THEN_EXIT)
    job, _ = w.submit(observe, script=script)
    w.wait_event(job, MAIN, EventType.ADVICE, timeout=120)
    w.figures["install to first advice (s)"] = time.monotonic() - started
    detection = next(e for e in w.events(job, MAIN) if e.event_type == EventType.DETECTION)
    assert detection.data["job_state"] == "RUNNING", detection  # decided before Slurm's verdict
    w.wait_slurm(job, {"FAILED"})
    failed_at = time.monotonic()

    def workload_failed() -> bool:
        rows = w.open_store().list_workloads(cluster=MAIN, limit=100)
        return any(r.job_id == job and r.state == WorkloadState.FAILED for r in rows)

    # the bug of §6: the workload stayed `watching` for minutes after Slurm said FAILED
    wait_until(workload_failed, f"workload of job {job} failed", 30, lambda: w.trail(job))
    w.figures["Slurm FAILED to workload failed (s)"] = time.monotonic() - failed_at
    asyncio.run(record_history(w, job, "observe_advised_attempt_ends_failed"))
    listing, workloads = w.cli("first-advice", job)
    assert "advice" in listing and "Xid" in listing, listing
    assert job in workloads, workloads
    record = w.show(job)
    assert record["Restarts"] == "0" and record["ExcNodeList"] == "(null)" and not is_held(record), record
    advice = [e for e in w.events(job, MAIN) if e.event_type == EventType.ADVICE]
    assert advice and all(e.mode == "observe" for e in advice), advice

    w.figures["observe phase done (s)"] = time.monotonic() - started
    # ---- runbook stage 3: one owner per job, then the canary deployment ------------------------------
    w.write_settings("trainguard.yaml", merged(w.settings("trainguard.yaml"), w.yaml_block("main-owner")))
    w.op.run(w.block("main-restart", "bash"))
    canary = merged(w.settings("trainguard.yaml"), w.yaml_block("canary-settings"))
    set_key(canary, "api.port", site.port(w.yaml_block("canary-settings")["api"]["port"]))
    w.write_settings("canary.yaml", canary)
    w.op.run(w.block("canary-units", "bash"))
    assert {
        "trainguard-canary-api",
        "trainguard-canary-cluster-worker",
        "trainguard-canary-control-worker",
    } <= set(units.procs)
    w.wait_cluster_settings(MAIN, "environment_pattern")  # before canary jobs are submitted
    w.wait_ready(8089)
    canary_opt_in = sbatch_comment(w.block("canary-job", "bash"))
    canary_job, _ = w.submit(
        canary_opt_in,
        env={
            "TRAINSIM_ITERS": "60",
            "TRAINSIM_FAULT": "xid",
            "TRAINSIM_FAULT_AT": "12",
            "TRAINSIM_FAULT_ONCE": str(ROOT / "canary-fault.fired"),
        },
    )
    w.wait_event(canary_job, CANARY, EventType.DETECTION, timeout=120)
    detected = time.monotonic()
    w.wait_event(canary_job, CANARY, EventType.COMPLETED, timeout=180)
    w.figures["canary detection to completed (s)"] = time.monotonic() - detected
    steps = [e.action for e in w.events(canary_job, CANARY) if e.event_type == EventType.ACTION]
    assert steps[:3] == ["requeue_hold", "exclude", "release"], w.trail(canary_job)
    record = w.show(canary_job)
    assert record["JobState"] == "COMPLETED" and record["Restarts"] == "1", record
    assert record["ExcNodeList"] != "(null)", record
    assert w.events(canary_job, MAIN) == [], "the main deployment watched the canary job"
    (listing,) = w.cli("canary-audit", canary_job)
    assert "requeue_hold" in listing and "completed" in listing, listing

    w.figures["canary phase done (s)"] = time.monotonic() - started
    # ---- stage 4: the main deployment acts; stage 5: roll it back with a job running --------------------
    w.write_settings(
        "trainguard.yaml", merged(w.settings("trainguard.yaml"), w.yaml_block("stage4-settings"))
    )
    w.op.run(w.block("stage4-restart", "bash"))
    w.wait_cluster_settings(MAIN, "mode")
    trigger = ROOT / "rollback.trigger"
    prod_job, _ = w.submit(
        json.dumps({"trainguard": {"environment": "prod", "mode": "action"}}),
        env={"TRAINSIM_ITERS": "3000", "TRAINSIM_TRIGGER": str(trigger)},
    )
    w.wait_event(prod_job, MAIN, EventType.WORKLOAD_DISCOVERED, mode="action")
    w.figures["stage 4 done (s)"] = time.monotonic() - started
    w.op.run(w.block("rollback", "bash"))
    w.wait_event(prod_job, MAIN, EventType.SETTINGS_CHANGED, mode="observe")
    api_answer, cli_answer = w.cli("rollback-check", prod_job)
    sources = [(e["workload_key"] == "", e["data"].get("source")) for e in json.loads(api_answer)["items"]]
    assert (True, "worker restart") in sources and (False, "worker restart") in sources, sources
    assert "settings_changed" in cli_answer and "observe" in cli_answer, cli_answer
    assert w.show(prod_job)["JobState"] == "RUNNING"
    trigger.write_text("xid\n")
    w.wait_event(prod_job, MAIN, EventType.ADVICE)
    w.wait_slurm(prod_job, {"FAILED"})
    time.sleep(4)  # a wrongly acting worker would have requeued it by now
    record = w.show(prod_job)
    assert record["JobState"] == "FAILED" and record["Restarts"] == "0", record
    assert record["ExcNodeList"] == "(null)" and not is_held(record), record
    events = w.events(prod_job, MAIN)
    assert all(e.mode == "observe" for e in events if e.event_type == EventType.ADVICE), events
    assert not [e for e in events if e.event_type == EventType.ACTION], events

    # ---- what the walk must not have left or said ----------------------------------------------------
    units.check()
    assert units.deaths == [], units.deaths  # three units on an empty database, restarts: no crash
    logs = "".join(
        units.log(name) for name in ("trainguard-cluster-worker", "trainguard-canary-cluster-worker")
    )
    assert " INFO asyncssh" not in logs  # asyncssh stays at WARNING unless logging.loggers says otherwise
    assert "Traceback" not in "".join(units.log(p.stem) for p in units.logs.glob("*.log"))
    assert list(units.cwd.iterdir()) == []  # units write only under state_dir
    # the CLI without the env file (no database URL) has no store: it says so and fails
    bare = subprocess.run(
        [sys.executable, "-m", "trainguard", "--config", str(w.etc("trainguard.yaml")), "audit", "list"],
        cwd=units.cwd,
        env=base_env(site),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert bare.returncode == 2 and "audit" in bare.stderr.lower(), (
        bare.returncode,
        bare.stdout,
        bare.stderr,
    )
    assert list(units.cwd.iterdir()) == [] and not Path(site.path("/var/lib/trainguard/audit.db")).exists()
    w.figures["whole walk (s)"] = time.monotonic() - started
    w.figures["longest unit stop on restart (s)"] = max(units.stop_s)
    print("\n" + "\n".join(f"{k}: {v:.1f}" for k, v in w.figures.items()))

"""Capture real Slurm output of one version into tests/fixtures/slurm/<version>/fmt_*.{json,txt}.

Runs a private LocalSlurmCluster (needs root; 24.11 from the rootfs slurm-lab prepares) through the
scenarios the format layer must understand: running/held/failed/completed jobs, an array with a
pending remainder, a heterogeneous job, a requeue-hold, a node failure with Slurm's own requeue, and a
drained node. Usage: `python scripts/capture_slurm_formats.py 24.11` (or 22.05). Ports: base 28917
plus TG_TEST_PORT_OFFSET, so it runs beside the e2e clusters.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from trainguard.localstack.slurm import LocalSlurmCluster

REPO = Path(__file__).resolve().parents[1]
OPT_IN = '{"trainguard":{"environment":"prod","mode":"observe"}}'


def main(version: str) -> None:
    offset = int(os.environ.get("TG_TEST_PORT_OFFSET", "0"))
    port = 28917 + offset + (100 if version == "24.11" else 0)
    base = Path(f"/tmp/tg-fmt-{version}")
    if base.exists():
        shutil.rmtree(base)
    out = REPO / "tests" / "fixtures" / "slurm" / version
    out.mkdir(parents=True, exist_ok=True)
    work = base / "jobs"
    work.mkdir(parents=True)
    lab = LocalSlurmCluster(base, nodes=4, ctld_port=port, node_port_base=port + 184, version=version)
    env = {**os.environ, **lab.env}

    def run(*argv: str) -> str:
        """stdout, or "" when the command failed (22.05's scontrol has no --json: nothing is written)."""
        proc = subprocess.run(list(argv), env=env, capture_output=True, text=True, timeout=30, check=False)
        return proc.stdout if proc.returncode == 0 else ""

    def save(name: str, text: str) -> None:
        if text:
            (out / name).write_text(text)

    def capture(name: str, jobs: list[str]) -> None:
        save(f"fmt_{name}_squeue.json", run("squeue", "--json", "-t", "all"))
        save(f"fmt_{name}_states.json", run("squeue", "--json", "--only-job-state", "-t", "all"))
        save(f"fmt_{name}_sinfo.json", run("sinfo", "--json"))
        save(f"fmt_{name}_nodes.json", run("scontrol", "show", "node", "--json"))
        save(f"fmt_{name}_nodes.txt", run("scontrol", "show", "nodes", "-o"))
        save(f"fmt_{name}_squeue_ids.txt", run("squeue", "-h", "-t", "all", "-o", "%i|%T|%r"))
        text = "".join(
            run("env", "SLURM_TIME_FORMAT=%s", "scontrol", "show", "job", "-d", "-o", job) for job in jobs
        )
        save(f"fmt_{name}_jobs.txt", text)

    def script(name: str, body: str) -> str:
        path = work / f"{name}.sh"
        path.write_text(f"#!/bin/bash\n{body}\n")
        path.chmod(0o755)
        return str(path)

    lab.start()
    try:
        sleep = script("sleep", "srun -l sleep 600")
        common = ["-D", str(work), "-o", f"{work}/%x-%j.out"]
        train = lab.sbatch([*common, "-N", "2", "-J", "train %x", "--comment", OPT_IN, sleep])
        held = lab.sbatch([*common, "-N", "1", "--hold", "--comment", "plain; rm -rf /", sleep])
        failed = lab.sbatch([*common, "-N", "1", script("fail", "exit 3")])
        done = lab.sbatch([*common, "-N", "1", script("ok", "exit 0")])
        array = lab.sbatch([*common, "-N", "1", "--array=0-3%1", "--comment", OPT_IN, sleep])
        het = lab.sbatch([*common, "-N", "1", "--comment", OPT_IN, ":", "-N", "1", sleep])
        time.sleep(4)
        ids = [train, held, failed, done, array, het, str(int(het) + 1)]
        capture("mixed", ids)

        subprocess.run(["scontrol", "requeuehold", train], env=env, check=False, timeout=30)
        capture("requeuehold_now", [train])
        time.sleep(4)
        capture("requeuehold_later", [train])

        for job in (array, het, held, train):
            subprocess.run(["scancel", job], env=env, check=False, timeout=30)
        time.sleep(3)
        victim = lab.sbatch([*common, "-N", "1", "-w", "node3", "--requeue", "--comment", OPT_IN, sleep])
        time.sleep(3)
        lab.kill_node("node3")
        subprocess.run(
            ["scontrol", "update", "NodeName=node4", "State=DRAIN", "Reason=bad gpu seen by trainguard"],
            env=env,
            check=False,
            timeout=30,
        )
        # Slurm requeues the victim once node3 is DOWN (~10-12 s): catch its old allocation tearing down.
        deadline = time.monotonic() + 40
        seen = 0
        while time.monotonic() < deadline and seen < 3:
            text = run("squeue", "--json", "-t", "all", "-j", victim)
            if '"COMPLETING"' in text or '"NODE_FAIL"' in text or '"REQUEUED"' in text:
                capture(f"node_fail_{seen}", [victim])
                seen += 1
                time.sleep(1.5)
            time.sleep(0.3)
        capture("node_fail_end", [victim])
    finally:
        lab.stop()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "24.11")

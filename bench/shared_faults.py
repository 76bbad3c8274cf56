"""Faults while both worker processes live (bench.scale's two-worker fault window).

Each worker process runs its own replica of the simulated cluster, so a fault is visible only to the
process that writes it. In the two-worker window each process faults only the jobs whose watch runs in it
(`mine`), at the per-workload rate over those jobs, so the two together fault the cluster at the set rate
and every fault can be seen. The survivor switches the window on and off with a flag file; the replica
appends each fault it writes to a JSON-lines file, from which the survivor reads them back to time their
detection (one clock: both processes run on this machine)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.simcluster import Fault, SimJob, SimWorkloads
from trainguard.models import workflow_id_for


@dataclass(frozen=True)
class SharedFaultFiles:
    flag: Path  # exists while the two-worker fault window is open
    log: Path  # the replica's faults, one JSON object a line

    @classmethod
    def under(cls, base: Path) -> SharedFaultFiles:
        return cls(base / "faulting", base / "replica-faults.jsonl")

    def open_window(self) -> None:
        self.flag.touch()

    def close_window(self) -> None:
        self.flag.unlink(missing_ok=True)

    def append(self, fault: Fault) -> None:
        with self.log.open("a") as f:
            f.write(json.dumps({"job_id": fault.job_id, "at": fault.at, "node": fault.node}) + "\n")

    def replica_faults(self) -> list[Fault]:
        if not self.log.exists():
            return []
        rows = [json.loads(line) for line in self.log.read_text().splitlines() if line.strip()]
        return [Fault(r["job_id"], float(r["at"]), r["node"]) for r in rows]


def watched_here(cluster: str, watched: dict[str, float]) -> Callable[[SimJob], bool]:
    """Jobs whose watch runs in this process (ClusterActivities.watched is keyed by workflow id)."""
    ids: dict[str, str] = {}

    def mine(job: SimJob) -> bool:
        snap = job.snap
        wid = ids.get(snap.job_id)
        if wid is None:
            wid = ids[snap.job_id] = workflow_id_for(cluster, snap.job_id, snap.submit_time)
        return wid in watched

    return mine


async def follow_window(files: SharedFaultFiles, workloads: SimWorkloads, every_s: float = 0.25) -> None:
    """The replica's side: fault while the survivor holds the window open."""
    while True:
        workloads.faulting = files.flag.exists()
        await asyncio.sleep(every_s)

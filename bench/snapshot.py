"""Snapshot cost at 1,000 / 10,000 / 50,000 jobs, Slurm 22.05 and 24.11 formats, through the real parser.

    .venv/bin/python -m bench.snapshot [--jobs 1000,10000,50000] [--watched 0.01]

Input is real captured output (tests/fixtures/slurm/{22.05,24.11}/fmt_mixed_*), scaled up by replicating
its job objects with new ids and printed as Slurm prints it (2-space indented JSON). For each size:

* **full**: `squeue --json -t all` text -> JobSnapshots (load + parse_jobs), CPU seconds per snapshot.
* **incr** (24.11 only; 22.05 ignores `-j` and has no `--only-job-state`): the state listing of every
  job + detail records of the watched (opted-in) jobs and of the jobs whose state changed (as many
  again), parsed, planned and merged as trainguard.slurm.incremental does. Every 30th snapshot is
  still a full read; the per-minute figure includes that share.
* **interval**: what SnapshotCache serves at a 2 s setting: max(2 s, 4 x cost).
* **CPU-s/min**: parsing CPU per minute at that interval; **old** is the previous behaviour (a full read
  every 2 s, back to back when slower: min(60, 30 x cost)).
* **stall thr / stall** (ms): the longest the event loop went without running a 5 ms ticker while one
  full parse ran in a thread / as SlurmClient runs it (trainguard.slurm.offload: a helper process for
  documents over 2 MB). json.loads holds the GIL for a whole document, so a thread does not help.
* **incr interval/CPU-s/min** count 29 incremental snapshots and one full read per cycle.

Not measured here: slurmctld's and squeue's own cost of producing the output (needs a real slurmctld
holding that many jobs); the parse is TrainGuard's share.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainguard.models import JobSnapshot
from trainguard.slurm import incremental, offload
from trainguard.slurm.formats import parse_jobs
from trainguard.slurm.parsers import load_document

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "slurm"
OPT_IN = '{"trainguard":{"environment":"prod","mode":"observe"}}'
SETTING_S = 2.0
COST_FACTOR = 4.0
FULL_EVERY = 30


@dataclass(frozen=True)
class Row:
    version: str
    jobs: int
    doc_mb: float
    full_cpu_s: float
    full_interval_s: float
    full_per_min: float
    old_per_min: float
    incr_cpu_s: float | None
    incr_interval_s: float | None
    incr_per_min: float | None
    stall_thread_ms: float | None
    stall_ms: float | None


def _load(version: str, name: str) -> dict[str, Any]:
    doc = json.loads((FIXTURES / version / name).read_text())
    assert isinstance(doc, dict)
    return doc


def _set_id(job: dict[str, Any], new_id: int) -> None:
    job["job_id"] = new_id


def scale_jobs(doc: dict[str, Any], n: int, watched: float) -> dict[str, Any]:
    """`doc` with n jobs: its real job objects replicated under new ids; a `watched` share opted in."""
    base = doc["jobs"]
    every = max(1, round(1 / watched)) if watched > 0 else 0
    jobs = []
    for i in range(n):
        job = copy.deepcopy(base[i % len(base)])
        _set_id(job, 100_000 + i)
        job["comment"] = OPT_IN if every and i % every == 0 else "plain job"
        jobs.append(job)
    return {**doc, "jobs": jobs}


def states_of(doc: dict[str, Any], jobs: Sequence[JobSnapshot]) -> dict[str, Any]:
    """The `--only-job-state` listing of a (scaled) 24.11 document, ids printed as the real one prints
    them (`8_0` for an array task, one `5_<t>` per pending task, `7+1` for a het component)."""
    entries = []
    for raw, job in zip(doc["jobs"], jobs, strict=True):
        entries.extend({"job_id": pid, "state": raw["job_state"]} for pid in incremental.printed_ids(job))
    return {"jobs": entries, "meta": doc["meta"], "errors": [], "warnings": []}


def _parse(text: str) -> list[JobSnapshot]:
    try:
        return parse_jobs(load_document(text, "squeue --json"))
    except ValueError:
        return []


def _cpu(fn: Any, repeat: int = 1) -> tuple[float, Any]:
    best = float("inf")
    result = None
    for _ in range(repeat):
        start = time.process_time()
        result = fn()
        best = min(best, time.process_time() - start)
    return best, result


async def _stall_ms(text: str, *, process: bool) -> float:
    """Longest gap between 5 ms ticks of the event loop while one parse runs off the loop: in a thread,
    or as SlurmClient does it (trainguard.slurm.offload: a helper process for large documents)."""
    loop = asyncio.get_running_loop()
    worst = 0.0
    done = False

    async def ticker() -> None:
        nonlocal worst
        last = loop.time()
        while not done:
            await asyncio.sleep(0.005)
            now = loop.time()
            worst = max(worst, now - last)
            last = now

    if process:  # start the helper process first: its one-time start is not a per-snapshot cost
        await offload.parse(_parse, "x" * offload.PROCESS_THRESHOLD_BYTES)
    tick = asyncio.create_task(ticker())
    await asyncio.sleep(0.02)
    if process:
        await offload.parse(_parse, text)
    else:
        await asyncio.to_thread(_parse, text)
    done = True
    await tick
    return worst * 1000


def measure(version: str, n: int, watched: float, *, stall: bool = True, repeat: int = 1) -> Row:
    real = _load(version, "fmt_mixed_squeue.json")
    doc = scale_jobs(real, n, watched)
    text = json.dumps(doc, indent=2)
    full_cpu, jobs = _cpu(lambda: parse_jobs(load_document(text, "squeue --json")), repeat)
    assert len(jobs) == n
    interval = max(SETTING_S, COST_FACTOR * full_cpu)
    incr_cpu = incr_interval = incr_per_min = None
    if version != "22.05":
        states_text = json.dumps(states_of(doc, jobs), indent=2)
        wanted = [j for j in doc["jobs"] if j["comment"] == OPT_IN]
        changed = doc["jobs"][1 : 1 + len(wanted)]  # as many jobs again changed state since last time
        detail_text = json.dumps({**doc, "jobs": wanted + changed}, indent=2)

        def incremental_read() -> int:
            job_states = incremental.parse_job_states(load_document(states_text, "squeue --only-job-state"))
            todo = incremental.plan(job_states, jobs, lambda job: "trainguard" in job.comment)
            details = parse_jobs(load_document(detail_text, "squeue --json"))
            return len(incremental.merge(todo.keep, details))

        incr_cpu, merged = _cpu(incremental_read, repeat)
        assert merged >= n - len(changed)
        # FULL_EVERY - 1 incremental snapshots, then one full read; each sets the next interval.
        incr_interval = max(SETTING_S, COST_FACTOR * incr_cpu)
        cycle_cpu = incr_cpu * (FULL_EVERY - 1) + full_cpu
        cycle_s = incr_interval * (FULL_EVERY - 1) + interval
        incr_per_min = cycle_cpu * 60 / cycle_s
    stall_thread_ms = asyncio.run(_stall_ms(text, process=False)) if stall else None
    stall_ms = asyncio.run(_stall_ms(text, process=True)) if stall else None
    return Row(
        version=version,
        jobs=n,
        doc_mb=len(text) / 1e6,
        full_cpu_s=full_cpu,
        full_interval_s=interval,
        full_per_min=full_cpu * 60 / interval,
        old_per_min=min(60.0, full_cpu * 60 / SETTING_S),
        incr_cpu_s=incr_cpu,
        incr_interval_s=incr_interval,
        incr_per_min=incr_per_min,
        stall_thread_ms=stall_thread_ms,
        stall_ms=stall_ms,
    )


def _f(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def table(rows: Sequence[Row]) -> str:
    head = (
        f"{'slurm':<6} {'jobs':>6} {'MB':>6} {'full cpu s':>10} {'interval s':>10} {'CPU-s/min':>9} "
        f"{'old':>6} {'incr cpu s':>10} {'interval s':>10} {'CPU-s/min':>9} {'stall thr':>9} {'stall':>6}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r.version:<6} {r.jobs:>6} {r.doc_mb:>6.1f} {r.full_cpu_s:>10.3f} {r.full_interval_s:>10.1f} "
            f"{r.full_per_min:>9.2f} {r.old_per_min:>6.1f} {_f(r.incr_cpu_s, 3):>10} "
            f"{_f(r.incr_interval_s, 1):>10} {_f(r.incr_per_min):>9} {_f(r.stall_thread_ms, 0):>9} "
            f"{_f(r.stall_ms, 0):>6}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--jobs", default="1000,10000,50000")
    parser.add_argument("--watched", type=float, default=0.01, help="share of jobs opted in (watched)")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.jobs.split(",") if s]
    rows = [measure(v, n, args.watched, stall=n <= 10_000) for v in ("22.05", "24.11") for n in sizes]
    print(table(rows))


if __name__ == "__main__":
    main()

"""A tiny run of bench/snapshot.py (the snapshot-cost benchmark), so it keeps working."""

from __future__ import annotations

import json

from bench import snapshot
from trainguard.slurm import incremental
from trainguard.slurm.formats import parse_jobs


def test_scaled_documents_keep_real_jobs_and_ids_as_slurm_prints_them() -> None:
    real = snapshot._load("24.11", "fmt_mixed_squeue.json")
    doc = snapshot.scale_jobs(real, 40, watched=0.1)
    jobs = parse_jobs(doc)
    assert len(jobs) == 40 and len({j.job_id for j in jobs}) == 40
    assert sum(1 for j in jobs if "trainguard" in j.comment) == 4
    states = incremental.parse_job_states(snapshot.states_of(doc, jobs))
    assert set(states) == {i for j in jobs for i in incremental.printed_ids(j)}


def test_snapshot_bench_smoke_both_formats() -> None:
    rows = [snapshot.measure(version, 60, 0.05, stall=False) for version in ("22.05", "24.11")]
    old, new = rows
    assert (old.version, old.jobs, old.incr_cpu_s) == ("22.05", 60, None)
    assert new.incr_cpu_s is not None and new.incr_per_min is not None
    for row in rows:
        assert row.doc_mb > 0 and row.full_cpu_s > 0 and row.full_interval_s >= snapshot.SETTING_S
        assert row.full_per_min <= 60 / snapshot.COST_FACTOR + 1e-9  # never more than a quarter of a core
    table = snapshot.table(rows)
    assert "22.05" in table and "24.11" in table
    json.dumps([r.__dict__ for r in rows])

"""bench.soak's own logic: which workflows outlived their job, how fast memory grows, how jobs churn."""

from __future__ import annotations

import asyncio
import math
import random

from bench.simcluster import SimFiles, SimSlurm
from bench.soak import Churn, growth_per_hour, job_of, orphans


def test_the_job_id_is_read_from_the_workflow_id() -> None:
    assert job_of("trainguard-job-sim-200001-1764561600") == "200001"
    assert job_of("trainguard-job-sim-12_3-1764561600") == "12_3"
    assert job_of("trainguard-cluster-sim") is None
    assert job_of("trainguard-job-simx-5-1") is None  # another cluster's prefix does not match
    assert job_of("trainguard-job-sim-7") is None


def test_a_workflow_is_left_behind_only_once_its_job_is_gone_longer_than_the_grace() -> None:
    running = ["trainguard-job-sim-1-100", "trainguard-job-sim-2-100", "trainguard-job-sim-3-100"]
    gone = {"1": 1000.0, "2": 1100.0}
    assert orphans(running, gone, now=1150.0, grace_s=120.0) == ["trainguard-job-sim-1-100"]
    assert orphans(running, gone, now=1119.0, grace_s=120.0) == []


def test_growth_per_hour_is_the_least_squares_slope() -> None:
    assert math.isclose(growth_per_hour([(0.0, 100.0), (1800.0, 110.0), (3600.0, 120.0)]), 20.0)
    noisy = [(0.0, 100.0), (600.0, 103.0), (1200.0, 101.0), (1800.0, 104.0)]
    assert 0 < growth_per_hour(noisy) < 10
    assert math.isnan(growth_per_hour([(0.0, 1.0)]))


def test_jobs_end_linger_leave_and_are_replaced() -> None:
    sim = SimSlurm("sim", SimFiles(), clock=lambda: 0.0, parse=False)
    churn = Churn(sim, random.Random(3), lifetime=(10.0, 10.0), linger_s=5.0, vanish_share=0.5)
    for _ in range(20):
        churn.submit(0.0)
    churn.tick(10.0)  # every job's lifetime is over: ended (finished or vanished), each replaced
    assert churn.counts["submitted"] == 40
    vanished = churn.counts["vanished"]
    assert 0 < vanished < 20 and set(churn.gone) == {j for j in churn.gone if j not in sim.jobs}
    assert len(sim.jobs) == 40 - vanished  # the finished ones are still listed
    churn.tick(15.0)
    assert len(churn.gone) == 20 and len(sim.jobs) == 20
    assert all(job.snap.state == "RUNNING" for job in sim.jobs.values())


def test_trimmed_logs_keep_their_offsets() -> None:
    files = SimFiles()
    files.append("/a", "0123456789")
    files.trim("/a", 4)
    stat = asyncio.run(files.stat("/a"))
    assert stat is not None and stat.size == 10
    assert asyncio.run(files.read_file("/a", 8, 100)) == b"89"
    assert asyncio.run(files.read_file("/a", 0, 100)) == b"6789"  # behind the trim: the kept head
    assert files.held_bytes == 4

"""Tiny versions of the benchmarks in bench/, so they keep working as the code under them changes."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest

from bench import latency, scale, takeover_floor
from bench.common import Dist, percentile
from bench.simcluster import SimFiles, SimSlurm, SimWorkloads, opt_in_comment
from tests.e2e.stack import PORT_OFFSET
from trainguard.detection.analyzer import LogAnalyzer
from trainguard.models import ProgressState


def test_percentile_is_nearest_rank_and_nan_when_empty() -> None:
    values = [5.0, 1.0, 4.0, 2.0, 3.0]
    assert percentile(values, 50) == 3.0
    assert percentile(values, 95) == 5.0
    assert percentile(values, 0) == 1.0
    assert math.isnan(percentile([], 50))
    d = Dist.of(values)
    assert (d.n, d.p50, d.max) == (5, 3.0, 5.0)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


async def test_sim_slurm_requeues_holds_and_restarts_like_slurm() -> None:
    clock = Clock()
    sim = SimSlurm("sim", SimFiles(), restart_delay_s=5.0, clock=clock)
    sim.add_job("7", comment=opt_in_comment(), interval_s=1.0, nodes=("gpu0001", "gpu0002"))
    workloads = SimWorkloads(sim)

    held = await sim.requeue_hold("7", expected_restarts=0)
    assert (held.performed, held.held, held.restart_count, held.job_state) == (True, True, 1, "PENDING")
    again = await sim.requeue_hold("7", expected_restarts=0)  # a retried step must not requeue twice
    assert again.restart_count == 1
    await sim.set_excluded("7", ["gpu0002"])
    released = await sim.release("7")
    assert released.performed and not released.held
    clock.now += 1.0
    workloads.tick()
    assert (await sim.job("7")).state == "PENDING"  # type: ignore[union-attr]
    clock.now += 5.0
    workloads.tick()
    job = await sim.job("7")
    assert job is not None and job.state == "RUNNING" and "gpu0002" not in job.nodes


async def test_sim_logs_are_progress_lines_then_a_detectable_fault() -> None:
    clock = Clock()
    files = SimFiles()
    sim = SimSlurm("sim", files, clock=clock)
    sim.add_job("8", comment=opt_in_comment(), interval_s=1.0, nodes=("gpu0001", "gpu0002"))
    workloads = SimWorkloads(sim, faults_per_hour=3600.0 * 50, fault_to_exit_s=1.0)
    for _ in range(5):
        clock.now += 1.1
        workloads.tick()
    workloads.faulting = True
    clock.now += 0.5
    workloads.tick()
    assert len(workloads.faults) == 1
    clock.now += 1.5
    workloads.tick()
    assert (await sim.job("8")).state == "FAILED"  # type: ignore[union-attr]

    stat = await files.stat("/sim/8.out")
    assert stat is not None
    data = await files.read_file("/sim/8.out", 0, stat.size)
    nodes = ("gpu0001", "gpu0002")
    analyzer = LogAnalyzer(ProgressState(), node_of_rank=lambda r: nodes[r] if 0 <= r < len(nodes) else None)
    findings = analyzer.feed(data, now=clock.now)
    assert analyzer.progress_lines >= 4
    # the simulated Xid names rank 1's node, as trainsim's does, so attribution can exclude it
    assert any(f.fatal and f.nodes == (workloads.faults[0].node,) for f in findings), findings


async def test_scale_smoke_detects_every_fault_under_a_small_load(tmp_path: Path) -> None:
    # Faults are Poisson draws, each process's over the jobs it watches: ~7 expected in the 2 s two-worker
    # window, then ~17 in the 8 s window over the ~13 jobs not yet faulted. Under load, a 6 s two-worker
    # window at 400/h twice left no job to fault after it (a job faulted, requeued or still failed is not
    # faulted again).
    args = scale.parse_args(
        [
            "--workloads",
            "20",
            "--healthy",
            "5",
            "--duration",
            "8",
            "--shared-faults",
            "2",
            "--warmup",
            "1",
            "--drain",
            "6",
            "--faults-per-hour",
            "600",
            "--interval",
            "1",
            "2",
            "--sample",
            "5",
            "--base-dir",
            str(tmp_path),
        ]
    )
    report = await scale.run(args)
    assert report.workloads == 20
    assert report.faults > 0, report.render()
    assert report.undetected == 0
    assert report.detection.p95 <= 10.0
    assert report.window_s >= 5.0 and report.worker_peak_mib > 0
    assert "detection p50" in report.render()
    # faults while both worker processes lived: each faulted the jobs it watched, and all were seen
    shared = report.shared
    assert shared is not None and shared.faults > 0 and shared.undetected == 0, shared
    assert shared.detection.p95 <= 10.0, shared
    assert "two workers" in report.render()
    # the second cluster worker (a process) was SIGKILLed: its watches ran again on the survivor
    loss = report.loss
    assert loss is not None and loss.held > 0 and len(loss.resumed) == loss.held, loss
    assert loss.takeover is not None and loss.takeover.taken >= loss.held, loss  # + discovery, if it held it
    assert max(loss.resumed) <= 30.0, loss


async def test_takeover_floor_smoke_every_failed_activity_resumes_on_the_taker(tmp_path: Path) -> None:
    args = takeover_floor.parse_args(
        ["--lost", "30", "--settle", "2", "--timeout", "60", "--base-dir", str(tmp_path)]
    )
    result = await takeover_floor.run(args)
    assert (result.lost, result.fail_errors, result.not_resumed) == (30, 0, 0), result
    assert result.resumed.n == 30 and 0 < result.resumed.p50 <= result.resumed.max < 60, result
    assert "resumed on the taker" in result.render()


@pytest.mark.e2e
async def test_latency_smoke_one_xid_on_the_real_cluster() -> None:
    base = Path(f"/tmp/tg-h1/bench-latency-{PORT_OFFSET}")  # pytest-xdist's tmp_path is too deep for Slurm
    shutil.rmtree(base, ignore_errors=True)
    args = latency.parse_args(["--faults", "xid", "--base-dir", str(base), "--port-offset", str(PORT_OFFSET)])
    results = await latency.run(args)
    assert len(results) == 1
    r = results[0]
    assert r.detection_s is not None and 0 <= r.detection_s < 10, r
    assert r.action_latency_s is not None and r.action_latency_s < 10, r
    assert r.productive_s is not None and r.productive_s > r.detection_s, r
    assert "xid" in latency.summarise(results)

"""examples/trainsim.py, run standalone in subprocesses the way srun would start each rank."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest

TRAINSIM = Path(__file__).resolve().parents[2] / "examples" / "trainsim.py"
PROGRESS = re.compile(r"^ iteration\s+(\d+)/\s*(\d+) \| .*elapsed time per iteration \(ms\): ([\d.]+)", re.M)


def sim_env(tmp: Path, **overrides: object) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "TRAINSIM_"))}
    env.update(
        TRAINSIM_STEP_S="0.01",
        TRAINSIM_ITERS="12",
        TRAINSIM_CKPT_EVERY="5",
        TRAINSIM_CKPT_S="0",
        TRAINSIM_CKPT_DIR=str(tmp / "ckpt"),
        TRAINSIM_NCCL_DELAY_S="0.2",
    )
    env.update({k: str(v) for k, v in overrides.items()})
    return env


def rank_env(tmp: Path, rank: int, node: str, **overrides: object) -> dict[str, str]:
    return sim_env(
        tmp,
        SLURM_PROCID=rank,
        SLURM_NTASKS=2,
        SLURMD_NODENAME=node,
        SLURM_JOB_NODELIST="node[1-2]",
        SLURM_JOB_ID=77,
        **overrides,
    )


def run_sim(env: dict[str, str], timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(TRAINSIM)], env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def start_sim(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, str(TRAINSIM)], env=env, stdout=out, stderr=subprocess.STDOUT
        )


def wait_for(log: Path, pattern: str, timeout: float = 20.0) -> str:
    deadline = time.monotonic() + timeout
    regex = re.compile(pattern, re.M)
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace") if log.exists() else ""
        if regex.search(text):
            return text
        time.sleep(0.05)
    raise TimeoutError(f"{pattern!r} not seen in {log} within {timeout}s")


def iterations(text: str) -> list[int]:
    return [int(m.group(1)) for m in PROGRESS.finditer(text)]


def step_ms(text: str) -> dict[int, float]:
    return {int(m.group(1)): float(m.group(3)) for m in PROGRESS.finditer(text)}


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=10)


def load_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("trainsim", TRAINSIM)
    if spec is None or spec.loader is None:
        raise ImportError(TRAINSIM)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve string annotations through sys.modules
    spec.loader.exec_module(module)
    return module


# -------------------------------------------------------------------------------------- healthy runs


def test_healthy_run_logs_every_iteration_checkpoints_and_completes(tmp_path: Path) -> None:
    result = run_sim(sim_env(tmp_path))
    assert result.returncode == 0, result.stderr
    assert iterations(result.stdout) == list(range(1, 13))
    assert "timeout=1800" in result.stdout  # the benign config look-alike is there for detectors to ignore
    assert re.search(r"^\S+:\d+:\d+ \[0\] NCCL INFO ", result.stdout, re.M)
    assert "saving checkpoint at iteration 5 to" in result.stdout
    assert "successfully saved checkpoint at iteration 10" in result.stdout
    assert result.stdout.rstrip().splitlines()[-1].startswith("training complete")
    saved = sorted(p.name for p in (tmp_path / "ckpt").glob("iter_*.json"))
    assert saved == ["iter_0000005.json", "iter_0000010.json", "iter_0000012.json"]
    state = json.loads((tmp_path / "ckpt" / "iter_0000012.json").read_text())
    assert state["iteration"] == 12 and state["consumed_samples"] == 12 * 32
    assert not list((tmp_path / "ckpt").glob(".*.tmp"))  # atomic rename left no temporaries


def test_restart_resumes_from_newest_checkpoint(tmp_path: Path) -> None:
    first = run_sim(sim_env(tmp_path, TRAINSIM_ITERS=8))
    assert first.returncode == 0
    second = run_sim(sim_env(tmp_path, TRAINSIM_ITERS=14, SLURM_RESTART_COUNT=1))
    assert second.returncode == 0
    assert f"loading checkpoint from {tmp_path / 'ckpt'} at iteration 8" in second.stdout
    assert iterations(second.stdout) == list(range(9, 15))
    assert "consumed samples:          288 |" in second.stdout  # 9 x 32: the counter resumed too


def test_non_zero_rank_prefixes_its_lines_and_leaves_progress_to_rank_0(tmp_path: Path) -> None:
    result = run_sim(rank_env(tmp_path, 1, "node2"))
    assert result.returncode == 0
    assert iterations(result.stdout) == []
    assert "[rank1]: initializing rank 1 of 2 on host node2" in result.stdout
    assert re.search(r"^node2:\d+:\d+ \[0\] NCCL INFO .*rank 1 nranks 2", result.stdout, re.M)


# ------------------------------------------------------------------------------------------- faults


def test_exception_prints_application_traceback_and_exits_1(tmp_path: Path) -> None:
    result = run_sim(sim_env(tmp_path, TRAINSIM_FAULT="exception", TRAINSIM_FAULT_AT=4))
    assert result.returncode == 1
    assert iterations(result.stdout) == [1, 2, 3]
    assert "[rank0]: Traceback (most recent call last):" in result.stderr
    assert result.stderr.rstrip().splitlines()[-1] == "[rank0]: KeyError: 'input_ids'"


def test_oom_prints_torch_out_of_memory(tmp_path: Path) -> None:
    result = run_sim(sim_env(tmp_path, TRAINSIM_FAULT="oom", TRAINSIM_FAULT_AT=2))
    assert result.returncode == 1
    assert re.search(
        r"^\[rank0\]: torch\.OutOfMemoryError: CUDA out of memory\. Tried to allocate [\d.]+ GiB",
        result.stderr,
        re.M,
    )


def test_xid_names_the_host_and_exits_non_zero(tmp_path: Path) -> None:
    result = run_sim(
        rank_env(tmp_path, 1, "node2", TRAINSIM_FAULT="xid", TRAINSIM_FAULT_AT=3, TRAINSIM_FAULT_NODE="node2")
    )
    assert result.returncode != 0
    assert re.search(
        r"^node2: NVRM: Xid \(PCI:0000:[0-9a-f]{2}:00\): 79, pid=\d+, name=python3, "
        r"GPU has fallen off the bus\.",
        result.stderr,
        re.M,
    )
    assert "[rank1]: RuntimeError: CUDA error: uncorrectable ECC error encountered" in result.stderr


def test_xid_code_is_configurable(tmp_path: Path) -> None:
    result = run_sim(sim_env(tmp_path, TRAINSIM_FAULT="xid", TRAINSIM_FAULT_AT=2, TRAINSIM_XID=48))
    assert result.returncode == 1
    assert re.search(r"NVRM: Xid \(PCI:[0-9a-f:]+\): 48, .*double bit error", result.stderr)


def test_crash_dies_by_segfault(tmp_path: Path) -> None:
    result = run_sim(sim_env(tmp_path, TRAINSIM_FAULT="crash", TRAINSIM_FAULT_AT=3))
    assert result.returncode == -signal.SIGSEGV
    assert "[rank0]: Fatal Python error: Segmentation fault" in result.stderr


def test_nccl_timeout_faulty_rank_hangs_and_peer_prints_watchdog_cascade(tmp_path: Path) -> None:
    fault = {"TRAINSIM_FAULT": "nccl_timeout", "TRAINSIM_FAULT_AT": 4, "TRAINSIM_FAULT_NODE": "node2"}
    log0, log1 = tmp_path / "r0.log", tmp_path / "r1.log"
    healthy = start_sim(rank_env(tmp_path, 0, "node1", **fault), log0)
    faulty = start_sim(rank_env(tmp_path, 1, "node2", **fault), log1)
    try:
        assert healthy.wait(timeout=30) == -signal.SIGABRT
        text0 = log0.read_text()
        assert iterations(text0) == [1, 2, 3]
        assert re.search(
            r"^\[rank0\]:\[E\d{4} [\d:.]+ ProcessGroupNCCL\.cpp:\d+\] \[Rank 0\] Watchdog caught collective "
            r"operation timeout: WorkNCCL\(SeqNum=\d+, OpType=ALLREDUCE, .*\) "
            r"ran for \d+ milliseconds before timing out\.$",
            text0,
            re.M,
        )
        assert "To avoid data inconsistency, we are taking the entire process down." in text0
        text1 = wait_for(log1, r"NCCL WARN")
        assert re.search(r"^node2:\d+:\d+ \[0\] NCCL WARN NET/IB : .*port error", text1, re.M)
        time.sleep(0.3)
        assert faulty.poll() is None  # the stuck rank stays stuck until srun kills it
        assert "Watchdog caught" not in log1.read_text()
    finally:
        stop(healthy)
        stop(faulty)


def test_hang_stops_progress_without_exiting(tmp_path: Path) -> None:
    log = tmp_path / "out.log"
    proc = start_sim(sim_env(tmp_path, TRAINSIM_FAULT="hang", TRAINSIM_FAULT_AT=4), log)
    try:
        wait_for(log, r"iteration\s+3/")
        time.sleep(0.5)  # 50 step times
        assert proc.poll() is None
        assert iterations(log.read_text()) == [1, 2, 3]
    finally:
        stop(proc)


def test_slow_node_makes_steps_three_to_five_times_slower(tmp_path: Path) -> None:
    result = run_sim(sim_env(tmp_path, TRAINSIM_STEP_S=0.03, TRAINSIM_FAULT="slow", TRAINSIM_FAULT_AT=7))
    assert result.returncode == 0
    ms = step_ms(result.stdout)
    before = sum(ms[i] for i in range(1, 7)) / 6
    after = sum(ms[i] for i in range(7, 13)) / 6
    assert 2.5 < after / before < 6.0


@pytest.mark.parametrize("kind", ["xid", "hang"])
def test_fault_on_a_node_outside_the_job_never_fires(tmp_path: Path, kind: str) -> None:
    marker = tmp_path / "fired"
    env = rank_env(
        tmp_path,
        0,
        "node1",
        TRAINSIM_FAULT=kind,
        TRAINSIM_FAULT_AT=2,
        TRAINSIM_FAULT_NODE="node9",
        TRAINSIM_FAULT_ONCE=marker,
    )
    result = run_sim(env, timeout=15)
    assert result.returncode == 0
    assert iterations(result.stdout) == list(range(1, 13))
    assert "NVRM" not in result.stderr
    assert not marker.exists()  # the fault stays armed for a job that does include node9


def test_trigger_file_fires_the_named_fault_mid_run(tmp_path: Path) -> None:
    trigger = tmp_path / "trigger"
    log = tmp_path / "out.log"
    proc = start_sim(sim_env(tmp_path, TRAINSIM_ITERS=100000, TRAINSIM_TRIGGER=trigger), log)
    try:
        wait_for(log, r"iteration\s+3/")
        trigger.write_text("exception\n")
        assert proc.wait(timeout=20) == 1
        text = log.read_text()
        assert "[rank0]: KeyError: 'input_ids'" in text
        assert len(iterations(text)) >= 3
    finally:
        stop(proc)


def test_fault_once_marker_lets_the_requeued_attempt_run_clean(tmp_path: Path) -> None:
    marker = tmp_path / "fired"
    env = sim_env(tmp_path, TRAINSIM_FAULT="exception", TRAINSIM_FAULT_AT=8, TRAINSIM_FAULT_ONCE=marker)
    first = run_sim(env)
    assert first.returncode == 1
    assert marker.exists()
    second = run_sim({**env, "SLURM_RESTART_COUNT": "1"})
    assert second.returncode == 0
    assert iterations(second.stdout)[0] == 6  # resumed after the checkpoint at 5, not from 0
    assert "training complete" in second.stdout


# --------------------------------------------------------------------------------------- pure parts


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("node[1-3]", ("node1", "node2", "node3")),
        ("gpu-[01-02,07],login1", ("gpu-01", "gpu-02", "gpu-07", "login1")),
        ("solo", ("solo",)),
    ],
)
def test_expand_nodelist(text: str, expected: tuple[str, ...]) -> None:
    assert load_module().expand_nodelist(text) == expected


def test_trigger_contents_are_parsed_and_garbage_ignored(tmp_path: Path) -> None:
    sim = load_module()
    path = tmp_path / "t"
    path.write_text("xid node=node3 xid=94\n")
    fault = sim.read_trigger(path, 17, 79)
    assert (fault.kind, fault.at, fault.node, fault.xid) == ("xid", 17, "node3", 94)
    path.write_text("rm -rf /")
    assert sim.read_trigger(path, 1, 79) is None
    assert sim.read_trigger(tmp_path / "missing", 1, 79) is None

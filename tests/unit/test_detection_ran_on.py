"""An error the job ran on (docs/detection.md, "An error the job ran on"; trainguard/detection/ran_on.py).

RAN_ON logs read FATAL on main before the rule: a fatal-looking line the job survived, then training that
advances. STILL_FATAL logs are guards (fatal before and after): a crash after which another rank prints a
step or two, progress that does not advance, progress stamped before the error, hardware and scheduler
verdicts, a launcher's verdict.
"""

from __future__ import annotations

import pytest

from trainguard.detection.analyzer import LogAnalyzer
from trainguard.detection.classify import classify_text
from trainguard.detection.ran_on import RAN_ON, RAN_ON_MIN_ADVANCES


def _steps(first: int, last: int, *, ranks: tuple[int, ...] = (), loss: float = 2.1) -> str:
    """A plain loop's progress (`step 28/600 loss 0.6568 lr 5.33e-04 (0.52 s/it)`), per rank when given."""
    out = []
    for step in range(first, last + 1):
        for r in ranks or (None,):
            prefix = f"[rank{r}]: " if r is not None else ""
            out.append(f"{prefix}step {step}/600 loss {loss - step / 1000:.4f} lr 5.33e-04 (0.52 s/it)")
    return "\n".join(out) + "\n"


def _megatron(first: int, last: int, minute: int = 0) -> str:
    return "".join(
        f"[2026-12-01 10:{minute + i // 60:02d}:{i % 60:02d}] iteration {it:>8d}/  500000 | "
        f"consumed samples: {it * 512:>10d} | elapsed time per iteration (ms): 987.6 | lm loss: 2.345E+00 |\n"
        for i, it in enumerate(range(first, last + 1))
    )


HF = "".join(
    f"{{'loss': {2.0 - i * 0.1:.4f}, 'grad_norm': 1.21, 'learning_rate': 5e-05, "
    f"'epoch': {0.1 * (i + 1):.2f}}}\n"
    for i in range(5)
)
OOM_TB = (
    "[rank3]: Traceback (most recent call last):\n"
    '[rank3]:   File "/workspace/train.py", line 211, in <module>\n'
    "[rank3]:     loss.backward()\n"
    "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total "
    "capacity of 79.15 GiB of which 1.20 GiB is free.\n"
)
GLOO_RESET = (
    "[rank2]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer "
    "[10.0.0.3]:24017\n"
)
BUS_ERROR = (
    "ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory "
    "(shm).\n"
)

RAN_ON_LOGS = {
    # An interactive shell's ~/.bashrc line that calls python before the environment exists (bash names only
    # itself there), then the job's Trainer logs its loss: generic shell_main_command_not_found alone.
    "bashrc_then_trainer": "bash: python: command not found\n" + HF,
    "bashrc_then_megatron": "-bash: python3: command not found\n" + _megatron(1, 6),
    # A lost peer in an elastic job, reported by one rank; all four ranks then train on.
    "elastic_lost_peer": _steps(100, 101, ranks=(0, 1, 2, 3))
    + GLOO_RESET
    + _steps(102, 106, ranks=(0, 1, 2, 3)),
    # A dataloader worker's error the loader survives (its worker is replaced), then the loop trains on.
    "dataloader_error_survived": _steps(40, 41) + BUS_ERROR + _steps(42, 46),
    # The error, then an elastic restart from a checkpoint (lower iteration) that trains on.
    "restart_then_advances": _steps(100, 102) + BUS_ERROR + _steps(90, 94),
    # The progress only rank 0 prints while the error is rank 2's: another stream, on its own enough.
    "other_rank_prints_progress": _steps(10, 11, ranks=(0,)) + GLOO_RESET + _steps(12, 16, ranks=(0,)),
}

STILL_FATAL_LOGS = {
    # Rank 3 runs out of memory; ranks 0-2 print the step in flight and rank 0 one more, then block.
    "crash_then_step_in_flight": _steps(100, 101, ranks=(0, 1, 2, 3))
    + OOM_TB
    + _steps(102, 102, ranks=(0, 1, 2))
    + _steps(103, 103, ranks=(0,)),
    # Interleaved out of order: rank 1's older line after rank 0's newer one is no restart-and-advance.
    "crash_then_interleaved_ranks": _steps(100, 100, ranks=(0, 1))
    + OOM_TB
    + "[rank0]: step 101/600 loss 2.0000 lr 5.33e-04 (0.52 s/it)\n"
    + "[rank1]: step 100/600 loss 2.0000 lr 5.33e-04 (0.52 s/it)\n"
    + "[rank1]: step 101/600 loss 2.0000 lr 5.33e-04 (0.52 s/it)\n"
    + "[rank0]: step 102/600 loss 2.0000 lr 5.33e-04 (0.52 s/it)\n",
    # The same progress line repeated (a bar redrawn, a line each rank prints) is no advance.
    "crash_then_repeated_line": _steps(100, 100) + OOM_TB.replace("[rank3]: ", "") + _steps(101, 101) * 6,
    # Progress the log's clock stamps before the error: a buffered stdout flushed after the traceback.
    "progress_stamped_before": "[2026-12-01 10:05:00] " + BUS_ERROR + _megatron(200, 205, minute=1),
    # Hardware and the scheduler's word are fatal whatever follows.
    "xid_then_progress": "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.\n"
    + _steps(1, 8),
    "ecc_then_progress": "RuntimeError: CUDA error: uncorrectable ECC error encountered\n" + _steps(1, 8),
    "node_failure_then_progress": (
        "slurmstepd: error: *** JOB 4242 ON gpu-a-017 CANCELLED AT 2026-12-01T10:00:00 DUE TO NODE FAILURE, "
        "SEE SLURMCTLD LOG FOR DETAILS ***\n" + _steps(1, 8)
    ),
    # A launcher's verdict that a rank died is its last word on that process.
    "launcher_verdict_then_progress": "srun: error: gpu-a-017: task 3: Killed\n" + _steps(1, 8),
}


@pytest.mark.parametrize("name", sorted(RAN_ON_LOGS))
def test_an_error_the_job_ran_on_is_not_fatal_and_stays_in_the_evidence(name: str) -> None:
    r = classify_text(RAN_ON_LOGS[name])
    assert not r.fatal, (name, r.category, r.pattern_ids)
    assert r.category == "healthy"
    assert any(RAN_ON in e for e in r.evidence), r.evidence
    assert r.pattern_ids


@pytest.mark.parametrize("name", sorted(STILL_FATAL_LOGS))
def test_a_crash_and_what_never_runs_on_stay_fatal(name: str) -> None:
    r = classify_text(STILL_FATAL_LOGS[name])
    assert r.fatal, (name, r.category, r.evidence)


def test_the_threshold_is_three_advances_on_one_stream() -> None:
    assert RAN_ON_MIN_ADVANCES == 3
    two = _steps(1, 2) + BUS_ERROR + _steps(3, 4)
    three = _steps(1, 2) + BUS_ERROR + _steps(3, 5)
    assert classify_text(two).fatal
    assert not classify_text(three).fatal


def test_ranks_advances_are_not_summed() -> None:
    # Ranks 0 and 1 each print two steps past rank 3's crash: four lines, two per stream.
    log = _steps(10, 10, ranks=(0, 1)) + OOM_TB + _steps(11, 12, ranks=(0, 1))
    assert classify_text(log).fatal


def test_the_finding_s_own_stream_decides_when_it_prints_progress() -> None:
    # Rank 2 logged the error and then printed the same step again: rank 0's advances do not outvote it.
    log = (
        _steps(10, 10, ranks=(0, 2))
        + GLOO_RESET
        + "[rank2]: step 10/600 loss 2.0000 lr 5.33e-04 (0.52 s/it)\n"
        + _steps(11, 15, ranks=(0,))
    )
    assert classify_text(log).fatal


def test_the_lowered_finding_keeps_its_line_and_says_why() -> None:
    a = LogAnalyzer(follow_ran_on=True)
    data = RAN_ON_LOGS["dataloader_error_survived"].encode()
    found = a.feed(data, now=0.0) + a.flush(now=0.0)
    assert [f.fatal for f in found] == [True]  # as emitted: a live watch sees the line before what follows
    lowered = a.ran_on(found)
    assert len(lowered) == 1 and not lowered[0].fatal
    assert lowered[0].line == found[0].line and lowered[0].pattern_id == found[0].pattern_id
    assert lowered[0].detail.startswith(f"{RAN_ON}: 5 advancing progress lines after it, to 46")


def test_a_later_real_crash_still_decides() -> None:
    # A survived error early, then training, then a real crash: the crash decides.
    log = _steps(1, 1) + BUS_ERROR + _steps(2, 8) + OOM_TB.replace("[rank3]: ", "")
    r = classify_text(log)
    assert r.fatal and r.category == "cuda_oom"


def test_a_failure_shown_only_by_cascades_keeps_the_error_as_its_cause() -> None:
    # Rank 3 dies while rank 0, accumulating gradients under DDP's no_sync, runs through micro-batches that
    # need no collective; the next all-reduce times out. The watchdog's line names no cause of its own.
    log = (
        _steps(100, 100, ranks=(0,))
        + OOM_TB
        + _steps(101, 104, ranks=(0,))
        + "[rank0]:[E1201 10:40:00.000000 4242 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=8801, OpType=ALLREDUCE, NumelIn=262144, NumelOut=262144, "
        "Timeout(ms)=600000) ran for 600012 milliseconds before timing out.\n"
    )
    r = classify_text(log)
    assert r.fatal and r.category == "cuda_oom", (r.category, r.pattern_ids)

from __future__ import annotations

import pytest

from trainguard.detection.progress import ProgressConfig, ProgressLine, ProgressTracker, parse_progress
from trainguard.models import Category, Finding

CFG = ProgressConfig(hang_factor=10, hang_floor_s=60, hang_ceiling_s=3600, checkpoint_floor_s=1800)


@pytest.mark.parametrize(
    ("line", "iteration", "step_ms"),
    [
        (
            " iteration     6502/  159576 | consumed samples: 216960 | "
            "elapsed time per iteration (ms): 31074.1 |",
            6502,
            31074.1,
        ),
        (
            "[default7]: iteration    45000/  115311 | elapsed time per iteration (s): 111.00 | lm loss: 2.1",
            45000,
            111000.0,
        ),
        (
            "Training epoch 0, iteration 10/99 | lr: 1e-4 | global_step: 10 | train_step_timing in s: 0.6177",
            10,
            617.7,
        ),
        (
            "Epoch 0:   6%|██   | 32040/500150 [6:28:43<94:39:17,  1.37it/s, loss=2.6, v_num=95nc]",
            32040,
            1000 / 1.37,
        ),
        (" 19%|█▉        | 3237/16700 [3:34:12<38:35:22, 10.32s/it]", 3237, 10320.0),
        ("0%| | 0/10 [00:00<?, ?it/s]\r 10%|█ | 1/10 [00:01<00:09,  2.00it/s]", 1, 500.0),
        ("{'loss': 10.2027, 'grad_norm': 219.7, 'learning_rate': 0.0, 'epoch': 0.0}", None, None),
        ("steps: 100 loss: 2.3456 iter time (s): 0.512 samples/sec: 62.5", 100, 512.0),
        ("[rank0]:step:  10  loss:  9.9213  memory: 30.1GiB(38%)  tps: 7,113  mfu: 41.2%", 10, None),
    ],
)
def test_default_patterns_parse_common_frameworks(
    line: str, iteration: int | None, step_ms: float | None
) -> None:
    p = parse_progress(line, CFG)
    assert p is not None
    assert p.iteration == iteration
    if step_ms is None:
        assert p.step_ms is None
    else:
        assert p.step_ms == pytest.approx(step_ms, rel=1e-3)


def test_non_progress_lines_are_ignored() -> None:
    for line in ("saving checkpoint at iteration 100", "NCCL INFO iteration hint", "loss scale: 1024"):
        assert parse_progress(line, CFG) is None


def test_hang_learns_the_rhythm_with_floor_and_ceiling() -> None:
    t = ProgressTracker(CFG)
    assert t.check_hang(1e9) is None  # nothing to compare with yet
    for i in range(10):
        t.on_progress(ProgressLine(i, None), now=100.0 + 10 * i)
    last = 190.0
    assert t.hang_threshold_s() == pytest.approx(100.0)
    assert t.check_hang(last + 99) is None
    hang = t.check_hang(last + 101)
    assert hang is not None and hang.category == Category.HANG and "iteration 9" in hang.detail
    fast = ProgressTracker(CFG)
    for i in range(5):
        fast.on_progress(ProgressLine(i, None), now=float(i))
    assert fast.hang_threshold_s() == CFG.hang_floor_s
    slow = ProgressTracker(CFG)
    for i in range(5):
        slow.on_progress(ProgressLine(i, None), now=1000.0 * i)
    assert slow.hang_threshold_s() == CFG.hang_ceiling_s


def test_checkpoint_gets_more_slack_and_progress_clears_it() -> None:
    t = ProgressTracker(CFG)
    for i in range(5):
        t.on_progress(ProgressLine(i, None), now=10.0 * i)
    normal = t.hang_threshold_s()
    t.on_checkpoint(True, now=45.0)
    assert t.hang_threshold_s() >= max(normal * CFG.checkpoint_factor, CFG.checkpoint_floor_s)
    assert t.check_hang(40.0 + normal + 1) is None
    hang = t.check_hang(40.0 + 1801)
    assert hang is not None and "checkpoint" in hang.detail
    t.on_progress(ProgressLine(5, None), now=60.0)
    assert not t.in_checkpoint


def _feed(t: ProgressTracker, steps: list[float], start_iter: int = 1) -> list[Finding]:
    out: list[Finding] = []
    for i, ms in enumerate(steps, start_iter):
        f = t.on_progress(ProgressLine(i, ms), now=float(i))
        if f is not None:
            out.append(f)
    return out


def test_straggler_needs_a_sustained_drop_not_warmup_or_one_slow_step() -> None:
    t = ProgressTracker(CFG)
    warmup = [5000.0, 4000.0, 3000.0, 2000.0, 1500.0]
    steady = [1000.0] * 10
    assert _feed(t, warmup + steady + [4000.0] + steady) == []
    assert t.baseline_step_ms == pytest.approx(1000.0, rel=0.05)
    found = _feed(t, [1500.0] * 10, start_iter=100)
    assert len(found) == 1
    f = found[0]
    assert f.category == Category.STRAGGLER and not f.fatal
    assert _feed(t, [1000.0] * 10, start_iter=200) == []
    assert not t.straggling
    assert len(_feed(t, [1600.0] * 10, start_iter=300)) == 1


def test_duplicate_rank_lines_count_once_and_state_round_trips() -> None:
    t = ProgressTracker(CFG)
    t.on_progress(ProgressLine(5, 100.0), now=1.0)
    t.on_progress(ProgressLine(5, 100.0), now=1.0)
    assert t.iterations_seen == 1
    again = ProgressTracker(CFG, t.state())
    assert again.state() == t.state()

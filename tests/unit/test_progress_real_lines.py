"""Every default progress and checkpoint pattern against lines that real frameworks printed.

Each line is copied from a public log (source in the comment); the lines of the PyTorch DDP example
(examples/ddp_train.py) come from its own runs on the local cluster (tests/fixtures/pytorch/).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from trainguard.detection.analyzer import LogAnalyzer
from trainguard.detection.progress import ProgressConfig, checkpoint_event, parse_progress
from trainguard.policy.straggler import slowdown_fraction

CFG = ProgressConfig()
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "pytorch"

PROGRESS = [
    # Megatron-LM: https://github.com/epfLLM/Megatron-LLM/issues/11
    (
        " iteration      122/  250000 | consumed samples:       124928 | elapsed time per iteration (ms): "
        "86545.2 | learning rate: 9.150E-06 | global batch size:  1024 | lm loss: 2.504220E+00 | loss scale: "
        "1.0 | grad norm: 0.231 | number of skipped iterations:   0 | number of nan iterations:   0 |",
        122,
        86545.2,
    ),
    # Megatron-DeepSpeed: https://github.com/deepspeedai/DeepSpeed/issues/3742
    (
        " samples/sec: 7.799 | iteration       34/   10000 | elapsed time per iteration (ms): 4103.1 | "
        "learning rate: 2.111E-06 | approx flops per GPU: 112.9TFLOPS | lm_loss: 1.118665E+01 |",
        34,
        4103.1,
    ),
    # NeMo 2 with step timing: https://github.com/NVIDIA-BioNeMo/bionemo-recipes/pull/740
    (
        "Training epoch 0, iteration 120/149 | lr: 3e-05 | consumed_samples: 121 | global_batch_size: 1 | "
        "global_step: 120 | reduced_train_loss: 1.233 | train_step_timing in s: 0.03146 | val_loss: 4.106",
        120,
        31.46,
    ),
    # NeMo 2 without step timing: https://github.com/NVIDIA-NeMo/Speech/pull/10128
    (
        "Training epoch 0, iteration 3/9 | lr: 0.0006 | consumed_samples: 128 | global_batch_size: 32 | "
        "global_step: 3 | reduced_train_loss: 8.595",
        3,
        None,
    ),
    # NeMo 1 (Lightning bar): https://github.com/NVIDIA/NeMo-Framework-Launcher/issues/55
    (
        "Epoch 0:   1%|          | 795/77225 [9:07:58<878:01:48, 41.36s/it, loss=3.1, v_num=, "
        "reduced_train_loss=3.090, global_step=794.0, consumed_samples=1.63e+6]",
        795,
        41360.0,
    ),
    # PyTorch Lightning: https://github.com/Lightning-AI/pytorch-lightning/issues/3866
    (
        "Epoch 0:  97% 1651/1702 [13:00<00:24,  2.11it/s, loss=0.158, v_num=0, train_loss=0.149]",
        1651,
        1000 / 2.11,
    ),
    # tqdm bar under HF Trainer + DeepSpeed: https://github.com/huggingface/transformers/issues/14531
    (
        "  8%|█████████████          | 1999/24128 [1:52:09<20:27:23,  3.33s/it]",
        1999,
        3330.0,
    ),
    # HF Trainer log dict: https://github.com/DAMO-NLP-SG/VideoLLaMA2/issues/157
    (
        "{'loss': 1.5214, 'grad_norm': 82.93941089686794, 'learning_rate': 1.4285714285714286e-06, "
        "'epoch': 0.01}",
        None,
        None,
    ),
    # DeepSpeed log_dist: https://github.com/deepspeedai/DeepSpeed/issues/1825
    (
        "[2022-03-11 02:06:58,985] [INFO] [logging.py:69:log_dist] [Rank 0] step=40, skipped=2, "
        "lr=[5e-05], mom=[[0.9, 0.999]]",
        40,
        None,
    ),
    # torchtitan: https://github.com/pytorch/torchtitan/pull/950
    (
        "[rank0]:[titan] 2025-03-12 11:10:21,511 - root - INFO - step: 22  loss:  6.2250  memory:  "
        "1.41GiB(1.79%)  tps: 193,831  tflops: 18.36  mfu: 1.86%",
        22,
        None,
    ),
    # torchtitan on a terminal, with its colours: https://github.com/pytorch/torchtitan/pull/2389
    (
        "[titan] 2026-02-24 19:46:19,145 - root - INFO - \x1b[31mstep:  5  \x1b[32mloss:  7.07623  "
        "\x1b[38;2;180;60;0mgrad_norm: 46.5000  \x1b[33mmemory: 66.91GiB(37.51%)  \x1b[34mtps: 10,007",
        5,
        None,
    ),
    # a plain DDP loop (examples/ddp_train.py, captured in tests/fixtures/pytorch/)
    ("step 28/600 loss 0.6568 lr 5.33e-04 (0.52 s/it)", 28, 520.0),
    ("[rank3]: step 7/200 loss 4.8673 lr 4.00e-02 (0.11 s/it)", 7, 110.0),
]


@pytest.mark.parametrize(("line", "iteration", "step_ms"), PROGRESS)
def test_real_progress_lines(line: str, iteration: int | None, step_ms: float | None) -> None:
    assert any(k in line for k in CFG.keywords), "the prefilter must let the line through"
    p = parse_progress(line, CFG)
    assert p is not None, line
    assert p.iteration == iteration
    if step_ms is None:
        assert p.step_ms is None
    else:
        assert p.step_ms == pytest.approx(step_ms, rel=1e-3)


CHECKPOINTS = [
    # examples/ddp_train.py
    ("saved checkpoint at step 20 to /tmp/ckpt/step_0000020.pt", False, 20),
    ("resumed from step 20 (/tmp/ckpt/step_0000020.pt)", False, 20),
    # Megatron-LM (legacy load line): https://github.com/intelligent-machine-learning/dlrover/issues/977
    (" loading checkpoint from /nas/megatron_gpt/ at iteration 100", True, 100),
    # Megatron-LM save (megatron/training/checkpointing.py prints it; trainsim copies it)
    ("  successfully saved checkpoint from iteration     500 to /ckpt [ t 1/1, p 1/1 ]", False, 500),
    # torchtitan: https://github.com/pytorch/torchtitan/pull/1287
    (
        "[rank0]:[titan] 2025-06-25 13:10:45,513 - root - INFO - Loading the checkpoint at step 400.",
        True,
        400,
    ),
    (
        "[rank0]:[titan] 2025-06-25 13:10:56,821 - root - INFO - Finished loading the checkpoint in 11.31 "
        "seconds.",
        False,
        None,
    ),
    # DeepSpeed: https://github.com/huggingface/transformers/pull/27820
    (
        "[2023-12-12 06:20:12,261] [INFO] [logging.py:96:log_dist] [Rank 0] [Torch] Checkpoint global_step10 "
        "is about to be saved!",
        True,
        None,
    ),
    # HF Trainer: https://github.com/huggingface/transformers/pull/27820
    ("Saving model checkpoint to /scratch/sanitycheck-20231211/tmp-checkpoint-10", True, None),
]


@pytest.mark.parametrize(("line", "starting", "iteration"), CHECKPOINTS)
def test_real_checkpoint_lines(line: str, starting: bool | None, iteration: int | None) -> None:
    assert any(k in line for k in CFG.checkpoint_keywords), "the prefilter must let the line through"
    event = checkpoint_event(line, CFG)
    assert event is not None, line
    assert (event.starting, event.iteration) == (starting, iteration)


def test_deepspeed_ready_line_credits_its_step() -> None:
    # DeepSpeed runtime/checkpoint_engine/torch_checkpoint_engine.py: logger.info(f"[Torch] Checkpoint
    # {tag} is ready now!") with tag global_step<N>
    event = checkpoint_event(
        "[INFO] [torch_checkpoint_engine.py:27:commit] [Torch] Checkpoint global_step10 is ready now!", CFG
    )
    assert event is not None and (event.starting, event.iteration) == (False, 10)


def test_progress_lines_are_not_checkpoint_lines_and_vice_versa() -> None:
    assert parse_progress("saved checkpoint at step 20 to /tmp/ckpt/step_0000020.pt", CFG) is None
    assert parse_progress("resumed from step 20 (/tmp/ckpt/step_0000020.pt)", CFG) is None
    assert checkpoint_event("step 28/600 loss 0.6568 lr 5.33e-04 (0.52 s/it)", CFG) is None
    for line in ("loss scale: 1024", "lossy compression enabled", "stepping down the learning rate"):
        assert parse_progress(line, CFG) is None


def test_a_real_ddp_log_arms_the_hang_detector_and_credits_its_checkpoints() -> None:
    """The srun-launched DDP example's own output, captured on the local cluster, through the analyzer."""
    data = (FIXTURES / "srun_sigkill_rank2.out").read_bytes()
    analyzer = LogAnalyzer()
    analyzer.feed(data, now=100.0)
    state = analyzer.progress
    assert analyzer.progress_lines >= 20
    assert state.last_iteration is not None and state.last_iteration >= 20
    assert state.last_checkpoint_iteration == 20  # "saved checkpoint at step 20 to ..."
    assert analyzer.check_hang(100.0 + CFG.hang_floor_s + 1) is not None


def test_a_save_end_line_alone_credits_the_last_iteration() -> None:
    analyzer = LogAnalyzer()
    analyzer.feed(b"step 7/100 loss 1.0 lr 1e-3 (0.5 s/it)\nCheckpoint saved.\n", now=1.0)
    assert analyzer.progress.last_checkpoint_iteration == 7


@pytest.mark.parametrize(
    "line",
    [
        "training complete: 60 steps",  # examples/ddp_train.py
        # Megatron-LM (megatron/training/training.py: print_datetime / exit message)
        "exiting program at iteration 1000",
        # Lightning (loops/fit_loop.py rank_zero_info)
        "`Trainer.fit` stopped: `max_steps=1000` reached.",
        # HF Trainer (trainer.py logger.info)
        "\n\nTraining completed. Do not forget to share your model on huggingface.co/models =)\n\n",
    ],
)
def test_a_finished_job_is_not_a_hang_while_it_tears_down(line: str) -> None:
    analyzer = LogAnalyzer()
    analyzer.feed(b"step 59/60 loss 0.1 (0.2 s/it)\nstep 60/60 loss 0.1 (0.2 s/it)\n", now=10.0)
    assert analyzer.check_hang(10.0 + CFG.hang_ceiling_s + 1) is not None
    analyzer.feed(line.encode() + b"\n", now=11.0)
    assert analyzer.progress.finished
    assert analyzer.check_hang(10.0 + CFG.hang_ceiling_s + 1) is None
    # a requeued attempt's first progress line arms it again
    analyzer.feed(b"resumed from step 40 (x)\nstep 41/60 loss 0.1 lr 1e-3 (0.2 s/it)\n", now=20.0)
    assert not analyzer.progress.finished
    assert analyzer.check_hang(20.0 + CFG.hang_ceiling_s + 1) is not None


def _rank_lines(slow_rank: int | None, steps: range, fast: float = 0.2, slow: float = 0.6) -> bytes:
    out = []
    for step in steps:
        for rank in range(4):
            t = slow if rank == slow_rank else fast
            out.append(f"[rank{rank}]: step {step}/100 loss 0.5 lr 1.00e-03 ({t:.2f} s/it)\n")
    return "".join(out).encode()


def test_a_slow_rank_is_named_with_its_node_from_per_rank_step_times() -> None:
    analyzer = LogAnalyzer(node_of_rank=lambda r: ("node1", "node1", "node2", "node2")[r])
    assert not analyzer.feed(_rank_lines(None, range(1, 12)), now=1.0)  # all equal: nothing
    found = analyzer.feed(_rank_lines(3, range(12, 30)), now=2.0)
    slow = [f for f in found if f.pattern_id == "rank_straggler"]
    assert len(slow) == 1  # reported once while it stays slow
    assert slow[0].rank == 3 and slow[0].nodes == ("node2",) and slow[0].category.value == "straggler"
    assert "3.00x" in slow[0].detail


def test_the_slowest_rank_gates_the_jobs_step_time_in_the_cost_model() -> None:
    """Each rank times its own share; rank 3 takes 3x as long, so every synchronous step waits for it:
    the job's step is 0.6 s, not the 0.2 s most lines (and their median) show. The straggler cost model
    then sees a 67 % slowdown, not ~0 %."""
    analyzer = LogAnalyzer(node_of_rank=lambda r: ("node1", "node1", "node2", "node2")[r])
    analyzer.feed(_rank_lines(None, range(1, 12)), now=1.0)
    assert analyzer.progress.recent_step_ms == pytest.approx(200.0)
    analyzer.feed(_rank_lines(3, range(12, 30)), now=2.0)
    progress = analyzer.progress
    assert progress.recent_step_ms == pytest.approx(600.0)
    assert progress.baseline_step_ms == pytest.approx(200.0)
    assert slowdown_fraction(progress) == pytest.approx(2 / 3)


def test_one_slow_step_or_equal_ranks_are_no_straggler() -> None:
    analyzer = LogAnalyzer(node_of_rank=lambda r: "node1")
    data = _rank_lines(None, range(1, 30)) + _rank_lines(2, range(30, 31)) + _rank_lines(None, range(31, 40))
    assert not [f for f in analyzer.feed(data, now=1.0) if f.pattern_id == "rank_straggler"]

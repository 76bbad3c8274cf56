#!/usr/bin/env python3
"""A small, real PyTorch DistributedDataParallel job: gloo on the CPU, a tiny model, real checkpoints.

Runs under either launcher sites use:
  - `srun` one task per rank (rank/world from SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID, rendezvous at
    MASTER_ADDR:MASTER_PORT through the env:// store), or
  - `torchrun` per node with a c10d rendezvous (RANK / WORLD_SIZE / LOCAL_RANK set by torchrun).

It prints what training frameworks print (nothing here is written for TrainGuard's patterns):
  plain  `step 28/600 loss 0.6568 lr 5.33e-04 (0.52 s/it)`  (rank 0; every rank with DDP_RANK_TIMES=1)
  hf     `{'loss': 0.6568, 'grad_norm': 0.41, 'learning_rate': 0.000533, 'epoch': 0.05}`
and `saved checkpoint at step N to DIR` / `resumed from step N (FILE)`. Checkpoints are torch.save files
`step_NNNNNNN.pt`, written by rank 0 to a temporary name and renamed (atomic); a (re)start resumes from
the newest one. Settings are DDP_* environment variables (see examples/README.md). With
DDP_RANK_TIMES=1 every rank prints its line, prefixed `[rankN]: `, timing its own share of the step
(before it waits for its peers), as per-rank timers do.

The only fault it injects itself is a Python exception in one rank (DDP_FAULT=exception); kills, stops
and node deaths come from outside, as in life. DDP_PID_DIR gets `rank<R>.pid` ("pid node local_rank") so
a test can signal one rank's process.
"""

from __future__ import annotations

import datetime
import os
import re
import socket
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

CKPT_RE = re.compile(r"^step_(\d+)\.pt$")


def env_int(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


def env_float(name: str, default: float) -> float:
    return float(os.environ.get(name, default))


def ranks() -> tuple[int, int, int]:
    """(rank, world size, local rank) from torchrun's variables, else from srun's."""
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ.get("LOCAL_RANK", 0))
    return env_int("SLURM_PROCID", 0), env_int("SLURM_NTASKS", 1), env_int("SLURM_LOCALID", 0)


def newest_checkpoint(directory: Path) -> tuple[int, Path] | None:
    best: tuple[int, Path] | None = None
    if not directory.is_dir():
        return None
    for entry in directory.iterdir():
        m = CKPT_RE.match(entry.name)
        if m and (best is None or int(m.group(1)) > best[0]):
            best = (int(m.group(1)), entry)
    return best


def save_checkpoint(
    directory: Path,
    step: int,
    model: nn.Module,
    opt: torch.optim.Optimizer,
    sched: torch.optim.lr_scheduler.LRScheduler,
) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / f"step_{step:07d}.pt"
    tmp = directory / f".step_{step:07d}.pt.tmp-{os.getpid()}"
    state = {"step": step, "model": model.state_dict(), "optim": opt.state_dict()}
    torch.save({**state, "sched": sched.state_dict()}, tmp)
    with open(tmp, "rb") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, final)  # readers see either no checkpoint or a complete one
    return final


def main() -> int:
    rank, world, local_rank = ranks()
    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    steps = env_int("DDP_STEPS", 200)
    step_s = env_float("DDP_STEP_S", 0.2)
    ckpt_every = env_int("DDP_CKPT_EVERY", 20)
    ckpt_dir = Path(os.environ.get("DDP_CKPT_DIR", "checkpoints"))
    style = os.environ.get("DDP_LOG_STYLE", "plain")
    rank_times = os.environ.get("DDP_RANK_TIMES", "0") == "1"
    fault = os.environ.get("DDP_FAULT", "")
    fault_at = env_int("DDP_FAULT_AT", 10)
    fault_rank = env_int("DDP_FAULT_RANK", 1)
    fault_once = os.environ.get("DDP_FAULT_ONCE", "")  # marker file: fire only while it is absent
    slow_rank = env_int("DDP_SLOW_RANK", -1)
    slow_from = env_int("DDP_SLOW_FROM", 10**9)
    slow_factor = env_float("DDP_SLOW_FACTOR", 3.0)
    torch.set_num_threads(1)
    torch.manual_seed(1234)

    pid_dir = os.environ.get("DDP_PID_DIR")
    if pid_dir:
        Path(pid_dir).mkdir(parents=True, exist_ok=True)
        tmp = Path(pid_dir) / f".rank{rank}.pid.tmp"
        tmp.write_text(f"{os.getpid()} {node} {local_rank}\n")
        os.replace(tmp, Path(pid_dir) / f"rank{rank}.pid")

    timeout = datetime.timedelta(seconds=env_float("DDP_TIMEOUT_S", 120.0))
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timeout)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 10))

    start = 0
    found = newest_checkpoint(ckpt_dir)
    if found is not None:
        state = torch.load(found[1], map_location="cpu", weights_only=True)
        model.module.load_state_dict(state["model"])
        opt.load_state_dict(state["optim"])
        if "sched" in state:  # checkpoints of an older version of this script have none
            sched.load_state_dict(state["sched"])
        start = int(state["step"])
        if rank == 0:
            print(f"resumed from step {start} ({found[1]})", flush=True)

    gen = torch.Generator().manual_seed(rank)
    w_true = torch.linspace(-1, 1, 16)
    loss_fn = nn.MSELoss()
    last = time.monotonic()
    for step in range(start + 1, steps + 1):
        x = torch.randn(32, 16, generator=gen)
        y = (x @ w_true).unsqueeze(1) + 0.1 * torch.randn(32, 1, generator=gen)
        if fault == "exception" and rank == fault_rank and step == fault_at and fault_once:
            if os.path.exists(fault_once):
                fault = ""  # fired in an earlier attempt
            else:
                Path(fault_once).touch()
        if fault == "exception" and rank == fault_rank and step == fault_at:
            raise ValueError(f"bad sample in batch at step {step}: expected 16 features, got 15")
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()  # gloo allreduce of the gradients: every rank waits for every other
        opt.step()
        sched.step()
        pause = step_s * (slow_factor if rank == slow_rank and step >= slow_from else 1.0)
        time.sleep(pause)
        busy = time.monotonic() - last  # this rank's own share of the step, before waiting for peers
        dist.barrier()  # synchronous training: the step ends when the slowest rank is done
        now = time.monotonic()
        dt, last = now - last, now
        lr = sched.get_last_lr()[0]
        if rank == 0 or rank_times:
            prefix = f"[rank{rank}]: " if rank_times else ""
            if style == "hf":
                if rank == 0:
                    epoch = step / steps
                    print(
                        f"{{'loss': {loss.item():.4f}, 'grad_norm': 0.41, 'learning_rate': {lr:.6g}, "
                        f"'epoch': {epoch:.2f}}}",
                        flush=True,
                    )
            else:
                shown = busy if rank_times else dt  # per-rank lines time the rank itself
                print(
                    f"{prefix}step {step}/{steps} loss {loss.item():.4f} lr {lr:.2e} ({shown:.2f} s/it)",
                    flush=True,
                )
        if (ckpt_every and step % ckpt_every == 0) or step == steps:
            if rank == 0:
                path = save_checkpoint(ckpt_dir, step, model.module, opt, sched)
                print(f"saved checkpoint at step {step} to {path}", flush=True)
            dist.barrier()
    if rank == 0:
        print(f"training complete: {steps} steps", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""A short PyTorch distributed job (gloo on the CPU) that fails one real way.

For tests/e2e/test_real_torch_faults.py.

Launched by torchrun. Every rank trains a DistributedDataParallel model; at step FAULT_STEP (3) the rank
FAULT_RANK (1) meets the fault named by FAULT. What the fault prints is PyTorch's, gloo's, Python's, the C
library's or torchrun's own; the only lines this script prints are ordinary progress lines.

FAULT:
- exception: the rank feeds the model a batch of the wrong width (a real shape bug; PyTorch raises);
- segv: the rank reads address 0 (ctypes.string_at(0)); abort: the rank calls os.abort();
- sigkill, sigterm: the rank writes its pid to FAULT_PID_FILE and trains on slowly; the test signals it;
- timeout: the rank sleeps instead of joining the step's collectives, the process group's timeout
  (FAULT_TIMEOUT_S) is short, the other rank's gloo collective times out;
- peer_exit: the rank returns early with status 0, while the other rank waits in the step's collective;
- dataloader_kill: the rank's batches come from a DataLoader worker that writes its pid to FAULT_PID_FILE
  and loads slowly; the test SIGKILLs the worker;
- enospc: rank 0 saves the checkpoint with torch.save to /dev/full (every write fails with ENOSPC);
- truncated: rank 0 saves the checkpoint, it is cut to half its size (as by a copy that ran out of room or
  time), and every rank loads it.
"""

from __future__ import annotations

import ctypes
import datetime
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset


class SlowBatches(Dataset[torch.Tensor]):
    def __len__(self) -> int:
        return 10_000

    def __getitem__(self, i: int) -> torch.Tensor:
        time.sleep(0.05)
        return torch.randn(8)


def _write_pid(pid: int) -> None:
    path = Path(os.environ["FAULT_PID_FILE"])
    tmp = path.with_suffix(".tmp")
    tmp.write_text(str(pid))
    tmp.rename(path)


def _worker_init(_: int) -> None:
    _write_pid(os.getpid())


def main() -> int:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    fault = os.environ["FAULT"]
    fault_rank = int(os.environ.get("FAULT_RANK", "1"))
    fault_step = int(os.environ.get("FAULT_STEP", "3"))
    steps = int(os.environ.get("FAULT_STEPS", "6"))
    timeout = float(os.environ.get("FAULT_TIMEOUT_S", "60"))
    ckpt = Path(os.environ.get("FAULT_CKPT_DIR", "checkpoints"))
    me = rank == fault_rank
    torch.set_num_threads(1)
    torch.manual_seed(1234)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=timeout))
    net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    model = DistributedDataParallel(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_fn = nn.MSELoss()
    batches = None
    if fault == "dataloader_kill" and me:
        loader = DataLoader(SlowBatches(), batch_size=4, num_workers=1, worker_init_fn=_worker_init)
        batches = iter(loader)
    slow = fault in ("sigkill", "sigterm", "dataloader_kill")
    if slow:
        steps = 600  # until the test's signal ends it (about 60 s at most)
    for step in range(1, steps + 1):
        x = next(batches) if batches is not None else torch.randn(16, 8)
        if me and step == fault_step:
            if fault == "exception":
                x = torch.randn(16, 7)  # the wrong width: the first Linear raises
            elif fault == "segv":
                ctypes.string_at(0)
            elif fault == "abort":
                os.abort()
            elif fault in ("sigkill", "sigterm"):
                _write_pid(os.getpid())
            elif fault == "timeout":
                time.sleep(4 * timeout)  # never joins this step's collectives in time
            elif fault == "peer_exit":
                print(f"rank {rank}: nothing left to do, returning", flush=True)
                return 0
        y = x.sum(dim=1, keepdim=True)
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        if rank == 0:
            print(f"step {step}/{steps} loss {mean.item() / world:.4f}", flush=True)
        if slow:
            time.sleep(0.1)

    ckpt.mkdir(parents=True, exist_ok=True)
    path = ckpt / f"step_{steps:07d}.pt"
    if rank == 0:
        target = "/dev/full" if fault == "enospc" else str(path)
        torch.save({"step": steps, "model": net.state_dict(), "optim": opt.state_dict()}, target)
        if fault == "truncated":
            size = path.stat().st_size
            with path.open("r+b") as f:
                f.truncate(size // 2)
        print(f"saved checkpoint at step {steps} to {target}", flush=True)
    dist.barrier()
    state = torch.load(path, map_location="cpu", weights_only=True)
    net.load_state_dict(state["model"])
    dist.barrier()
    if rank == 0:
        print(f"training complete: {steps} steps", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())

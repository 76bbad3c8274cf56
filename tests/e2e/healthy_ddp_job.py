#!/usr/bin/env python3
"""A short, healthy PyTorch distributed job (gloo on the CPU) for tests/e2e/test_healthy_real_logs.py.

Launched by torchrun (RANK / WORLD_SIZE / MASTER_ADDR from it) or by srun (SLURM_PROCID / SLURM_NTASKS,
MASTER_ADDR / MASTER_PORT from the job). It does what a real job does, briefly: a DistributedDataParallel
model trained a few steps, an explicit all_reduce, broadcast and all_gather, barriers, a torch.save
checkpoint written by rank 0 and loaded back by every rank, a torch.distributed.checkpoint (DCP)
save and load, then destroy_process_group and `sys.exit(0)`. The lines it prints itself are ordinary
progress lines; everything else in the captured output is PyTorch's, gloo's, torchrun's or srun's own.

Settings: HEALTHY_STEPS (5), HEALTHY_CKPT_DIR, HEALTHY_DDP=0 (explicit gradient all_reduce instead of
DDP), HEALTHY_DCP=0 (no DCP step), HEALTHY_DESTROY=0 (no destroy_process_group).
"""

from __future__ import annotations

import datetime
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def main() -> int:
    if "RANK" not in os.environ:  # under srun
        os.environ["RANK"] = os.environ["SLURM_PROCID"]
        os.environ["WORLD_SIZE"] = os.environ["SLURM_NTASKS"]
        os.environ["LOCAL_RANK"] = os.environ.get("SLURM_LOCALID", "0")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    steps = int(os.environ.get("HEALTHY_STEPS", "5"))
    ckpt = Path(os.environ.get("HEALTHY_CKPT_DIR", "checkpoints"))
    torch.set_num_threads(1)
    torch.manual_seed(1234)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    # HEALTHY_DDP=0: the gradients are averaged by explicit all_reduce calls instead of DDP's reducer
    # (TORCH_DISTRIBUTED_DEBUG=DETAIL with DDP on gloo crashed here: SIGSEGV in DDP's constructor).
    ddp = os.environ.get("HEALTHY_DDP", "1") == "1"
    model: nn.Module = DistributedDataParallel(net) if ddp else net
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(rank)
    loss_fn = nn.MSELoss()
    for step in range(1, steps + 1):
        x = torch.randn(16, 8, generator=gen)
        y = x.sum(dim=1, keepdim=True)
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        if not ddp:
            for param in net.parameters():
                assert param.grad is not None
                dist.all_reduce(param.grad)
                param.grad /= world
        opt.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)  # the mean loss over ranks
        mean /= world
        if rank == 0:
            print(f"step {step}/{steps} loss {mean.item():.4f}", flush=True)
        dist.barrier()

    flag = torch.tensor([rank == 0], dtype=torch.int64)
    dist.broadcast(flag, src=0)
    gathered = [torch.zeros(1) for _ in range(world)]
    dist.all_gather(gathered, torch.tensor([float(rank)]))

    ckpt.mkdir(parents=True, exist_ok=True)
    path = ckpt / f"step_{steps:07d}.pt"
    if rank == 0:
        torch.save({"step": steps, "model": net.state_dict(), "optim": opt.state_dict()}, path)
        print(f"saved checkpoint at step {steps} to {path}", flush=True)
    dist.barrier()
    state = torch.load(path, map_location="cpu", weights_only=True)
    net.load_state_dict(state["model"])
    opt.load_state_dict(state["optim"])
    dist.barrier()
    if rank == 0:
        print(f"resumed from step {state['step']} ({path})", flush=True)

    if os.environ.get("HEALTHY_DCP", "1") == "1":
        dcp_dir = ckpt / "dcp"
        dcp.save({"model": net.state_dict()}, checkpoint_id=str(dcp_dir))
        loaded = {"model": net.state_dict()}
        dcp.load(loaded, checkpoint_id=str(dcp_dir))
        dist.barrier()
    if rank == 0:
        print(f"training complete: {steps} steps", flush=True)
    if os.environ.get("HEALTHY_DESTROY", "1") == "1":
        dist.destroy_process_group()
    if rank == 0:
        print("exiting with status 0", flush=True)
    sys.exit(0)


if __name__ == "__main__":
    main()

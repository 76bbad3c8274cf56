#!/usr/bin/env python3
"""A training-job simulator that logs like Megatron-LM / PyTorch, checkpoints, and fails on demand.

Standard library only, so it runs on any Slurm node with a python3. Run one task per node under
`srun` (it reads SLURM_PROCID, SLURM_NTASKS, SLURMD_NODENAME, SLURM_JOB_ID, SLURM_RESTART_COUNT,
SLURM_JOB_NODELIST) or standalone as a single rank. See examples/README.md for every knob.

The ranks do not talk to each other: each one knows the whole fault plan (same environment, same
trigger file), so each can play its own part — the faulty rank fails, its peers block in the
"collective" and, after the simulated NCCL timeout, print the watchdog cascade and abort.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import resource
import signal
import socket
import sys
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import NoReturn, TextIO

FAULT_KINDS = ("nccl_timeout", "xid", "exception", "hang", "slow", "crash", "oom")
NCCL_TIMEOUT_MS = 600_000
"""What the watchdog lines claim (PyTorch's default); the simulator waits only --nccl-delay-s."""

# Xid code -> (driver message, CUDA error the application then sees). Texts follow NVIDIA's Xid catalog.
XID_TEXT: dict[int, tuple[str, str]] = {
    13: ("Graphics Engine Exception", "an illegal memory access was encountered"),
    31: (
        "MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f2a_4c000000",
        "an illegal memory access was encountered",
    ),
    43: ("Ch 00000010, engmask 00000101", "an illegal memory access was encountered"),
    48: (
        "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, "
        "subpartition 0.",
        "uncorrectable ECC error encountered",
    ),
    63: (
        "Row Remapper: New row marked for remapping, reset gpu to activate.",
        "uncorrectable ECC error encountered",
    ),
    64: ("Row Remapper: row remapping failure.", "uncorrectable ECC error encountered"),
    74: (
        "NVLink: fatal error detected on link 5(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)",
        "uncorrectable NVLink error detected during the execution",
    ),
    # After a GPU drops off the bus the CUDA error varies; the project's reference scenario pairs it with
    # the ECC text so that both evidence lines agree on hardware.
    79: ("GPU has fallen off the bus.", "uncorrectable ECC error encountered"),
    92: ("High single-bit ECC error rate detected", "uncorrectable ECC error encountered"),
    94: ("Contained ECC error occurred", "uncorrectable ECC error encountered"),
    95: ("Uncontained ECC error occurred", "uncorrectable ECC error encountered"),
    119: (
        "Timeout after 6s of waiting for RPC response from GPU0 GSP! Expected function 76 (GSP_RM_CONTROL)",
        "unknown error",
    ),
    120: ("GSP Error: Task 1 raised error code 0x5 for reason 0x0 at 0x1234", "unknown error"),
}


@dataclass(frozen=True)
class Fault:
    kind: str
    at: int  # first iteration the fault applies to
    node: str | None = None  # Slurm node whose rank fails; None = the rank below
    rank: int = 0
    xid: int = 79


@dataclass(frozen=True)
class Config:
    iters: int
    step_s: float
    ckpt_every: int
    ckpt_dir: Path
    ckpt_s: float
    global_batch: int
    lr: float
    seed: int
    nccl_delay_s: float
    xid: int
    fault: Fault | None
    fault_once: Path | None
    trigger: Path | None


@dataclass(frozen=True)
class Rank:
    rank: int
    world: int
    local_rank: int
    host: str
    job_id: str
    restarts: int
    job_nodes: tuple[str, ...]

    @property
    def prefix(self) -> str:
        return f"[rank{self.rank}]: "


# ---------------------------------------------------------------------------------------------- output


def emit(line: str, stream: TextIO | None = None) -> None:
    """One line, flushed at once: a log tailer must see it even if the process dies next."""
    out = stream or sys.stdout
    out.write(line + "\n")
    out.flush()


def emit_rank(me: Rank, text: str, stream: TextIO | None = None) -> None:
    for line in text.splitlines() or [""]:
        emit(me.prefix + line, stream or sys.stderr)


def c10_stamp(level: str) -> str:
    """The glog-style header c10 logging prints: `E0521 14:02:11.123456789`."""
    now = datetime.now()
    return f"{level}{now:%m%d %H:%M:%S}.{now.microsecond:06d}{random.randint(0, 999):03d}"


def ip(me: Rank) -> str:
    return f"10.0.{me.rank // 250}.{me.rank % 250 + 1}"


def nccl_prefix(me: Rank, tid_offset: int = 0) -> str:
    pid = os.getpid()
    return f"{me.host}:{pid}:{pid + 17 + tid_offset} [{me.local_rank}]"


# ------------------------------------------------------------------------------------------ environment


def expand_nodelist(text: str) -> tuple[str, ...]:
    """Minimal Slurm hostlist expansion (`node[1-3,5],login1`); enough to know who is in the job."""
    names: list[str] = []
    for prefix, body, plain in re.findall(r"([^,\[]*)\[([^\]]*)\]|([^,\[\]]+)", text):
        if plain:
            names.append(plain)
            continue
        for part in body.split(","):
            lo, _, hi = part.partition("-")
            if not lo.isdigit() or (hi and not hi.isdigit()):
                continue
            for n in range(int(lo), int(hi or lo) + 1):
                names.append(f"{prefix}{n:0{len(lo)}d}")
    return tuple(names)


def current_rank() -> Rank:
    env = os.environ
    host = env.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST") or ""
    return Rank(
        rank=int(env.get("SLURM_PROCID", "0")),
        world=max(1, int(env.get("SLURM_NTASKS", "1"))),
        local_rank=int(env.get("SLURM_LOCALID", "0")),
        host=host,
        job_id=env.get("SLURM_JOB_ID", "0"),
        restarts=int(env.get("SLURM_RESTART_COUNT", "0")),
        job_nodes=expand_nodelist(nodelist) if nodelist else (host,),
    )


def parse_args(argv: Sequence[str] | None) -> Config:
    env = os.environ

    def env_or(name: str, default: str) -> str:
        return env.get(name, default)

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iters", type=int, default=int(env_or("TRAINSIM_ITERS", "200")))
    p.add_argument("--step-s", type=float, default=float(env_or("TRAINSIM_STEP_S", "0.5")))
    p.add_argument("--ckpt-every", type=int, default=int(env_or("TRAINSIM_CKPT_EVERY", "50")))
    p.add_argument("--ckpt-dir", default=env_or("TRAINSIM_CKPT_DIR", "checkpoints"))
    p.add_argument(
        "--ckpt-s",
        type=float,
        default=float(env.get("TRAINSIM_CKPT_S", "-1")),
        help="time one checkpoint save takes (default: 2 steps)",
    )
    p.add_argument("--global-batch", type=int, default=int(env_or("TRAINSIM_GLOBAL_BATCH", "32")))
    p.add_argument("--lr", type=float, default=float(env_or("TRAINSIM_LR", "1.5e-4")))
    p.add_argument("--seed", type=int, default=int(env_or("TRAINSIM_SEED", "1234")))
    p.add_argument(
        "--nccl-delay-s",
        type=float,
        default=float(env_or("TRAINSIM_NCCL_DELAY_S", "5")),
        help="how long peers wait before their NCCL watchdog fires",
    )
    p.add_argument("--fault", choices=FAULT_KINDS, default=env.get("TRAINSIM_FAULT") or None)
    p.add_argument("--fault-at", type=int, default=int(env_or("TRAINSIM_FAULT_AT", "10")))
    p.add_argument("--fault-node", default=env.get("TRAINSIM_FAULT_NODE") or None)
    p.add_argument("--fault-rank", type=int, default=int(env_or("TRAINSIM_FAULT_RANK", "0")))
    p.add_argument("--xid", type=int, default=int(env_or("TRAINSIM_XID", "79")))
    p.add_argument(
        "--fault-once",
        default=env.get("TRAINSIM_FAULT_ONCE") or None,
        help="marker file: the fault fires only while it does not exist, then creates it",
    )
    p.add_argument(
        "--trigger",
        default=env.get("TRAINSIM_TRIGGER") or None,
        help="file polled each iteration; its contents name a fault: KIND [node=N] [rank=R] [xid=X]",
    )
    a = p.parse_args(argv)
    if a.iters < 1 or a.step_s < 0 or a.ckpt_every < 0:
        p.error("--iters must be >= 1, --step-s and --ckpt-every >= 0")
    fault = Fault(a.fault, a.fault_at, a.fault_node, a.fault_rank, a.xid) if a.fault else None
    return Config(
        iters=a.iters,
        step_s=a.step_s,
        ckpt_every=a.ckpt_every,
        ckpt_dir=Path(a.ckpt_dir),
        ckpt_s=a.ckpt_s if a.ckpt_s >= 0 else 2 * a.step_s,
        global_batch=a.global_batch,
        lr=a.lr,
        seed=a.seed,
        nccl_delay_s=a.nccl_delay_s,
        xid=a.xid,
        fault=fault,
        fault_once=Path(a.fault_once) if a.fault_once else None,
        trigger=Path(a.trigger) if a.trigger else None,
    )


def read_trigger(path: Path, at: int, xid_default: int) -> Fault | None:
    try:
        words = path.read_text(errors="replace").split()
    except OSError:
        return None
    if not words or words[0] not in FAULT_KINDS:
        return None
    opts = dict(w.split("=", 1) for w in words[1:] if "=" in w)
    try:
        return Fault(
            words[0], at, opts.get("node"), int(opts.get("rank", "0")), int(opts.get("xid", xid_default))
        )
    except ValueError:
        return None


# ------------------------------------------------------------------------------------------ checkpoints


def latest_checkpoint(ckpt_dir: Path) -> dict[str, float] | None:
    best: tuple[int, Path] | None = None
    for path in ckpt_dir.glob("iter_*.json"):
        m = re.fullmatch(r"iter_(\d+)\.json", path.name)
        if m and (best is None or int(m.group(1)) > best[0]):
            best = (int(m.group(1)), path)
    if best is None:
        return None
    try:
        state = json.loads(best[1].read_text())
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) else None


def atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)  # readers see the old file or the whole new one, never a torn write


def save_checkpoint(cfg: Config, me: Rank, iteration: int, consumed: int, loss: float) -> None:
    emit(f"saving checkpoint at iteration {iteration} to {cfg.ckpt_dir}")
    time.sleep(cfg.ckpt_s)
    cfg.ckpt_dir.mkdir(parents=True, exist_ok=True)
    state = {
        "iteration": iteration,
        "consumed_samples": consumed,
        "lm_loss": loss,
        "job_id": me.job_id,
        "restarts": me.restarts,
        "saved_at": time.time(),
    }
    atomic_write(cfg.ckpt_dir / f"iter_{iteration:07d}.json", json.dumps(state))
    atomic_write(cfg.ckpt_dir / "latest_checkpointed_iteration.txt", f"{iteration}\n")
    emit(f"  successfully saved checkpoint at iteration {iteration} to {cfg.ckpt_dir}")


# ------------------------------------------------------------------------------------------ startup log


def startup(cfg: Config, me: Rank) -> None:
    pid = os.getpid()
    if me.rank == 0:
        emit(
            f"using world size: {me.world}, data-parallel size: {me.world}, tensor-model-parallel size: 1, "
            "pipeline-model-parallel size: 1"
        )
        emit("------------------------ arguments ------------------------")
        args = {
            "distributed_backend": "nccl",
            "distributed_timeout_minutes": "10",
            "global_batch_size": str(cfg.global_batch),
            "lr": f"{cfg.lr}",
            "save": str(cfg.ckpt_dir),
            "save_interval": str(cfg.ckpt_every),
            "train_iters": str(cfg.iters),
            "seed": str(cfg.seed),
        }
        for key, value in args.items():
            emit(f"  {key} {'.' * max(3, 40 - len(key))} {value}")
        emit("-------------------- end of arguments ---------------------")
        emit(f"> initializing torch distributed with backend=nccl, world_size={me.world}, timeout=1800 ...")
        emit(f"{me.host}:{pid}:{pid} [{me.local_rank}] NCCL INFO cudaDriverVersion 12040")
        emit(f"{me.host}:{pid}:{pid} [{me.local_rank}] NCCL INFO Bootstrap : Using eth0:{ip(me)}<0>")
        emit("NCCL version 2.21.5+cuda12.4")
    else:
        emit_rank(
            me,
            f"initializing rank {me.rank} of {me.world} on host {me.host} (pid {pid}, local rank "
            f"{me.local_rank})",
            sys.stdout,
        )
    nccl = nccl_prefix(me)
    emit(f"{nccl} NCCL INFO NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.")
    emit(f"{nccl} NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB eth0:{ip(me)}<0>")
    emit(
        f"{nccl} NCCL INFO comm 0x55d0c8a3f0 rank {me.rank} nranks {me.world} cudaDev {me.local_rank} "
        f"nvmlDev {me.local_rank} busId 3b000 commId 0x9f1c2a7d5e3b8c01 - Init COMPLETE"
    )
    if me.rank == 0:
        built = "[after model, optimizer, and learning rate scheduler are built]"
        emit(f"{built} datetime: {datetime.now():%Y-%m-%d %H:%M:%S}")


# --------------------------------------------------------------------------------------------- faults


def die_by_signal(sig: signal.Signals) -> NoReturn:
    # A simulated crash must not litter the submit directory with core files.
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    signal.signal(sig, signal.SIG_DFL)
    os.kill(os.getpid(), sig)
    time.sleep(5)
    os._exit(128 + sig)


def sleep_forever() -> NoReturn:
    while True:
        time.sleep(3600)


def seq_num(iteration: int) -> int:
    return iteration * 4 + 1  # a few collectives per step: grads all-reduce, loss reduce, ...


def watchdog_cascade(cfg: Config, me: Rank, iteration: int) -> NoReturn:
    """What a healthy peer prints when a collective never completes (PyTorch ProcessGroupNCCL)."""
    time.sleep(cfg.nccl_delay_s)
    seq = seq_num(iteration)
    ran_ms = NCCL_TIMEOUT_MS + random.randint(5, 90)
    work = (
        f"WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn=466119168, NumelOut=466119168, "
        f"Timeout(ms)={NCCL_TIMEOUT_MS})"
    )
    pg = f"[PG ID 0 PG GUID 0(default_pg) Rank {me.rank}]"
    caught = (
        f"[Rank {me.rank}] Watchdog caught collective operation timeout: {work} "
        f"ran for {ran_ms} milliseconds before timing out."
    )
    works = f"last enqueued NCCL work: {seq + 1}, last completed NCCL work: {seq - 1}."
    lines = [
        (616, caught),
        (1785, f"{pg} Exception (either an error or timeout) detected by watchdog at work: {seq}, {works}"),
        (1834, f"{pg} Timeout at NCCL work: {seq}, {works}"),
        (
            630,
            f"[Rank {me.rank}] Some NCCL operations have failed or timed out. Due to the asynchronous nature "
            "of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.",
        ),
        (636, f"[Rank {me.rank}] To avoid data inconsistency, we are taking the entire process down."),
        (1595, f"{pg} Process group watchdog thread terminated with exception: {caught}"),
    ]
    for source_line, text in lines:
        emit(f"[rank{me.rank}]:[{c10_stamp('E')} ProcessGroupNCCL.cpp:{source_line}] {text}", sys.stderr)
    emit("terminate called after throwing an instance of 'c10::DistBackendError'", sys.stderr)
    emit(f"  what():  {pg} Process group watchdog thread terminated with exception: {caught}", sys.stderr)
    die_by_signal(signal.SIGABRT)


def raise_in_pipeline(exc: BaseException) -> None:
    """Raise through a call chain shaped like Megatron's, so the traceback reads like the real thing."""

    def pretrain() -> None:
        train_step()

    def train_step() -> None:
        get_batch()

    def get_batch() -> None:
        raise exc

    pretrain()


CUDA_ERROR_TAIL = (
    "CUDA kernel errors might be asynchronously reported at some other API call, "
    "so the stacktrace below might be incorrect.\n"
    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n"
)
OOM_TEXT = (
    "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB "
    "of which 1.23 GiB is free. Including non-PyTorch memory, this process has 77.86 GiB memory in use. "
    "Of the allocated memory 75.02 GiB is allocated by PyTorch, and 1.31 GiB is reserved by PyTorch "
    "but unallocated. If reserved but unallocated memory is large try setting "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  "
    "See documentation for Memory Management  "
    "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
)


class OutOfMemoryError(RuntimeError):
    pass


# Tracebacks print `module.QualName`; this is what PyTorch's own class prints as.
OutOfMemoryError.__module__ = "torch"


def fail_with(me: Rank, exc: BaseException, code: int = 1) -> NoReturn:
    try:
        raise_in_pipeline(exc)
    except BaseException as err:
        tb = err.__traceback__.tb_next if err.__traceback__ else None  # start at the "application" frames
        emit_rank(me, "".join(traceback.format_exception(type(err), err, tb)).rstrip("\n"))
    sys.stdout.flush()
    os._exit(code)


def fire(cfg: Config, me: Rank, fault: Fault, iteration: int) -> float:
    """Play this rank's part in the fault. Returns a step-time factor for faults that do not stop us."""
    faulty = fault.node == me.host if fault.node else fault.rank == me.rank
    involved = (fault.node in me.job_nodes) if fault.node else fault.rank < me.world
    if not involved:
        return 1.0
    if cfg.fault_once is not None:
        cfg.fault_once.parent.mkdir(parents=True, exist_ok=True)
        cfg.fault_once.touch()

    if fault.kind == "hang":
        sleep_forever()
    if fault.kind == "slow":
        # Synchronous data parallelism: one slow rank makes every rank's step slow.
        return random.uniform(3.0, 5.0)
    if not faulty:
        watchdog_cascade(cfg, me, iteration)

    pid = os.getpid()
    if fault.kind == "nccl_timeout":
        nccl = nccl_prefix(me, tid_offset=40)
        # The stuck rank never enqueues the collective, so its own watchdog stays silent; what its node
        # does log is the link going down.
        emit(f"{nccl} NCCL WARN NET/IB : mlx5_0:1 Got async event : port error", sys.stderr)
        sleep_forever()
    if fault.kind == "xid":
        message, cuda = XID_TEXT.get(fault.xid, ("Unknown Xid", "unknown error"))
        bus = f"0000:{0x3B + 0x20 * me.local_rank:02x}:00"
        emit(f"{me.host}: NVRM: Xid (PCI:{bus}): {fault.xid}, pid={pid}, name=python3, {message}", sys.stderr)
        fail_with(me, RuntimeError(f"CUDA error: {cuda}\n{CUDA_ERROR_TAIL}"))
    if fault.kind == "exception":
        fail_with(me, KeyError("input_ids"))
    if fault.kind == "oom":
        fail_with(me, OutOfMemoryError(OOM_TEXT))
    if fault.kind == "crash":
        emit_rank(me, f"Fatal Python error: Segmentation fault (host {me.host}, pid {pid})")
        die_by_signal(signal.SIGSEGV)
    return 1.0


# ----------------------------------------------------------------------------------------------- main


def run(cfg: Config, me: Rank) -> int:
    random.seed(cfg.seed + me.rank)
    armed = cfg.fault_once is None or not cfg.fault_once.exists()  # decided once, before any rank fires
    startup(cfg, me)

    start_iter = 0
    consumed = 0
    state = latest_checkpoint(cfg.ckpt_dir)
    if state is not None:
        start_iter = int(state.get("iteration", 0))
        consumed = int(state.get("consumed_samples", start_iter * cfg.global_batch))
        if me.rank == 0:
            emit(f"loading checkpoint from {cfg.ckpt_dir} at iteration {start_iter}")
            emit(f"  successfully loaded checkpoint from {cfg.ckpt_dir} at iteration {start_iter}")
    elif me.rank == 0:
        emit(f"WARNING: could not find the metadata file {cfg.ckpt_dir}/latest_checkpointed_iteration.txt")
        emit("    will not load any checkpoints and will start from random")
    if me.rank == 0:
        emit(f"restart count: {me.restarts}, job id: {me.job_id}, starting at iteration {start_iter + 1}")
        emit("training ...")

    fault = cfg.fault if armed else None
    triggered = False
    slow = 1.0
    loss = 0.0
    last_saved = start_iter
    for it in range(start_iter + 1, cfg.iters + 1):
        if armed and cfg.trigger is not None and not triggered:
            found = read_trigger(cfg.trigger, it, cfg.xid)
            if found is not None:
                fault, triggered = found, True
        if fault is not None and it >= fault.at:
            slow = fire(cfg, me, fault, it)
            fault = None  # fired; a factor it returned keeps applying

        t0 = time.monotonic()
        time.sleep(cfg.step_s * (slow if slow == 1.0 else random.uniform(0.9, 1.1) * slow))
        elapsed = time.monotonic() - t0
        consumed += cfg.global_batch
        loss = 2.0 + 8.5 * math.exp(-it / 60.0) + random.uniform(-0.05, 0.05)
        if me.rank == 0:
            skipped = 1 if it == 3 else 0  # fp16 loss-scale overflow in warm-up: benign
            scale = 32768.0 if it >= 3 else 65536.0
            ms = max(elapsed * 1000.0, 0.001)
            lr = cfg.lr * min(1.0, it / 10)  # warm-up
            emit(
                f" iteration {it:8d}/{cfg.iters:8d} | consumed samples: {consumed:12d} | "
                f"elapsed time per iteration (ms): {ms:.1f} | "
                f"throughput (samples/s): {cfg.global_batch / (ms / 1000.0):.1f} | "
                f"learning rate: {lr:.3E} | global batch size: {cfg.global_batch:5d} | "
                f"lm loss: {loss:.6E} | loss scale: {scale:.1f} | "
                f"grad norm: {random.uniform(0.8, 1.6):.3f} | "
                f"number of skipped iterations: {skipped:3d} | number of nan iterations:   0 |"
            )
        if cfg.ckpt_every and it % cfg.ckpt_every == 0:
            last_saved = it
            if me.rank == 0:
                save_checkpoint(cfg, me, it, consumed, loss)
            else:
                time.sleep(cfg.ckpt_s)  # every rank writes its shard; keeps the ranks in step
    if me.rank == 0:
        if last_saved != cfg.iters:
            save_checkpoint(cfg, me, cfg.iters, consumed, loss)
        emit(f"[after training is done] datetime: {datetime.now():%Y-%m-%d %H:%M:%S}")
        emit(f"training complete: {cfg.iters} iterations, {consumed} samples")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    cfg = parse_args(argv)
    return run(cfg, current_rank())


if __name__ == "__main__":
    sys.exit(main())

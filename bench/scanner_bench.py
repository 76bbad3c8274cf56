"""Scanner throughput: TrainGuard's streaming analyzer vs `grep -E -f <catalog patterns>` on one file.

Generates a multi-rank training log (NCCL INFO chatter, Megatron iteration lines, DeepSpeed info
lines, warnings, a few failure lines, one 10 MB line and a blob of binary garbage) into a temporary
directory, scans it with LogAnalyzer in 4 MiB reads (as the watch activity does) and with grep on
the very same file, and prints MB/s, the ratio and peak RSS at several points of the scan.

    .venv/bin/python bench/scanner_bench.py --size-mb 256
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from trainguard.detection.analyzer import LogAnalyzer
from trainguard.detection.catalog import load_catalog

READ_BYTES = 4 * 1024 * 1024
BIG_LINE_BYTES = 10 * 1024 * 1024


def _rss_mib() -> float:
    # ru_maxrss is KiB on Linux.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _block(rng: random.Random, nodes: int, first_iteration: int) -> tuple[bytes, int]:
    """About 1 MB of ordinary multi-rank output; returns it and the next iteration number."""
    lines: list[str] = []
    it = first_iteration
    while sum(len(x) for x in lines) < 1_000_000:
        node = f"gpu-{rng.randrange(nodes):04d}"
        gpu = rng.randrange(8)
        pid = 10000 + rng.randrange(5000)
        r = rng.random()
        if r < 0.55:
            ch = rng.randrange(32)
            lines.append(
                f"{node}:{pid}:{pid + 77} [{gpu}] NCCL INFO Channel {ch:02d}/0 : {gpu}[{gpu}] -> "
                f"{(gpu + 1) % 8}[{(gpu + 1) % 8}] via P2P/IPC/read\n"
            )
        elif r < 0.60:
            lines.append(
                f"{node}:{pid}:{pid + 77} [{gpu}] NCCL INFO NET/IB : Using [0]mlx5_{gpu}:1/IB ; "
                f"OOB ib0:10.0.{rng.randrange(255)}.{rng.randrange(255)}<0>\n"
            )
        elif r < 0.80:
            rank = rng.randrange(nodes * 8)
            lines.append(
                f"[default{gpu}]:[2024-05-01 12:00:{rng.randrange(60):02d},123] [INFO] "
                "[logging.py:96:log_dist] "
                f"[Rank {rank}] step={it}, skipped=0, lr=[0.00029], mom=[(0.9, 0.95)]\n"
            )
        elif r < 0.95:
            lines.append(
                "time (ms) | forward-compute: 118.47 | forward-recv: 1575.55 | backward-compute: 320.30 | "
                f"backward-send: 2.16 | optimizer: {rng.uniform(90, 110):.2f} | batch-generator: 2.85\n"
            )
        elif r < 0.99:
            lines.append(
                f"[default{gpu}]:/opt/conda/lib/python3.10/site-packages/torch/utils/checkpoint.py:31: "
                "UserWarning: None of the inputs have requires_grad=True. Gradients will be None\n"
            )
        else:
            it += 1
            lines.append(
                f" iteration {it:8d}/  500000 | consumed samples: {it * 1024:12d} | "
                f"elapsed time per iteration (ms): {rng.uniform(1000, 1100):.1f} | "
                "learning rate: 2.999E-04 | global batch size:  1024 | "
                f"lm loss: {rng.uniform(2, 3):.6E} | loss scale: 1.0 | grad norm: 0.211 | number of skipped "
                "iterations:   0 | number of nan iterations:   0 |\n"
            )
    return "".join(lines).encode(), it


FAILURE_TAIL = (
    b"[Tue Jun  4 12:00:00 2024] NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, GPU has fallen off the bus.\n"
    b"[rank12]:[E604 12:00:05.1 ProcessGroupNCCL.cpp:607] [Rank 12] Watchdog caught collective operation "
    b"timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600013 milliseconds "
    b"before timing out.\n"
    b"srun: error: gpu-0003: task 24: Killed\n"
)


def generate(path: Path, size_mb: int, nodes: int, seed: int) -> int:
    rng = random.Random(seed)
    target = size_mb * 1024 * 1024
    written = 0
    it = 0
    blocks = [_block(rng, nodes, i * 1000) for i in range(4)]
    with path.open("wb") as fh:
        while written < target:
            data, _ = blocks[it % len(blocks)]
            it += 1
            fh.write(data)
            written += len(data)
            if it == 2 and target > 3 * BIG_LINE_BYTES:
                fh.write(b"x" * BIG_LINE_BYTES + b" Watchdog caught collective operation timeout\n")
                garbage = rng.randbytes(2 * 1024 * 1024)
                fh.write(garbage + b"\n")
                written += BIG_LINE_BYTES + len(garbage) + 48
        fh.write(FAILURE_TAIL)
        written += len(FAILURE_TAIL)
    return written


def scan_ours(path: Path) -> tuple[float, int, list[tuple[int, float]]]:
    analyzer = LogAnalyzer()
    size = path.stat().st_size
    marks = [size // 4, size // 2, 3 * size // 4]
    rss: list[tuple[int, float]] = []
    findings = 0
    offset = 0
    start = time.perf_counter()
    with path.open("rb", buffering=0) as fh:
        while True:
            data = fh.read(READ_BYTES)
            if not data:
                break
            findings += len(analyzer.feed(data, now=time.time(), base_offset=offset))
            offset += len(data)
            while marks and offset >= marks[0]:
                rss.append((marks.pop(0), _rss_mib()))
    findings += len(analyzer.flush(now=time.time()))
    elapsed = time.perf_counter() - start
    rss.append((offset, _rss_mib()))
    return elapsed, findings, rss


def scan_grep(path: Path, patterns: Path, env: dict[str, str], timeout_s: float) -> tuple[float, int | None]:
    """Seconds and matching-line count; the count is None when grep ran past `timeout_s`."""
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            ["grep", "-E", "-a", "-c", "-f", str(patterns), str(path)],
            capture_output=True,
            text=True,
            env=env,
            check=False,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired:
        return time.perf_counter() - start, None
    elapsed = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"grep failed: {proc.stderr.strip()}")
    return elapsed, int(proc.stdout.strip() or 0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size-mb", type=int, default=256)
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--check", action="store_true", help="exit 1 when slower than grep")
    args = parser.parse_args(argv)
    if shutil.which("grep") is None:
        print("grep not found", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="tg-bench-") as tmp:
        log_path = Path(tmp) / "multi-rank.log"
        pat_path = Path(tmp) / "patterns.ere"
        size = generate(log_path, args.size_mb, args.nodes, args.seed)
        pat_path.write_text("\n".join(load_catalog().grep_patterns()) + "\n")
        rss_before = _rss_mib()
        ours_s, findings, rss = scan_ours(log_path)
        # The byte-oriented C locale is grep's fastest mode, so it is the baseline to beat.
        grep_env = {**os.environ, "LC_ALL": "C"}
        grep_s, grep_lines = scan_grep(log_path, pat_path, grep_env, timeout_s=600)
        # In a UTF-8 locale grep re-checks long matching lines with a slow matcher; capped, not awaited.
        cap = max(10.0, 5 * ours_s)
        utf8_s, utf8_lines = scan_grep(log_path, pat_path, {**os.environ, "LC_ALL": "C.UTF-8"}, timeout_s=cap)
    mb = size / 1e6
    print(f"log: {mb:.1f} MB, {args.nodes} nodes x 8 ranks, one 10 MB line, 2 MB of binary garbage")
    print(f"trainguard LogAnalyzer : {mb / ours_s:8.1f} MB/s  ({ours_s:.2f} s, {findings} findings)")
    print(f"grep -E -f (LC_ALL=C)  : {mb / grep_s:8.1f} MB/s  ({grep_s:.2f} s, {grep_lines} matching lines)")
    if utf8_lines is None:
        print(f"grep -E -f (C.UTF-8)   : gave up after {utf8_s:.0f} s (long matching line)")
    else:
        print(f"grep -E -f (C.UTF-8)   : {mb / utf8_s:8.1f} MB/s  ({utf8_s:.2f} s)")
    ratio = grep_s / ours_s
    print(f"ratio (ours / grep C)  : {ratio:.2f}x faster" if ratio >= 1 else f"ratio: {ratio:.2f}x (slower)")
    marks = ", ".join(f"{pos / 1e6:.0f} MB: {r:.0f} MiB" for pos, r in rss)
    print(f"peak RSS               : before scan {rss_before:.0f} MiB; during scan {marks}")
    if args.check and ratio < 1.0:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

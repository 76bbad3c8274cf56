"""The newest complete checkpoint in a job's checkpoint directory, whatever framework wrote it.

Futile-retry and straggler decisions ask "is the job still making checkpoint progress?"; log lines say
so only when the job prints them. This reads the directory itself (from an activity: it is I/O). A
checkpoint being written is not progress, so each layout has its own "complete" rule:

- Megatron-LM / NeMo: `latest_checkpointed_iteration.txt` (written after every rank saved) names the
  iteration; `iter_NNNNNNN/` must exist.
- DeepSpeed: `latest` names the tag (`global_stepN`); the tag's directory must exist.
- torch.distributed.checkpoint (torchtitan `step-N/`, any `*N/`): complete once `.metadata` exists
  (DCP writes it last, on commit).
- Hugging Face Trainer `checkpoint-N/`: complete once `trainer_state.json` is in it (written last;
  `tmp-checkpoint-N/` is one being written).
- Lightning `*.ckpt` (`epoch=0-step=500.ckpt`): the step in the name.
- Plain files with an iteration in the name (`step_0000020.pt`, `iter_100.pth`, `model-500.safetensors`):
  hidden or temporary names (`.x`, `*.tmp*`, `*.partial`, `tmp-*`) are writes in progress.

The directory comes from untrusted input (the job's comment); callers check it with `allowed_dir`.
Reads are bounded: at most MAX_ENTRIES directory entries and small tracker files.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

MAX_ENTRIES = 10_000
MAX_TRACKER_BYTES = 256

_MEGATRON_TRACKER = "latest_checkpointed_iteration.txt"
_DEEPSPEED_TRACKER = "latest"
_DCP_METADATA = ".metadata"
_HF_STATE = "trainer_state.json"
_HF_DIR = re.compile(r"^checkpoint-(\d+)$")
_LIGHTNING = re.compile(r"(?:^|[-_])step=(\d+)")
_ITERATION_IN_NAME = re.compile(r"(?:step|iter|iteration|global_step|ckpt|checkpoint|model)[-_=]?(\d+)", re.I)
_ANY_NUMBER = re.compile(r"(\d+)")
_CHECKPOINT_SUFFIXES = (".pt", ".pth", ".ckpt", ".bin", ".safetensors", ".distcp", ".pkl", ".json", ".npz")
_PARTIAL = re.compile(r"(^\.|^tmp[-_.]|\.tmp|\.partial$|\.incomplete$|\.part$|~$)", re.I)


@dataclass(frozen=True)
class CheckpointInfo:
    iteration: int
    mtime: float  # when it became complete (the completing file's mtime)
    layout: str  # megatron, deepspeed, dcp, hf, lightning, file
    path: str


def allowed_dir(path: str, roots: tuple[str, ...]) -> Path | None:
    """`path` resolved, when it is absolute and lies under one of `roots` (resolved too), else None."""
    if not path or not os.path.isabs(path) or "\x00" in path:
        return None
    try:
        resolved = Path(path).resolve(strict=False)
    except (OSError, RuntimeError):
        return None
    for root in roots:
        if not root or not os.path.isabs(root):
            continue
        try:
            base = Path(root).resolve(strict=False)
        except (OSError, RuntimeError):
            continue
        if resolved == base or resolved.is_relative_to(base):
            return resolved
    return None


def _read_small(path: Path) -> str | None:
    try:
        with path.open("rb") as fh:
            return fh.read(MAX_TRACKER_BYTES).decode("utf-8", errors="replace").strip()
    except OSError:
        return None


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


def _megatron(directory: Path) -> CheckpointInfo | None:
    tracker = directory / _MEGATRON_TRACKER
    text = _read_small(tracker)
    if text is None or not text.isdigit():
        return None  # absent, or "release" (a converted model, not training progress)
    iteration = int(text)
    step_dir = directory / f"iter_{iteration:07d}"
    mtime = _mtime(tracker)
    if mtime is None or not step_dir.is_dir():
        return None
    return CheckpointInfo(iteration, mtime, "megatron", str(step_dir))


def _deepspeed(directory: Path) -> CheckpointInfo | None:
    tracker = directory / _DEEPSPEED_TRACKER
    text = _read_small(tracker)
    if not text or "/" in text or text.startswith("."):
        return None
    m = _ANY_NUMBER.search(text)
    tag_dir = directory / text
    mtime = _mtime(tracker)
    if m is None or mtime is None or not tag_dir.is_dir():
        return None
    return CheckpointInfo(int(m.group(1)), mtime, "deepspeed", str(tag_dir))


def _entries(directory: Path) -> list[os.DirEntry[str]]:
    out: list[os.DirEntry[str]] = []
    try:
        with os.scandir(directory) as it:
            for entry in it:
                out.append(entry)
                if len(out) >= MAX_ENTRIES:
                    break
    except OSError:
        return []
    return out


def _is_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir(follow_symlinks=False)
    except OSError:
        return False


def _is_file(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_file(follow_symlinks=False)
    except OSError:
        return False


def _from_entry(entry: os.DirEntry[str]) -> CheckpointInfo | None:
    name = entry.name
    if _PARTIAL.search(name):
        return None
    if _is_dir(entry):
        hf = _HF_DIR.match(name)
        if hf:
            mtime = _mtime(Path(entry.path) / _HF_STATE)
            return None if mtime is None else CheckpointInfo(int(hf.group(1)), mtime, "hf", entry.path)
        metadata = _mtime(Path(entry.path) / _DCP_METADATA)
        m = _ITERATION_IN_NAME.search(name) or _ANY_NUMBER.search(name)
        if metadata is not None and m is not None:
            return CheckpointInfo(int(m.group(1)), metadata, "dcp", entry.path)
        return None
    if not _is_file(entry):
        return None
    if name.endswith(".ckpt"):
        lightning = _LIGHTNING.search(name)
        if lightning:
            mtime = _mtime(Path(entry.path))
            if mtime is None:
                return None
            return CheckpointInfo(int(lightning.group(1)), mtime, "lightning", entry.path)
    if not name.endswith(_CHECKPOINT_SUFFIXES) or name == _HF_STATE:
        return None
    m = _ITERATION_IN_NAME.search(name)
    if m is None:
        return None
    mtime = _mtime(Path(entry.path))
    return None if mtime is None else CheckpointInfo(int(m.group(1)), mtime, "file", entry.path)


def newest_checkpoint(directory: str | Path) -> CheckpointInfo | None:
    """The newest complete checkpoint (highest iteration; the later one on a tie) in `directory`."""
    path = Path(directory)
    if not path.is_dir():
        return None
    # A tracker file is the framework's own word on which checkpoint is complete: when there is one,
    # step directories newer than it are still being written (or finalised) and do not count.
    found = [c for c in (_megatron(path), _deepspeed(path)) if c is not None]
    if not found and not (path / _MEGATRON_TRACKER).exists() and not (path / _DEEPSPEED_TRACKER).exists():
        found = [c for c in map(_from_entry, _entries(path)) if c is not None]
    if not found:
        return None
    return max(found, key=lambda c: (c.iteration, c.mtime))


# A filesystem is full when what is left is below both bounds: 1 % of it (a small quota'd or scratch
# filesystem) and 1 GiB (on a petabyte filesystem 1 % is still room for many checkpoints).
FULL_FRACTION = 0.01
FULL_BYTES = 1 << 30


@dataclass(frozen=True)
class FilesystemSpace:
    path: str
    free_bytes: int  # what an unprivileged writer may still use (f_bavail)
    size_bytes: int

    @property
    def full(self) -> bool:
        return self.free_bytes < min(FULL_FRACTION * self.size_bytes, FULL_BYTES)

    def describe(self) -> str:
        return (
            f"the checkpoint directory's filesystem is full: {_size(self.free_bytes)} free of "
            f"{_size(self.size_bytes)} at {self.path}"
        )


def filesystem_space(directory: str | Path) -> FilesystemSpace | None:
    """Free space of the filesystem holding `directory` (its nearest existing ancestor), or None."""
    path = Path(directory)
    while not path.exists() and path != path.parent:
        path = path.parent
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    if st.f_blocks == 0:  # pseudo filesystems report no size
        return None
    return FilesystemSpace(str(directory), st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize)


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"

"""Training progress: learn a job's rhythm from its own log, then spot hangs and stragglers.

Everything here is pure (time comes in as `now`) so the watch activity can resume it from a
ProgressState carried in heartbeat details.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

from pydantic import BaseModel, ConfigDict, Field

from trainguard.models import Attribution, Category, Finding, FindingSource, ProgressState, clip

# Named groups: iter, total, step_ms, step_s, rate_its (it/s), rate_sit (s/it). All optional.
# Each default is tested on a real line with its source in tests/unit/test_progress_real_lines.py.
DEFAULT_PROGRESS_PATTERNS: tuple[str, ...] = (
    # NeMo 2 / Megatron-core style
    r"iteration\s+(?P<iter>\d+)\s*/\s*(?P<total>\d+)\s*\|.*?train_step_timing in s:\s*(?P<step_s>[\d.]+)",
    # Megatron-LM / Megatron-DeepSpeed (and NeMo 2 without step timing)
    r"iteration\s+(?P<iter>\d+)\s*/\s*(?P<total>\d+)\s*\|(?:.*?elapsed time per iteration \(ms\):\s*"
    r"(?P<step_ms>[\d.]+)|.*?elapsed time per iteration \(s\):\s*(?P<step_s2>[\d.]+))?",
    # tqdm, PyTorch Lightning and NeMo progress bars, HF Trainer's bar
    r"(?P<iter>\d+)/(?P<total>\d+)\s*\[[\d:]+<[\d:?]+,\s*(?:(?P<rate_its>[\d.]+)\s*it/s|(?P<rate_sit>[\d.]+)\s*s/it)",
    # Hugging Face Trainer's logged dicts
    r"\{'loss': [-+\d.einaf]+,.*'epoch': [\d.]+",
    # DeepSpeed engine: wall-clock breakdown line, and log_dist's per-step line
    r"steps:\s*(?P<iter>\d+)\s+loss:.*?iter time \(s\):\s*(?P<step_s>[\d.]+)",
    r"\[Rank \d+\] step=(?P<iter>\d+), skipped=\d+",
    # torchtitan (its colours are stripped before matching)
    r"step:\s*(?P<iter>\d+)\s+loss:",
    # a plain training loop: `step 28/600 loss 0.6568 lr 5.33e-04 (0.52 s/it)`
    r"\b[Ss]tep\s+(?P<iter>\d+)\s*/\s*(?P<total>\d+)\b.*?\bloss\b(?:.*?\(?(?P<rate_sit>[\d.]+)\s*s/it)?",
)
DEFAULT_PROGRESS_KEYWORDS: tuple[str, ...] = (
    "iteration",
    "it/s",
    "s/it",
    "'loss':",
    "step:",
    "steps:",
    "step=",
    "loss",
)
DEFAULT_CHECKPOINT_START: tuple[str, ...] = (
    r"[Ss]aving (model )?checkpoint",
    r"[Ll]oading (model )?checkpoint",
    r"[Ss]aving model (checkpoint|state|to)",
    r"save_checkpoint",
    r"(?:Saving|Loading) the checkpoint",  # torchtitan
    r"is about to be saved",  # DeepSpeed
    r"Restoring states from the checkpoint",  # Lightning
)
DEFAULT_CHECKPOINT_END: tuple[str, ...] = (
    r"successfully (saved|loaded) checkpoint",
    r"[Ss]aved checkpoint",
    r"[Cc]heckpoint saved",
    r"save-checkpoint:\s*[\d.]+",
    r"[Ll]oaded checkpoint",
    r"[Rr]esumed from",
    r"Finished (?:saving|loading) the checkpoint",  # torchtitan
    r"Checkpoint \S+ is ready now",  # DeepSpeed
    r"Restored all states from the checkpoint",  # Lightning
)
# A line that names the iteration of a complete checkpoint (one saved, or one being loaded: only a
# complete checkpoint can be loaded). Group `ckpt` is the iteration. Credited even without a start line.
DEFAULT_CHECKPOINT_ITERATION: tuple[str, ...] = (
    r"(?:[Ss]aved|[Ll]oaded) checkpoint (?:from |at |to )?(?:step|iteration)\s+(?P<ckpt>\d+)",
    r"[Ll]oad(?:ed|ing) checkpoint from \S+ (?:\[.*?\] )?at iteration\s+(?P<ckpt>\d+)",
    r"[Rr]esum(?:ed|ing) (?:training )?from (?:step|iteration|global step)\s+(?P<ckpt>\d+)",
    r"Loading the checkpoint at step (?P<ckpt>\d+)",  # torchtitan
    r"Checkpoint global_step(?P<ckpt>\d+) is ready now",  # DeepSpeed
    r"Continuing training from global step (?P<ckpt>\d+)",  # HF Trainer
)
DEFAULT_CHECKPOINT_KEYWORDS: tuple[str, ...] = (
    "aving checkpoint",
    "aving model",
    "oading checkpoint",
    "oading model checkpoint",
    "aved checkpoint",
    "oaded checkpoint",
    "heckpoint saved",
    "save-checkpoint",
    "save_checkpoint",
    "esumed from",
    "esuming from",
    "the checkpoint",
    "is ready now",
    "is about to be saved",
    "from global step",
)
# The job says it finished training: what follows (final save, evaluation, process teardown) is not a
# hang. Megatron-LM "exiting program at iteration", Lightning "`Trainer.fit` stopped: `max_steps=...`
# reached.", HF Trainer "Training completed.", torchtitan "Training completed", plain loops.
DEFAULT_FINISHED: tuple[str, ...] = (
    r"[Tt]raining (?:is )?(?:complete|completed|finished|done)\b",
    r"[Ff]inished training",
    r"exiting program at iteration",
    r"\bTRAINING DONE\b",
    r"`Trainer\.fit` stopped",
)
DEFAULT_FINISHED_KEYWORDS: tuple[str, ...] = ("raining", "TRAINING DONE", "xiting program", "Trainer.fit")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class ProgressConfig(BaseModel):
    """How progress is recognised and how patient the hang/straggler detectors are."""

    model_config = ConfigDict(frozen=True)

    patterns: tuple[str, ...] = DEFAULT_PROGRESS_PATTERNS
    keywords: tuple[str, ...] = DEFAULT_PROGRESS_KEYWORDS  # prefilter: a progress line holds one
    checkpoint_start: tuple[str, ...] = DEFAULT_CHECKPOINT_START
    checkpoint_end: tuple[str, ...] = DEFAULT_CHECKPOINT_END
    checkpoint_iteration: tuple[str, ...] = DEFAULT_CHECKPOINT_ITERATION
    checkpoint_keywords: tuple[str, ...] = DEFAULT_CHECKPOINT_KEYWORDS
    finished: tuple[str, ...] = DEFAULT_FINISHED
    finished_keywords: tuple[str, ...] = DEFAULT_FINISHED_KEYWORDS
    hang_factor: float = Field(default=10.0, gt=1)  # k x the observed interval between progress lines
    hang_floor_s: float = Field(default=180.0, gt=0)
    hang_ceiling_s: float = Field(default=3600.0, gt=0)
    checkpoint_factor: float = Field(default=3.0, ge=1)  # extra slack while a checkpoint is saved/loaded
    checkpoint_floor_s: float = Field(default=1800.0, gt=0)
    checkpoint_ceiling_s: float = Field(default=7200.0, gt=0)
    interval_alpha: float = Field(default=0.3, gt=0, le=1)
    warmup_steps: int = Field(default=5, ge=0)  # step-time samples ignored at (re)start
    straggler_window: int = Field(default=5, ge=1)  # median over this many recent steps
    straggler_ratio: float = Field(default=1.3, gt=1)  # median / baseline that counts as slow
    straggler_sustain: int = Field(default=3, ge=1)  # consecutive slow medians before reporting
    baseline_alpha: float = Field(default=0.1, gt=0, le=1)

    @cached_property
    def compiled(self) -> CompiledProgress:
        return CompiledProgress(
            patterns=tuple(re.compile(p) for p in self.patterns),
            checkpoint_start=re.compile("|".join(f"(?:{p})" for p in self.checkpoint_start)),
            checkpoint_end=re.compile("|".join(f"(?:{p})" for p in self.checkpoint_end)),
            checkpoint_iteration=tuple(re.compile(p) for p in self.checkpoint_iteration),
            finished=re.compile("|".join(f"(?:{p})" for p in self.finished)),
        )

    @property
    def all_keywords(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys((*self.keywords, *self.checkpoint_keywords, *self.finished_keywords)))


@dataclass(frozen=True)
class CompiledProgress:
    patterns: tuple[re.Pattern[str], ...]
    checkpoint_start: re.Pattern[str]
    checkpoint_end: re.Pattern[str]
    checkpoint_iteration: tuple[re.Pattern[str], ...]
    finished: re.Pattern[str]


@dataclass(frozen=True)
class ProgressLine:
    iteration: int | None
    step_ms: float | None


def _float(value: str | None) -> float | None:
    if not value:
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return number if number >= 0 else None


def parse_progress(line: str, config: ProgressConfig) -> ProgressLine | None:
    """A progress line's iteration and step time, or None when the line shows no progress."""
    # tqdm redraws with carriage returns; the last frame is the current one.
    if "\r" in line:
        line = next((seg for seg in reversed(line.split("\r")) if seg.strip()), "")
    if "\x1b" in line:
        line = _ANSI.sub("", line)
    for rx in config.compiled.patterns:
        m = rx.search(line)
        if m is None:
            continue
        g = m.groupdict()
        it = g.get("iter")
        step_ms = _float(g.get("step_ms"))
        step_s = _float(g.get("step_s")) or _float(g.get("step_s2"))
        if step_ms is None and step_s is not None:
            step_ms = step_s * 1000.0
        rate = _float(g.get("rate_its"))
        if step_ms is None and rate:
            step_ms = 1000.0 / rate
        sit = _float(g.get("rate_sit"))
        if step_ms is None and sit is not None:
            step_ms = sit * 1000.0
        return ProgressLine(iteration=int(it) if it else None, step_ms=step_ms)
    return None


@dataclass(frozen=True)
class CheckpointEvent:
    starting: bool | None  # True: a save/load starts; False: one ended; None: neither
    iteration: int | None  # the iteration of a complete checkpoint this line names


def checkpoint_event(line: str, config: ProgressConfig) -> CheckpointEvent | None:
    """What a checkpoint line says, or None when it says nothing about checkpoints."""
    compiled = config.compiled
    iteration: int | None = None
    for rx in compiled.checkpoint_iteration:
        m = rx.search(line)
        if m is not None:
            iteration = int(m.group("ckpt"))
            break
    starting: bool | None = None
    if compiled.checkpoint_end.search(line):
        starting = False
    elif compiled.checkpoint_start.search(line):
        starting = True
    if starting is None and iteration is None:
        return None
    return CheckpointEvent(starting=starting, iteration=iteration)


def training_finished(line: str, config: ProgressConfig) -> bool:
    return config.compiled.finished.search(line) is not None


def _median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


class ProgressTracker:
    """Mutable working copy of a ProgressState."""

    def __init__(self, config: ProgressConfig, state: ProgressState | None = None) -> None:
        self.config = config
        s = state or ProgressState()
        self.last_iteration = s.last_iteration
        self.last_progress_at = s.last_progress_at
        self.iterations_seen = s.iterations_seen
        self.mean_interval_s = s.mean_interval_s
        self.baseline_step_ms = s.baseline_step_ms
        self.recent_step_ms = s.recent_step_ms
        self.in_checkpoint = s.in_checkpoint
        self.last_checkpoint_iteration = s.last_checkpoint_iteration
        self.checkpoint_started_at = s.checkpoint_started_at
        self.recent_steps: list[float] = list(s.recent_steps_ms)
        self.step_samples = s.step_samples
        self.slow_streak = s.slow_streak
        self.straggling = s.straggling
        self.finished = s.finished

    def state(self) -> ProgressState:
        return ProgressState(
            last_iteration=self.last_iteration,
            last_progress_at=self.last_progress_at,
            iterations_seen=self.iterations_seen,
            mean_interval_s=self.mean_interval_s,
            baseline_step_ms=self.baseline_step_ms,
            recent_step_ms=self.recent_step_ms,
            in_checkpoint=self.in_checkpoint,
            last_checkpoint_iteration=self.last_checkpoint_iteration,
            checkpoint_started_at=self.checkpoint_started_at,
            recent_steps_ms=tuple(self.recent_steps),
            step_samples=self.step_samples,
            slow_streak=self.slow_streak,
            straggling=self.straggling,
            finished=self.finished,
        )

    def on_checkpoint(self, starting: bool | None, now: float, iteration: int | None = None) -> None:
        """A checkpoint line: a start gives the hang detector more slack; an end, or a line naming a
        complete checkpoint's iteration, credits that checkpoint (a save-end line without an iteration
        credits the last iteration seen, whether or not its start line was recognised)."""
        if iteration is not None:
            self.last_checkpoint_iteration = iteration
        if starting and not self.in_checkpoint:
            self.in_checkpoint = True
            self.checkpoint_started_at = now
        elif starting is False:
            self.in_checkpoint = False
            self.checkpoint_started_at = None
            if iteration is None and self.last_iteration is not None:
                self.last_checkpoint_iteration = self.last_iteration

    def on_progress(self, p: ProgressLine, now: float, line: str = "") -> Finding | None:
        """Record one progress line; returns a straggler finding when a slowdown becomes sustained."""
        cfg = self.config
        if p.iteration is not None and self.last_iteration is not None:
            if p.iteration == self.last_iteration:
                return None  # the same step printed by another rank
            if p.iteration < self.last_iteration:
                # Restarted from a checkpoint: a fresh warm-up, but the baseline is still the job's own.
                self.recent_steps.clear()
                self.step_samples = 0
                self.slow_streak = 0
                self.straggling = False
        step_ms = p.step_ms
        if self.last_progress_at is not None and now > self.last_progress_at:
            dt = now - self.last_progress_at
            a = cfg.interval_alpha
            prev = self.mean_interval_s
            self.mean_interval_s = dt if prev is None else (1 - a) * prev + a * dt
            if step_ms is None and p.iteration is not None and self.last_iteration is not None:
                delta = p.iteration - self.last_iteration
                if delta > 0:
                    step_ms = dt * 1000.0 / delta
        self.last_progress_at = now
        if p.iteration is not None:
            self.last_iteration = p.iteration
        self.iterations_seen += 1
        self.finished = False
        self.in_checkpoint = False
        self.checkpoint_started_at = None
        if step_ms is None or step_ms <= 0:
            return None
        return self._step_time(step_ms, now, line)

    def _step_time(self, step_ms: float, now: float, line: str) -> Finding | None:
        cfg = self.config
        self.step_samples += 1
        if self.step_samples <= cfg.warmup_steps:
            return None
        self.recent_steps.append(step_ms)
        del self.recent_steps[: -cfg.straggler_window]
        median = _median(self.recent_steps)
        self.recent_step_ms = median
        if self.baseline_step_ms is None:
            if len(self.recent_steps) >= cfg.straggler_window:
                self.baseline_step_ms = median
            return None
        slow = median > cfg.straggler_ratio * self.baseline_step_ms
        if not slow:
            self.slow_streak = 0
            self.straggling = False
            if step_ms <= cfg.straggler_ratio * self.baseline_step_ms:
                b = cfg.baseline_alpha
                self.baseline_step_ms = (1 - b) * self.baseline_step_ms + b * step_ms
            return None
        self.slow_streak += 1
        if self.slow_streak < cfg.straggler_sustain or self.straggling:
            return None
        self.straggling = True
        ratio = median / self.baseline_step_ms
        return Finding(
            source=FindingSource.PROGRESS,
            pattern_id="progress_straggler",
            category=Category.STRAGGLER,
            attribution=Attribution.HARDWARE,
            fatal=False,
            line=clip(line),
            timestamp=now,
            detail=(
                f"median step {median:.0f} ms over the last {len(self.recent_steps)} steps is "
                f"{ratio:.2f}x the job's baseline {self.baseline_step_ms:.0f} ms"
            ),
        )

    def hang_threshold_s(self) -> float:
        cfg = self.config
        interval = self.mean_interval_s
        if interval is None and self.baseline_step_ms is not None:
            interval = self.baseline_step_ms / 1000.0
        base = cfg.hang_ceiling_s if interval is None else cfg.hang_factor * interval
        threshold = min(max(base, cfg.hang_floor_s), cfg.hang_ceiling_s)
        if self.in_checkpoint:
            threshold = min(
                max(threshold * cfg.checkpoint_factor, cfg.checkpoint_floor_s), cfg.checkpoint_ceiling_s
            )
        return threshold

    def check_hang(self, now: float) -> Finding | None:
        if self.last_progress_at is None or self.finished:
            return None
        stalled = now - self.last_progress_at
        threshold = self.hang_threshold_s()
        if stalled <= threshold:
            return None
        where = " during a checkpoint save/load" if self.in_checkpoint else ""
        it = f" after iteration {self.last_iteration}" if self.last_iteration is not None else ""
        return Finding(
            source=FindingSource.PROGRESS,
            pattern_id="progress_hang",
            category=Category.HANG,
            attribution=Attribution.APPLICATION,
            fatal=True,
            timestamp=now,
            detail=f"no progress for {stalled:.0f} s{it}{where} (threshold {threshold:.0f} s)",
        )


MAX_TRACKED_RANKS = 4096


class RankStragglers:
    """One rank slower than its peers, from the step time each rank prints for itself.

    Synchronous training makes every rank's wall-clock step equal (all wait for the slowest), so a
    job-wide slowdown does not say where; per-rank timers (a rank's own share of the step, printed
    with its rank prefix) do. A rank is a straggler when the median of its last `straggler_window`
    times exceeds `straggler_ratio` x the median of the other ranks' medians for `straggler_sustain`
    reports in a row; it is reported once until it recovers. Bounded: at most MAX_TRACKED_RANKS ranks.
    """

    def __init__(self, config: ProgressConfig) -> None:
        self.config = config
        self._recent: dict[int, list[float]] = {}
        self._streak: dict[int, int] = {}
        self._reported: set[int] = set()

    def slowest_ms(self) -> float | None:
        """The slowest rank's median step over a full window: synchronous training waits for it, so it
        is the job's real step time when each rank times only its own share."""
        full = [_median(v) for v in self._recent.values() if len(v) >= self.config.straggler_window]
        return max(full) if len(full) >= 2 else None

    def observe(self, rank: int, step_ms: float, now: float, line: str = "") -> Finding | None:
        cfg = self.config
        if step_ms <= 0 or (rank not in self._recent and len(self._recent) >= MAX_TRACKED_RANKS):
            return None
        recent = self._recent.setdefault(rank, [])
        recent.append(step_ms)
        del recent[: -cfg.straggler_window]
        if len(recent) < cfg.straggler_window:
            return None
        peers = [_median(v) for r, v in self._recent.items() if r != rank and len(v) >= cfg.straggler_window]
        if not peers:
            return None
        mine, theirs = _median(recent), _median(peers)
        if theirs <= 0 or mine <= cfg.straggler_ratio * theirs:
            self._streak[rank] = 0
            self._reported.discard(rank)
            return None
        self._streak[rank] = self._streak.get(rank, 0) + 1
        if self._streak[rank] < cfg.straggler_sustain or rank in self._reported:
            return None
        self._reported.add(rank)
        return Finding(
            source=FindingSource.PROGRESS,
            pattern_id="rank_straggler",
            category=Category.STRAGGLER,
            attribution=Attribution.HARDWARE,
            fatal=False,
            line=clip(line),
            timestamp=now,
            rank=rank,
            detail=(
                f"rank {rank}'s median step {mine:.0f} ms over its last {len(recent)} steps is "
                f"{mine / theirs:.2f}x its {len(peers)} peers' {theirs:.0f} ms"
            ),
        )

"""The newest complete checkpoint of each common layout, on real directories (tmp_path)."""

from __future__ import annotations

import os
from pathlib import Path

from trainguard.checkpoint_dir import allowed_dir, newest_checkpoint


def touch(path: Path, text: str = "x", mtime: float | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path


def test_megatron_tracker_names_the_complete_iteration(tmp_path: Path) -> None:
    (tmp_path / "iter_0000100").mkdir()
    (tmp_path / "iter_0000200").mkdir()  # being written: the tracker still says 100
    touch(tmp_path / "iter_0000200" / ".metadata")
    touch(tmp_path / "latest_checkpointed_iteration.txt", "100\n", mtime=1000.0)
    info = newest_checkpoint(tmp_path)
    assert info is not None and (info.iteration, info.layout, info.mtime) == (100, "megatron", 1000.0)


def test_megatron_release_or_missing_step_dir_is_not_progress(tmp_path: Path) -> None:
    touch(tmp_path / "latest_checkpointed_iteration.txt", "release")
    assert newest_checkpoint(tmp_path) is None
    touch(tmp_path / "latest_checkpointed_iteration.txt", "300")  # iter_0000300 absent
    assert newest_checkpoint(tmp_path) is None


def test_deepspeed_latest_tag(tmp_path: Path) -> None:
    (tmp_path / "global_step40").mkdir()
    (tmp_path / "global_step50").mkdir()
    touch(tmp_path / "latest", "global_step40")
    info = newest_checkpoint(tmp_path)
    assert info is not None and (info.iteration, info.layout) == (40, "deepspeed")


def test_dcp_step_dirs_count_once_their_metadata_is_written(tmp_path: Path) -> None:
    touch(tmp_path / "step-10" / ".metadata", mtime=500.0)
    touch(tmp_path / "step-10" / "__0_0.distcp")
    touch(tmp_path / "step-20" / "__0_0.distcp")  # no .metadata yet: being written
    info = newest_checkpoint(tmp_path)
    assert info is not None and (info.iteration, info.layout, info.mtime) == (10, "dcp", 500.0)


def test_hf_checkpoint_dirs_need_trainer_state_and_tmp_dirs_are_partial(tmp_path: Path) -> None:
    touch(tmp_path / "checkpoint-500" / "trainer_state.json", "{}")
    touch(tmp_path / "checkpoint-1000" / "model.safetensors")  # trainer_state.json not yet written
    touch(tmp_path / "tmp-checkpoint-1500" / "trainer_state.json", "{}")
    info = newest_checkpoint(tmp_path)
    assert info is not None and (info.iteration, info.layout) == (500, "hf")


def test_lightning_ckpt_files_by_step(tmp_path: Path) -> None:
    touch(tmp_path / "epoch=0-step=500.ckpt")
    touch(tmp_path / "epoch=1-step=1000.ckpt")
    touch(tmp_path / "last.ckpt")
    info = newest_checkpoint(tmp_path)
    assert info is not None and (info.iteration, info.layout) == (1000, "lightning")


def test_plain_files_with_an_iteration_and_temporary_writes(tmp_path: Path) -> None:
    touch(tmp_path / "step_0000020.pt")
    touch(tmp_path / "step_0000040.pt")
    touch(tmp_path / ".step_0000060.pt.tmp-4242")  # examples/ddp_train.py mid-save
    touch(tmp_path / "model_80.pt.partial")
    touch(tmp_path / "notes-2024.txt")
    info = newest_checkpoint(tmp_path)
    assert info is not None and (info.iteration, info.layout) == (40, "file")
    assert info.path.endswith("step_0000040.pt")


def test_empty_missing_or_unrelated_dirs(tmp_path: Path) -> None:
    assert newest_checkpoint(tmp_path) is None
    assert newest_checkpoint(tmp_path / "missing") is None
    touch(tmp_path / "README.md")
    (tmp_path / "logs").mkdir()
    assert newest_checkpoint(tmp_path) is None


def test_only_absolute_dirs_under_an_allowed_root(tmp_path: Path) -> None:
    inside = tmp_path / "jobs" / "ckpt"
    assert allowed_dir(str(inside), (str(tmp_path / "jobs"),)) == inside.resolve()
    assert allowed_dir(str(tmp_path / "jobs" / ".." / "etc"), (str(tmp_path / "jobs"),)) is None
    assert allowed_dir("relative/ckpt", (str(tmp_path),)) is None
    assert allowed_dir("/etc", (str(tmp_path),)) is None
    assert allowed_dir(str(inside), ()) is None
    link = tmp_path / "jobs" / "escape"
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to("/etc")
    assert allowed_dir(str(link), (str(tmp_path / "jobs"),)) is None

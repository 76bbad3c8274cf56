"""How the lab picks a Slurm version and runs one from a root filesystem (pure parts; the real thing is
tests/e2e/test_slurm_lab.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from trainguard.cli import main
from trainguard.localstack import slurm_rootfs
from trainguard.localstack.slurm import LabError, LocalSlurmCluster
from trainguard.localstack.slurm_rootfs import (
    CLIENTS,
    DAEMONS,
    MARKER,
    check_version,
    collapse,
    default_rootfs,
    default_version,
    write_wrappers,
)


def test_only_known_versions() -> None:
    assert check_version("24.11") == "24.11"
    with pytest.raises(ValueError, match=r"unsupported Slurm version '23\.02'"):
        check_version("23.02")
    with pytest.raises(ValueError):
        LocalSlurmCluster(Path("/tmp/none"), version="25.05")


def test_version_and_rootfs_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("TG_LAB_SLURM_VERSION", raising=False)
    assert default_version() == "22.05"
    monkeypatch.setenv("TG_LAB_SLURM_VERSION", "24.11")
    assert default_version() == "24.11"
    assert default_rootfs("24.11") == slurm_rootfs.REPO / "var" / "slurm-24.11" / "rootfs"
    monkeypatch.setenv("TG_LAB_SLURM_ROOTFS_24_11", str(tmp_path))
    assert default_rootfs("24.11") == tmp_path


def test_a_cluster_dir_keeps_its_version(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr("trainguard.localstack.slurm.host_version", lambda: "24.11")
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "slurm-version").write_text("24.11\n")
    lab = LocalSlurmCluster(tmp_path)
    assert lab.version == "24.11" and lab.rootfs is None  # the host's own version: host binaries
    assert lab.env == {"SLURM_CONF": str(lab.conf)}
    assert LocalSlurmCluster(tmp_path, version="22.05").version == "22.05"  # explicit wins


def test_the_other_version_runs_through_wrappers_first_on_path(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr("trainguard.localstack.slurm.host_version", lambda: "22.05")
    # start() first refuses a base too deep for Slurm's sockets, as pytest-xdist's tmp_path can be
    short = Path(tempfile.mkdtemp(prefix="tg-rootfs-"))
    try:
        lab = LocalSlurmCluster(short / "c", version="24.11", rootfs=tmp_path / "rootfs")
        check_other_version(lab, tmp_path)
    finally:
        shutil.rmtree(short, ignore_errors=True)


def check_other_version(lab: LocalSlurmCluster, tmp_path: Path) -> None:
    assert lab.rootfs == (tmp_path / "rootfs").resolve()
    assert lab.env["PATH"].split(":")[0] == str(lab.bin_dir)
    assert lab._exe("squeue") == str(lab.bin_dir / "squeue")
    assert "Slurm 24.11 (from" in lab.describe()
    # No slurmctld in that root filesystem: a clear error naming the fix, never a silent fallback.
    with pytest.raises(LabError, match=r"bootstrap\.sh"):
        lab.start()


def test_24_11_gets_its_own_slurmd_timeout(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr("trainguard.localstack.slurm.host_version", lambda: "22.05")
    assert "\nSlurmdTimeout=5\n" in LocalSlurmCluster(tmp_path / "a", version="22.05").render_config()
    text = LocalSlurmCluster(tmp_path / "b", version="24.11").render_config()
    assert "\nSlurmdTimeout=10\n" in text and "SlurmdTimeout=5" not in text


def test_settings_replace_or_add_lines_of_one_cluster_only(tmp_path: Path) -> None:
    text = LocalSlurmCluster(
        tmp_path / "a", settings={"MinJobAge": "2", "MaxJobCount": "5000"}
    ).render_config()
    assert "\nMinJobAge=2\n" in text and "MinJobAge=600" not in text and text.count("MinJobAge=") == 1
    assert text.endswith("MaxJobCount=5000\n")
    assert "\nMinJobAge=600\n" in LocalSlurmCluster(tmp_path / "b").render_config()
    for bad in ({"MinJobAge": "2\nSlurmUser=nobody"}, {"Min JobAge": "2"}):
        with pytest.raises(ValueError, match=r"invalid slurm\.conf setting"):
            LocalSlurmCluster(tmp_path / "c", settings=bad).render_config()


def test_jwt_only_when_asked(tmp_path: Path) -> None:
    assert "AuthAltTypes" not in LocalSlurmCluster(tmp_path / "a").render_config()
    lab = LocalSlurmCluster(tmp_path / "b", rest_port=30100)
    assert f"AuthAltParameters=jwt_key={lab.jwt_key}" in lab.render_config()
    assert LocalSlurmCluster(tmp_path / "c", jwt=True).jwt
    with pytest.raises(LabError, match="rest_port"):
        _ = LocalSlurmCluster(tmp_path / "d").rest_url


def test_collapse_keeps_outermost_paths(tmp_path: Path) -> None:
    a = tmp_path / "a"
    assert collapse([a / "b" / "c", a, tmp_path / "x", a / "b"]) == [a, tmp_path / "x"]


def test_wrappers_enter_the_rootfs_and_run_directly_inside_it(tmp_path: Path) -> None:
    rootfs = tmp_path / "rootfs"
    (rootfs / "etc").mkdir(parents=True)
    (rootfs / "usr" / "sbin").mkdir(parents=True)
    (rootfs / "usr" / "sbin" / "slurmctld").write_text("")
    shared = tmp_path / "my repo"  # a space must not split the word
    other = tmp_path / "other"
    write_wrappers(tmp_path / "bin", rootfs, [shared / "sub", other, shared])
    assert {p.name for p in (tmp_path / "bin").iterdir()} >= set(DAEMONS + CLIENTS)
    assert (rootfs / MARKER).exists()
    assert (rootfs / str(shared).lstrip("/")).is_dir()  # mount point made
    enter = (tmp_path / "bin" / ".enter-rootfs").read_text()
    assert f"for p in '{shared}' '{other}'; do" in enter  # shared/sub rides on shared's bind
    assert 'exec chroot "$R" /usr/bin/env -C "$wd" "$@"' in enter
    ctld = (tmp_path / "bin" / "slurmctld").read_text()
    assert f"[ -e /{MARKER} ] && exec /usr/sbin/slurmctld" in ctld
    assert "exec /usr/bin/squeue" in (tmp_path / "bin" / "squeue").read_text()
    assert all(os.access(tmp_path / "bin" / n, os.X_OK) for n in DAEMONS + CLIENTS)
    with pytest.raises(ValueError):
        write_wrappers(tmp_path / "bin2", rootfs, [Path("/")])


def test_wrapper_shell_syntax(tmp_path: Path) -> None:
    rootfs = tmp_path / "rootfs"
    (rootfs / "etc").mkdir(parents=True)
    write_wrappers(tmp_path / "bin", rootfs, [tmp_path / "w"])
    for name in (".enter-rootfs", "sbatch"):
        subprocess.run(["sh", "-n", str(tmp_path / "bin" / name)], check=True)


def test_lab_cli_takes_the_version(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["lab", "up", "--slurm", "23.02", "--dir", str(tmp_path)])
    assert "invalid choice" in capsys.readouterr().err
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "slurm-version").write_text("24.11\n")
    assert main(["lab", "status", "--dir", str(tmp_path)]) == 1
    assert "not running" in capsys.readouterr().out

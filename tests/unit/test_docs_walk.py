"""The walked docs without the real stack: every block the walk runs is there, the units and the guide
agree on the commands, and the env files read as systemd reads them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from tests.e2e.docwalk import (
    BINARY,
    DOCS,
    Site,
    _commands,
    read_env_file,
    read_unit,
    sbatch_comment,
    walk_blocks,
)
from trainguard.settings import Settings

REPO = Path(__file__).resolve().parents[2]
UNITS = sorted((REPO / "deploy" / "systemd").glob("*.service"))
WALKED = {
    "ssh-install": "bash",
    "ssh-keys": "bash",
    "ssh-settings": "yaml",
    "ssh-env": "bash",
    "ssh-start": "bash",
    "first-advice": "bash",
    "main-owner": "yaml",
    "main-restart": "bash",
    "canary-settings": "yaml",
    "canary-units": "bash",
    "canary-job": "bash",
    "canary-audit": "bash",
    "stage4-settings": "yaml",
    "stage4-restart": "bash",
    "rollback": "bash",
    "rollback-check": "bash",
}


def test_every_walked_block_is_in_the_docs() -> None:
    blocks = walk_blocks("operator-guide.md", "runbook.md")
    assert {name: lang for name, (lang, _) in blocks.items()} == WALKED


def test_the_documented_settings_are_valid_settings() -> None:
    blocks = walk_blocks("operator-guide.md", "runbook.md")
    main = yaml.safe_load(blocks["ssh-settings"][1])
    Settings(**main)
    assert main["cluster"]["runner"] == "ssh" and "SLURM_CONF" in main["cluster"]["ssh"]["slurm_env"]
    for overlay in ("main-owner", "canary-settings", "stage4-settings"):
        Settings(**{**main, **yaml.safe_load(blocks[overlay][1])})
    for name in ("first-advice", "canary-job"):
        assert set(json.loads(sbatch_comment(blocks[name][1]))["trainguard"]) == {"environment", "mode"}


def test_units_run_the_installed_binary_with_the_env_file() -> None:
    assert [u.name for u in UNITS] == [
        "trainguard-api.service",
        "trainguard-cluster-worker.service",
        "trainguard-control-worker.service",
    ]
    guide = (DOCS / "operator-guide.md").read_text()
    for path in UNITS:
        unit = read_unit(path)
        assert unit.exec_start[0] == BINARY
        assert unit.environment_files == ("/etc/trainguard/trainguard.env",)
        # the guide quotes each unit's command as it is
        quoted = "trainguard " + " ".join(unit.exec_start[1:])
        assert f"`{unit.name}` (`{quoted}`" in guide, quoted


def test_env_example_reads_as_systemd_and_a_shell_read_it(tmp_path: Path) -> None:
    example = REPO / "deploy" / "systemd" / "trainguard.env.example"
    env = read_env_file(example)
    assert env == {
        "TRAINGUARD_CONFIG": "/etc/trainguard/trainguard.yaml",
        "TRAINGUARD_HOME": "/var/lib/trainguard",
    }
    walked = tmp_path / "x.env"
    lines = walk_blocks("operator-guide.md")["ssh-env"][1]
    walked.write_text(lines)
    operators = json.loads(read_env_file(walked)["TRAINGUARD_API__OPERATORS"])
    assert operators[0]["role"] == "operator" and len(operators[0]["token"]) >= 16


def test_paths_move_under_the_site_root_once(tmp_path: Path) -> None:
    site = Site(tmp_path)
    text = "EnvironmentFile=/etc/trainguard/trainguard.env s#/etc/trainguard/a#/etc/trainguard/b# /opt/x"
    moved = site.path(text)
    assert moved.count(str(tmp_path)) == 3 and site.path(moved) == moved and "/opt/x" in moved


def test_commands_keep_a_for_loop_and_join_continuations() -> None:
    block = walk_blocks("runbook.md")["canary-units"][1]
    commands = _commands(block)
    loop = next(c for c in commands if c.startswith("for "))
    assert loop.endswith("done") and "--metrics-port 911" in loop and "\\\n" not in loop
    assert re.search(r"^systemctl enable --now( trainguard-canary-\S+){3}$", commands[-1])

"""PolicyConfig mirrors the typed settings, and the policy package stays importable in the sandbox."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

import trainguard.policy
from trainguard.policy import PolicyConfig
from trainguard.settings import PolicySettings, Settings

POLICY_DIR = Path(trainguard.policy.__file__).parent
# What the workflow sandbox may see imported from the policy: models, pydantic and pure stdlib.
ALLOWED = {
    "__future__",
    "collections",
    "dataclasses",
    "enum",
    "math",
    "statistics",
    "typing",
    "pydantic",
    "trainguard.models",
    # pure data and functions only (its docstring promises it; the workflow sandbox replays with it)
    "trainguard.slurm.states",
    "collections.abc",
}


def test_config_has_every_setting_with_the_same_default() -> None:
    settings = PolicySettings()
    config = PolicyConfig()
    for name in PolicySettings.model_fields:
        assert name in PolicyConfig.model_fields, name
        assert getattr(config, name) == getattr(settings, name), name


def test_worker_construction_from_settings_round_trips() -> None:
    settings = Settings(policy={"retry_budget": 9, "same_failure_limit": 4, "drain_enabled": True})
    config = PolicyConfig(**settings.policy.model_dump())
    assert (config.retry_budget, config.same_failure_limit, config.drain_enabled) == (9, 4, True)


@pytest.mark.parametrize(
    "bad",
    [{"retry_budget": -1}, {"no_checkpoint_attempts": 0}, {"storm_window_s": 0}, {"array_systemic_tasks": 1}],
)
def test_invalid_values_are_rejected(bad: dict[str, float]) -> None:
    with pytest.raises(ValidationError):
        PolicyConfig(**bad)


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


@pytest.mark.parametrize("path", sorted(POLICY_DIR.glob("*.py")), ids=lambda p: p.name)
def test_policy_imports_only_sandbox_safe_modules(path: Path) -> None:
    for module in _imports(path):
        if module.startswith("trainguard.policy"):
            continue
        top = module.split(".")[0]
        assert module in ALLOWED or top in ALLOWED - {"trainguard"}, f"{path.name} imports {module}"


def test_policy_modules_use_no_clock_randomness_or_io() -> None:
    forbidden = {"time", "datetime", "random", "os", "uuid", "open", "print", "secrets"}
    for path in POLICY_DIR.glob("*.py"):
        tree = ast.parse(path.read_text())
        names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        assert not names & forbidden, f"{path.name} uses {names & forbidden}"
    assert "trainguard.policy" in sys.modules

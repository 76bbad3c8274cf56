"""Settings that reach running workloads: the diff that is audited, the watchdog's scope, and the mapping
of settings (file + environment) to what ClusterWatch compares."""

from __future__ import annotations

import pytest

from trainguard import contracts as c
from trainguard.models import Mode
from trainguard.runtime_config import describe_diff, diff_data, settings_diff, watchdog_guards
from trainguard.settings import Settings, load_settings
from workers.worker import cluster_config, recovery_config


def test_diff_lists_changed_keys_with_old_and_new_values() -> None:
    old = c.ClusterConfig(mode=Mode.ACTION, acknowledged=True, recovery=c.RecoveryConfig(cluster_queue="q"))
    new_policy = old.recovery.policy.model_copy(update={"retry_budget": 1})
    new = old.model_copy(
        update={"mode": Mode.OBSERVE, "recovery": old.recovery.model_copy(update={"policy": new_policy})}
    )
    diff = settings_diff(old, new)
    assert diff == {"mode": ("action", "observe"), "recovery.policy.retry_budget": (5, 1)}
    assert describe_diff(diff) == "mode action → observe, recovery.policy.retry_budget 5 → 1"
    assert diff_data(diff) == {"mode": "action → observe", "recovery.policy.retry_budget": "5 → 1"}
    assert settings_diff(old, old) == {}


def test_describe_is_bounded() -> None:
    diff = {f"k{i}": (i, i + 1) for i in range(30)}
    assert describe_diff(diff, limit=3).endswith("(+27 more)")
    assert len(diff_data(diff)) == 24


@pytest.mark.parametrize(
    ("pattern", "environment", "guarded"),
    [
        (".*", "anything", True),
        ("prod-.*", "prod-a", True),
        ("prod-.*", "dev", False),
        ("prod", "prod-a", False),
    ],
)
def test_watchdog_environment_pattern(pattern: str, environment: str, guarded: bool) -> None:
    assert watchdog_guards(pattern, environment) is guarded


def test_watchdog_settings_reach_the_workflow_config(monkeypatch: pytest.MonkeyPatch) -> None:
    assert recovery_config(Settings()).watchdog_release is True
    monkeypatch.setenv("TRAINGUARD_WATCHDOG__MODE", "observe")
    monkeypatch.setenv("TRAINGUARD_WATCHDOG__ENVIRONMENT_PATTERN", "prod-.*")
    cfg = recovery_config(load_settings())
    assert cfg.watchdog_release is False and cfg.watchdog_environment_pattern == "prod-.*"
    monkeypatch.setenv("TRAINGUARD_WATCHDOG__MODE", "action")
    monkeypatch.setenv("TRAINGUARD_WATCHDOG__ACKNOWLEDGE_SCHEDULER_ACTIONS", "false")
    assert recovery_config(load_settings()).watchdog_release is False


def test_runbook_rollback_variable_changes_what_clusterwatch_compares(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`TRAINGUARD_CLUSTER__MODE=observe` in the env file overrides the YAML's action mode."""
    before = cluster_config(Settings(cluster={"mode": "action", "acknowledge_scheduler_actions": True}))
    monkeypatch.setenv("TRAINGUARD_CLUSTER__MODE", "observe")
    after = cluster_config(Settings(cluster={"mode": "action", "acknowledge_scheduler_actions": True}))
    assert settings_diff(before, after) == {"mode": ("action", "observe")}

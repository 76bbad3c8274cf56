"""Settings that reach running workloads: what changed between two configurations, and the watchdog's scope.

Pure functions (no I/O): the workflows import them to audit a settings change key by key and to decide
whether the watchdog guards a workload.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel

Scalar = str | int | float | bool | None


def _flatten(value: Any, prefix: str, out: dict[str, Any]) -> None:
    if isinstance(value, dict):
        for key in sorted(value):
            _flatten(value[key], f"{prefix}.{key}" if prefix else str(key), out)
    else:
        out[prefix] = value


def flat(model: BaseModel) -> dict[str, Any]:
    """A model as dotted keys (`recovery.policy.retry_budget`) -> JSON-able value."""
    out: dict[str, Any] = {}
    _flatten(model.model_dump(mode="json"), "", out)
    return out


def settings_diff(old: BaseModel, new: BaseModel) -> dict[str, tuple[Any, Any]]:
    """Every dotted key whose value differs, with (old, new); keys only one side has count as changed."""
    a, b = flat(old), flat(new)
    return {k: (a.get(k), b.get(k)) for k in sorted(a.keys() | b.keys()) if a.get(k) != b.get(k)}


def describe_diff(diff: dict[str, tuple[Any, Any]], limit: int = 12) -> str:
    """`cluster.mode action → observe, …` for an audit message (bounded: a whole policy may change)."""
    parts = [f"{key} {_show(old)} → {_show(new)}" for key, (old, new) in list(diff.items())[:limit]]
    more = len(diff) - limit
    return ", ".join(parts) + (f" (+{more} more)" if more > 0 else "")


def diff_data(diff: dict[str, tuple[Any, Any]], limit: int = 24) -> dict[str, Scalar]:
    """Audit `data` for a change: one `old → new` string per key (values may be lists or dicts)."""
    return {key: f"{_show(old)} → {_show(new)}"[:300] for key, (old, new) in list(diff.items())[:limit]}


def _show(value: Any) -> str:
    return "null" if value is None else str(value)


def watchdog_guards(pattern: str, environment: str) -> bool:
    """`watchdog.environment_pattern`: does the watchdog guard a workload of this opt-in environment?"""
    try:
        return re.fullmatch(pattern, environment, re.DOTALL) is not None
    except re.error:
        return True  # validated at start; an unreadable pattern must not switch the fail-open guard off

"""Log lines that name their workload: `workload_key` on every record (\"-\" when a line has none).

Activities log through `activity_log(key)` (the SDK's activity.logger, which adds the activity's
context, plus the workload key in `extra`); workflows through `workflow.logger` with the same `extra`
(silent during replay). The process format prints it, so `grep 'lab/123/'` finds one workload's lines.
"""

from __future__ import annotations

import logging
from collections.abc import MutableMapping
from typing import Any

from temporalio import activity

KEY = "workload_key"


class WorkloadKeyDefault(logging.Filter):
    """Gives records without a workload key "-", so the format never fails on other libraries' lines."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, KEY):
            setattr(record, KEY, "-")
        return True


class _WithKey(logging.LoggerAdapter):
    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[Any, MutableMapping[str, Any]]:
        kwargs["extra"] = {**(self.extra or {}), **kwargs.get("extra", {})}
        return msg, kwargs


def activity_log(workload_key: str) -> logging.LoggerAdapter:
    """activity.logger with the workload key on every record."""
    return _WithKey(activity.logger, {KEY: workload_key})


def extra(workload_key: str) -> dict[str, str]:
    return {KEY: workload_key}

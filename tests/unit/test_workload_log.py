"""Every log line names its workload (or "-"), and an ended workload's gauges are removed."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import cast

import pytest
from prometheus_client import REGISTRY
from temporalio import activity
from temporalio.client import Client
from temporalio.testing import ActivityEnvironment

from activities.control import ControlActivities
from trainguard import contracts as c
from trainguard import telemetry
from trainguard.audit.store import AuditStore
from trainguard.logconfig import FORMAT, configure_logging
from trainguard.models import WorkloadState, WorkloadStatus
from trainguard.settings import AttributionSettings, LoggingSettings
from trainguard.workload_log import WorkloadKeyDefault, activity_log, extra


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def captured(name: str, emit: Callable[[], object]) -> str:
    """Run `emit` and format the one record it logs on logger `name` as the worker process would."""
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Keep()
    handler.addFilter(WorkloadKeyDefault())
    logger = logging.getLogger(name)
    saved = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        emit()
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved)
    assert len(records) == 1, records
    return logging.Formatter(FORMAT).format(records[0])


def test_lines_carry_the_workload_key_or_a_dash() -> None:
    logger = logging.getLogger("tg-test-workload-log")
    line = captured(logger.name, lambda: logger.info("held", extra=extra("lab/7/1700000000")))
    assert "[lab/7/1700000000]: held" in line
    assert " [-]: nothing in particular" in captured(
        logger.name, lambda: logger.info("nothing in particular")
    )


@activity.defn(name="log_test_step")
async def step() -> None:
    activity_log("lab/8/1").info("step done")


def test_activity_log_adds_the_key_and_the_activity_context() -> None:
    line = captured("temporalio.activity", lambda: asyncio.run(ActivityEnvironment().run(step)))
    assert "[lab/8/1]: step done" in line and "'workflow_run_id': 'test-run'" in line, line


def test_configured_logging_never_fails_on_a_line_without_a_key(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging(LoggingSettings())
    logging.getLogger("trainguard.test").warning("plain line")
    assert "[-]: plain line" in capsys.readouterr().err


def status(state: WorkloadState) -> WorkloadStatus:
    return WorkloadStatus(
        workload_key="gauge-test/9/1",
        cluster="gauge-test",
        job_id="9",
        submit_time=1,
        state=state,
        goodput=0.5,
    )


def test_an_ended_workloads_goodput_gauge_is_removed(tmp_path: Path) -> None:
    store = AuditStore.from_url(f"sqlite:///{tmp_path / 'a.db'}")
    acts = ControlActivities(store, cast(Client, None), AttributionSettings())
    labels = {"workload": "gauge-test/9/1"}
    run = ActivityEnvironment().run
    asyncio.run(
        run(acts.record_events, c.RecordEventsInput(events=(), status=status(WorkloadState.WATCHING)))
    )
    assert REGISTRY.get_sample_value("trainguard_goodput_ratio", labels) == 0.5
    asyncio.run(
        run(acts.record_events, c.RecordEventsInput(events=(), status=status(WorkloadState.COMPLETED)))
    )
    assert REGISTRY.get_sample_value("trainguard_goodput_ratio", labels) is None
    telemetry.forget_workload("gauge-test/9/1")  # already gone: no error

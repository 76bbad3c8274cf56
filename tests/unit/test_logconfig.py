"""Log levels from settings `logging`: asyncssh (and httpx) quiet by default, TrainGuard at its level,
both overridable; a real asyncssh log call shows whether it gets through."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import asyncssh
import pytest
from pydantic import ValidationError

from trainguard.logconfig import configure_logging
from trainguard.settings import LoggingSettings, Settings


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    names = ("asyncssh", "httpx", "httpcore", "trainguard")
    saved = {n: logging.getLogger(n).level for n in names}
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    for n, lvl in saved.items():
        logging.getLogger(n).setLevel(lvl)
    root.handlers[:] = handlers
    root.setLevel(level)


def test_asyncssh_is_quiet_by_default(caplog: pytest.LogCaptureFixture) -> None:
    configure_logging(Settings().logging)
    logging.getLogger().addHandler(caplog.handler)  # configure_logging replaced the root's handlers
    asyncssh.logging.logger.info("Opening SSH connection to login-node, port 22")
    asyncssh.logging.logger.warning("Connection failure: refused")
    logging.getLogger("trainguard.activities").info("watching job 42")
    logging.getLogger("httpx").info('HTTP Request: GET http://loki/ "HTTP/1.1 200 OK"')
    shown = [r.getMessage() for r in caplog.records]
    assert shown == ["Connection failure: refused", "watching job 42"]


def test_levels_come_from_settings(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("TRAINGUARD_LOGGING__LEVEL", "warning")
    monkeypatch.setenv("TRAINGUARD_LOGGING__LOGGERS", '{"asyncssh": "INFO"}')
    settings = Settings()
    assert settings.logging.level == "WARNING"
    configure_logging(settings.logging)
    logging.getLogger().addHandler(caplog.handler)
    asyncssh.logging.logger.info("Opening SSH connection to login-node, port 22")
    logging.getLogger("trainguard.activities").info("watching job 42")
    assert [r.getMessage() for r in caplog.records] == ["Opening SSH connection to login-node, port 22"]
    assert logging.getLogger("httpx").level == logging.WARNING  # defaults stay for loggers not named


def test_bad_levels_are_refused() -> None:
    with pytest.raises(ValidationError):
        LoggingSettings(level="LOUD")
    with pytest.raises(ValidationError):
        LoggingSettings(loggers={"asyncssh": "verbose"})

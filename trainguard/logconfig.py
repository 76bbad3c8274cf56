"""Process logging from settings `logging`: one format, TrainGuard at `logging.level`, chatty libraries
(asyncssh, httpx) at WARNING unless `logging.loggers` says otherwise."""

from __future__ import annotations

import logging

from trainguard.settings import LoggingSettings
from trainguard.workload_log import WorkloadKeyDefault

FORMAT = "%(asctime)s %(levelname)s %(name)s [%(workload_key)s]: %(message)s"


def configure_logging(settings: LoggingSettings) -> None:
    logging.basicConfig(level=settings.level, format=FORMAT, force=True)
    for handler in logging.getLogger().handlers:
        handler.addFilter(WorkloadKeyDefault())
    for name, level in settings.levels().items():
        logging.getLogger(name).setLevel(level)

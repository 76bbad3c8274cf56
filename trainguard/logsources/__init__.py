"""Where job logs come from: output files (local or over SSH), Loki, VictoriaLogs."""

from trainguard.logsources.base import LogChunk, LogSource, close_source
from trainguard.logsources.factory import make_log_source

__all__ = ["LogChunk", "LogSource", "close_source", "make_log_source"]

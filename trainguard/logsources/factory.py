"""Pick the log source a job's settings ask for.

Label mapping: `logs.labels` maps TrainGuard's logical names (`job_id`, `filename`) to the names the
operator's collector uses. The job is selected by its job-id label; when that is mapped to "" (not
labelled), by the `filename` label matching the job's stdout/stderr paths.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx

from trainguard.logsources.base import LogSource
from trainguard.logsources.combined import CombinedLogSource
from trainguard.logsources.files import FileLogSource
from trainguard.logsources.http import make_http_client
from trainguard.logsources.loki import LokiLogSource, logql_selector
from trainguard.logsources.victorialogs import VictoriaLogsLogSource, logsql_filters
from trainguard.models import JobSnapshot
from trainguard.settings import LogSettings
from trainguard.slurm.runner import Runner

LOOKBACK_S = 3600.0  # where a backend read starts when Slurm gave no submit time
CLOCK_SKEW_S = 60.0


def job_matchers(settings: LogSettings, job: JobSnapshot) -> dict[str, str | tuple[str, ...]]:
    job_label = settings.labels.get("job_id", "job_id")
    if job_label:
        return {job_label: job.job_id}
    file_label = settings.labels.get("filename", "")
    paths = tuple(dict.fromkeys(p for p in (job.stdout_path, job.stderr_path) if p))
    if file_label and paths:
        return {file_label: paths if len(paths) > 1 else paths[0]}
    raise ValueError("logs.labels maps neither job_id nor filename (with known output paths): cannot select")


def backend_query(settings: LogSettings, job: JobSnapshot) -> str:
    """The selector (Loki) or filter (VictoriaLogs) that picks one job's lines."""
    matchers = job_matchers(settings, job)
    if settings.backend == "loki":
        return logql_selector(matchers, settings.query_prefix)
    return logsql_filters(matchers, settings.query_prefix)


def start_ns_for(job: JobSnapshot, now: float) -> int:
    started = job.submit_time or job.start_time
    since = started - CLOCK_SKEW_S if started else now - LOOKBACK_S
    return int(since * 1_000_000_000)


def make_log_source(
    settings: LogSettings,
    runner: Runner,
    job: JobSnapshot,
    *,
    client: httpx.AsyncClient | None = None,
    clock: Callable[[], float] = time.time,
) -> LogSource:
    """Pass a shared `client` to pool connections across jobs; otherwise the source owns one
    (release it with `close_source`)."""
    if settings.backend == "files":
        paths = list(dict.fromkeys(p for p in (job.stdout_path, job.stderr_path) if p))
        if not paths:
            raise ValueError(f"job {job.job_id} has no output path")
        if len(paths) == 1:
            return FileLogSource(runner, paths[0])
        return CombinedLogSource([FileLogSource(runner, p) for p in paths])
    owns = client is None
    http = client if client is not None else make_http_client(settings)
    start = start_ns_for(job, clock())
    query = backend_query(settings, job)
    if settings.backend == "loki":
        return LokiLogSource(http, query, start_ns=start, clock=clock, owns_client=owns)
    return VictoriaLogsLogSource(http, query, start_ns=start, clock=clock, owns_client=owns)

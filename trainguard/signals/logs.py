"""Log-side checks: backend reachable, job-id label present and queryable, marker found, progress
lines recognised, timestamps sane; a label mapping proposed when the names differ."""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import quote

import httpx

from trainguard.logsources.base import close_source
from trainguard.logsources.factory import backend_query, make_log_source
from trainguard.logsources.http import LogBackendError, make_http_client, raise_for_backend
from trainguard.logsources.loki import LokiLogSource
from trainguard.logsources.timeline import MAX_LINES_PER_QUERY, LogLine
from trainguard.logsources.victorialogs import VictoriaLogsLogSource, format_rfc3339_ns
from trainguard.models import JobSnapshot, LogCursor
from trainguard.settings import LogSettings
from trainguard.signals.progress import count_progress_lines
from trainguard.signals.report import Report, Status
from trainguard.slurm.runner import Runner
from trainguard.slurm.states import RUNNING

NS = 1_000_000_000
FUTURE_TOLERANCE_S = 120.0
STALE_AFTER_S = 600.0
MAX_FILE_BYTES = 8 * 1024 * 1024
MAX_LABELS_PROBED = 100
_INTERNAL_FIELDS = {"_msg", "_time", "_stream", "_stream_id"}


@dataclass(frozen=True)
class Window:
    start_ns: int
    end_ns: int


async def check_logs(
    report: Report,
    settings: LogSettings,
    runner: Runner,
    job: JobSnapshot | None,
    job_id: str,
    marker: str | None,
    window: Window,
    now: float,
) -> None:
    if settings.backend == "files":
        await _check_files(report, settings, runner, job, marker, now)
        return
    try:
        client = make_http_client(settings)
    except ValueError as err:
        report.add("logs.backend", Status.FAIL, str(err), f"set logs.url to the {settings.backend} address")
        return
    try:
        await _check_backend(report, settings, client, job, job_id, marker, window, now)
    finally:
        await client.aclose()


async def _check_files(
    report: Report,
    settings: LogSettings,
    runner: Runner,
    job: JobSnapshot | None,
    marker: str | None,
    now: float,
) -> None:
    report.add("logs.backend", Status.PASS, "files: job output read through the cluster runner")
    report.add("logs.job_label", Status.SKIP, "files backend: the job's StdOut/StdErr paths identify it")
    if job is None or not (job.stdout_path or job.stderr_path):
        report.add(
            "logs.job_query",
            Status.FAIL,
            "no output path: the job is not known to Slurm (or finished too long ago)",
            "pass the id of a running or recently finished opted-in job",
        )
        return
    source = make_log_source(settings, runner, job)
    paths = ", ".join(dict.fromkeys(p for p in (job.stdout_path, job.stderr_path) if p))
    try:
        chunk = await source.read(LogCursor(), MAX_FILE_BYTES)
    except Exception as err:
        report.add("logs.job_query", Status.FAIL, f"cannot read {paths}: {err}", "check permissions")
        return
    finally:
        await close_source(source)
    if not chunk.data:
        report.add(
            "logs.job_query",
            Status.FAIL,
            f"{paths}: missing or empty where the cluster worker runs",
            "run the cluster worker where the job output is visible (shared filesystem) or use SSH mode",
        )
        return
    report.add("logs.job_query", Status.PASS, f"{len(chunk.data)} bytes readable from {paths}")
    _content_checks(report, chunk.data, marker, now)
    report.add(
        "logs.timestamps", Status.SKIP, "files carry no per-line timestamps; lines are timed on arrival"
    )


def _content_checks(report: Report, data: bytes, marker: str | None, now: float) -> None:
    if marker:
        found = marker.encode() in data
        report.add(
            "logs.marker",
            Status.PASS if found else Status.FAIL,
            f"marker {marker!r} {'found' if found else 'not found'} in the job's log",
            ""
            if found
            else "the query selects other lines than the job's: check the label mapping and prefix",
        )
    else:
        report.add("logs.marker", Status.SKIP, "no --marker given")
    count, how = count_progress_lines(data, now)
    if count:
        report.add("logs.progress", Status.PASS, f"{count} progress line(s) recognised ({how})")
    else:
        report.add(
            "logs.progress",
            Status.WARN,
            f"no progress line recognised ({how}): hang and straggler detection will be blind",
            "log an iteration line (Megatron `iteration N/ M`) or add a progress pattern to the catalog",
        )


async def _labels(settings: LogSettings, client: httpx.AsyncClient, window: Window) -> list[str]:
    params = {"start": str(window.start_ns), "end": str(window.end_ns)}
    if settings.backend == "loki":
        response = await client.get("/loki/api/v1/labels", params=params)
        raise_for_backend(response, "Loki labels")
        return [str(x) for x in response.json().get("data") or []]
    response = await client.get("/select/logsql/field_names", params={**_vl_window(window), "query": "*"})
    raise_for_backend(response, "VictoriaLogs field_names")
    names = [str(v.get("value")) for v in response.json().get("values") or []]
    return [n for n in names if n not in _INTERNAL_FIELDS]


def _vl_window(window: Window) -> dict[str, str]:
    return {"start": format_rfc3339_ns(window.start_ns), "end": format_rfc3339_ns(window.end_ns)}


async def _values(settings: LogSettings, client: httpx.AsyncClient, name: str, window: Window) -> list[str]:
    if settings.backend == "loki":
        path = f"/loki/api/v1/label/{quote(name, safe='')}/values"
        response = await client.get(path, params={"start": str(window.start_ns), "end": str(window.end_ns)})
        raise_for_backend(response, "Loki label values")
        return [str(x) for x in response.json().get("data") or []]
    params = {**_vl_window(window), "query": "*", "field": name, "limit": "10000"}
    response = await client.get("/select/logsql/field_values", params=params)
    raise_for_backend(response, "VictoriaLogs field_values")
    return [str(v.get("value")) for v in response.json().get("values") or []]


async def _discover_mapping(
    settings: LogSettings, client: httpx.AsyncClient, labels: list[str], job_id: str, window: Window
) -> dict[str, str] | None:
    """Which label carries the job id as a value (or, failing that, a file name containing it)."""
    by_file: str | None = None
    id_in_name = re.compile(rf"(?<![0-9]){re.escape(job_id)}(?![0-9])")
    for name in labels[:MAX_LABELS_PROBED]:
        values = await _values(settings, client, name, window)
        if job_id in values:
            return {"job_id": name}
        if by_file is None and any(id_in_name.search(v) and "/" in v for v in values):
            by_file = name
    if by_file is not None:
        return {"job_id": "", "filename": by_file}
    return None


async def _query_lines(
    settings: LogSettings, client: httpx.AsyncClient, job: JobSnapshot, window: Window
) -> list[LogLine]:
    query = backend_query(settings, job)
    kind = LokiLogSource if settings.backend == "loki" else VictoriaLogsLogSource
    source = kind(client, query, start_ns=window.start_ns)
    return await source.fetch(window.start_ns, window.end_ns, MAX_LINES_PER_QUERY)


async def _check_backend(
    report: Report,
    settings: LogSettings,
    client: httpx.AsyncClient,
    job: JobSnapshot | None,
    job_id: str,
    marker: str | None,
    window: Window,
    now: float,
) -> None:
    backend = settings.backend
    try:
        labels = await _labels(settings, client, window)
    except (httpx.HTTPError, LogBackendError, ValueError) as err:
        report.add(
            "logs.backend",
            Status.FAIL,
            f"{backend} at {settings.url}: {err}",
            "check logs.url, credentials (username/password or bearer_token), tenant and TLS (tls_verify)",
        )
        return
    report.add("logs.backend", Status.PASS, f"{backend} at {settings.url} answered ({len(labels)} label(s))")
    job_label = settings.labels.get("job_id", "job_id")
    effective = settings
    if job_label and job_label in labels:
        report.add("logs.job_label", Status.PASS, f"label {job_label!r} present")
    else:
        mapping = await _discover_mapping(settings, client, labels, job_id, window)
        shown = ", ".join(labels[:12]) + (" …" if len(labels) > 12 else "")
        if mapping is None:
            report.add(
                "logs.job_label",
                Status.FAIL,
                f"label {job_label!r} absent, no label carries job id {job_id!r}; labels: {shown or 'none'}",
                "label job logs with the Slurm job id in the collector (e.g. promtail/alloy: SLURM_JOB_ID)",
            )
            return
        new_labels = {**settings.labels, **mapping}
        report.propose("logs", "labels", new_labels)
        effective = settings.model_copy(update={"labels": new_labels})
        found_as = mapping["job_id"] or f"file name in {mapping['filename']!r}"
        report.add(
            "logs.job_label",
            Status.FAIL,
            f"label {job_label!r} absent; job id {job_id!r} found as {found_as}",
            f"set logs.labels to {new_labels} (proposed below)",
        )
    subject = job or JobSnapshot(job_id=job_id)
    try:
        lines = await _query_lines(effective, client, subject, window)
    except (httpx.HTTPError, LogBackendError, ValueError) as err:
        report.add("logs.job_query", Status.FAIL, f"query failed: {err}", "check logs.query_prefix syntax")
        return
    via = " (with the proposed mapping)" if effective is not settings else ""
    query = backend_query(effective, subject)
    if not lines:
        report.add(
            "logs.job_query",
            Status.FAIL,
            f"{query} returned no lines{via}",
            "check logs.query_prefix and that the job's output is shipped to the backend",
        )
        return
    report.add("logs.job_query", Status.PASS, f"{len(lines)} line(s) for {query}{via}")
    data = b"".join(line.line.encode("utf-8", errors="replace") + b"\n" for line in lines)
    _content_checks(report, data, marker, now)
    _timestamp_check(report, lines, job, now)


def _timestamp_check(report: Report, lines: list[LogLine], job: JobSnapshot | None, now: float) -> None:
    newest = max(line.ts_ns for line in lines) / NS
    oldest = min(line.ts_ns for line in lines) / NS
    future = [line for line in lines if line.ts_ns / NS > now + FUTURE_TOLERANCE_S]
    if future:
        ahead = max(line.ts_ns for line in future) / NS - now
        report.add(
            "logs.timestamps",
            Status.FAIL,
            f"{len(future)} line(s) stamped up to {ahead:.0f} s in the future",
            "fix clock skew (NTP) or the timezone the collector assumes when parsing timestamps",
        )
        return
    submitted = job.submit_time if job else 0
    if submitted and oldest < submitted - FUTURE_TOLERANCE_S:
        report.add(
            "logs.timestamps",
            Status.WARN,
            f"oldest line is {submitted - oldest:.0f} s older than the job's submission",
            "the collector may stamp lines with a wrong timezone, or the job id label is reused",
        )
        return
    running = job is not None and job.state.upper().startswith(RUNNING)
    if running and now - newest > STALE_AFTER_S:
        report.add(
            "logs.timestamps",
            Status.WARN,
            f"newest line is {now - newest:.0f} s old although the job is running",
            "logs arrive late or the collector stopped: hang detection would fire on shipping lag",
        )
        return
    report.add(
        "logs.timestamps", Status.PASS, f"newest line {max(0.0, now - newest):.0f} s old, none in the future"
    )

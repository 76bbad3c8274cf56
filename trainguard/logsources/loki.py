"""Grafana Loki: LogQL `query_range` over the labels that identify a job, read forward
(`start` inclusive, `end` exclusive). The cursor is explained in timeline.py.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import httpx

from trainguard.logsources.http import LogBackendError, raise_for_backend
from trainguard.logsources.timeline import LogLine, TimelineSource

_LABEL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def logql_string(value: str) -> str:
    """A LogQL double-quoted string literal (Go string syntax) for untrusted text."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    return f'"{escaped}"'


def check_label_name(name: str) -> str:
    if not _LABEL_NAME.fullmatch(name):
        raise ValueError(f"invalid label name {name!r}")
    return name


def logql_selector(matchers: Mapping[str, str | tuple[str, ...]], prefix: str = "") -> str:
    """`{<prefix>, name="value", ...}`; the prefix holds extra matchers, with or without braces.

    A tuple value matches any of its members (a fully anchored RE2 alternation of escaped literals).
    """
    parts: list[str] = []
    extra = prefix.strip()
    if extra.startswith("{") and extra.endswith("}"):
        extra = extra[1:-1].strip()
    if extra:
        parts.append(extra)
    for name, value in matchers.items():
        check_label_name(name)
        if isinstance(value, tuple):
            alternation = "|".join(re.escape(v) for v in value)
            parts.append(f"{name}=~{logql_string(alternation)}")
        else:
            parts.append(f"{name}={logql_string(value)}")
    if not parts:
        raise ValueError("a Loki query needs at least one label matcher")
    return "{" + ", ".join(parts) + "}"


def parse_streams(doc: object) -> list[LogLine]:
    """Flatten a `resultType: streams` answer into lines ordered by time (then stream, then order)."""
    if not isinstance(doc, dict) or doc.get("status") != "success":
        raise LogBackendError(f"unexpected Loki answer: {str(doc)[:200]}", retryable=True)
    data = doc.get("data") or {}
    if data.get("resultType") != "streams":
        raise LogBackendError(f"expected streams, got {data.get('resultType')!r}", retryable=False)
    keyed: list[tuple[int, tuple[tuple[str, str], ...], int, str]] = []
    for stream in data.get("result") or []:
        labels = tuple(sorted((str(k), str(v)) for k, v in (stream.get("stream") or {}).items()))
        for index, pair in enumerate(stream.get("values") or []):
            keyed.append((int(pair[0]), labels, index, str(pair[1])))
    keyed.sort(key=lambda item: (item[0], item[1], item[2]))
    return [LogLine(ts, line, labels) for ts, labels, _, line in keyed]


class LokiLogSource(TimelineSource):
    @property
    def query(self) -> str:
        return self._key

    async def fetch(self, start_ns: int, end_ns: int, limit: int) -> list[LogLine]:
        params = {
            "query": self.query,
            "start": str(start_ns),
            "end": str(end_ns),
            "limit": str(limit),
            "direction": "forward",
        }
        try:
            response = await self._client.get("/loki/api/v1/query_range", params=params)
        except httpx.HTTPError as err:
            raise LogBackendError(f"Loki unreachable: {err!r}", retryable=True) from None
        raise_for_backend(response, "Loki query_range")
        return parse_streams(response.json())

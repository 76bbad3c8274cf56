"""VictoriaLogs: a LogsQL query at `/select/logsql/query`, read forward in time.

The endpoint answers JSON lines (one object per log entry with `_msg`, `_time`, `_stream`, fields).
Its `limit` argument keeps the *newest* entries, so the query sorts and limits with pipes instead:
`<filters> _time:[start, end) | sort by (_time) | limit N`. The cursor is the same as Loki's: last
timestamp (ns) and how many entries carried it (see timeline.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime

import httpx

from trainguard.logsources.http import LogBackendError, raise_for_backend
from trainguard.logsources.loki import logql_string
from trainguard.logsources.timeline import LogLine, TimelineSource

_SIMPLE_FIELD = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
_RFC3339 = re.compile(r"(\d{4})-(\d\d)-(\d\d)[T ](\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)$")


def parse_rfc3339_ns(text: str) -> int:
    """RFC3339 with up to nanosecond precision (datetime keeps only microseconds)."""
    match = _RFC3339.match(text.strip())
    if not match:
        raise ValueError(f"not an RFC3339 timestamp: {text[:60]!r}")
    year, month, day, hour, minute, second, frac, zone = match.groups()
    base = datetime(int(year), int(month), int(day), int(hour), int(minute), int(second), tzinfo=UTC)
    seconds = int(base.timestamp())
    if zone != "Z":
        sign = 1 if zone[0] == "+" else -1
        seconds -= sign * (int(zone[1:3]) * 3600 + int(zone[4:6]) * 60)
    nanos = int((frac or "0").ljust(9, "0"))
    return seconds * 1_000_000_000 + nanos


def format_rfc3339_ns(ns: int) -> str:
    seconds, nanos = divmod(ns, 1_000_000_000)
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S") + f".{nanos:09d}Z"


def logsql_field(name: str) -> str:
    return name if _SIMPLE_FIELD.fullmatch(name) else logql_string(name)


def logsql_filters(matchers: Mapping[str, str | tuple[str, ...]], prefix: str = "") -> str:
    """Exact-match filters ANDed after an optional operator-supplied prefix (any LogsQL filter)."""
    parts = [prefix.strip()] if prefix.strip() else []
    for name, value in matchers.items():
        if isinstance(value, tuple):
            members = ", ".join(logql_string(v) for v in value)
            parts.append(f"{logsql_field(name)}:in({members})")
        else:
            parts.append(f"{logsql_field(name)}:={logql_string(value)}")
    if not parts:
        raise ValueError("a VictoriaLogs query needs at least one filter")
    return " ".join(parts)


def parse_json_lines(text: str) -> list[LogLine]:
    keyed: list[tuple[int, tuple[tuple[str, str], ...], int, str]] = []
    for index, raw in enumerate(text.splitlines()):
        if not raw.strip():
            continue
        try:
            entry = json.loads(raw)
            ts = parse_rfc3339_ns(str(entry["_time"]))
        except (ValueError, KeyError, TypeError) as err:
            message = f"unexpected VictoriaLogs entry: {raw[:200]!r} ({err})"
            raise LogBackendError(message, retryable=False) from None
        stream = (("_stream", str(entry.get("_stream", ""))),)
        keyed.append((ts, stream, index, str(entry.get("_msg", ""))))
    keyed.sort(key=lambda item: (item[0], item[1], item[2]))
    return [LogLine(ts, line, labels) for ts, labels, _, line in keyed]


class VictoriaLogsLogSource(TimelineSource):
    @property
    def filters(self) -> str:
        return self._key

    def build_query(self, start_ns: int, end_ns: int, limit: int) -> str:
        window = f"_time:[{format_rfc3339_ns(start_ns)}, {format_rfc3339_ns(end_ns)})"
        return f"{self.filters} {window} | sort by (_time) | limit {limit}"

    async def fetch(self, start_ns: int, end_ns: int, limit: int) -> list[LogLine]:
        try:
            response = await self._client.post(
                "/select/logsql/query", data={"query": self.build_query(start_ns, end_ns, limit)}
            )
        except httpx.HTTPError as err:
            raise LogBackendError(f"VictoriaLogs unreachable: {err!r}", retryable=True) from None
        raise_for_backend(response, "VictoriaLogs query")
        return parse_json_lines(response.text)

"""A fake Grafana Loki querier with the documented HTTP API shapes (Loki HTTP API reference:
`GET /loki/api/v1/query_range`, `/labels`, `/label/<name>/values`, `/ready`).

Implements: stream selectors with `=`, `!=`, `=~`, `!~` (regexes fully anchored, as in Loki),
line filters `|= "text"`, `start` inclusive / `end` exclusive in ns, `limit` applied across streams
(default 100), `direction` forward/backward, and multi-tenancy: with `require_tenant` a request
without `X-Scope-OrgID` gets 401 "no org id" and each tenant sees only its own streams.
"""

from __future__ import annotations

import re
import time
from collections import defaultdict
from urllib.parse import unquote

from tests.fakes.httpserver import FakeHTTPServer, Request, Response, json_response, text_response

_MATCHER = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*(,|$)')
_LINE_FILTER = re.compile(r'\s*\|=\s*"((?:[^"\\]|\\.)*)"')

Labels = tuple[tuple[str, str], ...]


def _unescape(text: str) -> str:
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "r": "\r", "t": "\t"}.get(m.group(1), m.group(1)), text)


def parse_query(query: str) -> tuple[list[tuple[str, str, str]], list[str]]:
    text = query.strip()
    if not text.startswith("{") or "}" not in text:
        raise ValueError("parse error : queries require at least one regexp or equality matcher")
    close = text.index("}")
    inner, rest = text[1:close], text[close + 1 :]
    matchers: list[tuple[str, str, str]] = []
    pos = 0
    while pos < len(inner):
        match = _MATCHER.match(inner, pos)
        if not match:
            raise ValueError(f"parse error at position {pos + 1}: syntax error in selector")
        matchers.append((match.group(1), match.group(2), _unescape(match.group(3))))
        pos = match.end()
    filters: list[str] = []
    pos = 0
    while rest[pos:].strip():
        match = _LINE_FILTER.match(rest, pos)
        if not match:
            raise ValueError("parse error : unsupported pipeline in fake")
        filters.append(_unescape(match.group(1)))
        pos = match.end()
    if not any(op in ("=", "=~") and value for _, op, value in matchers):
        raise ValueError("parse error : queries require at least one regexp or equality matcher")
    return matchers, filters


def _matches(labels: dict[str, str], matchers: list[tuple[str, str, str]]) -> bool:
    for name, op, value in matchers:
        actual = labels.get(name, "")
        if op in ("=", "!="):
            ok = (actual == value) == (op == "=")
        else:
            ok = (re.fullmatch(value, actual) is not None) == (op == "=~")
        if not ok:
            return False
    return True


class FakeLoki(FakeHTTPServer):
    def __init__(self, *, require_tenant: bool = False, **auth: str | None) -> None:
        super().__init__(**auth)
        self.require_tenant = require_tenant
        self._streams: dict[str, dict[Labels, list[tuple[int, str]]]] = defaultdict(dict)

    def push(self, labels: dict[str, str], entries: list[tuple[int, str]], tenant: str = "fake") -> None:
        key = tuple(sorted(labels.items()))
        self._streams[tenant].setdefault(key, []).extend(entries)

    def _tenant(self, request: Request) -> str | None:
        org = request.headers.get("x-scope-orgid")
        if org:
            return org
        return None if self.require_tenant else "fake"

    def route(self, request: Request) -> Response:
        tenant = self._tenant(request)
        if request.path == "/ready":
            return text_response("ready\n")
        if tenant is None:
            return text_response("no org id\n", 401)
        streams = self._streams.get(tenant, {})
        if request.path == "/loki/api/v1/labels":
            names = sorted({name for key in streams for name, _ in key})
            return json_response({"status": "success", "data": names})
        if request.path.startswith("/loki/api/v1/label/") and request.path.endswith("/values"):
            name = unquote(request.path[len("/loki/api/v1/label/") : -len("/values")])
            values = sorted({value for key in streams for n, value in key if n == name})
            return json_response({"status": "success", "data": values})
        if request.path == "/loki/api/v1/query_range":
            return self._query_range(request, streams)
        return text_response("404 page not found\n", 404)

    def _query_range(self, request: Request, streams: dict[Labels, list[tuple[int, str]]]) -> Response:
        query = request.param("query") or ""
        matchers, filters = parse_query(query)
        now_ns = time.time_ns()
        end = int(request.param("end") or now_ns)
        start = int(request.param("start") or end - 3600 * 1_000_000_000)
        limit = int(request.param("limit") or 100)
        direction = request.param("direction") or "backward"
        if direction not in ("forward", "backward"):
            raise ValueError(f"invalid direction {direction!r}")
        hits: list[tuple[int, Labels, int, str]] = []
        for key, entries in streams.items():
            if not _matches(dict(key), matchers):
                continue
            for index, (ts, line) in enumerate(entries):
                if start <= ts < end and all(f in line for f in filters):
                    hits.append((ts, key, index, line))
        hits.sort(key=lambda h: (h[0], h[1], h[2]), reverse=direction == "backward")
        hits = hits[:limit]
        grouped: dict[Labels, list[list[str]]] = {}
        for ts, key, _, line in hits:
            grouped.setdefault(key, []).append([str(ts), line])
        result = [{"stream": dict(key), "values": values} for key, values in grouped.items()]
        return json_response(
            {
                "status": "success",
                "data": {"resultType": "streams", "result": result, "stats": {"summary": {}}},
            }
        )

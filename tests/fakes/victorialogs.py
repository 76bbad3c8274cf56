"""A fake VictoriaLogs with the documented HTTP API shapes (VictoriaLogs "Querying" docs):
`/select/logsql/query` answers JSON lines, one object per entry with `_msg`, `_stream`, `_time`
(RFC3339, ns) and the other fields in alphabetical order; its `limit` argument keeps the newest
entries. `/select/logsql/field_names` and `/field_values` answer `{"values":[{"value":..,"hits":..}]}`.
Tenants come from the `AccountID` / `ProjectID` headers (default 0:0).

LogsQL subset: `field:="v"`, `field:in("a","b")`, `_time:[start, end)` (either bracket), `"phrase"`
or a bare word (substring of `_msg`; the real engine matches whole words), `*`; pipes
`sort by (_time)` and `limit N`. Anything else is a 400 like the real parser's error.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from typing import Any

from tests.fakes.httpserver import FakeHTTPServer, Request, Response, json_response, text_response
from trainguard.logsources.victorialogs import format_rfc3339_ns, parse_rfc3339_ns

_STR = r'"((?:[^"\\]|\\.)*)"'
_FIELD = r'([A-Za-z_][A-Za-z0-9_.]*|"(?:[^"\\]|\\.)*")'
_TOKENS = [
    ("exact", re.compile(_FIELD + r":=" + _STR)),
    ("in", re.compile(_FIELD + r":in\(((?:\s*" + r'"(?:[^"\\]|\\.)*"' + r"\s*,?)*)\)")),
    ("time", re.compile(r"_time:([\[(])\s*([^,\s]+)\s*,\s*([^\])\s]+)\s*([\])])")),
    ("phrase", re.compile(_STR)),
    ("all", re.compile(r"\*")),
    ("word", re.compile(r"[A-Za-z0-9_.\-]+")),
]

Entry = dict[str, str]


def _unescape(text: str) -> str:
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), text)


def _field(text: str) -> str:
    return _unescape(text[1:-1]) if text.startswith('"') else text


def _time_ns(entry: Entry) -> int:
    return parse_rfc3339_ns(entry["_time"])


def compile_query(query: str) -> tuple[list[Any], bool, int | None]:
    """Return (filters, sorted by _time, pipe limit)."""
    head, *pipes = query.split("|")
    filters: list[Any] = []
    pos = 0
    while head[pos:].strip():
        while head[pos].isspace():
            pos += 1
        for kind, pattern in _TOKENS:
            match = pattern.match(head, pos)
            if match:
                filters.append((kind, match.groups()))
                pos = match.end()
                break
        else:
            raise ValueError(f"cannot parse query [{query}]: unexpected token at position {pos}")
    sort, limit = False, None
    for pipe in pipes:
        words = pipe.split()
        if words[:2] == ["sort", "by"] and "".join(words[2:]) == "(_time)":
            sort = True
        elif len(words) == 2 and words[0] in ("limit", "head") and words[1].isdigit():
            limit = int(words[1])
        else:
            raise ValueError(f"cannot parse query [{query}]: unsupported pipe {pipe.strip()!r}")
    return filters, sort, limit


def _keep(entry: Entry, filters: list[Any]) -> bool:
    for kind, groups in filters:
        if kind == "exact" and entry.get(_field(groups[0]), "") != _unescape(groups[1]):
            return False
        if kind == "in":
            members = [_unescape(m) for m in re.findall(r'"((?:[^"\\]|\\.)*)"', groups[1])]
            if entry.get(_field(groups[0]), "") not in members:
                return False
        if kind == "time":
            lo_open, lo, hi, hi_close = groups
            ts, low, high = _time_ns(entry), parse_rfc3339_ns(lo), parse_rfc3339_ns(hi)
            if ts < low or (lo_open == "(" and ts == low) or ts > high or (hi_close == ")" and ts == high):
                return False
        if kind in ("phrase", "word") and _unescape(groups[0]) not in entry.get("_msg", ""):
            return False
    return True


class FakeVictoriaLogs(FakeHTTPServer):
    def __init__(self, **auth: str | None) -> None:
        super().__init__(**auth)
        self._entries: dict[tuple[str, str], list[Entry]] = defaultdict(list)

    def push(self, fields: dict[str, str], entries: list[tuple[int, str]], tenant: str = "0:0") -> None:
        account, _, project = tenant.partition(":")
        stream = "{" + ",".join(f'{k}="{v}"' for k, v in sorted(fields.items())) + "}"
        for ts, msg in entries:
            entry = {**fields, "_msg": msg, "_time": format_rfc3339_ns(ts), "_stream": stream}
            self._entries[(account, project or "0")].append(entry)

    def _select(self, request: Request) -> list[Entry]:
        tenant = (request.headers.get("accountid", "0"), request.headers.get("projectid", "0"))
        filters, sort, pipe_limit = compile_query(request.param("query") or "")
        picked = [e for e in self._entries.get(tenant, []) if _keep(e, filters)]
        if sort:
            picked.sort(key=_time_ns)
        if pipe_limit is not None:
            picked = picked[:pipe_limit]
        arg_limit = request.param("limit")
        if arg_limit:
            picked = sorted(picked, key=_time_ns)[-int(arg_limit) :]  # the newest N, as documented
        return picked

    def route(self, request: Request) -> Response:
        if request.path == "/health":
            return text_response("OK")
        if request.path == "/select/logsql/query":
            body = "".join(json.dumps(dict(sorted(e.items()))) + "\n" for e in self._select(request))
            return 200, "application/stream+json", body.encode()
        if request.path == "/select/logsql/field_names":
            counts: dict[str, int] = defaultdict(int)
            for entry in self._select(request):
                for name in entry:
                    counts[name] += 1
            return json_response({"values": [{"value": k, "hits": v} for k, v in sorted(counts.items())]})
        if request.path == "/select/logsql/field_values":
            name = request.param("field") or ""
            counts = defaultdict(int)
            for entry in self._select(request):
                if name in entry:
                    counts[entry[name]] += 1
            return json_response({"values": [{"value": k, "hits": v} for k, v in sorted(counts.items())]})
        return text_response("missing route\n", 400)

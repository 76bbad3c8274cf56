"""slurmrestd's API versions and the request each TrainGuard operation becomes in each of them (pure logic).

Versions (paths `/slurm/<version>/...`), read from Slurm's openapi plugin sources:
- v0.0.38 (Slurm 22.05, plugin openapi/v0.0.38): jobs and nodes are read-only apart from
  `POST /job/{id}`, whose body is parsed like sbatch options (`hold` true/false sets priority 0/INFINITE,
  `exclude_nodes` sets ExcNodeList; `excluded_nodes` is a *disabled* key there), and `DELETE /job/{id}`
  (SIGKILL to the whole job, i.e. scancel). There is no node update: drain and resume are unavailable.
- v0.0.40, v0.0.41, v0.0.42 (Slurm 23.11-25.05, plugin openapi/slurmctld with data_parser v0.0.4x):
  `POST /job/{id}` takes a job description (`hold`, `excluded_nodes`), `DELETE /job/{id}` cancels,
  `POST /node/{name}` takes `state` (["DRAIN"] / ["RESUME"]) and `reason`.
- v0.0.43 (Slurm 25.05/25.11): the same requests in its published schema; not tested against a live
  slurmrestd here (25.x cannot be installed on this machine).
- No version has a requeue operation (none up to Slurm 25.11's v0.0.44): `scontrol requeuehold` has no
  REST equivalent, so `requeue_hold` of a running or finished job raises UnsupportedOperationError.
  A job Slurm requeued itself (node failure with --requeue) only needs a hold, which every version has.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trainguard.slurm import commands
from trainguard.slurm.runner import CommandError

_VERSION = re.compile(r"v(\d+)\.(\d+)\.(\d+)")
_SLURM_PATH = re.compile(r"^/slurm/(v\d+\.\d+\.\d+)/")


def version_key(name: str) -> tuple[int, int, int]:
    match = _VERSION.fullmatch(name)
    if match is None:
        raise ValueError(f"not an API version: {name!r}")
    major, minor, micro = (int(g) for g in match.groups())
    return major, minor, micro


class SlurmRestError(CommandError):
    """slurmrestd answered with an error (HTTP status in `returncode`, Slurm's error text in `stderr`)."""


class SlurmRestAuthError(SlurmRestError):
    """The token or user was refused (HTTP 401/403, or 22.05's anonymous refusal), or the token expired."""


class NoSupportedVersionError(SlurmRestError):
    """slurmrestd serves no API version TrainGuard understands (or not the one pinned in the settings)."""

    def __init__(self, url: str, served: Sequence[str], wanted: Sequence[str]) -> None:
        shown = ", ".join(served) or "none"
        super().__init__(
            ("slurmrestd", "GET", f"{url}/openapi/v3"),
            None,
            f"slurmrestd at {url} serves API versions {shown}; TrainGuard needs one of {', '.join(wanted)}",
            retryable=False,
        )
        self.served = tuple(served)
        self.wanted = tuple(wanted)


class UnsupportedOperationError(SlurmRestError):
    """The chosen API version has no request for this operation; nothing was sent to Slurm."""

    def __init__(self, version: str, operation: str, target: str, why: str) -> None:
        super().__init__(
            ("slurmrestd", operation, target),
            None,
            f"slurmrestd API {version} cannot {operation}: {why}",
            retryable=False,
        )
        self.version = version
        self.operation = operation


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    body: Mapping[str, Any] | None = None

    def describe(self) -> tuple[str, ...]:
        return ("slurmrestd", self.method, self.path)


NO_REQUEUE = (
    "slurmrestd has no requeue request in any API version (scontrol requeuehold has no REST equivalent); "
    "a running or finished job can only be requeued with the Slurm commands (cluster.access: cli)"
)
NO_NODE_UPDATE = "v0.0.38 (Slurm 22.05) has no node update request; drain/resume need Slurm 23.11 or later"


@dataclass(frozen=True)
class ApiVersion:
    """The requests of one slurmrestd API version."""

    name: str
    exclude_key: str  # the job-update key that sets ExcNodeList
    node_update: bool  # POST /node/{name} exists
    exclude_as_list: bool = True  # data_parser wants an array (a string works, with a warning)
    live_tested: bool = True  # against a real slurmrestd in tests/e2e/test_slurmrestd.py

    def _base(self) -> str:
        return f"/slurm/{self.name}"

    def ping(self) -> Request:
        return Request("GET", f"{self._base()}/ping")

    def check(self) -> Request:
        """A small read slurmctld authenticates (24.11's ping answers even for a refused token)."""
        return Request("GET", f"{self._base()}/partitions")

    def jobs(self) -> Request:
        return Request("GET", f"{self._base()}/jobs")

    def nodes(self) -> Request:
        return Request("GET", f"{self._base()}/nodes")

    def job(self, job_id: str) -> Request:
        return Request("GET", f"{self._base()}/job/{commands.job_id(job_id)}")

    def node(self, name: str) -> Request:
        return Request("GET", f"{self._base()}/node/{commands.node_name(name)}")

    def _update_job(self, job_id: str, body: Mapping[str, Any]) -> Request:
        return Request("POST", f"{self._base()}/job/{commands.job_id(job_id)}", body)

    def hold(self, job_id: str) -> Request:
        return self._update_job(job_id, {"hold": True})

    def release(self, job_id: str) -> Request:
        return self._update_job(job_id, {"hold": False})

    def set_excluded(self, job_id: str, nodes: Sequence[str]) -> Request:
        # v0.0.38 parses sbatch's comma list; data_parser's CSV_STRING an array. "" clears the list
        # (as `scontrol update ExcNodeList=` does; an empty array would leave it unchanged).
        names = [commands.node_name(n) for n in nodes]
        value: str | list[str] = names if (self.exclude_as_list and names) else ",".join(names)
        return self._update_job(job_id, {self.exclude_key: value})

    def cancel(self, job_id: str) -> Request:
        # Default signal SIGKILL with KILL_FULL_JOB: what scancel does.
        return Request("DELETE", f"{self._base()}/job/{commands.job_id(job_id)}")

    def requeue_hold(self, job_id: str) -> Request:
        raise UnsupportedOperationError(self.name, "requeuehold", commands.job_id(job_id), NO_REQUEUE)

    def _update_node(self, name: str, operation: str, body: Mapping[str, Any]) -> Request:
        node = commands.node_name(name)
        if not self.node_update:
            raise UnsupportedOperationError(self.name, operation, node, NO_NODE_UPDATE)
        return Request("POST", f"{self._base()}/node/{node}", body)

    def drain(self, name: str, reason: str) -> Request:
        return self._update_node(name, "drain", {"state": ["DRAIN"], "reason": commands.reason_text(reason)})

    def resume(self, name: str) -> Request:
        return self._update_node(name, "resume", {"state": ["RESUME"]})


VERSIONS: dict[str, ApiVersion] = {
    "v0.0.38": ApiVersion("v0.0.38", exclude_key="exclude_nodes", node_update=False, exclude_as_list=False),
    "v0.0.40": ApiVersion("v0.0.40", exclude_key="excluded_nodes", node_update=True),
    "v0.0.41": ApiVersion("v0.0.41", exclude_key="excluded_nodes", node_update=True),
    "v0.0.42": ApiVersion("v0.0.42", exclude_key="excluded_nodes", node_update=True),
    "v0.0.43": ApiVersion("v0.0.43", exclude_key="excluded_nodes", node_update=True, live_tested=False),
}


def served_versions(openapi: Mapping[str, Any]) -> list[str]:
    """The slurmctld API versions in an OpenAPI document's `paths` (dbv0.0.x is slurmdbd's), oldest first."""
    paths = openapi.get("paths")
    if not isinstance(paths, Mapping):
        return []
    found = {m.group(1) for p in paths if isinstance(p, str) and (m := _SLURM_PATH.match(p))}
    return sorted(found, key=version_key)


def choose_version(
    url: str, served: Iterable[str], *, pinned: str | None = None, known: Mapping[str, ApiVersion] = VERSIONS
) -> ApiVersion:
    """The newest served version TrainGuard knows, or `pinned` if it is served and known."""
    served_list = sorted(set(served), key=version_key)
    if pinned is not None:
        if pinned in served_list and pinned in known:
            return known[pinned]
        raise NoSupportedVersionError(url, served_list, [pinned])
    usable = [v for v in served_list if v in known]
    if not usable:
        raise NoSupportedVersionError(url, served_list, sorted(known, key=version_key))
    return known[usable[-1]]


# --- errors in answers ------------------------------------------------------------------------------

_TRANSIENT_HTTP = frozenset({502, 503, 504})
# 511 is 24.11's answer when slurmctld refuses the forwarded token ("Protocol authentication error").
_AUTH_HTTP = frozenset({401, 403, 511})
AUTH_MARKERS = ("Protocol authentication error", "Authentication failure")
# Per-job results of DELETE /job (data_parser): "already completing or completed" is success for a cancel.
_DONE_CODES = frozenset({0, 2021})
REJECTED_HINT = (
    "slurmctld refused the request without saying why; slurmrestd 22.05 reports a token slurmctld does "
    "not accept (wrong key, wrong user, expired) this way: check cluster.slurmrestd.user and the token"
)


def _messages(items: Any) -> list[str]:
    if not isinstance(items, list):
        return []
    out: list[str] = []
    for item in items:
        if not isinstance(item, Mapping):
            continue
        parts = [str(item[k]) for k in ("error", "description") if isinstance(item.get(k), str) and item[k]]
        if parts:
            out.append(": ".join(dict.fromkeys(parts)))
    return out


def _numbers(items: Any) -> list[int]:
    if not isinstance(items, list):
        return []
    return [
        n
        for item in items
        if isinstance(item, Mapping)
        for n in (item.get("error_number", item.get("errno")),)
        if isinstance(n, int)
    ]


def _status_messages(items: Any) -> list[str]:
    """data_parser's DELETE /job answer: `status: [{error: {code, string}, job_id, step_id}]`."""
    if not isinstance(items, list):
        return []
    out = []
    for item in items:
        error = item.get("error") if isinstance(item, Mapping) else None
        if (
            isinstance(error, Mapping)
            and isinstance(error.get("code"), int)
            and error["code"] not in _DONE_CODES
        ):
            out.append(str(error.get("string") or error.get("message") or f"error {error['code']}"))
    return out


def answer_error(
    request: Request, status: int, doc: Mapping[str, Any] | None, text: str, *, transient: Iterable[str] = ()
) -> SlurmRestError | None:
    """The error an answer carries, if any.

    slurmrestd puts Slurm's own error text (`slurm_strerror`) in `errors`, sometimes with HTTP 200
    (a body it could not parse), sometimes with 500 (Slurm said no). data_parser versions report a
    failed per-job update as a warning ("non-zero return-code") with 200.
    """
    where = request.describe()
    errors = doc.get("errors") if doc is not None else None
    messages = _messages(errors)
    warnings = [w for w in _messages(doc.get("warnings") if doc else None) if "non-zero return-code" in w]
    messages += warnings + _status_messages(doc.get("status") if doc else None)
    if status in _AUTH_HTTP or any(m in text for text in messages for m in AUTH_MARKERS):
        why = "; ".join(messages) or "token or user refused"
        return SlurmRestAuthError(where, status, f"HTTP {status}: {why}", retryable=False)
    if not messages and status < 400:
        return None
    if not messages:
        snippet = " ".join(text.split())[:300] or "(empty body)"
        return SlurmRestError(where, status, f"HTTP {status}: {snippet}", retryable=status in _TRANSIENT_HTTP)
    joined = "; ".join(messages)
    numbers = _numbers(errors)
    if numbers and all(n == -1 for n in numbers) and all("Unspecified error" in m for m in messages):
        joined = f"{joined} ({REJECTED_HINT})"
    retryable = status in _TRANSIENT_HTTP or any(marker in joined for marker in transient)
    return SlurmRestError(where, status, joined, retryable=retryable)

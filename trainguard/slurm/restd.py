"""Slurm reached through slurmrestd (JWT auth): the interface Slinky/Kubernetes-hosted Slurm and many sites
expose instead of shell access. Same interface and rules as the CLI client (`SlurmAccess`).

At start the client reads slurmrestd's OpenAPI document, picks the newest API version it knows
(`restd_api.VERSIONS`, or the pinned `api_version`) and pings slurmctld through it, so a wrong URL, an
unserved version or a refused token is a clear error before any job is watched. Each request carries
`X-SLURM-USER-NAME` and `X-SLURM-USER-TOKEN`; the token is re-read from its file when the file changes.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import httpx

from trainguard.models import ClusterSnapshot, JobSnapshot, NodeSnapshot
from trainguard.slurm import commands, formats
from trainguard.slurm.access import UNKNOWN_JOB_MARKERS, SlurmAccess
from trainguard.slurm.client import TRANSIENT_MARKERS
from trainguard.slurm.errors import SlurmParseError
from trainguard.slurm.restd_api import (
    REJECTED_HINT,
    VERSIONS,
    ApiVersion,
    NoSupportedVersionError,
    Request,
    SlurmRestAuthError,
    SlurmRestError,
    UnsupportedOperationError,
    answer_error,
    choose_version,
    served_versions,
    version_key,
)
from trainguard.slurm.restd_token import TokenSource
from trainguard.slurm.states import ACTIVE_STATES, NODE_BAD_STATES

log = logging.getLogger(__name__)

# 22.05 says "Invalid node name specified"; 24.11 "No error: Failure to query node X" (errno 0, empty answer).
UNKNOWN_NODE_MARKERS = ("Invalid node name specified", "No error: Failure to query node")
OPENAPI_PATHS = ("/openapi/v3", "/openapi")


def parse_jobs(version: ApiVersion, doc: Mapping[str, Any]) -> list[JobSnapshot]:
    """`/jobs` and `/job/{id}` are the documents `squeue --json` prints in the same version."""
    return formats.parse_jobs(doc)


def parse_nodes(version: ApiVersion, doc: Mapping[str, Any]) -> list[NodeSnapshot]:
    """`/nodes` and `/node/{name}`: 22.05's `sinfo --json` shape, or `scontrol show node --json`'s."""
    return formats.parse_nodes(doc)


BIG_DOCUMENT = 256 * 1024


def _load(text: str) -> dict[str, Any] | None:
    try:
        doc = json.loads(text) if text.lstrip().startswith("{") else None
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


class SlurmRestClient(SlurmAccess):
    def __init__(
        self,
        url: str,
        user: str,
        token: TokenSource,
        cluster: str,
        *,
        verify: bool | ssl.SSLContext = True,
        timeout_s: float = 30.0,
        api_version: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.url = url.rstrip("/")
        self.user = user
        self.token = token
        self.cluster = cluster
        self.pinned = api_version
        self.clock = clock
        self.version: ApiVersion | None = None
        self.served: list[str] = []
        self._lock = asyncio.Lock()
        self._http = httpx.AsyncClient(
            base_url=self.url, verify=verify, timeout=timeout_s, transport=transport, follow_redirects=False
        )

    def __repr__(self) -> str:
        version = self.version.name if self.version else None
        return f"SlurmRestClient(url={self.url!r}, user={self.user!r}, version={version!r})"

    # -- transport -------------------------------------------------------------------------------

    async def _send(self, request: Request) -> tuple[int, str, dict[str, Any] | None]:
        headers = {"X-SLURM-USER-NAME": self.user, "X-SLURM-USER-TOKEN": self.token.get(self.clock())}
        try:
            response = await self._http.request(
                request.method,
                request.path,
                headers=headers,
                json=dict(request.body) if request.body is not None else None,
            )
        except httpx.TransportError as err:
            # Connection refused, timeouts, TLS failures: slurmrestd (or its host) may come back.
            why = f"cannot reach slurmrestd at {self.url}: {type(err).__name__} {err}".rstrip()
            raise SlurmRestError(request.describe(), None, why, retryable=True) from None
        text = response.text
        # At 10,000 jobs a /jobs document is tens of MB: decode it off the event loop.
        doc = await asyncio.to_thread(_load, text) if len(text) > BIG_DOCUMENT else _load(text)
        return response.status_code, text, doc

    async def _call(self, request: Request) -> dict[str, Any]:
        """Send; raise the answer's error (Slurm's own text), else return the JSON document."""
        status, text, doc = await self._send(request)
        error = answer_error(request, status, doc, text, transient=TRANSIENT_MARKERS)
        if error is not None:
            if isinstance(error, SlurmRestAuthError) or REJECTED_HINT in error.stderr:
                # A token file may be rotated under us: then trying again later can succeed.
                raise SlurmRestAuthError(
                    error.argv, error.returncode, error.stderr, retryable=self.token.rotates
                )
            raise error
        if doc is None:
            raise SlurmRestError(
                request.describe(), status, f"HTTP {status}: not a JSON document", retryable=True
            )
        return doc

    # -- discovery -------------------------------------------------------------------------------

    async def start(self) -> ApiVersion:
        """Discover the served versions, choose one, and check the token with a ping (once)."""
        async with self._lock:
            if self.version is None:
                self.served = await self._discover()
                version = choose_version(self.url, self.served, pinned=self.pinned)
                await self._call(version.check())  # slurmctld checks the token only when asked
                self.version = version
                log.info(
                    "slurmrestd %s serves %s; using %s%s",
                    self.url,
                    ", ".join(self.served),
                    version.name,
                    "" if version.live_tested else " (not tested against a live slurmrestd)",
                )
            return self.version

    async def _discover(self) -> list[str]:
        for path in OPENAPI_PATHS:
            status, _text, doc = await self._send(Request("GET", path))
            if status in (401, 403):
                why = f"HTTP {status}: token or user refused"
                raise SlurmRestAuthError(
                    ("slurmrestd", "GET", path), status, why, retryable=self.token.rotates
                )
            if status == 200 and doc is not None and (found := served_versions(doc)):
                return found
        # No OpenAPI document: ask each known version's ping, newest first.
        found = []
        for name in sorted(VERSIONS, key=version_key, reverse=True):
            status, _, _ = await self._send(VERSIONS[name].ping())
            if status != 404:
                found.append(name)
        if not found:
            raise NoSupportedVersionError(self.url, [], sorted(VERSIONS, key=version_key))
        return sorted(found, key=version_key)

    async def _api(self) -> ApiVersion:
        return self.version or await self.start()

    # -- reads -----------------------------------------------------------------------------------

    async def snapshot(self) -> ClusterSnapshot:
        api = await self._api()
        taken_at = self.clock()
        jobs_doc, nodes_doc = await asyncio.gather(self._call(api.jobs()), self._call(api.nodes()))
        try:
            jobs = await asyncio.to_thread(parse_jobs, api, jobs_doc)
            nodes = parse_nodes(api, nodes_doc)
        except SlurmParseError as err:
            # Unreadable is not "no jobs": the caller keeps what it knew and retries.
            raise SlurmRestError(api.jobs().describe(), 200, str(err), retryable=True) from None
        return ClusterSnapshot(cluster=self.cluster, taken_at=taken_at, jobs=tuple(jobs), nodes=tuple(nodes))

    async def job(self, job_id: str) -> JobSnapshot | None:
        api = await self._api()
        request = api.job(job_id)
        try:
            doc = await self._call(request)
        except SlurmRestError as err:
            if any(m in err.stderr for m in UNKNOWN_JOB_MARKERS):
                return None
            raise
        try:
            jobs = parse_jobs(api, doc)
        except SlurmParseError as err:
            raise SlurmRestError(request.describe(), 200, str(err), retryable=True) from None
        # An array job's id answers with all its tasks; a task id `123_4` with that task.
        for job in jobs:
            if job.job_id == job_id or (
                job.array_job_id and f"{job.array_job_id}_{job.array_task_id}" == job_id
            ):
                return job
        return None

    async def node(self, name: str) -> NodeSnapshot | None:
        api = await self._api()
        request = api.node(name)
        try:
            doc = await self._call(request)
        except SlurmRestError as err:
            if any(m in err.stderr for m in UNKNOWN_NODE_MARKERS):
                return None
            raise
        try:
            nodes = parse_nodes(api, doc)
        except SlurmParseError as err:
            raise SlurmRestError(request.describe(), 200, str(err), retryable=True) from None
        return next((n for n in nodes if n.name == commands.node_name(name)), None)

    # -- one request per primitive ---------------------------------------------------------------

    async def _hold(self, job_id: str) -> None:
        await self._call((await self._api()).hold(job_id))

    async def _requeue_hold(self, job_id: str) -> None:
        api = await self._api()
        try:
            api.requeue_hold(job_id)  # no version has it: raises UnsupportedOperationError
        except UnsupportedOperationError as unsupported:
            failing = await self._failing_nodes(job_id)
            if failing:
                # Slurm requeues a --requeue job itself once it sets a failed node DOWN; the step's
                # retries then find it requeued and only hold it, which REST can do.
                raise SlurmRestError(
                    unsupported.argv,
                    None,
                    f"{unsupported.stderr}; job {job_id} may be requeued and is on failing node(s) "
                    f"{', '.join(failing)}: waiting for Slurm to requeue it",
                    retryable=True,
                ) from None
            raise

    async def _failing_nodes(self, job_id: str) -> list[str]:
        """The job's nodes Slurm reports down or not responding, if the job lets Slurm requeue it."""
        job = await self.job(job_id)
        if job is None or not job.requeue_allowed or job.state not in ACTIVE_STATES:
            return []
        failing = []
        for name in job.nodes:
            node = await self.node(name)
            words = [node.state.lower(), *(f.lower() for f in node.flags)] if node else []
            if any(bad in word for word in words for bad in NODE_BAD_STATES):
                failing.append(name)
        return failing

    async def _release(self, job_id: str) -> None:
        await self._call((await self._api()).release(job_id))

    async def _set_excluded(self, job_id: str, nodes: Sequence[str]) -> None:
        await self._call((await self._api()).set_excluded(job_id, nodes))

    async def _cancel(self, job_id: str) -> None:
        await self._call((await self._api()).cancel(job_id))

    async def _drain(self, node: str, reason: str) -> None:
        await self._call((await self._api()).drain(node, reason))

    async def _resume(self, node: str) -> None:
        await self._call((await self._api()).resume(node))

    def _request(self, operation: str, target: str) -> tuple[str, ...]:
        version = self.version.name if self.version else "v?"
        return ("slurmrestd", operation, f"/slurm/{version}/{target}")

    async def close(self) -> None:
        await self._http.aclose()

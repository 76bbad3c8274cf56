"""Optional external attribution service (schema: docs/attribution-api.md).

The built-in verdict always stands on its own: this client returns None whenever the service is slow,
down, or answers something that does not validate, and never raises for those.
"""

from __future__ import annotations

import logging
from typing import Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from trainguard.models import Attribution, Category, Finding, JobSnapshot, Verdict, clip

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
MAX_RESPONSE_BYTES = 256 * 1024
MAX_EXCERPT_LINES = 200


class ExternalRequest(BaseModel):
    model_config = ConfigDict(frozen=True)

    schema_version: int = SCHEMA_VERSION
    workload_key: str = ""
    cluster: str = ""
    job: JobSnapshot | None = None
    findings: tuple[Finding, ...] = ()
    builtin: Verdict | None = None  # what TrainGuard concluded on its own
    log_excerpt: tuple[str, ...] = Field(default=(), max_length=MAX_EXCERPT_LINES)


class ExternalResponse(BaseModel):
    model_config = ConfigDict(extra="ignore")

    schema_version: Literal[1] = 1
    category: Category
    attribution: Attribution
    fatal: bool | None = None
    confidence: float = Field(default=0.5, ge=0.0, le=1.0)
    nodes: list[str] = Field(default_factory=list, max_length=1024)
    evidence: list[str] = Field(default_factory=list, max_length=50)
    summary: str = ""
    service: str = "external"


async def external_attribution(
    url: str,
    request: ExternalRequest,
    *,
    timeout_s: float,
    token: str | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
) -> Verdict | None:
    headers = {"Accept": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    try:
        async with httpx.AsyncClient(timeout=timeout_s, transport=transport) as client:
            resp = await client.post(
                url,
                content=request.model_dump_json(),
                headers={**headers, "Content-Type": "application/json"},
            )
    except (httpx.HTTPError, OSError) as err:
        log.warning("external attribution unavailable: %s", type(err).__name__)
        return None
    if resp.status_code != 200:
        log.warning("external attribution answered HTTP %d", resp.status_code)
        return None
    if len(resp.content) > MAX_RESPONSE_BYTES:
        log.warning("external attribution answer too large (%d bytes)", len(resp.content))
        return None
    try:
        answer = ExternalResponse.model_validate_json(resp.content)
    except ValidationError as err:
        log.warning("external attribution answer invalid: %d error(s)", err.error_count())
        return None
    fatal = (
        answer.fatal
        if answer.fatal is not None
        else answer.category
        not in (
            Category.HEALTHY,
            Category.STRAGGLER,
        )
    )
    return Verdict(
        category=answer.category,
        attribution=answer.attribution,
        fatal=fatal,
        confidence=answer.confidence,
        nodes=tuple(clip(n, 128) for n in answer.nodes),
        evidence=tuple(clip(e) for e in answer.evidence[:10]),
        summary=clip(answer.summary),
        external=clip(answer.service, 64),
    )

"""Shared dependencies: the store, the Temporal control, and bearer-token checks."""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from trainguard.api.temporal_control import TemporalControl
from trainguard.audit import AuditStore
from trainguard.settings import Settings

bearer = HTTPBearer(auto_error=False, description="settings.api.token")
BearerCreds = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]


@dataclass
class AppContext:
    settings: Settings
    store: AuditStore
    temporal: TemporalControl


def context(request: Request) -> AppContext:
    ctx: AppContext = request.app.state.ctx
    return ctx


def get_store(request: Request) -> AuditStore:
    return context(request).store


def _check(expected: str | None, creds: HTTPAuthorizationCredentials | None, what: str) -> None:
    if expected is None:
        raise HTTPException(status.HTTP_403_FORBIDDEN, f"{what} are disabled: no api.token is configured")
    given = creds.credentials if creds is not None else ""
    if not given or not hmac.compare_digest(given.encode(), expected.encode()):
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "missing or wrong bearer token",
            headers={"WWW-Authenticate": "Bearer"},
        )


def require_write(request: Request, creds: BearerCreds) -> None:
    _check(context(request).settings.api.token, creds, "changes")


def require_read(request: Request, creds: BearerCreds) -> None:
    api = context(request).settings.api
    if api.read_requires_token:
        _check(api.token, creds, "reads")

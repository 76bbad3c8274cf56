"""Shared dependencies: the store, the Temporal control, and who is calling.

A caller is a `Principal`: a name and a role, from a named bearer token (`api.operators`, or the one
shared `api.token` of older setups, named "api-token"), or from the header an authenticating proxy
sets (`api.trusted_header`, honoured only on connections from the proxy). The audit records the
principal's name as who acted; request bodies cannot say who they are. Tokens are compared in constant
time and never logged or echoed.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Literal

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from trainguard.api.temporal_control import TemporalControl
from trainguard.audit import AuditStore
from trainguard.settings import OPERATOR_NAME, APISettings, Role, Settings

log = logging.getLogger(__name__)
bearer = HTTPBearer(auto_error=False, description="a token from settings api.operators")
BearerCreds = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]
SHARED_TOKEN_NAME = "api-token"


@dataclass(frozen=True)
class Principal:
    name: str
    role: Role
    via: Literal["token", "header", "anonymous"]


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


def _unauthorized(detail: str) -> HTTPException:
    return HTTPException(status.HTTP_401_UNAUTHORIZED, detail, headers={"WWW-Authenticate": "Bearer"})


def _by_token(api: APISettings, given: str) -> Principal | None:
    """Every configured token is compared (constant time each), so timing does not say which matched."""
    found: Principal | None = None
    candidates = [(o.name, o.role, o.token.get_secret_value()) for o in api.operators]
    if api.token is not None:
        # It could do everything before roles existed; named credentials are the way to less.
        candidates.append((SHARED_TOKEN_NAME, Role.ADMIN, api.token.get_secret_value()))
    for name, role, token in candidates:
        if hmac.compare_digest(given.encode(), token.encode()) and found is None:
            found = Principal(name, role, "token")
    return found


def _from_proxy(request: Request, proxies: list[str]) -> bool:
    host = request.client.host if request.client else ""
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        return False
    return any(addr in ipaddress.ip_network(p, strict=False) for p in proxies)


def _by_header(request: Request, api: APISettings) -> Principal | None:
    cfg = api.trusted_header
    if not cfg.header or cfg.header not in request.headers:
        return None
    if not _from_proxy(request, cfg.trusted_proxies):
        log.warning("ignored %s header from untrusted address %s", cfg.header, request.client)
        raise _unauthorized(f"{cfg.header} is honoured only from the authenticating proxy")
    name = request.headers[cfg.header].strip()
    if not re.fullmatch(OPERATOR_NAME, name):
        raise _unauthorized(f"{cfg.header} does not hold a valid user name")
    role = cfg.roles.get(name, cfg.default_role)
    if role is None:
        raise HTTPException(
            status.HTTP_403_FORBIDDEN, f"user {name!r} has no role in api.trusted_header.roles"
        )
    return Principal(name, role, "header")


def authenticate(request: Request, creds: HTTPAuthorizationCredentials | None) -> Principal | None:
    """The caller's principal; None when the request carries no credential at all."""
    api = context(request).settings.api
    if creds is not None and creds.credentials:
        principal = _by_token(api, creds.credentials)
        if principal is None:
            raise _unauthorized("unknown bearer token")
        return principal
    return _by_header(request, api)


def _configured(api: APISettings) -> bool:
    return bool(api.operators) or api.token is not None or bool(api.trusted_header.header)


def require(role: Role) -> Callable[[Request, HTTPAuthorizationCredentials | None], Principal]:
    """A dependency admitting callers with at least `role`; it leaves the principal on request.state."""

    def dependency(request: Request, creds: BearerCreds) -> Principal:
        api = context(request).settings.api
        open_read = role == Role.VIEWER and not api.read_requires_token
        if not open_read and not _configured(api):
            what = "reads" if role == Role.VIEWER else "changes"
            raise HTTPException(
                status.HTTP_403_FORBIDDEN,
                f"{what} are disabled: no credentials are configured (api.operators or api.token)",
            )
        principal = authenticate(request, creds)
        if principal is None:
            if not open_read:
                raise _unauthorized("missing credentials: send Authorization: Bearer <token>")
            principal = Principal("anonymous", Role.VIEWER, "anonymous")
        if principal.role.rank < role.rank:
            raise HTTPException(
                status.HTTP_403_FORBIDDEN,
                f"{principal.name} is {principal.role.value}; this needs {role.value}",
            )
        request.state.principal = principal
        return principal

    return dependency


require_read = require(Role.VIEWER)
require_write = require(Role.OPERATOR)
require_admin = require(Role.ADMIN)
Caller = Annotated[Principal, Depends(require_write)]
Admin = Annotated[Principal, Depends(require_admin)]
Viewer = Annotated[Principal, Depends(require_read)]

"""The HTTP client both log backends share: auth, tenant header, TLS verification, timeouts."""

from __future__ import annotations

import httpx

from trainguard.settings import LogSettings

DEFAULT_TIMEOUT_S = 10.0


class LogBackendError(Exception):
    """The backend refused or failed a query. `retryable` is False for auth and query errors."""

    def __init__(self, message: str, *, retryable: bool) -> None:
        super().__init__(message)
        self.retryable = retryable


def tenant_headers(settings: LogSettings) -> dict[str, str]:
    if not settings.tenant:
        return {}
    if settings.backend == "victorialogs":
        # VictoriaLogs tenants are AccountID[:ProjectID].
        account, _, project = settings.tenant.partition(":")
        headers = {"AccountID": account}
        if project:
            headers["ProjectID"] = project
        return headers
    return {"X-Scope-OrgID": settings.tenant}


def make_http_client(settings: LogSettings, timeout_s: float = DEFAULT_TIMEOUT_S) -> httpx.AsyncClient:
    if not settings.url:
        raise ValueError(f"logs.url is required for the {settings.backend} backend")
    headers = tenant_headers(settings)
    auth: httpx.Auth | None = None
    if settings.bearer_token:
        headers["Authorization"] = f"Bearer {settings.bearer_token.get_secret_value()}"
    elif settings.username is not None:
        auth = httpx.BasicAuth(
            settings.username, settings.password.get_secret_value() if settings.password else ""
        )
    return httpx.AsyncClient(
        base_url=settings.url.rstrip("/"),
        headers=headers,
        auth=auth,
        verify=settings.tls_verify,
        timeout=timeout_s,
        follow_redirects=False,
    )


def raise_for_backend(response: httpx.Response, what: str) -> None:
    if response.is_success:
        return
    body = response.text[:300].strip()
    # 4xx other than 429 will not heal by retrying (bad query, bad credentials, unknown tenant).
    retryable = response.status_code == 429 or response.status_code >= 500
    raise LogBackendError(f"{what} failed: HTTP {response.status_code}: {body}", retryable=retryable)

"""Browser-facing hardening: security headers on every response, and interactive API docs that work
offline (Swagger UI's files served by the app from the fastapi-offline package, no CDN) or are off."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

# Everything from the app itself; nothing may frame it (clickjacking on the mode switches).
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),  # for browsers that predate frame-ancestors
)


class SecurityHeaders:
    """Pure ASGI middleware (BaseHTTPMiddleware would buffer streamed responses)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                present = {k.lower() for k, _ in message.get("headers", [])}
                extra = [(k, v) for k, v in HEADERS if k not in present]
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        await self.app(scope, receive, with_headers)


def swagger_assets() -> Path:
    import fastapi_offline

    return Path(fastapi_offline.__file__).parent / "static"


def install_docs(app: FastAPI, static_dir: Path) -> None:
    """/docs: Swagger UI from local files; the page's own script is a file too (CSP: no inline code)."""
    app.mount("/docs-assets", StaticFiles(directory=swagger_assets()), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    async def docs() -> FileResponse:
        return FileResponse(static_dir / "docs.html", headers={"Cache-Control": "no-cache"})

"""The advisor API and operator console: `create_app(settings)` builds the FastAPI application."""

from __future__ import annotations

from http import HTTPStatus
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request, Response, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry
from sqlalchemy.exc import SQLAlchemyError
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

import trainguard.telemetry  # noqa: F401  (registers TrainGuard's metrics so /metrics always lists them)
from trainguard import __version__
from trainguard.api import advice, fleet, workloads
from trainguard.api.deps import AppContext, context
from trainguard.api.metrics import render_metrics, store_registry
from trainguard.api.schemas import Health
from trainguard.api.security import SecurityHeaders, install_docs
from trainguard.api.temporal_control import (
    ClientTemporalControl,
    TemporalControl,
    TemporalUnavailable,
    UpdateRejected,
    WorkflowNotFound,
)
from trainguard.api.vendor import console_page, install_vendor
from trainguard.audit import AdviceNotFound, AuditStore
from trainguard.models import clip
from trainguard.settings import Settings

STATIC_DIR = Path(__file__).parent / "static"


ERROR_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    422: "invalid_request",
    503: "unavailable",
}


def _error(code: int, detail: Any, headers: dict[str, str] | None = None) -> JSONResponse:
    slug = ERROR_CODES.get(code)
    if slug is None:
        try:
            slug = HTTPStatus(code).phrase.lower().replace(" ", "_")
        except ValueError:
            slug = "error"
    return JSONResponse({"error": slug, "detail": detail}, status_code=code, headers=headers)


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> Response:
        return _error(exc.status_code, exc.detail, getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def invalid_request(_: Request, exc: RequestValidationError) -> Response:
        # Only location, message and type: echoing the input back could carry undecodable bytes.
        errors = [
            {
                "loc": [str(p) for p in e.get("loc", ())],
                "msg": clip(str(e.get("msg", "")), 300),
                "type": e.get("type"),
            }
            for e in exc.errors()
        ]
        return _error(status.HTTP_422_UNPROCESSABLE_CONTENT, errors)

    @app.exception_handler(ValueError)
    async def bad_value(_: Request, exc: ValueError) -> Response:
        return _error(status.HTTP_400_BAD_REQUEST, clip(str(exc), 300))

    @app.exception_handler(AdviceNotFound)
    async def advice_missing(_: Request, exc: AdviceNotFound) -> Response:
        return _error(status.HTTP_404_NOT_FOUND, f"no advice {clip(str(exc), 300)}")

    @app.exception_handler(WorkflowNotFound)
    async def workflow_missing(_: Request, exc: WorkflowNotFound) -> Response:
        return _error(status.HTTP_404_NOT_FOUND, str(exc))

    @app.exception_handler(UpdateRejected)
    async def rejected(_: Request, exc: UpdateRejected) -> Response:
        return _error(status.HTTP_409_CONFLICT, str(exc))

    @app.exception_handler(TemporalUnavailable)
    async def temporal_down(_: Request, exc: TemporalUnavailable) -> Response:
        return _error(status.HTTP_503_SERVICE_UNAVAILABLE, str(exc))

    @app.exception_handler(SQLAlchemyError)
    async def store_down(_: Request, exc: SQLAlchemyError) -> Response:
        return _error(status.HTTP_503_SERVICE_UNAVAILABLE, "audit store unavailable")


def _add_metrics_route(app: FastAPI, registry: CollectorRegistry) -> None:
    @app.get(
        "/metrics",
        tags=["health"],
        response_class=Response,
        responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}},
    )
    def metrics() -> Response:
        """Prometheus exposition: TrainGuard's own metrics plus gauges computed from the audit store."""
        return Response(render_metrics(registry), media_type=CONTENT_TYPE_LATEST)


def create_metrics_app(store: AuditStore) -> FastAPI:
    """`/metrics` alone, for `api.metrics_port`: scraped without the API's credentials."""
    app = FastAPI(title="TrainGuard metrics", docs_url=None, redoc_url=None, openapi_url=None)
    _add_metrics_route(app, store_registry(store))
    return app


def create_app(
    settings: Settings, *, store: AuditStore | None = None, temporal: TemporalControl | None = None
) -> FastAPI:
    app = FastAPI(
        title="TrainGuard advisor API",
        version=__version__,
        description="Workloads, advice, audit trail and controls of TrainGuard. Calls carry "
        "`Authorization: Bearer <token>` of a named credential (settings api.operators); its role "
        "(viewer, operator, admin) decides what it may do, and the audit records its name.",
        docs_url=None,  # offline docs below, or none
        redoc_url=None,
    )
    app.add_middleware(SecurityHeaders)
    if settings.api.docs == "offline":
        install_docs(app, STATIC_DIR)
    app.state.ctx = AppContext(
        settings=settings,
        store=store if store is not None else AuditStore.from_url(settings.audit.url),
        temporal=temporal if temporal is not None else ClientTemporalControl(settings.temporal),
    )
    registry = store_registry(app.state.ctx.store)
    _install_error_handlers(app)
    app.include_router(workloads.router)
    app.include_router(advice.router)
    app.include_router(fleet.router)
    install_vendor(app)

    @app.get("/healthz", response_model=Health, tags=["health"])
    async def healthz() -> Health:
        """Liveness: the process answers."""
        return Health(status="ok")

    @app.get("/readyz", response_model=Health, tags=["health"], responses={503: {"model": Health}})
    async def readyz(request: Request, response: Response) -> Health:
        """Readiness: the audit store answers (Temporal is needed only for controls)."""
        try:
            await run_in_threadpool(context(request).store.ping)
        except SQLAlchemyError as err:
            response.status_code = status.HTTP_503_SERVICE_UNAVAILABLE
            return Health(status="unavailable", checks={"audit": clip(type(err).__name__, 100)})
        return Health(status="ok", checks={"audit": "ok"})

    if not settings.api.metrics_port:  # else create_metrics_app serves it on its own port
        _add_metrics_route(app, registry)

    page = console_page(STATIC_DIR / "index.html")

    @app.get("/", include_in_schema=False)
    async def console() -> HTMLResponse:
        return HTMLResponse(page, headers={"Cache-Control": "no-cache"})

    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    return app

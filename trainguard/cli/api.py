"""`trainguard api`: serve the advisor API and the operator console."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any


def register(sub: Any) -> None:
    parser = sub.add_parser("api", help="serve the advisor API, console and /metrics")
    parser.add_argument("--host", help="listen address (default: settings api.host)")
    parser.add_argument("--port", type=int, help="listen port (default: settings api.port)")
    parser.add_argument(
        "--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"]
    )
    parser.set_defaults(handler=_serve)


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from trainguard.api.app import create_app, create_metrics_app
    from trainguard.cli import settings_from

    settings = settings_from(args)
    app = create_app(settings)
    host = args.host or settings.api.host
    common: dict[str, Any] = {"log_level": args.log_level, "access_log": args.log_level == "debug"}
    servers = [uvicorn.Server(uvicorn.Config(app, host=host, port=args.port or settings.api.port, **common))]
    if settings.api.metrics_port:
        metrics_app = create_metrics_app(app.state.ctx.store)
        servers.append(
            uvicorn.Server(uvicorn.Config(metrics_app, host=host, port=settings.api.metrics_port, **common))
        )

    async def serve_all() -> None:
        await asyncio.gather(*(server.serve() for server in servers))

    asyncio.run(serve_all())
    return 0

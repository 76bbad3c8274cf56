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
        "--log-level",
        choices=["critical", "error", "warning", "info", "debug"],
        help="default: settings logging.level",
    )
    parser.set_defaults(handler=_serve)


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from trainguard.api.app import create_app, create_metrics_app
    from trainguard.cli import settings_from
    from trainguard.logconfig import configure_logging

    settings = settings_from(args)
    level = args.log_level or settings.logging.level.lower()
    configure_logging(settings.logging.model_copy(update={"level": level.upper()}))
    app = create_app(settings)
    host = args.host or settings.api.host
    # log_config=None: keep the logging set up above (uvicorn's own config would replace it).
    common: dict[str, Any] = {"log_level": level, "access_log": level == "debug", "log_config": None}
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

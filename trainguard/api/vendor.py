"""The charting library, served by the app from the installed `plotly` wheel (no CDN, no download at
run time, no vendored copy in the repository)."""

from __future__ import annotations

import asyncio
import gzip
import importlib.metadata
import importlib.util
import re
from functools import cache
from pathlib import Path

from fastapi import FastAPI, HTTPException, Request, Response, status
from fastapi.responses import FileResponse

PLOTLY_PATH = "/vendor/plotly.min.js"
# 4.8 MB (1.4 MB gzipped): cached a day by the browser, then revalidated by its ETag (an upgraded plotly
# changes it).
CACHE = "public, max-age=86400"


def plotly_js() -> Path | None:
    """plotly.min.js inside the installed plotly package, found without importing plotly."""
    spec = importlib.util.find_spec("plotly")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "package_data" / "plotly.min.js"
    return path if path.is_file() else None


# Bundled libraries (maplibre's CSS) add a <style> element at load time unless an element with its id
# exists already; the app's CSP (style-src 'self') would refuse it and report an error in the console.
STYLE_ID = re.compile(
    rb'getElementById\("([0-9a-f]{16,128})"\)\)\{var \w+=document\.createElement\("style"\)'
)
STYLE_IDS_MARK = "<!-- plotly-style-ids -->"


@cache
def injected_style_ids() -> tuple[str, ...]:
    path = plotly_js()
    if path is None:
        return ()
    return tuple(m.decode() for m in STYLE_ID.findall(path.read_bytes()))


def console_page(index: Path) -> str:
    """The console's page with a placeholder element for each style plotly.js would inject."""
    stubs = "\n  ".join(f'<template id="{i}"></template>' for i in injected_style_ids())
    return index.read_text().replace(STYLE_IDS_MARK, stubs)


@cache
def gzipped(path: Path) -> bytes:
    """Compressed once per process (~0.3 s), not per request: a console on a slow VPN link loads 1.4 MB."""
    return gzip.compress(path.read_bytes(), compresslevel=6, mtime=0)


def accepts_gzip(accept_encoding: str) -> bool:
    for part in accept_encoding.split(","):
        coding, _, params = part.strip().partition(";")
        if coding.strip().lower() in ("gzip", "*"):
            return params.replace(" ", "").lower() not in ("q=0", "q=0.0", "q=0.00", "q=0.000")
    return False


def install_vendor(app: FastAPI) -> None:
    path = plotly_js()
    etag = ""
    if path is not None:
        stat = path.stat()
        etag = f'"plotly-{importlib.metadata.version("plotly")}-{stat.st_size}-{int(stat.st_mtime)}"'

    @app.get(PLOTLY_PATH, include_in_schema=False)
    async def plotly(request: Request) -> Response:
        if path is None:
            raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, "the plotly package is not installed")
        headers = {"Cache-Control": CACHE, "ETag": etag, "Vary": "Accept-Encoding"}
        if etag in request.headers.get("if-none-match", ""):
            return Response(status_code=status.HTTP_304_NOT_MODIFIED, headers=headers)
        if accepts_gzip(request.headers.get("accept-encoding", "")):
            body = await asyncio.to_thread(gzipped, path)
            headers["Content-Encoding"] = "gzip"
            return Response(body, media_type="text/javascript", headers=headers)
        return FileResponse(path, media_type="text/javascript", headers=headers)

"""A threaded loopback HTTP server with the auth checks the real log backends perform in front."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Self
from urllib.parse import parse_qs, urlsplit


class Request:
    def __init__(self, method: str, path: str, params: dict[str, list[str]], headers: dict[str, str]) -> None:
        self.method = method
        self.path = path
        self.params = params
        self.headers = headers

    def param(self, name: str, default: str | None = None) -> str | None:
        values = self.params.get(name)
        return values[-1] if values else default


Response = tuple[int, str, bytes]  # status, content type, body
Route = Callable[[Request], Response]


def json_response(doc: object, status: int = 200) -> Response:
    return status, "application/json", json.dumps(doc).encode()


def text_response(text: str, status: int = 200) -> Response:
    return status, "text/plain; charset=utf-8", text.encode()


class FakeHTTPServer:
    """Subclasses implement `route`. Auth: basic (username/password) or bearer token, if set."""

    def __init__(
        self, *, username: str | None = None, password: str | None = None, bearer: str | None = None
    ) -> None:
        self.username = username
        self.password = password
        self.bearer = bearer
        self.requests: list[Request] = []
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def route(self, request: Request) -> Response:
        raise NotImplementedError

    def _authorized(self, headers: dict[str, str]) -> bool:
        given = headers.get("authorization", "")
        if self.bearer is not None:
            return given == f"Bearer {self.bearer}"
        if self.username is not None:
            token = base64.b64encode(f"{self.username}:{self.password or ''}".encode()).decode()
            return given == f"Basic {token}"
        return True

    def _handle(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        parts = urlsplit(handler.path)
        params = parse_qs(parts.query, keep_blank_values=True)
        headers = {k.lower(): v for k, v in handler.headers.items()}
        if method == "POST":
            length = int(headers.get("content-length", "0") or 0)
            body = handler.rfile.read(length).decode()
            if headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
                for key, values in parse_qs(body, keep_blank_values=True).items():
                    params.setdefault(key, []).extend(values)
        request = Request(method, parts.path, params, headers)
        self.requests.append(request)
        if not self._authorized(headers):
            status, ctype, payload = text_response("Unauthorized\n", 401)
        else:
            try:
                status, ctype, payload = self.route(request)
            except ValueError as err:
                status, ctype, payload = text_response(f"{err}\n", 400)
            except Exception as err:  # a fake bug must surface as a 500, not a dropped connection
                status, ctype, payload = text_response(f"internal error: {err!r}\n", 500)
        handler.send_response(status)
        handler.send_header("Content-Type", ctype)
        handler.send_header("Content-Length", str(len(payload)))
        handler.end_headers()
        handler.wfile.write(payload)

    def start(self) -> Self:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                fake._handle(self, "GET")

            def do_POST(self) -> None:
                fake._handle(self, "POST")

            def log_message(self, format: str, *args: object) -> None:
                return None

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("server not started")
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest

from trainguard.attribution.external import ExternalRequest, external_attribution
from trainguard.models import Attribution, Category, Finding, FindingSource, Verdict

GOOD = {
    "schema_version": 1,
    "category": "gpu_hardware",
    "attribution": "hardware",
    "confidence": 0.93,
    "nodes": ["gpu-07"],
    "evidence": ["Xid 79 on gpu-07"],
    "summary": "GPU fell off the bus",
    "service": "fleet-doctor",
}


class Handler(BaseHTTPRequestHandler):
    seen: ClassVar[list[dict[str, Any]]] = []

    def log_message(self, *args: object) -> None:
        pass

    def _answer(self, code: int, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        doc = json.loads(self.rfile.read(length))
        Handler.seen.append({"path": self.path, "auth": self.headers.get("Authorization"), "doc": doc})
        if self.path == "/good":
            self._answer(200, json.dumps(GOOD).encode())
        elif self.path == "/slow":
            time.sleep(1.0)
            self._answer(200, json.dumps(GOOD).encode())
        elif self.path == "/error":
            self._answer(500, b'{"error": "boom"}')
        elif self.path == "/bad":
            self._answer(200, b'{"category": "not-a-category", "attribution": "hardware"}')
        else:
            self._answer(200, b"not json")


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


def request() -> ExternalRequest:
    f = Finding(
        source=FindingSource.LOG,
        pattern_id="xid_hardware",
        category=Category.GPU_HARDWARE,
        attribution=Attribution.HARDWARE,
        line="NVRM: Xid 79",
    )
    builtin = Verdict(category=Category.GPU_HARDWARE, attribution=Attribution.HARDWARE, fatal=True)
    return ExternalRequest(workload_key="lab/42/1", cluster="lab", findings=(f,), builtin=builtin)


async def test_answer_is_turned_into_a_verdict(server: str) -> None:
    v = await external_attribution(f"{server}/good", request(), timeout_s=2.0, token="s3cret")
    assert v is not None and v.external == "fleet-doctor" and v.nodes == ("gpu-07",) and v.fatal
    last = Handler.seen[-1]
    assert last["auth"] == "Bearer s3cret"
    assert last["doc"]["schema_version"] == 1
    assert last["doc"]["findings"][0]["pattern_id"] == "xid_hardware"


@pytest.mark.parametrize("path", ["/slow", "/error", "/bad", "/garbage"])
async def test_slow_failing_or_invalid_service_yields_none(server: str, path: str) -> None:
    start = time.monotonic()
    assert await external_attribution(f"{server}{path}", request(), timeout_s=0.3) is None
    assert time.monotonic() - start < 0.9


async def test_unreachable_service_yields_none() -> None:
    assert await external_attribution("http://127.0.0.1:9/x", request(), timeout_s=0.5) is None

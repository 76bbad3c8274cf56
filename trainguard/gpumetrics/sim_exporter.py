"""A simulated NVIDIA dcgm-exporter: GPU metrics of many nodes on one loopback HTTP port.

Metric names, types, help texts and labels follow dcgm-exporter's defaults (etc/default-counters.csv plus
the ECC / NVLink counters operators usually enable), so the queries tested against it are the queries that
run against a real fleet. One endpoint serves every simulated node; the `Hostname` label tells them apart,
as it does when a real Prometheus scrapes one exporter per node.

Faults are injected over HTTP:
    POST /inject {"node": "node2", "gpu": 3, "kind": "xid", "value": 79}
    POST /clear  {"node": "node2"}            (or {} for everything)
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

log = logging.getLogger(__name__)

MODEL_NAME = "NVIDIA H100 80GB HBM3"
DRIVER_VERSION = "550.54.15"
MAX_BODY = 64 * 1024
MAX_GPUS = 64

# name -> (type, help); the order is the order of the exposition.
METRICS: dict[str, tuple[str, str]] = {
    "DCGM_FI_DEV_SM_CLOCK": ("gauge", "SM clock frequency (in MHz)."),
    "DCGM_FI_DEV_MEM_CLOCK": ("gauge", "Memory clock frequency (in MHz)."),
    "DCGM_FI_DEV_MEMORY_TEMP": ("gauge", "Memory temperature (in C)."),
    "DCGM_FI_DEV_GPU_TEMP": ("gauge", "GPU temperature (in C)."),
    "DCGM_FI_DEV_POWER_USAGE": ("gauge", "Power draw (in W)."),
    "DCGM_FI_DEV_GPU_UTIL": ("gauge", "GPU utilization (in %)."),
    "DCGM_FI_DEV_MEM_COPY_UTIL": ("gauge", "Memory utilization (in %)."),
    "DCGM_FI_DEV_XID_ERRORS": ("gauge", "Value of the last XID error encountered."),
    "DCGM_FI_DEV_FB_FREE": ("gauge", "Framebuffer memory free (in MiB)."),
    "DCGM_FI_DEV_FB_USED": ("gauge", "Framebuffer memory used (in MiB)."),
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": ("counter", "Total number of single-bit volatile ECC errors."),
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": ("counter", "Total number of double-bit volatile ECC errors."),
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": (
        "counter",
        "Total number of NVLink flow-control CRC errors.",
    ),
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL": ("counter", "Total number of NVLink data CRC errors."),
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": (
        "counter",
        "Number of remapped rows for uncorrectable errors",
    ),
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": ("counter", "Number of remapped rows for correctable errors"),
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": ("gauge", "Whether remapping of rows has failed"),
}

# Injectable fault kinds -> how they change a GPU. "set" replaces a gauge; "add" bumps a counter.
KINDS: dict[str, tuple[str, str, float]] = {
    "xid": ("set", "DCGM_FI_DEV_XID_ERRORS", 79.0),
    "ecc_dbe": ("add", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", 1.0),
    "ecc_sbe": ("add", "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", 1.0),
    "row_remap_failure": ("set", "DCGM_FI_DEV_ROW_REMAP_FAILURE", 1.0),
    "nvlink": ("add", "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", 100.0),
    "nvlink_data": ("add", "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", 100.0),
    "temp": ("set", "DCGM_FI_DEV_GPU_TEMP", 95.0),
    "util": ("set", "DCGM_FI_DEV_GPU_UTIL", 0.0),
}


class InjectError(ValueError):
    pass


def _baseline(gpu: int) -> dict[str, float]:
    # Slightly different per GPU so dashboards and queries never see identical series.
    return {
        "DCGM_FI_DEV_SM_CLOCK": 1980.0,
        "DCGM_FI_DEV_MEM_CLOCK": 2619.0,
        "DCGM_FI_DEV_MEMORY_TEMP": 44.0 + gpu % 3,
        "DCGM_FI_DEV_GPU_TEMP": 41.0 + gpu % 5,
        "DCGM_FI_DEV_POWER_USAGE": 612.5 + gpu,
        "DCGM_FI_DEV_GPU_UTIL": 97.0,
        "DCGM_FI_DEV_MEM_COPY_UTIL": 38.0,
        "DCGM_FI_DEV_XID_ERRORS": 0.0,
        "DCGM_FI_DEV_FB_FREE": 9411.0,
        "DCGM_FI_DEV_FB_USED": 71670.0,
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": 0.0,
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 0.0,
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": 0.0,
        "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL": 0.0,
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": 0.0,
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": 0.0,
        "DCGM_FI_DEV_ROW_REMAP_FAILURE": 0.0,
    }


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    return str(int(value)) if value.is_integer() else repr(value)


@dataclass
class SimGpu:
    node: str
    index: int
    values: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.values:
            self.values = _baseline(self.index)

    @property
    def uuid(self) -> str:
        return f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{self.node}/gpu{self.index}')}"

    @property
    def pci_bus_id(self) -> str:
        return f"00000000:{0x18 + 0x20 * (self.index % 7):02X}:00.0"

    def labels(self) -> str:
        pairs = {
            "gpu": str(self.index),
            "UUID": self.uuid,
            "pci_bus_id": self.pci_bus_id,
            "device": f"nvidia{self.index}",
            "modelName": MODEL_NAME,
            "Hostname": self.node,
            "DCGM_FI_DRIVER_VERSION": DRIVER_VERSION,
        }
        return ",".join(f'{k}="{_escape(v)}"' for k, v in pairs.items())


class GpuFleet:
    """Thread-safe state of every simulated GPU; renders the Prometheus text exposition format."""

    def __init__(self, nodes: Iterable[str], gpus_per_node: int = 8) -> None:
        if not 1 <= gpus_per_node <= MAX_GPUS:
            raise ValueError(f"gpus_per_node must be 1..{MAX_GPUS}")
        self.nodes = tuple(dict.fromkeys(nodes))
        if not self.nodes:
            raise ValueError("at least one node is needed")
        self.gpus_per_node = gpus_per_node
        self._lock = threading.Lock()
        self._gpus = {(n, i): SimGpu(n, i) for n in self.nodes for i in range(gpus_per_node)}

    def render(self) -> str:
        with self._lock:
            out: list[str] = []
            for name, (kind, help_text) in METRICS.items():
                out.append(f"# HELP {name} {help_text}")
                out.append(f"# TYPE {name} {kind}")
                for gpu in self._gpus.values():
                    out.append(f"{name}{{{gpu.labels()}}} {_number(gpu.values[name])}")
            return "\n".join(out) + "\n"

    def inject(self, node: str, gpu: int, kind: str, value: float | None = None) -> dict[str, float]:
        if kind not in KINDS:
            raise InjectError(f"unknown kind {kind!r}; known: {', '.join(KINDS)}")
        op, metric, default = KINDS[kind]
        amount = default if value is None else float(value)
        if not 0 <= amount < 1e12:
            raise InjectError("value must be between 0 and 1e12")
        with self._lock:
            target = self._gpus.get((node, gpu))
            if target is None:
                raise InjectError(f"no simulated GPU {gpu} on node {node!r}")
            target.values[metric] = amount if op == "set" else target.values[metric] + amount
            if kind == "ecc_dbe":
                # A double-bit error retires the row, as the driver does.
                target.values["DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"] += 1
            return {metric: target.values[metric]}

    def clear(self, node: str | None = None, gpu: int | None = None) -> int:
        """Back to healthy baselines (a GPU reset zeroes the volatile counters too). Returns GPUs reset."""
        with self._lock:
            count = 0
            for (n, i), state in self._gpus.items():
                if (node is None or n == node) and (gpu is None or i == gpu):
                    state.values = _baseline(i)
                    count += 1
            return count

    def snapshot(self) -> dict[str, dict[str, dict[str, float]]]:
        with self._lock:
            return {
                n: {str(i): dict(self._gpus[(n, i)].values) for i in range(self.gpus_per_node)}
                for n in self.nodes
            }


def _field(doc: Mapping[str, Any], key: str, kind: type, required: bool = False) -> Any:
    value = doc.get(key)
    if value is None:
        if required:
            raise InjectError(f"missing {key!r}")
        return None
    if kind is float and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if kind is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if kind is str and isinstance(value, str):
        return value
    raise InjectError(f"{key!r} must be a {kind.__name__}")


def _handler_for(fleet: GpuFleet) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "trainguard-gpusim/1"

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("gpusim %s " + format, self.address_string(), *args)

        def _reply(self, status: HTTPStatus, body: str, content_type: str = "application/json") -> None:
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _json(self, status: HTTPStatus, doc: object) -> None:
            self._reply(status, json.dumps(doc) + "\n")

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._reply(HTTPStatus.OK, fleet.render(), "text/plain; version=0.0.4; charset=utf-8")
            elif path in ("/health", "/healthz"):
                self._json(HTTPStatus.OK, {"status": "ok"})
            elif path == "/state":
                self._json(HTTPStatus.OK, fleet.snapshot())
            else:
                self._json(HTTPStatus.NOT_FOUND, {"error": "not found"})

        def _body(self) -> dict[str, Any]:
            try:
                length = int(self.headers.get("Content-Length", "0"))
            except ValueError:
                raise InjectError("bad Content-Length") from None
            if not 0 <= length <= MAX_BODY:
                raise InjectError("body too large")
            raw = self.rfile.read(length) if length else b"{}"
            try:
                doc = json.loads(raw or b"{}")
            except ValueError:
                raise InjectError("body is not JSON") from None
            if not isinstance(doc, dict):
                raise InjectError("body must be a JSON object")
            return doc

        def do_POST(self) -> None:
            try:
                doc = self._body()
                if self.path == "/inject":
                    gpu = _field(doc, "gpu", int)
                    changed = fleet.inject(
                        _field(doc, "node", str, required=True),
                        0 if gpu is None else gpu,
                        _field(doc, "kind", str, required=True),
                        _field(doc, "value", float),
                    )
                    self._json(HTTPStatus.OK, {"changed": changed})
                elif self.path == "/clear":
                    reset = fleet.clear(_field(doc, "node", str), _field(doc, "gpu", int))
                    self._json(HTTPStatus.OK, {"reset_gpus": reset})
                else:
                    self._json(HTTPStatus.NOT_FOUND, {"error": "not found"})
            except InjectError as err:
                self._json(HTTPStatus.BAD_REQUEST, {"error": str(err)})

    return Handler


class SimExporter:
    """The HTTP side. `start()` serves from a daemon thread (tests); `serve_forever()` blocks (CLI)."""

    def __init__(self, fleet: GpuFleet, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.fleet = fleet
        self.host = host
        self._server = ThreadingHTTPServer((host, port), _handler_for(fleet))
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def target(self) -> str:
        """host:port, the form a Prometheus scrape config wants."""
        return f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.target}"

    def start(self) -> SimExporter:
        self._thread = threading.Thread(target=self._server.serve_forever, name="gpusim", daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self._server.serve_forever()

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> SimExporter:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

"""GPU-health findings for a job's Slurm nodes from Prometheus (dcgm-exporter metric names by default).

Metrics are corroborating evidence next to the job's logs: a Prometheus that is down, slow or
misconfigured must never hold up or break a watch loop, so every failure here ends in a warning and
fewer (or no) findings, within `MetricsSettings.timeout_s`.
"""

from __future__ import annotations

import asyncio
import logging
import math
import re
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from trainguard.models import Attribution, Category, Finding, FindingSource, clip
from trainguard.settings import MetricsSettings

log = logging.getLogger(__name__)

DEFAULT_METRICS: dict[str, str] = {
    "xid": "DCGM_FI_DEV_XID_ERRORS",
    "ecc_dbe": "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
    "row_remap_failure": "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    "nvlink_errors": "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
    "gpu_temp": "DCGM_FI_DEV_GPU_TEMP",
}
"""Logical signal -> metric name; `MetricsSettings.metric_names` overrides any of them."""

GPU_TEMP_THRESHOLD_C = 87.0
"""H100/A100 start slowing down in the upper 80s °C; above that a GPU drags its whole job."""

NVLINK_ERRORS_THRESHOLD = 0.0

# NVIDIA's Xid catalog, bucketed the way an operator acts on them.
XID_HARDWARE: dict[int, str] = {
    48: "double-bit ECC error",
    63: "ECC page retirement / row remapping event",
    64: "ECC page retirement / row remapping failure",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
}
XID_APPLICATION: dict[int, str] = {
    13: "graphics engine exception",
    31: "GPU memory page fault (MMU fault)",
    43: "GPU stopped processing",
}
XID_INTERCONNECT = frozenset({74})

_SAFE_NODE = re.compile(r"[A-Za-z0-9._-]{1,255}")
_LABEL = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class PrometheusQueryError(RuntimeError):
    pass


@dataclass(frozen=True)
class Series:
    labels: dict[str, str]
    points: tuple[tuple[float, float], ...]  # (epoch s, value), oldest first


def metric_name(settings: MetricsSettings, signal: str) -> str:
    return settings.metric_names.get(signal) or DEFAULT_METRICS[signal]


def xid_verdict(code: int) -> tuple[Category, Attribution, bool, str]:
    """Category, attribution, fatal, description for one Xid code."""
    if code in XID_HARDWARE:
        category = Category.INTERCONNECT if code in XID_INTERCONNECT else Category.GPU_HARDWARE
        return category, Attribution.HARDWARE, True, XID_HARDWARE[code]
    if code in XID_APPLICATION:
        return Category.CUDA_ILLEGAL_ACCESS, Attribution.APPLICATION, False, XID_APPLICATION[code]
    return Category.GPU_HARDWARE, Attribution.HARDWARE, False, "Xid outside the known catalog buckets"


class NodeMatcher:
    """Maps Slurm node names to the metric label's values and back.

    The label may carry a different spelling (`node_map`), a domain (`node2.cluster.local`) or, for the
    `instance` label, a port (`node2:9400`); all of them resolve to the Slurm node.
    """

    def __init__(self, settings: MetricsSettings, nodes: Sequence[str]) -> None:
        self.nodes = tuple(n for n in dict.fromkeys(nodes) if _SAFE_NODE.fullmatch(n))
        wanted = set(self.nodes)
        self.by_label: dict[str, str] = {n: n for n in self.nodes}
        for label_value, node in settings.node_map.items():
            if node in wanted:
                self.by_label[label_value] = node

    def selector(self) -> str:
        # Node names are untrusted: only [A-Za-z0-9._-] reach the query, regex-escaped, then string-escaped.
        values = sorted(v for v in self.by_label if _SAFE_NODE.fullmatch(v))
        alternatives = "|".join(re.escape(v) for v in values)
        regex = f"(?:{alternatives})(?:[.:].*)?"
        return regex.replace("\\", "\\\\").replace('"', '\\"')

    def node_of(self, label_value: str) -> str | None:
        for candidate in (label_value, label_value.split(":", 1)[0], label_value.split(".", 1)[0]):
            if candidate in self.by_label:
                return self.by_label[candidate]
        return None


class PrometheusClient:
    def __init__(self, client: httpx.AsyncClient, base_url: str) -> None:
        self._client = client
        self._base = base_url.rstrip("/")

    async def _get(self, path: str, params: Mapping[str, str]) -> Any:
        resp = await self._client.get(f"{self._base}{path}", params=params)
        try:
            doc = resp.json()
        except ValueError:
            raise PrometheusQueryError(f"HTTP {resp.status_code}, not JSON") from None
        if not isinstance(doc, dict) or doc.get("status") != "success":
            error = doc.get("error", "") if isinstance(doc, dict) else ""
            raise PrometheusQueryError(f"HTTP {resp.status_code}: {clip(str(error), 200)}")
        return doc.get("data", {})

    async def instant(self, query: str, at: float) -> list[Series]:
        data = await self._get("/api/v1/query", {"query": query, "time": f"{at:.3f}"})
        return [
            Series(dict(item.get("metric", {})), ((float(item["value"][0]), float(item["value"][1])),))
            for item in data.get("result", [])
            if isinstance(item, dict) and "value" in item
        ]

    async def range(self, query: str, start: float, end: float, step: float) -> list[Series]:
        params = {"query": query, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
        data = await self._get("/api/v1/query_range", params)
        return [
            Series(
                dict(item.get("metric", {})), tuple((float(t), float(v)) for t, v in item.get("values", []))
            )
            for item in data.get("result", [])
            if isinstance(item, dict)
        ]


def _describe(metric: str, labels: Mapping[str, str], node_label: str, value: float) -> str:
    shown = {k: labels[k] for k in (node_label, "gpu", "UUID") if k in labels}
    inner = ",".join(f'{k}="{v}"' for k, v in shown.items())
    value = float(value)
    number = int(value) if math.isfinite(value) and value.is_integer() else round(value, 3)
    return f"{metric}{{{inner}}} = {number}"


def _gpu_detail(labels: Mapping[str, str]) -> str:
    parts = [f"{k}={labels[k]}" for k in ("gpu", "UUID", "modelName") if labels.get(k)]
    return " ".join(parts)


async def _xid_findings(
    prom: PrometheusClient, settings: MetricsSettings, nodes: NodeMatcher, since_s: float, now: float
) -> list[Finding]:
    metric = metric_name(settings, "xid")
    query = f'{metric}{{{settings.node_label}=~"{nodes.selector()}"}} > 0'
    step = max(1.0, since_s / 240.0)  # bounded points per series whatever the window
    findings: list[Finding] = []
    for series in await prom.range(query, now - since_s, now, step):
        node = nodes.node_of(series.labels.get(settings.node_label, ""))
        if node is None:
            continue
        first_seen: dict[int, float] = {}
        for ts, value in series.points:
            if math.isfinite(value) and value > 0:
                first_seen.setdefault(int(value), ts)
        for code, ts in sorted(first_seen.items(), key=lambda kv: kv[1]):
            category, attribution, fatal, what = xid_verdict(code)
            findings.append(
                Finding(
                    source=FindingSource.METRICS,
                    pattern_id=f"dcgm_xid_{code}",
                    category=category,
                    attribution=attribution,
                    fatal=fatal,
                    line=clip(f"{_describe(metric, series.labels, settings.node_label, code)} ({what})"),
                    timestamp=ts,
                    nodes=(node,),
                    detail=clip(f"Xid {code} on {node} {_gpu_detail(series.labels)}"),
                )
            )
    return findings


@dataclass(frozen=True)
class Check:
    signal: str
    pattern_id: str
    expr: Callable[[str, str], str]  # (metric selector, window) -> PromQL
    category: Category
    fatal: bool
    what: str


def _checks() -> tuple[Check, ...]:
    return (
        Check("ecc_dbe", "dcgm_ecc_dbe", lambda s, w: f"increase({s}[{w}]) > 0",
              Category.GPU_HARDWARE, True, "uncorrectable (double-bit) ECC errors increased"),
        Check("row_remap_failure", "dcgm_row_remap_failure", lambda s, w: f"max_over_time({s}[{w}]) > 0",
              Category.GPU_HARDWARE, True, "row remapping failed"),
        Check("nvlink_errors", "dcgm_nvlink_errors",
              lambda s, w: f"increase({s}[{w}]) > {NVLINK_ERRORS_THRESHOLD:g}",
              Category.INTERCONNECT, False, "NVLink CRC errors increased"),
        Check("gpu_temp", "dcgm_gpu_temp", lambda s, w: f"max_over_time({s}[{w}]) > {GPU_TEMP_THRESHOLD_C:g}",
              Category.GPU_HARDWARE, False, f"GPU temperature above {GPU_TEMP_THRESHOLD_C:g} C"),
    )  # fmt: skip


async def _check_findings(
    prom: PrometheusClient,
    settings: MetricsSettings,
    nodes: NodeMatcher,
    check: Check,
    since_s: float,
    now: float,
) -> list[Finding]:
    metric = metric_name(settings, check.signal)
    selector = f'{metric}{{{settings.node_label}=~"{nodes.selector()}"}}'
    findings = []
    for series in await prom.instant(check.expr(selector, f"{max(1, round(since_s))}s"), now):
        node = nodes.node_of(series.labels.get(settings.node_label, ""))
        if node is None:
            continue
        _, value = series.points[0]
        findings.append(
            Finding(
                source=FindingSource.METRICS,
                pattern_id=check.pattern_id,
                category=check.category,
                attribution=Attribution.HARDWARE,
                fatal=check.fatal,
                line=clip(f"{_describe(metric, series.labels, settings.node_label, value)} ({check.what})"),
                timestamp=now,
                nodes=(node,),
                detail=clip(f"{check.what} on {node} {_gpu_detail(series.labels)}"),
            )
        )
    return findings


async def gpu_findings(
    settings: MetricsSettings,
    nodes: Sequence[str],
    *,
    since_s: float = 120.0,
    client: httpx.AsyncClient | None = None,
) -> list[Finding]:
    """GPU-health findings for `nodes` over the last `since_s` seconds; [] when Prometheus can't say."""
    if not settings.prometheus_url or not nodes:
        return []
    if not _LABEL.fullmatch(settings.node_label):
        log.warning("metrics.node_label %r is not a valid Prometheus label name", settings.node_label)
        return []
    matcher = NodeMatcher(settings, nodes)
    if not matcher.nodes:
        return []
    since_s = max(1.0, since_s)
    now = time.time()

    async def collect(http: httpx.AsyncClient) -> list[Finding]:
        prom = PrometheusClient(http, str(settings.prometheus_url))
        jobs: list[tuple[str, Awaitable[list[Finding]]]] = [
            ("xid", _xid_findings(prom, settings, matcher, since_s, now))
        ]
        jobs += [(c.signal, _check_findings(prom, settings, matcher, c, since_s, now)) for c in _checks()]
        results = await asyncio.gather(*(job for _, job in jobs), return_exceptions=True)
        found: list[Finding] = []
        for (signal, _), result in zip(jobs, results, strict=True):
            if isinstance(result, BaseException):
                if not isinstance(result, Exception):
                    raise result  # cancellation and friends are not ours to swallow
                log.warning(
                    "GPU metrics query for %s failed: %s", signal, clip(str(result) or repr(result), 300)
                )
                continue
            found.extend(result)
        return sorted(found, key=lambda f: (f.timestamp or 0.0, f.nodes, f.pattern_id))

    try:
        async with asyncio.timeout(settings.timeout_s):
            if client is not None:
                return await collect(client)
            async with httpx.AsyncClient(timeout=settings.timeout_s) as own:
                return await collect(own)
    except TimeoutError:
        log.warning(
            "Prometheus at %s did not answer within %.1fs", settings.prometheus_url, settings.timeout_s
        )
    except (httpx.HTTPError, OSError, ValueError) as err:
        log.warning(
            "Prometheus at %s unusable: %s", settings.prometheus_url, clip(str(err) or repr(err), 300)
        )
    return []

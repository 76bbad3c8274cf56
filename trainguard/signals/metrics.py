"""Metric-side checks against Prometheus: reachable, DCGM metric names present, the node label present
on them, and its values matching Slurm's node names; a mapping proposed where they differ."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import httpx

from trainguard.settings import MetricsSettings
from trainguard.signals.report import Report, Status

# Logical name -> DCGM exporter metric; `metrics.metric_names` overrides by logical name.
DCGM_DEFAULTS: dict[str, str] = {
    "xid": "DCGM_FI_DEV_XID_ERRORS",
    "gpu_util": "DCGM_FI_DEV_GPU_UTIL",
    "gpu_temp": "DCGM_FI_DEV_GPU_TEMP",
    "ecc_dbe": "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
    "nvlink_crc": "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
    "power": "DCGM_FI_DEV_POWER_USAGE",
}
REQUIRED = ("xid", "gpu_util")  # GPU faults and stalls; the others sharpen attribution
LOOKBACK_S = 600.0
_PORT = re.compile(r":\d+$")


def metric_names(settings: MetricsSettings) -> dict[str, str]:
    return {**DCGM_DEFAULTS, **settings.metric_names}


def normalise_node(value: str) -> str:
    """`gpu-01.cluster.local:9400` -> `gpu-01`: how exporters' `instance` usually relates to Slurm."""
    return _PORT.sub("", value).split(".")[0]


async def _get(client: httpx.AsyncClient, path: str, params: dict[str, str] | None = None) -> list[Any]:
    response = await client.get(path, params=params)
    response.raise_for_status()
    doc = response.json()
    if not isinstance(doc, dict) or doc.get("status") != "success":
        raise ValueError(f"unexpected Prometheus answer from {path}: {str(doc)[:200]}")
    data = doc.get("data")
    if not isinstance(data, list):
        raise ValueError(f"unexpected Prometheus data from {path}: {str(data)[:200]}")
    return data


_PREFIXES = ("dcgm_fi_dev_", "dcgm_fi_", "dcgm_", "nvidia_", "gpu_")


def _core(name: str) -> str:
    lowered = name.lower()
    for prefix in _PREFIXES:
        if lowered.startswith(prefix):
            return lowered[len(prefix) :]
    return lowered


def _similar(name: str, default: str, available: Sequence[str]) -> str | None:
    """A present metric that is probably what `name` meant: the DCGM default, or the same core name."""
    if default in available:
        return default
    core = _core(name)
    return next((c for c in available if _core(c) == core), None)


async def check_metrics(
    report: Report, settings: MetricsSettings, slurm_nodes: set[str] | None, now: float
) -> None:
    if not settings.prometheus_url:
        report.add(
            "metrics.prometheus",
            Status.WARN,
            "metrics.prometheus_url not set: GPU-health evidence (Xid, ECC, NVLink) will be missing",
            "point metrics.prometheus_url at the Prometheus that scrapes the DCGM exporters",
        )
        return
    async with httpx.AsyncClient(
        base_url=settings.prometheus_url.rstrip("/"), timeout=settings.timeout_s
    ) as client:
        try:
            names = [str(n) for n in await _get(client, "/api/v1/label/__name__/values")]
        except (httpx.HTTPError, ValueError) as err:
            report.add(
                "metrics.prometheus",
                Status.FAIL,
                f"{settings.prometheus_url}: {err}",
                "check metrics.prometheus_url and that Prometheus is reachable from the worker",
            )
            return
        report.add(
            "metrics.prometheus", Status.PASS, f"{settings.prometheus_url} answered ({len(names)} metrics)"
        )
        wanted = metric_names(settings)
        present = set(names)
        missing = {k: v for k, v in wanted.items() if v not in present}
        renamed = {k: alt for k, v in missing.items() if (alt := _similar(v, DCGM_DEFAULTS.get(k, v), names))}
        if renamed:
            report.propose("metrics", "metric_names", {**settings.metric_names, **renamed})
        missing_required = [wanted[k] for k in REQUIRED if k in missing]
        if missing_required:
            report.add(
                "metrics.names",
                Status.FAIL,
                f"missing {', '.join(missing_required)} ({len(wanted) - len(missing)}/{len(wanted)} present)",
                "deploy dcgm-exporter with these counters, or map metrics.metric_names to your names",
            )
        elif missing:
            report.add(
                "metrics.names",
                Status.WARN,
                f"optional metric(s) absent: {', '.join(sorted(missing.values()))}",
                "enable them in the dcgm-exporter counters CSV for sharper attribution",
            )
        else:
            report.add("metrics.names", Status.PASS, f"all {len(wanted)} DCGM metrics present")
        probe = next((wanted[k] for k in ("xid", "gpu_util", *wanted) if wanted.get(k) in present), None)
        if probe is None:
            report.add("metrics.node_label", Status.SKIP, "no DCGM metric to inspect")
            report.add("metrics.node_names", Status.SKIP, "no DCGM metric to inspect")
            return
        params = {"match[]": probe, "start": str(now - LOOKBACK_S), "end": str(now)}
        series = await _get(client, "/api/v1/series", params)
    label_sets = [{str(k): str(v) for k, v in s.items()} for s in series if isinstance(s, dict)]
    _check_nodes(report, settings, probe, label_sets, slurm_nodes)


def _check_nodes(
    report: Report,
    settings: MetricsSettings,
    probe: str,
    label_sets: list[dict[str, str]],
    slurm_nodes: set[str] | None,
) -> None:
    label = settings.node_label
    values = sorted({s[label] for s in label_sets if label in s})
    best_label, best_map, best_hits = _best_node_label(label_sets, slurm_nodes or set())
    if not values:
        keys = sorted({k for s in label_sets for k in s if k != "__name__"})
        report.add(
            "metrics.node_label",
            Status.FAIL,
            f"{probe} has no {label!r} label; labels: {', '.join(keys) or 'none'}",
            f"set metrics.node_label to {best_label!r}"
            if best_label
            else "label DCGM series with the host name",
        )
        if best_label:
            report.propose("metrics", "node_label", best_label)
            if best_map:
                report.propose("metrics", "node_map", best_map)
        report.add("metrics.node_names", Status.SKIP, "no node label to compare")
        return
    report.add("metrics.node_label", Status.PASS, f"{probe} carries {label!r} ({len(values)} value(s))")
    if slurm_nodes is None:
        report.add("metrics.node_names", Status.SKIP, "Slurm node list unavailable")
        return
    mapped = {settings.node_map.get(v, v) for v in values}
    matched = mapped & slurm_nodes
    unmatched = sorted(mapped - slurm_nodes)
    if not matched:
        fix = "map metric values to Slurm node names with metrics.node_map"
        if best_label and best_hits:
            report.propose("metrics", "node_label", best_label)
            if best_map:
                report.propose("metrics", "node_map", best_map)
            fix = f"use node_label {best_label!r}" + (" with the proposed node_map" if best_map else "")
        report.add(
            "metrics.node_names",
            Status.FAIL,
            f"no {label!r} value is a Slurm node name (e.g. {', '.join(unmatched[:3])})",
            fix,
        )
        return
    without = sorted(slurm_nodes - mapped)
    if unmatched or without:
        detail = f"{len(matched)}/{len(slurm_nodes)} Slurm nodes have GPU metrics"
        if unmatched:
            detail += f"; unknown to Slurm: {', '.join(unmatched[:5])}"
        report.add(
            "metrics.node_names",
            Status.WARN,
            detail,
            "nodes without metrics get no GPU-health evidence; check exporters or metrics.node_map",
        )
        return
    report.add("metrics.node_names", Status.PASS, f"all {len(slurm_nodes)} Slurm nodes have GPU metrics")


def _best_node_label(
    label_sets: list[dict[str, str]], slurm_nodes: set[str]
) -> tuple[str | None, dict[str, str], int]:
    """The label whose values (as given, or normalised) name the most Slurm nodes."""
    best: tuple[str | None, dict[str, str], int] = (None, {}, 0)
    names = {k for s in label_sets for k in s if k != "__name__"}
    for name in sorted(names):
        values = {s[name] for s in label_sets if name in s}
        node_map = {
            v: normalise_node(v) for v in values if v not in slurm_nodes and normalise_node(v) in slurm_nodes
        }
        hits = sum(1 for v in values if v in slurm_nodes) + len(node_map)
        if hits > best[2]:
            best = (name, node_map, hits)
    return best

"""Per-node kernel/syslog streams: where a GPU's Xid, an ECC error or a NIC's failure really appears.

A job's own stdout never carries the kernel's lines. This follows each node of a running job: files
per node (`logs.node_log_path`, e.g. `/var/log/nodes/{node}/kern.log`, read through the Runner like
job output) or a log backend's per-host stream (`logs.node_log_label`, e.g. Loki `{host="node2"}`).
A node log is shared by every job on the node, so reading starts where the log ends when the watch
starts (older lines belong to whatever ran before), and only hardware evidence counts
(`node_findings`): another job's Python errors or OOM kills on a shared node are not this job's.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

from trainguard.detection.analyzer import LogAnalyzer
from trainguard.detection.catalog import Catalog
from trainguard.detection.locate import valid_node_name
from trainguard.logsources.base import LogSource
from trainguard.logsources.files import FileLogSource
from trainguard.logsources.loki import LokiLogSource, logql_selector
from trainguard.logsources.victorialogs import VictoriaLogsLogSource, logsql_filters
from trainguard.models import Attribution, Finding, LogCursor
from trainguard.settings import LogSettings
from trainguard.slurm.runner import Runner

NodeSourceFactory = Callable[[str], LogSource]


def node_log_enabled(settings: LogSettings) -> bool:
    return bool(settings.node_log_path if settings.backend == "files" else settings.node_log_label)


def make_node_log_source(
    settings: LogSettings,
    runner: Runner,
    node: str,
    *,
    client: httpx.AsyncClient | None = None,
    clock: Callable[[], float] = time.time,
) -> LogSource:
    """The kernel/syslog stream of one node. The node name comes from Slurm, but it still goes into a
    path or a query, so it must look like a host name."""
    if not valid_node_name(node):
        raise ValueError(f"not a node name: {node[:80]!r}")
    if settings.backend == "files":
        if "{node}" not in settings.node_log_path:
            raise ValueError("logs.node_log_path needs a {node} placeholder")
        return FileLogSource(runner, settings.node_log_path.replace("{node}", node))
    if client is None:
        raise ValueError("a backend node log needs an HTTP client")
    matchers: dict[str, str | tuple[str, ...]] = {settings.node_log_label: node}
    start = int(clock() * 1_000_000_000)  # from now on: older lines are another job's
    if settings.backend == "loki":
        query = logql_selector(matchers, settings.query_prefix)
        return LokiLogSource(client, query, start_ns=start, clock=clock)
    return VictoriaLogsLogSource(
        client, logsql_filters(matchers, settings.query_prefix), start_ns=start, clock=clock
    )


async def end_cursor(source: LogSource) -> LogCursor:
    """A cursor at the current end of the stream (files); backends already start at 'now'."""
    if isinstance(source, FileLogSource):
        return await source.end_cursor()
    return LogCursor()


def node_findings(node: str, findings: list[Finding]) -> list[Finding]:
    """Hardware evidence from one node's log, named for that node (a dmesg line names no host)."""
    out: list[Finding] = []
    for f in findings:
        if not f.fatal or f.attribution != Attribution.HARDWARE:
            continue
        out.append(f.model_copy(update={"nodes": (node,), "rank": None, "offset": None, "line_no": None}))
    return out


@dataclass
class NodeLogFollower:
    """One node's stream while a watch runs: its source, cursor and analyzer (catalog only)."""

    node: str
    source: LogSource
    cursor: LogCursor | None = None
    analyzer: LogAnalyzer = field(default_factory=LogAnalyzer)

    @classmethod
    def create(cls, node: str, source: LogSource, catalog: Catalog | None = None) -> NodeLogFollower:
        return cls(node=node, source=source, analyzer=LogAnalyzer(catalog=catalog))

    async def poll(self, now: float, max_bytes: int) -> list[Finding]:
        if self.cursor is None:
            self.cursor = await end_cursor(self.source)
        chunk = await self.source.read(self.cursor, max_bytes)
        self.cursor = chunk.cursor
        if not chunk.data:
            return []
        found = self.analyzer.feed(chunk.data, now=now)
        return node_findings(self.node, found)

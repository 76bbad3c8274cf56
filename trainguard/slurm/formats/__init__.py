"""One version-tolerant reading of Slurm's JSON and text output into the project's own models.

Every Slurm in use is understood: openapi v0.0.38 (22.05), data_parser v0.0.40/41/42 (23.11-24.11,
25.05) and v0.0.43 (25.05/25.11, from its published schema), plus `scontrol -o` text. The format is
detected from the document's `meta` (data_parser plugin, openapi plugin, or Slurm release) and each
format's shape is adapted in its own module; the rest of TrainGuard only sees JobSnapshot/NodeSnapshot.

Accepted documents: `squeue --json` and slurmrestd `/jobs` (`jobs: [...]`); `sinfo --json` (22.05's
`nodes: [...]`, 23.11+'s grouped `sinfo: [...]`), `scontrol show node --json` and slurmrestd `/nodes`
(`nodes: [...]`). A document that cannot be understood raises SlurmFormatError (never an empty list):
callers must not take it for "no jobs". A document with a non-empty `errors` list raises
SlurmReportedError (slurmctld unreachable: retry).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Protocol

from trainguard.models import JobSnapshot, NodeSnapshot
from trainguard.slurm.errors import SlurmFormatError, SlurmParseError, SlurmReportedError
from trainguard.slurm.formats import v0038, v0040, v0041, v0042, v0043
from trainguard.slurm.formats.common import check_errors, meta_of
from trainguard.slurm.formats.scontrol_text import FORMAT as SCONTROL_TEXT

__all__ = [
    "FORMATS",
    "SCONTROL_TEXT",
    "SlurmFormatError",
    "SlurmParseError",
    "SlurmReportedError",
    "detect_format",
    "format_of_release",
    "parse_jobs",
    "parse_nodes",
    "uses_data_parser",
]


class Adapter(Protocol):
    def jobs(self, doc: Mapping[str, Any]) -> list[JobSnapshot]: ...

    def nodes(self, doc: Mapping[str, Any]) -> list[NodeSnapshot]: ...


FORMATS: dict[str, Adapter] = {
    v0038.FORMAT: v0038,
    v0040.FORMAT: v0040.ADAPTER,
    v0041.FORMAT: v0041.ADAPTER,
    v0042.FORMAT: v0042.ADAPTER,
    v0043.FORMAT: v0043.ADAPTER,
}
_NEWEST_DATA_PARSER = 43
_DATA_PARSER = re.compile(r"data_parser/v0\.0\.(\d+)")
_OPENAPI = re.compile(r"openapi/v0\.0\.(\d+)")
_RELEASE = re.compile(r"(\d+)\.(\d+)")


def format_of_release(major: int, minor: int) -> str:
    """The JSON format a Slurm release's CLI prints by default (its newest data_parser)."""
    release = (major, minor)
    if release <= (22, 5):
        return v0038.FORMAT
    if release < (23, 11):
        return "data_parser/v0.0.39"
    if release < (24, 5):
        return v0040.FORMAT
    if release < (24, 11):
        return v0041.FORMAT
    if release < (25, 5):
        return v0042.FORMAT
    return v0043.FORMAT


def _release(meta: Mapping[str, Any]) -> tuple[int, int] | None:
    slurm = meta.get("slurm", meta.get("Slurm"))
    if not isinstance(slurm, Mapping):
        return None
    release = slurm.get("release")
    if isinstance(release, str) and (match := _RELEASE.match(release)):
        return int(match.group(1)), int(match.group(2))
    version = slurm.get("version")
    if isinstance(version, Mapping):
        try:
            return int(str(version.get("major"))), int(str(version.get("minor")))
        except ValueError:
            return None
    return None


def _sniff(doc: Mapping[str, Any]) -> str | None:
    """No usable meta: tell the shape from the first entry (lists of states are data_parser's)."""
    if "sinfo" in doc:
        return v0042.FORMAT
    for key, field in (("jobs", "job_state"), ("nodes", "state")):
        items = doc.get(key)
        if isinstance(items, list) and items and isinstance(items[0], Mapping):
            value = items[0].get(field)
            if isinstance(value, list):
                return v0042.FORMAT
            if isinstance(value, str):
                return v0038.FORMAT
    return None


def detect_format(doc: Mapping[str, Any] | str) -> str:
    """The format of one Slurm document, e.g. "openapi/v0.0.38", "data_parser/v0.0.42", "scontrol/text".

    A data_parser version newer than any known one is returned as printed (parse_* reads it with the
    newest adapter: fields TrainGuard reads have kept their shape since v0.0.40).
    """
    if isinstance(doc, str):
        return SCONTROL_TEXT
    if not isinstance(doc, Mapping):
        raise SlurmFormatError(f"a Slurm document is a JSON object, not {type(doc).__name__}")
    meta = meta_of(doc)
    plugin = meta.get("plugin")
    if isinstance(plugin, Mapping):
        data_parser = plugin.get("data_parser")
        if isinstance(data_parser, str) and (match := _DATA_PARSER.search(data_parser)):
            return f"data_parser/v0.0.{int(match.group(1))}"
        plugin_type = plugin.get("type")
        if isinstance(plugin_type, str) and (match := _OPENAPI.search(plugin_type)):
            version = int(match.group(1))
            return v0038.FORMAT if version <= 38 else f"data_parser/v0.0.{version}"
    release = _release(meta)
    if release is not None:
        return format_of_release(*release)
    sniffed = _sniff(doc)
    if sniffed is None:
        raise SlurmFormatError(
            f"cannot tell the Slurm output format: no meta and nothing to recognise (keys {sorted(doc)[:8]})"
        )
    return sniffed


def uses_data_parser(fmt: str) -> bool:
    return fmt.startswith("data_parser/")


def _adapter(fmt: str) -> Adapter:
    adapter = FORMATS.get(fmt)
    if adapter is not None:
        return adapter
    match = _DATA_PARSER.fullmatch(fmt)
    if match is not None:
        version = int(match.group(1))
        if version == 39:  # 23.02: data_parser shape; not tested against a real 23.02
            return v0040.ADAPTER
        if version > _NEWEST_DATA_PARSER:
            return v0043.ADAPTER
    raise SlurmFormatError(f"unsupported Slurm output format {fmt!r}")


def _guarded(doc: Mapping[str, Any], what: str, read: str) -> list[Any]:
    if not isinstance(doc, Mapping):
        raise SlurmFormatError(f"{what}: a Slurm document is a JSON object, not {type(doc).__name__}")
    check_errors(doc, what)
    fmt = detect_format(doc)
    adapter = _adapter(fmt)
    try:
        return getattr(adapter, read)(doc)
    except SlurmParseError:
        raise
    except (ValueError, TypeError, KeyError, AttributeError, OverflowError, RecursionError) as err:
        # Whatever an odd document trips over becomes the one typed error callers handle.
        raise SlurmFormatError(f"{what} ({fmt}): {type(err).__name__}: {str(err)[:200]}") from None


def parse_jobs(doc: Mapping[str, Any]) -> list[JobSnapshot]:
    """Jobs from `squeue --json` or slurmrestd /jobs of any supported version (paths expanded)."""
    return _guarded(doc, "jobs document", "jobs")


def parse_nodes(doc: Mapping[str, Any]) -> list[NodeSnapshot]:
    """Nodes from `sinfo --json`, `scontrol show node --json` or slurmrestd /nodes of any version."""
    return _guarded(doc, "nodes document", "nodes")

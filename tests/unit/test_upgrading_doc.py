"""docs/upgrading.md lists every patch id the workflows use, and every recorded history: an operator
deciding whether a patch may be removed, or which histories a release must keep replaying, reads it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "upgrading.md").read_text()


def patch_ids() -> set[str]:
    ids: set[str] = set()
    for path in (ROOT / "workflows").glob("*.py"):
        text = path.read_text()
        constants = dict(re.findall(r'^(PATCH_[A-Z_]+)\s*=\s*"([a-z0-9-]+)"', text, re.M))
        ids |= set(constants.values())
        ids |= set(re.findall(r'patched\(\s*"([a-z0-9-]+)"', text))
    return ids


def test_every_patch_id_is_documented() -> None:
    ids = patch_ids()
    assert len(ids) >= 10, ids  # the scan found the patches (guards against a scan that finds nothing)
    missing = sorted(i for i in ids if f"`{i}`" not in DOC)
    assert not missing, f"patch ids not in docs/upgrading.md: {missing}"


def test_every_recorded_history_is_documented() -> None:
    names = sorted(p.stem for p in (ROOT / "tests" / "workflows" / "histories").glob("*.json"))
    assert names
    missing = [n for n in names if f"`{n}`" not in DOC and f"`{n.rsplit('_', 1)[0]}_" not in DOC]
    assert not missing, f"histories not in docs/upgrading.md: {missing}"

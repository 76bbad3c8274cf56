"""Check results, the proposed settings, and how both are printed (table or JSON)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

import yaml


class Status(StrEnum):
    PASS = "pass"
    WARN = "warn"  # works, but a detector will be weaker than it could be
    FAIL = "fail"  # a detector will be blind: fix before the first workload
    SKIP = "skip"  # not applicable, or an earlier failure makes it meaningless


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str
    fix: str = ""


@dataclass
class Report:
    checks: list[Check] = field(default_factory=list)
    proposed: dict[str, dict[str, Any]] = field(default_factory=dict)  # settings section -> keys

    def add(self, name: str, status: Status, detail: str, fix: str = "") -> Check:
        check = Check(name, status, detail, fix)
        self.checks.append(check)
        return check

    def propose(self, section: str, key: str, value: Any) -> None:
        self.proposed.setdefault(section, {})[key] = value

    @property
    def ok(self) -> bool:
        return not any(c.status is Status.FAIL for c in self.checks)

    def to_json(self) -> str:
        doc = {
            "ok": self.ok,
            "checks": [{**asdict(c), "status": str(c.status)} for c in self.checks],
            "proposed_settings": self.proposed,
        }
        return json.dumps(doc, indent=2, sort_keys=False)

    def to_table(self, width: int = 100) -> str:
        name_w = max([len("CHECK"), *(len(c.name) for c in self.checks)])
        lines = [f"{'CHECK':<{name_w}}  RESULT  DETAIL", f"{'-' * name_w}  ------  {'-' * 40}"]
        for c in self.checks:
            detail = c.detail if len(c.detail) <= width else c.detail[: width - 1] + "…"
            lines.append(f"{c.name:<{name_w}}  {c.status.upper():<6}  {detail}")
        fixes = [c for c in self.checks if c.fix and c.status in (Status.FAIL, Status.WARN)]
        if fixes:
            lines += ["", "What to fix:"]
            lines += [f"  - {c.name}: {c.fix}" for c in fixes]
        if self.proposed:
            lines += ["", "Proposed settings (merge into your TrainGuard config):"]
            text = yaml.safe_dump(self.proposed, sort_keys=True, default_flow_style=False)
            lines += ["  " + line for line in text.rstrip().splitlines()]
        failed = sum(c.status is Status.FAIL for c in self.checks)
        warned = sum(c.status is Status.WARN for c in self.checks)
        verdict = "OK" if self.ok else "FAILED"
        lines += [
            "",
            f"signals check {verdict}: {failed} failed, {warned} warning(s), {len(self.checks)} checks",
        ]
        return "\n".join(lines)

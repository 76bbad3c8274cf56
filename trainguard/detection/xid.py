"""NVIDIA's Xid catalog as data (xid_catalog.yaml): what one Xid code means for a training job.

NVIDIA publishes a resolution bucket per code (the immediate action: restart the application, reset the
GPU, reboot the machine, ignore, ...). TrainGuard turns a bucket into a finding class:
- hardware: the GPU or machine must be reset or serviced; a platform verdict that may exclude the node;
- report: an unexpected code NVIDIA asks to report; hardware, but not enough alone to touch a running job;
- application: restarting the application is the fix; the node is fine;
- contained: a contained memory error; restart the application, the GPU stays usable;
- cascade: follows an earlier Xid (or the application's exit) and points back to it; it decides only when
  nothing else was seen, and then with low confidence;
- informational: not fatal by itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

import yaml

from trainguard.models import Attribution, Category

BUCKET_CLASSES: dict[str, str] = {
    "RESET_GPU": "hardware",
    "RESTART_BM": "hardware",
    "RESTART_VM": "hardware",
    "WORKFLOW_XID_48": "hardware",
    "WORKFLOW_NVLINK_ERR": "hardware",
    "WORKFLOW_NVLINK5_ERR": "hardware",
    "CHECK_MECHANICALS": "hardware",
    "UPDATE_SWFW": "hardware",
    "UNEXPECTED_ERR_REPORT_ISSUE": "report",
    "CONTACT_SUPPORT": "report",
    "RESTART_APP": "application",
    "WORKFLOW_XID_45": "cascade",
    "FOLLOW_PREVIOUS_XID": "cascade",
    "IGNORE": "informational",
    "CHECK_UVM": "informational",
}


@dataclass(frozen=True)
class XidClass:
    name: str
    category: Category
    attribution: Attribution
    fatal: bool
    cascade: bool
    priority: int


CLASSES: dict[str, XidClass] = {
    "hardware": XidClass("hardware", Category.GPU_HARDWARE, Attribution.HARDWARE, True, False, 3),
    "report": XidClass("report", Category.GPU_HARDWARE, Attribution.HARDWARE, True, False, 2),
    "application": XidClass(
        "application", Category.CUDA_ILLEGAL_ACCESS, Attribution.APPLICATION, True, False, 2
    ),
    # A contained memory error is the GPU's (hardware), but specific, not a platform verdict: it does not
    # touch a running job by itself, and the GPU stays usable after the application restarts.
    "contained": XidClass("contained", Category.GPU_HARDWARE, Attribution.HARDWARE, True, False, 2),
    "cascade": XidClass("cascade", Category.GPU_HARDWARE, Attribution.HARDWARE, True, True, 3),
    "informational": XidClass("informational", Category.GPU_HARDWARE, Attribution.HARDWARE, False, False, 1),
}
_NONFATAL = re.compile(r"\b(Nonfatal|NonFatal|Non-fatal|NONFATAL)\b")
UNKNOWN_CODE_CLASS = "hardware"  # a code newer than this table: treat as NVIDIA's usual RESET_GPU


@dataclass(frozen=True)
class XidCode:
    code: int
    mnemonic: str
    bucket: str
    klass: XidClass


def _parse(doc: Any) -> dict[int, XidCode]:
    if not isinstance(doc, dict) or not isinstance(doc.get("codes"), list):
        raise ValueError("xid catalog must be a mapping with a `codes` list")
    table: dict[int, XidCode] = {}
    for raw in doc["codes"]:
        code = int(raw["code"])
        bucket = str(raw["bucket"])
        name = str(raw.get("class") or BUCKET_CLASSES[bucket])
        if code in table:
            raise ValueError(f"xid {code} listed twice")
        table[code] = XidCode(code, str(raw.get("mnemonic", "")), bucket, CLASSES[name])
    return table


@lru_cache(maxsize=1)
def xid_table() -> dict[int, XidCode]:
    text = resources.files("trainguard.detection").joinpath("xid_catalog.yaml").read_text(encoding="utf-8")
    return _parse(yaml.safe_load(text))


def classify_xid(code: int, line: str = "") -> XidCode:
    entry = xid_table().get(code)
    if entry is None:
        entry = XidCode(code, "UNKNOWN", "UNKNOWN", CLASSES[UNKNOWN_CODE_CLASS])
    if entry.bucket == "WORKFLOW_NVLINK5_ERR" and _NONFATAL.search(line):
        # NVLink5 Xids (144-150) state their own severity; NVIDIA's workflow acts on the fatal ones.
        return XidCode(entry.code, entry.mnemonic, entry.bucket, CLASSES["informational"])
    if "previous Xid" in line or "previous XID" in line:
        entry = XidCode(entry.code, entry.mnemonic, entry.bucket, CLASSES["cascade"])
    return entry

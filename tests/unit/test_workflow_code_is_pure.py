"""Workflow code imports only models and pure decision logic, and calls nothing non-deterministic.

The production workers pass the `workflows` package through the Temporal sandbox (workers/worker.py,
WORKFLOW_RUNNER: re-importing it for every workflow run cost ~70 ms of CPU per workload start), and a
passed-through module is no longer guarded at run time: `datetime.datetime.now()` in it runs instead of
failing the task. So the rule is checked here, statically, on every module of the package: what it may
import, and which calls it may never make. The workflow tests still run under the full sandbox.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

WORKFLOWS = Path(__file__).resolve().parents[2] / "workflows"
ALLOWED_MODULES = {
    "__future__",
    "asyncio",
    "contextlib",
    "dataclasses",
    "re",
    "typing",
    "collections.abc",
    "temporalio",
    "temporalio.common",
    "temporalio.exceptions",
    "trainguard",  # only `contracts` (below)
    "trainguard.contracts",
    "trainguard.identity",
    "trainguard.models",
    "trainguard.policy",
    "trainguard.policy.limits",
    "trainguard.runtime_config",
    "trainguard.slurm.states",
}
ALLOWED_NAMES = {"trainguard": {"contracts"}, "datetime": {"timedelta"}, "temporalio": {"workflow"}}
# Attribute calls that read the clock, randomness, the environment or the outside world.
FORBIDDEN_CALLS = {
    "now",
    "utcnow",
    "today",
    "time",
    "monotonic",
    "perf_counter",
    "random",
    "randint",
    "choice",
    "shuffle",
    "uuid1",
    "uuid4",
    "getenv",
    "open",
    "sleep",  # asyncio.sleep is a timer only through workflow.sleep / wait_condition
    "run",  # subprocess.run / asyncio.run
    "to_thread",
    "get_event_loop",
}
WORKFLOW_API_CALLS = {"workflow.now", "workflow.time", "workflow.random", "workflow.uuid4", "workflow.sleep"}


def modules() -> list[Path]:
    found = sorted(WORKFLOWS.glob("*.py"))
    assert len(found) >= 10, found  # the package moved: this test must follow it
    return found


def violations(source: str) -> list[str]:
    tree = ast.parse(source)
    bad: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            bad += [
                f"import {a.name}"
                for a in node.names
                if not a.name.startswith("workflows") and a.name not in ALLOWED_MODULES
            ]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if module.startswith("workflows"):
                continue
            names = {a.name for a in node.names}
            if module in ALLOWED_NAMES:
                bad += [f"from {module} import {n}" for n in sorted(names - ALLOWED_NAMES[module])]
            elif module not in ALLOWED_MODULES:
                bad.append(f"from {module} import {', '.join(sorted(names))}")
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id in {"open", "input", "print", "exec", "eval"}:
                bad.append(f"{func.id}() at line {node.lineno}")
            elif isinstance(func, ast.Attribute) and func.attr in FORBIDDEN_CALLS:
                owner = func.value.id if isinstance(func.value, ast.Name) else ""
                if f"{owner}.{func.attr}" not in WORKFLOW_API_CALLS:
                    bad.append(f"{ast.unparse(func)}() at line {node.lineno}")
    return bad


@pytest.mark.parametrize("path", modules(), ids=lambda p: p.name)
def test_workflow_module_imports_and_calls_only_deterministic_things(path: Path) -> None:
    assert violations(path.read_text()) == []


@pytest.mark.parametrize(
    "source",
    [
        "import datetime\nx = datetime.datetime.now()\n",
        "from datetime import datetime\n",
        "import time\n",
        "import random\n",
        "from trainguard.audit.store import AuditStore\n",
        "import uuid\nuuid.uuid4()\n",
        "import asyncio\nasyncio.sleep(1)\n",
        "x = open('f')\n",
        "import os\nos.getenv('X')\n",
    ],
)
def test_the_check_catches_what_the_sandbox_no_longer_would(source: str) -> None:
    assert violations(source)


def test_workflow_apis_are_allowed() -> None:
    source = "from temporalio import workflow\nworkflow.now()\nworkflow.time()\nworkflow.uuid4()\n"
    assert violations(source) == []

"""Test order for the two pytest-xdist workers (scripts/test.sh runs them with --dist loadfile and
--no-loadscope-reorder, so files are handed out in this order, one at a time, to whichever worker is free).

The longest files go first and the many short unit files last, filling in: the run ends when the last file
does, so a long end-to-end file started last (xdist's default puts the files with the fewest tests, the
end-to-end ones, last) left one worker idle for minutes at the end while the other ran it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).parent
# Seconds per file, both Slurm versions, as a CI run on the 2-core machine measured them (--durations); only
# the order they give matters, so a stale figure costs a little balance, never a test.
MEASURED_S: dict[str, float] = {
    "e2e/test_safety_detection.py": 330,
    "e2e/test_safety_actions.py": 310,
    "e2e/test_faults_infra.py": 257,
    "e2e/test_pytorch_recovery.py": 251,
    "e2e/test_fail_open.py": 247,
    "e2e/test_crash_worker_kill.py": 151,
    "e2e/test_slurmrestd.py": 147,
    "e2e/test_recovery_slurm_events.py": 141,
    "e2e/test_recovery_loop.py": 121,
    "e2e/test_slurm_lab.py": 115,
    "e2e/test_operator_guide.py": 97,
    "unit/test_bench_smoke.py": 91,
    "e2e/test_upgrade.py": 78,
    "e2e/test_real_torch_faults.py": 72,
    "e2e/test_healthy_real_logs.py": 58,
}
# Files not measured: an end-to-end file starts a real stack (tens of seconds), others take about a second.
DEFAULT_S = {"e2e": 30.0, "workflows": 5.0}


def expected_s(path: Path) -> float:
    try:
        rel = path.relative_to(HERE).as_posix()
    except ValueError:
        return 1.0
    return MEASURED_S.get(rel, DEFAULT_S.get(rel.split("/", 1)[0], 1.0))


@pytest.hookimpl(trylast=True)  # after pytest's own grouping by fixture parameters, which it keeps
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # stable: the tests of one file keep their order, and files of equal weight their collection order
    weight = {path: expected_s(path) for path in {item.path for item in items}}
    items.sort(key=lambda item: -weight[item.path])

"""Cost of the console's chart endpoints over a seeded fleet (SQLite file, in process, no server).

    .venv/bin/python -m bench.console_charts                  # 200, 1000 and 3000 workloads over 30 days
    .venv/bin/python -m bench.console_charts --workloads 500 --repeat 5

Seeds trainguard/audit/demo_fleet.py's fleet (each workload: 0-3 failures with their advice, actions,
restart and resumption; two lemon nodes), then times GET /api/v1/fleet/summary?days=30,
/api/v1/fleet/nodes?days=30 and one workload's /timeline through FastAPI's test client (median of
`--repeat` calls; JSON size of the answer).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from fastapi.testclient import TestClient

from trainguard.api.app import create_app
from trainguard.api.temporal_control import StoreTemporalControl
from trainguard.audit import AuditStore, iter_all_events
from trainguard.audit.demo_fleet import seed_fleet
from trainguard.settings import Settings


def measure(workloads: int, repeat: int) -> list[tuple[str, int, int, float, int]]:
    with tempfile.TemporaryDirectory(prefix="tg-bench-charts-") as tmp:
        store = AuditStore.from_url(f"sqlite:///{Path(tmp) / 'audit.db'}")
        ids = seed_fleet(store, now=time.time(), days=30, workloads=workloads)
        events = sum(1 for _ in iter_all_events(store))
        client = TestClient(create_app(Settings(), store=store, temporal=StoreTemporalControl(store)))
        w = ids[0]
        paths = {
            "fleet/summary?days=30": "/api/v1/fleet/summary?days=30",
            "fleet/nodes?days=30": "/api/v1/fleet/nodes?days=30",
            "workload timeline": f"/api/v1/workloads/{w.cluster}/{w.job_id}/{w.submit_time}/timeline",
        }
        rows = []
        for name, path in paths.items():
            times, size = [], 0
            for _ in range(repeat):
                started = time.perf_counter()
                response = client.get(path)
                times.append(time.perf_counter() - started)
                response.raise_for_status()
                size = len(response.content)
            rows.append((name, workloads, events, statistics.median(times) * 1000, size))
        store.close()
        return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", type=int, action="append", help="fleet size (repeatable)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"{'endpoint':<24} {'workloads':>9} {'events':>7} {'median ms':>10} {'JSON bytes':>11}")
    for n in args.workloads or [200, 1000, 3000]:
        for name, workloads, events, ms, size in measure(n, args.repeat):
            print(f"{name:<24} {workloads:>9} {events:>7} {ms:>10.1f} {size:>11}")


if __name__ == "__main__":
    main()

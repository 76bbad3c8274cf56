"""`trainguard config reload`: apply the settings file and environment to the running workloads."""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
from typing import Any

from trainguard.cli import settings_from


def register(sub: Any) -> None:
    p = sub.add_parser(
        "config",
        help="apply changed settings to running workloads",
        description="`reload` reads the settings file and TRAINGUARD_* environment as a worker would and "
        "sends them to the cluster's ClusterWatch workflow, which audits what changed (event "
        "settings_changed, source 'config reload') and passes it to every running workload. A worker "
        "restart does the same.",
    )
    p.add_argument("action", choices=["reload"])
    p.set_defaults(handler=_reload)


def _reload(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    from workers.worker import apply_settings, connect

    async def go() -> int:
        client = await connect(settings)
        try:
            applied = await apply_settings(client, settings, source="config reload")
        except Exception as err:  # Temporal unreachable or the cluster's workflow not running
            print(f"trainguard: settings not applied: {str(err)[:300]}", file=sys.stderr)
            return 1
        finally:
            # A Temporal client still alive at interpreter exit can abort the process (PyGILState_Release
            # during finalization, about half the runs here): release it while the loop still runs.
            del client
            gc.collect()
        if applied.changed:
            print(f"cluster {settings.cluster.name}: settings changed: {applied.summary}")
        else:
            print(f"cluster {settings.cluster.name}: settings unchanged")
        return 0

    return asyncio.run(go())

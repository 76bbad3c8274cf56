"""JobRecovery's line to its cluster's ClusterWatch, which keeps the cluster-wide safety limits.

A workflow cannot send an update to another workflow, so JobRecovery runs these activities: the update
`grant` (asked before an advice is recorded, answered from ClusterWatch's deterministic state, deduplicated
by the request id) and the signal `workload_ended` (a finished workload's exclusions stop counting).
"""

from __future__ import annotations

import asyncio
import logging
import random

from temporalio import activity
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from activities.heartbeat import heartbeats
from trainguard import contracts as c
from trainguard.api.temporal_control import cluster_workflow_id
from trainguard.policy.limits import GrantResult

log = logging.getLogger(__name__)
MAX_ASKS = 1000  # bounded; the caller's start-to-close timeout ends it sooner
AGAIN = (RPCStatusCode.RESOURCE_EXHAUSTED, RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED)
UNAVAILABLE = GrantResult(requeue=False, exclude=False, drain=False, unavailable=True)


class LimitsActivities:
    def __init__(self, temporal: Client, max_in_flight: int = 8) -> None:
        self.temporal = temporal
        # Temporal admits few in-flight updates per workflow (10 by default); a burst of failures past it
        # is refused or aborted and thrashes. One worker keeps its own asks below that.
        self.in_flight = asyncio.Semaphore(max_in_flight)

    @activity.defn(name=c.GRANT_ACTIONS)
    @heartbeats
    async def grant_actions(self, inp: c.GrantInput) -> GrantResult:
        """Ask until ClusterWatch decides: a request told to settle sleeps here, not in the workflow."""
        handle = self.temporal.get_workflow_handle(cluster_workflow_id(inp.cluster))
        attempt = activity.info().attempt if activity.in_activity() else 1
        for ask in range(1, MAX_ASKS + 1):
            try:
                async with self.in_flight:
                    result: GrantResult = await handle.execute_update(
                        "grant",
                        inp.request,
                        # One id per ask: a repeated ask must reach the handler. ClusterWatch keeps each
                        # decision, so a retried activity gets the first decision and spends nothing twice.
                        id=f"grant/{inp.request.request_id}/{attempt}/{ask}"[:1000],
                        result_type=GrantResult,
                    )
            except RPCError as err:
                if err.status == RPCStatusCode.NOT_FOUND:
                    log.warning("no ClusterWatch for cluster %s: nothing granted", inp.cluster)
                    return UNAVAILABLE
                if err.status not in AGAIN:
                    raise  # retried by the activity's policy; the watchdog bounds the wait
                # A burst of failures: too many updates in flight on the one workflow, or updates aborted
                # while its task was busy. Temporal says try again; do it shortly, spread out.
                await asyncio.sleep(random.uniform(0.05, min(2.0, 0.1 * ask)))
                continue
            except WorkflowUpdateFailedError as err:
                log.warning("ClusterWatch of %s refused the grant request: %s", inp.cluster, err.cause)
                return UNAVAILABLE
            if result.settle_s <= 0:
                return result
            await asyncio.sleep(min(result.settle_s, 60.0))
        raise ApplicationError(f"no decision after {MAX_ASKS} asks", type="GrantUndecided")

    @activity.defn(name=c.WORKLOAD_ENDED)
    async def workload_ended(self, inp: c.WorkloadEnded) -> bool:
        handle = self.temporal.get_workflow_handle(cluster_workflow_id(inp.cluster))
        try:
            await handle.signal("workload_ended", inp)
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                raise
            return False  # no ClusterWatch: nothing counts this workload's exclusions
        return True

"""JobRecovery's line to its cluster's ClusterWatch, which keeps the cluster-wide safety limits.

A workflow cannot send an update to another workflow, so JobRecovery runs these activities: the update
`grant` (asked before an advice is recorded, answered from ClusterWatch's deterministic state, deduplicated
by the request id) and the signal `workload_ended` (a finished workload's exclusions stop counting).
"""

from __future__ import annotations

import logging

from temporalio import activity
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.service import RPCError, RPCStatusCode

from trainguard import contracts as c
from trainguard.api.temporal_control import cluster_workflow_id
from trainguard.policy.limits import GrantResult

log = logging.getLogger(__name__)


class LimitsActivities:
    def __init__(self, temporal: Client) -> None:
        self.temporal = temporal

    @activity.defn(name=c.GRANT_ACTIONS)
    async def grant_actions(self, inp: c.GrantInput) -> GrantResult:
        handle = self.temporal.get_workflow_handle(cluster_workflow_id(inp.cluster))
        try:
            result: GrantResult = await handle.execute_update(
                "grant",
                inp.request,
                # Temporal deduplicates a retried update by its id within a run; ClusterWatch keeps the
                # answers itself across continue-as-new.
                id=f"grant/{inp.request.request_id}"[:1000],
                result_type=GrantResult,
            )
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                raise  # Temporal unreachable: retried, the watchdog bounds the wait
            log.warning("no ClusterWatch for cluster %s: nothing granted", inp.cluster)
            return GrantResult(requeue=False, exclude=False, drain=False, unavailable=True)
        except WorkflowUpdateFailedError as err:
            log.warning("ClusterWatch of %s refused the grant request: %s", inp.cluster, err.cause)
            return GrantResult(requeue=False, exclude=False, drain=False, unavailable=True)
        return result

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

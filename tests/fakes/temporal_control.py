"""A stand-in for the workflows behind the API: applies controls straight to the audit store, without
Temporal. Used by the API and console tests only."""

from __future__ import annotations

import time

from trainguard.api.temporal_control import WorkflowNotFound, cluster_workflow_id
from trainguard.audit import AuditStore
from trainguard.models import (
    AuditEventIn,
    EventType,
    Mode,
    ModeChange,
    PauseRequest,
    WorkloadStatus,
    clip,
    mode_change_text,
)


class StoreTemporalControl:
    """Applies controls straight to the audit store, without Temporal: demos and API/console tests.

    Records every call in `calls` so a test can check what the API asked for.
    """

    def __init__(self, store: AuditStore) -> None:
        self._store = store
        self.calls: list[tuple[str, str, ModeChange | PauseRequest]] = []
        self.cluster_modes: dict[str, Mode] = {}

    def _find(self, workflow_id: str) -> WorkloadStatus:
        for status in self._store.list_workloads(limit=1000):
            if status.workflow_id == workflow_id:
                return status
        raise WorkflowNotFound(f"no running workflow {workflow_id}")

    async def set_workload_mode(self, workflow_id: str, change: ModeChange) -> WorkloadStatus:
        self.calls.append(("set_mode", workflow_id, change))
        current = self._find(workflow_id)
        # Stands in for the workflow's update handler, which writes the change's one audit row.
        self._store.record(
            AuditEventIn(
                event_id=f"{current.workload_key}/mode-{len(self.calls)}-{time.time_ns()}",
                event_type=EventType.MODE_CHANGED,
                workload_key=current.workload_key,
                cluster=current.cluster,
                job_id=current.job_id,
                submit_time=current.submit_time,
                attempt=current.attempts,
                actor=change.actor,
                ts=time.time(),
                mode=change.mode.value,
                message=mode_change_text(
                    change, scope="workload", target=current.workload_key, effective=change.mode
                ),
                data={
                    "who": clip(change.who, 200),
                    "scope": "workload",
                    **({"role": change.role, "via": change.via, "source": "api"} if change.role else {}),
                },
            )
        )
        return current.model_copy(
            update={"mode": change.mode, "updated_at": max(time.time(), current.updated_at)}
        )

    async def set_workload_paused(self, workflow_id: str, req: PauseRequest) -> None:
        self.calls.append(("set_paused", workflow_id, req))
        current = self._find(workflow_id)
        self._store.upsert_workload(
            current.model_copy(
                update={"paused": req.paused, "updated_at": max(time.time(), current.updated_at)}
            )
        )

    async def set_cluster_mode(self, cluster: str, change: ModeChange) -> None:
        self.calls.append(("set_cluster_mode", cluster_workflow_id(cluster), change))
        self.cluster_modes[cluster] = change.mode

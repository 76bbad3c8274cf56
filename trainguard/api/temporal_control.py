"""How the API steers running workflows: mode switches (updates) and pause/resume (signals)."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any, Protocol

from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError, RPCStatusCode, TLSConfig

from trainguard.models import (
    ModeChange,
    PauseRequest,
    WorkloadStatus,
    clip,
)
from trainguard.settings import TemporalSettings
from trainguard.temporal_metrics import sdk_runtime

SET_MODE_UPDATE = "set_mode"
SET_PAUSED_SIGNAL = "set_paused"
RPC_TIMEOUT = timedelta(seconds=20)


def cluster_workflow_id(cluster: str) -> str:
    return f"trainguard-cluster-{cluster}"


class TemporalControlError(Exception):
    """Base of what the API maps to HTTP status codes."""


class WorkflowNotFound(TemporalControlError):
    pass


class UpdateRejected(TemporalControlError):
    """The workflow refused the change (validator or handler failure)."""


class TemporalUnavailable(TemporalControlError):
    pass


class TemporalControl(Protocol):
    async def set_workload_mode(self, workflow_id: str, change: ModeChange) -> WorkloadStatus: ...

    async def set_workload_paused(self, workflow_id: str, req: PauseRequest) -> None: ...

    async def set_cluster_mode(self, cluster: str, change: ModeChange) -> None: ...


class ClientTemporalControl:
    """TemporalControl over a temporalio Client; connects lazily so the API starts without Temporal."""

    def __init__(self, settings: TemporalSettings, *, client: Client | None = None) -> None:
        self._settings = settings
        self._client = client
        self._lock = asyncio.Lock()

    async def set_workload_mode(self, workflow_id: str, change: ModeChange) -> WorkloadStatus:
        handle = await self._handle(workflow_id)
        try:
            result: WorkloadStatus = await handle.execute_update(
                SET_MODE_UPDATE, change, result_type=WorkloadStatus, rpc_timeout=RPC_TIMEOUT
            )
        except (RPCError, WorkflowUpdateFailedError) as err:
            raise _translate(err, workflow_id) from err
        return result

    async def set_workload_paused(self, workflow_id: str, req: PauseRequest) -> None:
        handle = await self._handle(workflow_id)
        try:
            await handle.signal(SET_PAUSED_SIGNAL, req, rpc_timeout=RPC_TIMEOUT)
        except RPCError as err:
            raise _translate(err, workflow_id) from err

    async def set_cluster_mode(self, cluster: str, change: ModeChange) -> None:
        workflow_id = cluster_workflow_id(cluster)
        handle = await self._handle(workflow_id)
        try:
            await handle.execute_update(SET_MODE_UPDATE, change, rpc_timeout=RPC_TIMEOUT)
        except (RPCError, WorkflowUpdateFailedError) as err:
            raise _translate(err, workflow_id) from err

    async def _handle(self, workflow_id: str) -> WorkflowHandle[Any, Any]:
        if self._client is None:
            async with self._lock:
                if self._client is None:
                    try:
                        self._client = await connect_client(self._settings)
                    except Exception as err:  # several error types; all mean "not reachable now"
                        raise TemporalUnavailable(
                            f"cannot reach Temporal at {self._settings.address}"
                        ) from err
        return self._client.get_workflow_handle(workflow_id)


def _translate(err: Exception, workflow_id: str) -> TemporalControlError:
    if isinstance(err, WorkflowUpdateFailedError):
        return UpdateRejected(
            f"workflow {workflow_id} rejected the change: {clip(str(err.cause or err), 300)}"
        )
    if isinstance(err, RPCError) and err.status == RPCStatusCode.NOT_FOUND:
        return WorkflowNotFound(f"no running workflow {workflow_id}")
    if isinstance(err, RPCError) and err.status == RPCStatusCode.INVALID_ARGUMENT:
        return UpdateRejected(f"workflow {workflow_id} refused the request: {clip(err.message, 300)}")
    return TemporalUnavailable(f"Temporal call failed for {workflow_id}: {clip(str(err), 300)}")


async def connect_client(settings: TemporalSettings) -> Client:
    tls: bool | TLSConfig = False
    if settings.tls or settings.tls_cert:
        tls = TLSConfig(
            client_cert=_read(settings.tls_cert),
            client_private_key=_read(settings.tls_key),
            server_root_ca_cert=_read(settings.tls_ca),
        )
    return await Client.connect(
        settings.address,
        namespace=settings.namespace,
        tls=tls,
        api_key=settings.api_key.get_secret_value() if settings.api_key else None,
        data_converter=pydantic_data_converter,
        connect_timeout=timedelta(seconds=5),
        runtime=sdk_runtime(settings.metrics_bind),
    )


def _read(path: str | None) -> bytes | None:
    if path is None:
        return None
    with open(path, "rb") as fh:
        return fh.read()

"""A realistic recovery history for demos, screenshots and API/console tests.

Writes only through the public store API, exactly as the workflows' activities do.
"""

from __future__ import annotations

from trainguard.audit.store import AuditStore
from trainguard.models import (
    ActionKind,
    Actor,
    Advice,
    Attribution,
    AuditEventIn,
    Category,
    EventType,
    Level,
    Mode,
    Verdict,
    WorkloadId,
    WorkloadState,
    WorkloadStatus,
)

XID_LINE = "[rank12]:gpu-03: NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, GPU has fallen off the bus."
NCCL_LINE = (
    "[rank0]:[E ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=88412, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600031 milliseconds "
    "before timing out."
)


def _event(
    w: WorkloadId, n: int, event_type: EventType, ts: float, *, attempt: int = 0, **kw: object
) -> AuditEventIn:
    fields: dict[str, object] = {
        "event_id": f"{w.key}/demo{n}",
        "event_type": event_type,
        "workload_key": w.key,
        "cluster": w.cluster,
        "job_id": w.job_id,
        "submit_time": w.submit_time,
        "attempt": attempt,
        "ts": ts,
    }
    fields.update(kw)
    return AuditEventIn.model_validate(fields)


def seed_recovery(
    store: AuditStore,
    *,
    cluster: str = "lab",
    job_id: str = "1234",
    name: str = "llama-70b-pretrain",
    start: float = 1_750_000_000.0,
    mode: Mode = Mode.ACTION,
) -> WorkloadId:
    """A job loses a GPU (Xid 79), is requeued without the node, restarts and resumes training."""
    w = WorkloadId(cluster=cluster, job_id=job_id, submit_time=int(start) - 60)
    t = start
    store.record(
        _event(w, 1, EventType.WORKLOAD_DISCOVERED, t, message=f"watching job {job_id} in {mode.value} mode")
    )
    store.record(
        _event(
            w,
            2,
            EventType.DETECTION,
            t + 3600.0,
            level=Level.ERROR,
            category=Category.GPU_HARDWARE.value,
            attribution=Attribution.HARDWARE.value,
            nodes=("gpu-03",),
            evidence=(XID_LINE, NCCL_LINE),
            message="Xid 79 on gpu-03 (initiating); NCCL watchdog timeout on rank 0 is a cascade",
            data={"detection_latency_s": 2.4, "pattern_id": "xid_79"},
        )
    )
    verdict = Verdict(
        category=Category.GPU_HARDWARE,
        attribution=Attribution.HARDWARE,
        fatal=True,
        confidence=0.95,
        nodes=("gpu-03",),
        evidence=(XID_LINE,),
        summary="GPU fell off the bus on gpu-03",
        pattern_ids=("xid_79", "nccl_watchdog_timeout"),
    )
    advice = Advice(
        advice_id=f"{w.key}:0:1",
        action=ActionKind.REQUEUE,
        reason="hardware fault on gpu-03: requeue from the last checkpoint without it",
        verdict=verdict,
        exclude_nodes=("gpu-03",),
        mode=mode,
        execute=mode == Mode.ACTION,
        attempt=0,
        generation=1,
    )
    store.record_advice(w, advice, ts=t + 3601.0)
    if mode == Mode.ACTION:
        for i, (action, dt) in enumerate(
            (("requeue_hold", 3602.0), ("exclude", 3603.0), ("release", 3604.0))
        ):
            store.record(
                _event(
                    w,
                    3 + i,
                    EventType.ACTION,
                    t + dt,
                    actor=Actor.POLICY,
                    action=action,
                    nodes=("gpu-03",) if action == "exclude" else (),
                    message=f"scontrol {action.replace('_', ' ')} confirmed by Slurm",
                    data={"advice_id": advice.advice_id},
                )
            )
        store.set_advice_disposition(
            advice.advice_id, disposition="converged", observed_generation=1, ts=t + 3604
        )
        store.record(
            _event(
                w,
                6,
                EventType.ALLOCATION_RESTARTED,
                t + 3640.0,
                attempt=1,
                nodes=("gpu-01", "gpu-02", "gpu-04", "gpu-05"),
                message="allocation restarted on gpu-[01-02,04-05]",
            )
        )
        store.record(
            _event(
                w,
                7,
                EventType.TRAINING_RESUMED,
                t + 3755.0,
                attempt=1,
                message="iteration 12001 after checkpoint 12000",
                evidence=(" iteration    12001/  500000 | elapsed time per iteration (ms): 812.4",),
                data={"time_to_productive_s": 155.0},
            )
        )
    store.upsert_workload(
        WorkloadStatus(
            workload_key=w.key,
            cluster=cluster,
            job_id=job_id,
            submit_time=w.submit_time,
            workflow_id=w.workflow_id,
            name=name,
            environment="prod",
            mode=mode,
            state=WorkloadState.WATCHING if mode == Mode.ACTION else WorkloadState.FAILED,
            attempts=1 if mode == Mode.ACTION else 0,
            excluded_nodes=("gpu-03",) if mode == Mode.ACTION else (),
            last_category=Category.GPU_HARDWARE.value,
            last_attribution=Attribution.HARDWARE.value,
            current_advice_id=advice.advice_id,
            last_iteration=12001 if mode == Mode.ACTION else 11987,
            updated_at=t + 3755.0,
        )
    )
    return w


def seed_demo(store: AuditStore, *, start: float = 1_750_000_000.0) -> list[WorkloadId]:
    """Three workloads: a recovered one (action mode), an observed one, a completed one."""
    recovered = seed_recovery(store, start=start)
    observed = seed_recovery(
        store, job_id="1301", name="gpt-moe-sweep", start=start + 100.0, mode=Mode.OBSERVE
    )
    done = WorkloadId(cluster="lab", job_id="1187", submit_time=int(start) - 7200)
    store.record(_event(done, 1, EventType.WORKLOAD_DISCOVERED, start - 7000.0, message="watching job 1187"))
    store.record(_event(done, 2, EventType.COMPLETED, start + 200.0, message="training completed"))
    store.upsert_workload(
        WorkloadStatus(
            workload_key=done.key,
            cluster="lab",
            job_id="1187",
            submit_time=done.submit_time,
            workflow_id=done.workflow_id,
            name="bert-finetune",
            state=WorkloadState.COMPLETED,
            updated_at=start + 200.0,
        )
    )
    return [recovered, observed, done]

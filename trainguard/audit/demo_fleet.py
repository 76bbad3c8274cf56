"""A fleet's two weeks of recoveries, for the console's fleet and node views (tests, screenshots, demos).

Written through the public store API only, as the workflows' activities write it. Deterministic for a
given seed. Two nodes are lemons: gpu-03 fails again and again (drained once), ib-07's links flap.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

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

LEMONS = ("gpu-03", "ib-07")
NODES = (*(f"gpu-{i:02d}" for i in range(1, 17)), "ib-07")


@dataclass(frozen=True)
class Fault:
    category: Category
    attribution: Attribution
    line: str
    pattern: str


FAULTS = (
    Fault(Category.GPU_HARDWARE, Attribution.HARDWARE, "NVRM: Xid 79, GPU has fallen off the bus.", "xid_79"),
    Fault(Category.NCCL_TIMEOUT, Attribution.INFRASTRUCTURE, "Watchdog caught collective timeout", "nccl_wd"),
    Fault(Category.INTERCONNECT, Attribution.INFRASTRUCTURE, "mlx5_core: link down on port 1", "ib_link"),
    Fault(
        Category.CUDA_OOM, Attribution.APPLICATION, "torch.OutOfMemoryError: CUDA out of memory", "cuda_oom"
    ),
    Fault(Category.SLURM_NODE_FAILURE, Attribution.HARDWARE, "Slurm: JobState=NODE_FAIL", "node_fail"),
    Fault(Category.STORAGE_IO, Attribution.INFRASTRUCTURE, "OSError: [Errno 5] Input/output error", "eio"),
)
NAMES = ("llama-70b-pretrain", "gpt-moe-sweep", "bert-finetune", "vit-h14", "mixtral-sft", "t5-xxl")


class _Writer:
    def __init__(self, store: AuditStore, w: WorkloadId) -> None:
        self.store, self.w, self.n = store, w, 0

    def event(self, event_type: EventType, ts: float, attempt: int, **kw: object) -> None:
        self.n += 1
        fields: dict[str, object] = {
            "event_id": f"{self.w.key}/fleet{self.n}",
            "event_type": event_type,
            "workload_key": self.w.key,
            "cluster": self.w.cluster,
            "job_id": self.w.job_id,
            "submit_time": self.w.submit_time,
            "attempt": attempt,
            "ts": ts,
        }
        fields.update(kw)
        self.store.record(AuditEventIn.model_validate(fields))


def _fault_for(rng: random.Random, nodes: tuple[str, ...]) -> tuple[Fault, str]:
    if "gpu-03" in nodes and rng.random() < 0.6:
        return FAULTS[0], "gpu-03"
    if "ib-07" in nodes and rng.random() < 0.6:
        return FAULTS[2], "ib-07"
    return rng.choice(FAULTS), rng.choice(nodes)


def _seed_workload(
    store: AuditStore, rng: random.Random, index: int, now: float, days: int, cluster: str
) -> WorkloadId:
    start = now - rng.uniform(0.3, days) * 86400
    w = WorkloadId(cluster=cluster, job_id=str(2000 + index), submit_time=int(start) - 120)
    out = _Writer(store, w)
    mode = Mode.OBSERVE if index % 5 == 4 else Mode.ACTION
    nodes = tuple(sorted([*rng.sample(NODES, 4), LEMONS[index % 2]]))
    out.event(EventType.WORKLOAD_DISCOVERED, start, 0, message=f"watching job {w.job_id} in {mode} mode")
    t, attempt, lost, last = start, 0, 0.0, Category.HEALTHY
    state = WorkloadState.WATCHING
    for _ in range(rng.randint(0, 3)):
        t += rng.uniform(2, 30) * 3600
        if t > now - 600:
            break
        fault, node = _fault_for(rng, nodes)
        last = fault.category
        first_signal = t - rng.uniform(0.5, 20)
        out.event(
            EventType.DETECTION,
            t,
            attempt,
            level=Level.ERROR,
            actor=Actor.POLICY,
            category=fault.category.value,
            attribution=fault.attribution.value,
            nodes=(node,),
            evidence=(f"{node}: {fault.line}",),
            message=f"1 finding(s): {fault.pattern}",
            data={"detection_latency_s": round(t - first_signal, 3), "first_signal_at": first_signal},
        )
        hardware = fault.attribution == Attribution.HARDWARE
        action = ActionKind.CANCEL if fault.category == Category.CUDA_OOM else ActionKind.REQUEUE
        verdict = Verdict(
            category=fault.category,
            attribution=fault.attribution,
            fatal=True,
            confidence=0.9,
            nodes=(node,),
            evidence=(fault.line,),
            summary=fault.line,
            pattern_ids=(fault.pattern,),
        )
        advice = Advice(
            advice_id=f"{w.key}/a{attempt}/fleet",
            action=action,
            verdict=verdict,
            reason=f"{fault.category.value} on {node}",
            exclude_nodes=(node,) if hardware else (),
            drain_nodes=(node,) if hardware and node == "gpu-03" and attempt >= 1 else (),
            mode=mode,
            execute=mode == Mode.ACTION,
            attempt=attempt,
        )
        store.record_advice(w, advice, ts=t + 1)
        if mode == Mode.OBSERVE:
            state = WorkloadState.FAILED
            break
        if index % 7 == 5 and attempt == 0:  # attribution ran past its time box: the watchdog let go
            out.event(
                EventType.WATCHDOG_FIRED,
                t + 30,
                attempt,
                level=Level.WARNING,
                actor=Actor.WATCHDOG,
                message="attribution/decision timed out after 30 s; no action taken",
            )
            state = WorkloadState.FAILED
            break
        if action == ActionKind.CANCEL:
            out.event(
                EventType.ACTION,
                t + 3,
                attempt,
                actor=Actor.POLICY,
                action="cancel",
                message="futile retry: cancelled",
                data={"advice_id": advice.advice_id, "performed": True},
            )
            out.event(EventType.STOPPED, t + 4, attempt, level=Level.WARNING, message="futile retry stopped")
            state = WorkloadState.STOPPED
            break
        steps = ["requeue_hold", *(["exclude"] if advice.exclude_nodes else []), "release"]
        for i, step in enumerate(steps):
            out.event(
                EventType.ACTION,
                t + 2 + i,
                attempt,
                actor=Actor.POLICY,
                action=step,
                nodes=advice.exclude_nodes if step == "exclude" else (),
                message=f"scontrol {step} confirmed by Slurm",
                data={"advice_id": advice.advice_id, "performed": True},
            )
        acted = rng.uniform(1.5, 12)
        out.event(
            EventType.ACTION,
            t + acted,
            attempt,
            actor=Actor.POLICY,
            action="recovery_requested",
            message="job requeued; waiting for the new allocation",
            data={"action_latency_s": round(acted, 3)},
        )
        if advice.drain_nodes:
            out.event(
                EventType.NODE_DRAINED,
                t + acted + 1,
                attempt,
                level=Level.WARNING,
                actor=Actor.POLICY,
                nodes=advice.drain_nodes,
                message="drained for repair: repeat offender",
            )
        attempt += 1
        nodes = (*(n for n in nodes if n not in advice.exclude_nodes), rng.choice(NODES))
        out.event(
            EventType.ALLOCATION_RESTARTED,
            t + acted + rng.uniform(20, 90),
            attempt,
            nodes=nodes,
            message=f"allocation restarted on {','.join(nodes)}",
        )
        spent = rng.uniform(90, 900)
        t = first_signal + spent
        lost += spent
        out.event(
            EventType.TRAINING_RESUMED,
            t,
            attempt,
            message="training resumed",
            data={"time_to_productive_s": round(spent, 3)},
        )
    if state == WorkloadState.WATCHING and index % 3 == 0 and t < now - 3600:
        t += rng.uniform(600, 3600)
        out.event(EventType.COMPLETED, t, attempt, message="training completed")
        state = WorkloadState.COMPLETED
    watched = max(1.0, (t if state != WorkloadState.WATCHING else now) - start)
    store.upsert_workload(
        WorkloadStatus(
            workload_key=w.key,
            cluster=cluster,
            job_id=w.job_id,
            submit_time=w.submit_time,
            workflow_id=w.workflow_id,
            name=f"{NAMES[index % len(NAMES)]}-{index}",
            mode=mode,
            state=state,
            attempts=attempt,
            last_category="" if last == Category.HEALTHY else last.value,
            updated_at=min(now, t),
            first_seen_at=start,
            lost_s=round(lost, 3),
            goodput=max(0.0, 1 - lost / watched),
        )
    )
    return w


def seed_fleet(
    store: AuditStore, *, now: float, days: int = 14, workloads: int = 18, seed: int = 7, cluster: str = "lab"
) -> list[WorkloadId]:
    """`workloads` jobs started over the last `days` days, with their failures and recoveries."""
    rng = random.Random(seed)
    return [_seed_workload(store, rng, i, now, days, cluster) for i in range(workloads)]

"""Cross-workload context read back from a real (SQLite) audit store: systemic arrays, node reputation."""

from __future__ import annotations

from pathlib import Path

from activities.fleet import FleetActivities
from trainguard import contracts as c
from trainguard.audit.store import AuditStore
from trainguard.models import ActionKind, Advice, Attribution, Category, JobSnapshot, Verdict, WorkloadId
from trainguard.policy import PolicyConfig

APP = Verdict(
    category=Category.PYTHON_EXCEPTION,
    attribution=Attribution.APPLICATION,
    fatal=True,
    pattern_ids=("python_traceback",),
)
HW = Verdict(
    category=Category.GPU_HARDWARE,
    attribution=Attribution.HARDWARE,
    fatal=True,
    nodes=("node3",),
    pattern_ids=("xid_hardware",),
)


def record(
    store: AuditStore,
    job_id: str,
    verdict: Verdict,
    *,
    nodes: tuple[str, ...],
    ts: float,
    array: str = "",
    task: str = "",
    user: str = "",
) -> None:
    w = WorkloadId(cluster="lab", job_id=job_id, submit_time=1)
    advice = Advice(
        advice_id=f"{w.key}/a0/s1",
        action=ActionKind.REQUEUE,
        reason="r",
        verdict=verdict,
        array_job_id=array,
        array_task_id=task,
        job_nodes=nodes,
        job_user=user,
    )
    store.record_advice(w, advice, ts=ts)


def array_job(task: str, node: str) -> JobSnapshot:
    return JobSnapshot(job_id=f"10{task}", array_job_id="100", array_task_id=task, nodes=(node,))


def test_same_failure_in_many_array_tasks_on_different_nodes_is_systemic(tmp_path: Path) -> None:
    store = AuditStore.from_url(f"sqlite:///{tmp_path / 'a.db'}")
    record(store, "101", APP, nodes=("node1",), ts=1000, array="100", task="1")
    record(store, "102", APP, nodes=("node2",), ts=1010, array="100", task="2")
    record(store, "900", APP, nodes=("node4",), ts=1010)  # not in the array
    fleet = FleetActivities(store)
    inp = c.FleetInput(
        workload=WorkloadId(cluster="lab", job_id="103", submit_time=1),
        verdict=APP,
        job=array_job("3", "node3"),
        now=1020,
        policy=PolicyConfig(),
    )
    ctx = fleet._sync(inp)
    assert ctx.array_systemic and "Stop recovering array 100" in ctx.array_reason
    one_other = fleet._sync(inp.model_copy(update={"now": 1020 + 7200}))  # the others aged out of the window
    assert not one_other.array_systemic


def test_node_implicated_by_hardware_in_two_jobs_is_drained_only_when_enabled(tmp_path: Path) -> None:
    store = AuditStore.from_url(f"sqlite:///{tmp_path / 'n.db'}")
    record(store, "201", HW, nodes=("node3", "node4"), ts=1000, user="alice")
    fleet = FleetActivities(store)
    inp = c.FleetInput(
        workload=WorkloadId(cluster="lab", job_id="202", submit_time=1),
        verdict=HW,
        job=JobSnapshot(job_id="202", nodes=("node3", "node1"), user="bob"),
        now=1100,
        policy=PolicyConfig(drain_enabled=True),
    )
    ctx = fleet._sync(inp)
    assert [node for node, _ in ctx.drain] == ["node3"]
    # the same two jobs, both of one user: not enough log evidence to take the node from everyone
    same_user = inp.model_copy(
        update={"job": JobSnapshot(job_id="202", nodes=("node3", "node1"), user="alice")}
    )
    assert fleet._sync(same_user).drain == ()
    assert ctx.drain[0][1].startswith("trainguard:")
    assert fleet._sync(inp.model_copy(update={"policy": PolicyConfig()})).drain == ()


def test_evidence_about_a_node_outside_the_allocation_does_not_drain(tmp_path: Path) -> None:
    store = AuditStore.from_url(f"sqlite:///{tmp_path / 'f.db'}")
    # an earlier job of alice on node1,node4 logged a kernel line naming node3
    record(store, "301", HW, nodes=("node1", "node4"), ts=1000, user="alice")
    fleet = FleetActivities(store)
    inp = c.FleetInput(
        workload=WorkloadId(cluster="lab", job_id="302", submit_time=1),
        verdict=HW,
        job=JobSnapshot(job_id="302", nodes=("node3", "node2"), user="bob"),
        now=1100,
        policy=PolicyConfig(drain_enabled=True),
    )
    assert fleet._sync(inp).drain == ()
    # a pending (requeued) job has no nodes: the workflow passes the failed attempt's allocation
    pending = inp.model_copy(update={"job": JobSnapshot(job_id="302", user="bob"), "allocation": ("node1",)})
    assert fleet._sync(pending).drain == ()


def test_failures_judged_part_of_a_storm_never_count_toward_a_drain(tmp_path: Path) -> None:
    store = AuditStore.from_url(f"sqlite:///{tmp_path / 's.db'}")
    w = WorkloadId(cluster="lab", job_id="401", submit_time=1)
    storm = Advice(
        advice_id=f"{w.key}/a0/s1",
        action=ActionKind.REQUEUE,
        reason="Storm: 6 jobs failed within 10 minutes → shared infrastructure suspected: node3 not excluded",
        verdict=HW,
        job_nodes=("node3",),
        job_user="alice",
    )
    store.record_advice(w, storm, ts=1000)
    fleet = FleetActivities(store)
    inp = c.FleetInput(
        workload=WorkloadId(cluster="lab", job_id="402", submit_time=1),
        verdict=HW,
        job=JobSnapshot(job_id="402", nodes=("node3",), user="bob"),
        now=1100,
        policy=PolicyConfig(drain_enabled=True),
    )
    assert fleet._sync(inp).drain == ()
    record(store, "403", HW, nodes=("node3",), ts=1050, user="carol")  # an ordinary failure does count
    assert [n for n, _ in fleet._sync(inp).drain] == ["node3"]

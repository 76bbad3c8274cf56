"""Reason codes for metrics and alerts, read from the real policy's sentences (decide(), arrays)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import cast

from prometheus_client import REGISTRY
from temporalio.client import Client
from temporalio.testing import ActivityEnvironment

from activities.control import ControlActivities
from tests.unit.test_policy_arrays import f
from tests.unit.test_policy_decide import APP, HW, OOM, T0, ctx, verdict
from trainguard import contracts as c
from trainguard.audit.store import AuditStore
from trainguard.identity import workload_of
from trainguard.models import ActionKind, Actor, Advice, Attribution, Category, JobSnapshot, Verdict
from trainguard.policy import PolicyConfig, PolicyState, array_is_systemic, decide
from trainguard.policy.reasons import SAFETY_LIMITS, STOPPED, advice_reason
from trainguard.settings import AttributionSettings


def last_advice(
    verdicts: list[Verdict],
    cfg: PolicyConfig,
    *,
    step_s: float = 3600.0,
    ckpts: list[int | None] | None = None,
) -> Advice:
    state = PolicyState()
    advice: Advice | None = None
    for i, v in enumerate(verdicts):
        ck = ckpts[i] if ckpts else 100 * (i + 1)
        advice, state = decide(state, v, ctx(T0 + i * step_s, ckpt=ck), cfg)
    assert advice is not None
    return advice


def hw(i: int) -> Verdict:
    return verdict(Category.GPU_HARDWARE, Attribution.HARDWARE, nodes=(f"n{i:02d}",))


def test_each_stop_of_the_policy_has_its_code() -> None:
    storm = last_advice(
        [hw(i) for i in range(4)], PolicyConfig(storm_restarts=3, storm_window_s=600), step_s=60
    )
    same = last_advice([APP, APP, APP], PolicyConfig(same_failure_limit=3), ckpts=[1, 1, 1])
    budget = last_advice([APP, OOM, APP], PolicyConfig(retry_budget=2, same_failure_limit=10))
    no_ckpt = last_advice([hw(1), hw(2)], PolicyConfig(no_checkpoint_attempts=1), ckpts=[100, 100])
    got = {advice_reason(a) for a in (storm, same, budget, no_ckpt)}
    assert all(a.action == ActionKind.CANCEL for a in (storm, same, budget, no_ckpt))
    assert got == {"storm", "futile_same_failure", "futile_retry_budget", "futile_no_checkpoint"}
    assert got <= set(STOPPED)


def test_systemic_array_and_safety_limits_have_their_codes() -> None:
    cfg = PolicyConfig(array_systemic_tasks=3, array_systemic_nodes=2, array_window_s=3600)
    systemic, text = array_is_systemic([f("1", "n1"), f("2", "n2"), f("3", "n3")], cfg)
    assert systemic
    requeue, _ = decide(PolicyState(), APP, ctx(ckpt=1), cfg)
    # What JobRecovery._with_fleet_context does with a systemic array failure.
    stopped = requeue.model_copy(update={"action": ActionKind.NONE, "execute": False, "reason": text})
    assert advice_reason(stopped) == "array_systemic"

    ledger, _ = decide(
        PolicyState(excluded_nodes=("n01", "n02")), HW, ctx(ckpt=1), PolicyConfig(max_excluded_nodes=2)
    )
    capacity, _ = decide(PolicyState(), HW, ctx(ckpt=1, usable=("n02", "n03")), PolicyConfig())
    assert (ledger.action, capacity.action) == (ActionKind.WAIT, ActionKind.WAIT)
    assert (advice_reason(ledger), advice_reason(capacity)) == ("exclusion_limit", "capacity")
    assert {advice_reason(ledger), advice_reason(capacity)} <= set(SAFETY_LIMITS)


def test_ordinary_advice_is_neither_a_stop_nor_a_limit() -> None:
    requeue, _ = decide(PolicyState(), HW, ctx(ckpt=1), PolicyConfig())
    assert advice_reason(requeue) == "recover"
    watch, _ = decide(PolicyState(), verdict(fatal=False), ctx(ckpt=1), PolicyConfig())
    assert advice_reason(watch) == "record"
    assert advice_reason(requeue.model_copy(update={"drain_nodes": ("n03",)})) == "drain"
    assert advice_reason(requeue.model_copy(update={"actor": Actor.OPERATOR})) == "operator"


def test_record_advice_counts_once_with_its_reason(tmp_path: Path) -> None:
    """The control activity counts advice as it is first stored (a retried write does not count twice)."""
    store = AuditStore.from_url(f"sqlite:///{tmp_path / 'a.db'}")
    acts = ControlActivities(store, cast(Client, None), AttributionSettings())
    stop = last_advice([APP, APP, APP], PolicyConfig(same_failure_limit=3), ckpts=[1, 1, 1])
    workload = workload_of("reasons-test", JobSnapshot(job_id="7", submit_time=1700000000))
    labels = {
        "cluster": "reasons-test",
        "action": "cancel",
        "reason": "futile_same_failure",
        "executed": "true",
    }
    before = REGISTRY.get_sample_value("trainguard_advice_total", labels) or 0.0
    inp = c.RecordAdviceInput(workload=workload, advice=stop, ts=T0)
    assert asyncio.run(ActivityEnvironment().run(acts.record_advice, inp)) is True
    assert asyncio.run(ActivityEnvironment().run(acts.record_advice, inp)) is False
    assert REGISTRY.get_sample_value("trainguard_advice_total", labels) == before + 1

"""Worker presence (workers/presence.py): who is gone, who takes over, which activities are taken."""

from __future__ import annotations

import asyncio
from typing import cast

from prometheus_client import REGISTRY
from temporalio.api.enums.v1 import PendingActivityState
from temporalio.client import Client

from trainguard import contracts as c
from workers.presence import (
    Held,
    Pending,
    Presence,
    Timing,
    held_by,
    lost_here,
    presence_queue,
    reaper,
    vanished,
)

STARTED = int(PendingActivityState.PENDING_ACTIVITY_STATE_STARTED)
SCHEDULED = int(PendingActivityState.PENDING_ACTIVITY_STATE_SCHEDULED)


def test_a_worker_is_gone_when_its_last_poll_is_older_than_the_timeout() -> None:
    seen = {"a": 100.0, "b": 90.0, "c": 84.0}
    assert vanished(seen, now=100.0, timeout_s=15) == {"c"}
    assert vanished(seen, now=100.0, timeout_s=16) == set()


def test_one_live_worker_takes_over_the_first_in_sort_order() -> None:
    seen = {"b@h": 100.0, "a@h": 80.0, "c@h": 99.0}  # a@h is gone: it does not take over
    assert reaper(seen, now=100.0, timeout_s=15) == "b@h"
    assert reaper({"a": 0.0}, now=100.0, timeout_s=15) is None


def test_only_started_watch_and_discovery_activities_of_dead_workers_are_taken() -> None:
    pending = [
        Pending("1", c.WATCH_JOB, STARTED, "dead"),
        Pending("2", c.DISCOVER_JOBS, STARTED, "dead"),
        Pending("3", c.WATCH_JOB, SCHEDULED, "dead"),  # not started: any worker picks it up anyway
        Pending("4", c.REQUEUE_HOLD, STARTED, "dead"),  # a step keeps its own 10 s heartbeat timeout
        Pending("5", c.WATCH_JOB, STARTED, "alive"),
    ]
    assert [p.activity_id for p in held_by(pending, {"dead"})] == ["1", "2"]


def test_a_watch_started_for_this_worker_long_enough_ago_but_not_running_here_is_lost() -> None:
    """The caller asks only about workflows whose watch does not run here: a watch the server says this
    worker started 15 s or more ago never reached it. Younger starts may still be on their way in; other
    workers' and other activities' are never judged."""
    pending = [
        Pending("1", c.WATCH_JOB, STARTED, "me", started_at=80.0),  # 20 s ago: lost
        Pending("2", c.WATCH_JOB, STARTED, "me", started_at=90.0),  # 10 s ago: may be starting
        Pending("3", c.WATCH_JOB, STARTED, "alive", started_at=10.0),  # another worker's: not ours to judge
        Pending("4", c.WATCH_JOB, SCHEDULED, "me", started_at=10.0),  # waiting for a poller
        Pending("5", c.DISCOVER_JOBS, STARTED, "me", started_at=10.0),  # not in the watch index
    ]
    assert [p.activity_id for p in lost_here(pending, "me", now=100.0, min_age_s=15)] == ["1"]


def test_presence_refreshes_well_inside_the_timeout_and_never_below_the_servers_minimum() -> None:
    assert Timing(15).poll_s == 5.0 and Timing(15).check_s == 2.5
    assert Timing(3).poll_s == 2.5 and Timing(3).check_s == 1.0
    assert Timing(600).poll_s == 10.0
    assert presence_queue("trainguard-cluster-a") == "trainguard-cluster-a-presence"


class FakePresence(Presence):
    def __init__(self, identity: str, seen: dict[str, float], now: float) -> None:
        super().__init__(
            cast(Client, None),
            cluster="pres-test",
            cluster_queue="q",
            identity=identity,
            timeout_s=15,
            clock=lambda: now,
        )
        self.seen = seen
        self.asked: list[set[str]] = []

    async def peers(self) -> dict[str, float]:
        return dict(self.seen)

    async def take_over(self, dead: set[str]) -> list[Held]:
        self.asked.append(set(dead))
        return [Held("wf", "run", "1", c.WATCH_JOB, w) for w in sorted(dead)]


def test_the_reaper_takes_over_each_vanished_worker_once_and_counts_it() -> None:
    seen = {"a": 100.0, "b": 100.0, "dead": 50.0}
    before = REGISTRY.get_sample_value("trainguard_watch_takeovers_total", {"cluster": "pres-test"}) or 0.0
    other = FakePresence("b", seen, now=100.0)
    assert asyncio.run(other.check_once()) == [] and other.asked == []  # "a" sorts first: it takes over
    me = FakePresence("a", seen, now=100.0)
    assert [h.worker for h in asyncio.run(me.check_once())] == ["dead"]
    assert asyncio.run(me.check_once()) == [] and me.asked == [{"dead"}]  # handled once
    assert REGISTRY.get_sample_value("trainguard_cluster_workers", {"cluster": "pres-test"}) == 2
    after = REGISTRY.get_sample_value("trainguard_watch_takeovers_total", {"cluster": "pres-test"})
    assert after == before + 1


def test_a_vanished_worker_is_swept_once_more_one_timeout_later_and_then_never() -> None:
    """The second sweep catches a watch the server handed to one of the dead worker's last polls after
    the first sweep described its workflow; it runs once, one presence timeout after the first."""
    seen = {"a": 100.0, "dead": 50.0}
    now = [100.0]
    me = FakePresence("a", seen, now=0.0)
    me.clock = lambda: now[0]
    assert [h.worker for h in asyncio.run(me.check_once())] == ["dead"]
    now[0] = 114.0
    seen["a"] = 114.0
    assert asyncio.run(me.check_once()) == [] and me.asked == [{"dead"}]  # not due yet
    now[0] = 115.0
    seen["a"] = 115.0
    assert [h.worker for h in asyncio.run(me.check_once())] == ["dead"]
    assert me.asked == [{"dead"}, {"dead"}]
    now[0] = 200.0
    seen["a"] = 200.0
    assert asyncio.run(me.check_once()) == [] and me.asked == [{"dead"}, {"dead"}]


def test_only_the_reaper_sweeps_again() -> None:
    """A worker that is no longer the first live identity leaves the second sweep to the one that is."""
    seen = {"b": 100.0, "dead": 50.0}
    now = [100.0]
    me = FakePresence("b", seen, now=0.0)
    me.clock = lambda: now[0]
    asyncio.run(me.check_once())
    seen["a"] = 120.0  # a worker that sorts first joined
    seen["b"] = 120.0
    now[0] = 120.0
    assert asyncio.run(me.check_once()) == [] and me.asked == [{"dead"}]


def test_a_restarted_worker_takes_over_its_dead_predecessor_alone() -> None:
    """One worker under systemd: the new process sees the old identity stale and takes its watches."""
    me = FakePresence("new", {"new": 100.0, "old": 70.0}, now=100.0)
    assert [h.worker for h in asyncio.run(me.check_once())] == ["old"]


def test_a_workflow_cache_smaller_than_the_running_workflows_is_reported_once_an_hour() -> None:
    from workers.worker import cache_report

    assert cache_report("w", running=10_000, slots=10_000, now=7200.0) is None
    report = cache_report("w", running=10_001, slots=10_000, now=7200.0)
    assert report is not None and report.event_type.value == "capacity_limit"
    assert report.data == {
        "worker": "w",
        "limit": "max_cached_workflows",
        "max_cached_workflows": 10_000,
        "running": 10_001,
    }
    same_hour = cache_report("w", running=12_000, slots=10_000, now=7200.0 + 3599)
    next_hour = cache_report("w", running=12_000, slots=10_000, now=7200.0 + 3600)
    assert same_hour is not None and same_hour.key == report.key
    assert next_hour is not None and next_hour.key != report.key

"""TrainGuard's own metrics: what the activities call and what Prometheus scrapes."""

from __future__ import annotations

from prometheus_client import REGISTRY

from trainguard import telemetry


def sample(name: str, **labels: str) -> float:
    value = REGISTRY.get_sample_value(name, labels)
    return 0.0 if value is None else value


def test_detection_latency_counts_per_category() -> None:
    before = sample("trainguard_detection_latency_seconds_count", category="segfault")
    below_5 = sample("trainguard_detection_latency_seconds_bucket", category="segfault", le="5.0")
    telemetry.observe_detection_latency(3.0, "segfault")
    telemetry.observe_detection_latency(-1.0, "segfault")  # clock skew between hosts: counted as 0
    assert sample("trainguard_detection_latency_seconds_count", category="segfault") == before + 2
    assert sample("trainguard_detection_latency_seconds_bucket", category="segfault", le="5.0") == below_5 + 2
    assert sample("trainguard_detections_total", category="segfault") >= 2


def test_recovery_success_ratio_follows_outcomes() -> None:
    telemetry._outcomes.clear()
    telemetry.count_recovery("success")
    telemetry.count_recovery("success")
    telemetry.count_recovery("stopped")
    assert sample("trainguard_recovery_success_ratio") == 2 / 3
    assert sample("trainguard_recoveries_total", outcome="stopped") >= 1


def test_goodput_is_clamped_and_forgotten() -> None:
    telemetry.set_goodput("lab/1/2", 1.7)
    assert sample("trainguard_goodput_ratio", workload="lab/1/2") == 1.0
    telemetry.set_goodput("lab/1/2", 0.42)
    assert sample("trainguard_goodput_ratio", workload="lab/1/2") == 0.42
    telemetry.forget_workload("lab/1/2")
    assert REGISTRY.get_sample_value("trainguard_goodput_ratio", {"workload": "lab/1/2"}) is None
    telemetry.forget_workload("never-seen")  # no error


def test_other_observations_and_label_bounds() -> None:
    before = sample("trainguard_watchdog_firings_total")
    telemetry.count_watchdog()
    assert sample("trainguard_watchdog_firings_total") == before + 1
    telemetry.observe_action_latency(12.0, "x" * 500)
    assert sample("trainguard_action_latency_seconds_count", step="x" * 119 + "…") == 1
    n = sample("trainguard_time_to_productive_seconds_count")
    telemetry.observe_time_to_productive(155.0)
    assert sample("trainguard_time_to_productive_seconds_count") == n + 1

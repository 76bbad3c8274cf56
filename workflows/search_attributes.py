"""Custom search attributes set by the workflows so operators can filter in the Temporal UI."""

from __future__ import annotations

from temporalio.common import (
    SearchAttributeKey,
    SearchAttributePair,
    SearchAttributeUpdate,
    TypedSearchAttributes,
)

from trainguard.models import WorkloadStatus

CLUSTER = SearchAttributeKey.for_keyword("TrainGuardCluster")
JOB_ID = SearchAttributeKey.for_keyword("TrainGuardJobId")
MODE = SearchAttributeKey.for_keyword("TrainGuardMode")
STATE = SearchAttributeKey.for_keyword("TrainGuardState")
CATEGORY = SearchAttributeKey.for_keyword("TrainGuardCategory")

ALL_KEYS = (CLUSTER, JOB_ID, MODE, STATE, CATEGORY)
"""Registered as Keyword on the dev server at start and with `trainguard temporal register`."""


def status_search_attributes(status: WorkloadStatus) -> list[SearchAttributeUpdate[str]]:
    return [
        CLUSTER.value_set(status.cluster),
        JOB_ID.value_set(status.job_id),
        MODE.value_set(status.mode.value),
        STATE.value_set(status.state.value),
        CATEGORY.value_set(status.last_category or "none"),
    ]


def initial_search_attributes(cluster: str, job_id: str, mode: str) -> TypedSearchAttributes:
    return TypedSearchAttributes(
        [
            SearchAttributePair(CLUSTER, cluster),
            SearchAttributePair(JOB_ID, job_id),
            SearchAttributePair(MODE, mode),
            SearchAttributePair(STATE, "watching"),
        ]
    )

"""effective_mode: a job can only be more conservative than its cluster; an operator override wins."""

from __future__ import annotations

import pytest

from trainguard.models import Mode
from trainguard.policy import effective_mode

OBS, ACT = Mode.OBSERVE, Mode.ACTION


@pytest.mark.parametrize(
    ("cluster", "job", "override", "expected"),
    [
        (OBS, OBS, None, OBS),
        (OBS, ACT, None, OBS),  # a job cannot escalate past its cluster
        (ACT, OBS, None, OBS),  # a job can be more conservative
        (ACT, ACT, None, ACT),
        (OBS, OBS, ACT, ACT),  # the operator decides
        (OBS, ACT, ACT, ACT),
        (ACT, ACT, OBS, OBS),
        (ACT, OBS, ACT, ACT),
        (ACT, ACT, ACT, ACT),
        (OBS, OBS, OBS, OBS),
    ],
)
def test_effective_mode(cluster: Mode, job: Mode, override: Mode | None, expected: Mode) -> None:
    assert effective_mode(cluster, job, override) == expected

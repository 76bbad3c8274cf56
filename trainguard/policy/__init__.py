"""Pure recovery policy: state + verdict + config -> Advice.

Imported by workflows inside Temporal's sandbox: only trainguard.models, pydantic and the standard
library, no I/O, no clock, no randomness. Every rule is documented in docs/policy.md.
"""

from trainguard.models import ArrayTaskFailure, NodeIncident
from trainguard.policy.arrays import array_is_systemic
from trainguard.policy.classify import FailureClass, classify, failure_key
from trainguard.policy.config import PolicyConfig
from trainguard.policy.decide import decide, restarts_in_window
from trainguard.policy.mode import effective_mode
from trainguard.policy.reputation import nodes_to_drain
from trainguard.policy.state import (
    HISTORY_LIMIT,
    RESTART_TIMES_LIMIT,
    AttemptRecord,
    DecisionContext,
    PolicyState,
    record_restart,
)
from trainguard.policy.straggler import StragglerEstimate, estimate

__all__ = [
    "HISTORY_LIMIT",
    "RESTART_TIMES_LIMIT",
    "ArrayTaskFailure",
    "AttemptRecord",
    "DecisionContext",
    "FailureClass",
    "NodeIncident",
    "PolicyConfig",
    "PolicyState",
    "StragglerEstimate",
    "array_is_systemic",
    "classify",
    "decide",
    "effective_mode",
    "estimate",
    "failure_key",
    "nodes_to_drain",
    "record_restart",
    "restarts_in_window",
]

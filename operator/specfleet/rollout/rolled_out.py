"""The `RolledOut` condition: the end of the spec's rollout, for `kubectl wait`.

Set last in every pass, from the status the pass leaves, by the same judgement `kubectl specfleet status
--wait` makes (`api.rollout_result`): True when the rollout succeeded, False when it failed, Unknown while it
goes on. Its `observedGeneration` is the pass's, so `kubectl wait` never takes it for a newer spec.
"""

from pydantic.main import IncEx

from specfleet.api.rollout_result import Ending, RolloutResult, rollout_result
from specfleet.api.vocabulary import ConditionType
from specfleet.rollout.state import Pass

JUDGED_FIELDS: dict[str, IncEx | bool] = {
    "phase": True,
    "observed_generation": True,
    "stable_revision": True,
    "canary_revision": True,
    "rejected_revision": True,
    "conditions": {"__all__": {"type", "status", "reason", "message"}},
    "history": {"__all__": {"revision", "outcome", "reason"}},
}
"""The part of the status `rollout_result` reads (the rest is not serialized for it)."""


MAX_MESSAGE = 32768
"""The longest condition message written (the API server's own limit)."""


def judged_rollout(p: Pass) -> RolloutResult:
    """The end of the rollout as the status the pass leaves shows it; `RolledOut` and the health conditions
    all read this one judgement."""
    return rollout_result(p.status.model_dump(mode="json", include=JUDGED_FIELDS), p.obs.generation)


def rolled_out(p: Pass, result: RolloutResult) -> Pass:
    ok = {Ending.SUCCEEDED: True, Ending.FAILED: False, Ending.PENDING: None}[result.ending]
    return p.with_condition(ConditionType.ROLLED_OUT, ok, result.reason.value, result.message[:MAX_MESSAGE])

"""Whether a SpeculativeDeployment's rollout has ended, and how, from its status as the API server serves it.

One judgement for everyone who waits on a rollout: `kubectl specfleet status --wait` reads it from the object
it polls, and the operator writes it as the `RolledOut` condition that `kubectl wait` reads. It takes the
camelCase status (a plain mapping) and imports only the standard library and the vocabulary, so the CLI
judges without building the API models, and agrees with any operator that writes these fields.

A rollout ends:
- succeeded: the fleet is `Healthy` with no canary: the spec's revision is stable and every stable replica
  is Ready (also when there was nothing to do), or an experiment kept stable (`ExperimentKeptStable`);
- failed: the spec's revision was rolled back or aborted (the reason is the history entry's), or the spec
  cannot be rendered (`SpecValid=False`);
- otherwise it is pending: a canary is live (progressing, paused at a gate or after a failure: a human may
  still promote it), stable is rolling to a promoted revision, or replicas are starting. So is a status the
  operator has not written for the object's current generation yet: it still describes the previous spec.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from specfleet.api.vocabulary import ConditionType

HEALTHY = "Healthy"
FAILED_PHASES = {"RolledBack": "rolled back", "Aborted": "aborted"}
"""The phases (`api.status.Phase` values) that end a rollout as failed, and how a message says them."""
KEPT_STABLE = "ExperimentKeptStable"
"""The Progressing reason of a Healthy fleet whose experiment found no candidate worth promoting."""


class Ending(StrEnum):
    PENDING = "Pending"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


class ResultReason(StrEnum):
    """Why, in one CamelCase word: the `RolledOut` condition's reason."""

    NOT_OBSERVED = "NotObservedYet"
    COMMAND_PENDING = "CommandPending"
    """`--wait` after a command: the operator has not acted on it yet (never a condition's reason)."""
    ROLLING_OUT = "RollingOut"
    ROLLOUT_COMPLETE = "RolloutComplete"
    KEPT_STABLE = KEPT_STABLE
    ROLLED_BACK = "RolledBack"
    ABORTED = "Aborted"
    INVALID_SPEC = "InvalidSpec"


@dataclass(frozen=True)
class RolloutResult:
    ending: Ending
    reason: ResultReason
    message: str


def rollout_result(status: Mapping[str, Any], generation: int | None) -> RolloutResult:
    """How the rollout of the object's spec stands, from its `status` and its `metadata.generation` (None: the
    caller knows the status is for the current spec, as the operator does while it writes it)."""
    observed = status.get("observedGeneration")
    if generation is not None and (not isinstance(observed, int) or observed < generation):
        seen = "no generation" if observed is None else f"generation {observed}"
        message = f"the operator has not acted on generation {generation} yet (status is of {seen})"
        return RolloutResult(Ending.PENDING, ResultReason.NOT_OBSERVED, message)
    spec_valid = _condition(status, ConditionType.SPEC_VALID)
    if spec_valid.get("status") == "False":
        message = spec_valid.get("message") or "the spec cannot be rendered"
        return RolloutResult(Ending.FAILED, ResultReason.INVALID_SPEC, message)
    phase = status.get("phase") or "Pending"
    progressing = _condition(status, ConditionType.PROGRESSING)
    if phase in FAILED_PHASES:
        return _failed(status, phase, progressing.get("message") or "")
    stable = status.get("stableRevision")
    if phase == HEALTHY and not status.get("canaryRevision"):
        if progressing.get("reason") == KEPT_STABLE:
            message = f"stable {stable} kept: {progressing.get('message') or 'no candidate beat it'}"
            return RolloutResult(Ending.SUCCEEDED, ResultReason.KEPT_STABLE, message)
        return RolloutResult(Ending.SUCCEEDED, ResultReason.ROLLOUT_COMPLETE, f"serving revision {stable}")
    why = ": ".join(part for part in (progressing.get("reason"), progressing.get("message")) if part)
    return RolloutResult(Ending.PENDING, ResultReason.ROLLING_OUT, f"{phase}: {why}" if why else phase)


def _condition(status: Mapping[str, Any], kind: ConditionType) -> Mapping[str, Any]:
    conditions: Sequence[Mapping[str, Any]] = status.get("conditions") or []
    return next((c for c in conditions if c.get("type") == kind), {})


def _failed(status: Mapping[str, Any], phase: str, fallback: str) -> RolloutResult:
    """The rejected revision and the reason its latest history entry gives. Without one, the latest entry that
    ended so (an experiment's candidate aborted one after another is recorded under its own revision), then the
    phase's own message (the history may have been cut to `historyLimit`)."""
    rejected = status.get("rejectedRevision")
    history: Sequence[Mapping[str, Any]] = status.get("history") or []
    ended = [h for h in reversed(history) if h.get("outcome") == phase]
    entry = next((h for h in ended if h.get("revision") == rejected), ended[0] if ended else {})
    reason = entry.get("reason") or fallback
    what = f"revision {rejected}" if rejected else "the canary"
    message = f"{what} was {FAILED_PHASES[phase]}" + (f": {reason}" if reason else "")
    return RolloutResult(Ending.FAILED, ResultReason(phase), message)

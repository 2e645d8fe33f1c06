"""How a canary ends: rolled back, aborted, paused, promoted; and how it retires (traffic first, pods later)."""

from specfleet.api.spec import FallbackAction
from specfleet.api.status import (
    Outcome,
    Phase,
    Verdict,
)
from specfleet.rollout.draft import _Draft
from specfleet.rollout.vocabulary import DRAIN, ConditionType

FRESH_EVIDENCE = {
    "step_ready_at": None,
    "step_ready_seconds": 0,
    "failed_analyses": 0,
    "analyses": 0,
    "evidence_since": None,
    "unjudged_since": None,
    "no_data_seconds": 0,
    "provider_error_seconds": 0,
}
"""What a canary has measured and counted: nothing, when a canary starts or ends."""


def _step_label(draft: _Draft) -> str:
    steps, index = draft.spec.rollout.steps, draft.status.current_step or 0
    return f"step {index + 1}/{len(steps)} ({steps[index].weight}%)"


def _fail_canary(draft: _Draft, action: FallbackAction, reason: str) -> bool:
    """Roll back, or pause for a human: a canary paused after a Fail loses its traffic (stable covers it),
    one paused for lack of a verdict keeps it (nothing is known against it)."""
    if action is FallbackAction.ROLLBACK and draft.spec.rollout.auto_rollback:
        _abort(draft, Outcome.ROLLED_BACK, reason)
        return True
    last = draft.status.last_analysis
    draft.canary_traffic = last is None or last.verdict is not Verdict.FAIL
    draft.update(phase=Phase.PAUSED)
    draft.condition(
        ConditionType.PROGRESSING, True, "AnalysisFailedPaused", f"{reason}; promote or abort with kubectl specfleet"
    )
    draft.event("Paused", reason, warning=True)
    return True


def _abort(draft: _Draft, outcome: Outcome, reason: str) -> None:
    """Record the end at once; the canary retires (traffic off once stable has a Ready pod, pods later)."""
    revision = draft.status.canary_revision
    assert revision is not None
    draft.record(outcome, revision, reason)
    draft.event(
        "RolledBack" if outcome is Outcome.ROLLED_BACK else "Aborted", f"canary {revision}: {reason}", warning=True
    )
    _retire_canary(draft)
    draft.update(
        rejected_revision=revision, phase=Phase.ROLLED_BACK if outcome is Outcome.ROLLED_BACK else Phase.ABORTED
    )
    draft.condition(ConditionType.PROGRESSING, False, outcome.value, reason)


def _promote(draft: _Draft, reason: str) -> None:
    """The stable Deployment takes the canary's revision; the canary stays until stable has rolled."""
    revision = draft.status.canary_revision
    assert revision is not None
    draft.record(Outcome.PROMOTED, revision, reason)
    draft.event("Promoted", f"canary {revision} promoted: {reason}")
    draft.update(
        stable_revision=revision,
        stable_serving=draft.spec.serving(),
        current_step=None,
        step_started_at=draft.obs.now,  # the promotion's progress deadline counts from here
        step_ready_at=None,
        step_ready_seconds=0,
        evidence_since=None,
        phase=Phase.PROGRESSING,
    )
    draft.canary_traffic = True
    draft.condition(ConditionType.PROGRESSING, True, "Promoting", f"stable rolling to {revision}")


def _retire_canary(draft: _Draft) -> None:
    """The canary leaves the rollout; its Deployment drains before it goes (see `_drain`)."""
    revision = draft.status.canary_revision
    _clear_canary(draft)
    if revision is not None:
        draft.update(retiring_revision=revision, traffic_off_at=None)


def _drain(draft: _Draft) -> None:
    """A retiring canary: traffic off once stable has a Ready pod (never to nothing), deleted DRAIN later."""
    status, now = draft.status, draft.obs.now
    if status.retiring_revision is None:
        return
    if status.canary_revision is not None:  # a new canary took the Deployment over
        draft.update(retiring_revision=None, traffic_off_at=None)
        return
    if status.traffic_off_at is None:
        if draft.obs.stable.ready == 0:
            draft.canary_traffic = True  # stable has nothing Ready: the canary keeps serving meanwhile
            return
        draft.update(traffic_off_at=now)
    draft.canary_traffic = False
    ends = draft.status.traffic_off_at
    assert ends is not None
    if now >= ends + DRAIN:
        draft.update(retiring_revision=None, traffic_off_at=None)
    else:
        draft.wake.append(ends + DRAIN)


def _clear_canary(draft: _Draft) -> None:
    draft.update(
        canary_revision=None, current_step=None, step_started_at=None, canary_started_at=None, **FRESH_EVIDENCE
    )

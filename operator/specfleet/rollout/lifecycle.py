"""How a canary ends: rolled back, aborted, paused, promoted; and how it retires (traffic first, pods later)."""

from datetime import datetime
from typing import Final

from specfleet.api.spec import FallbackAction
from specfleet.api.status import Outcome, Phase, StatusChanges, Verdict
from specfleet.api.vocabulary import Track
from specfleet.rollout.drift import reference_at_promotion
from specfleet.rollout.holdback import holdback_at_promotion
from specfleet.rollout.moves import budget
from specfleet.rollout.state import Pass
from specfleet.rollout.types import DRAIN


def step_anew(now: datetime) -> StatusChanges:
    """The status of a step that starts (again) at `now`: its progress deadline, readiness and evidence anew."""
    return StatusChanges(
        step_started_at=now, step_progressed_at=None, step_ready_at=None, step_ready_seconds=0, evidence_since=None
    )


FRESH_EVIDENCE: Final = StatusChanges(
    step_ready_at=None,
    step_ready_seconds=0,
    step_progressed_at=None,
    failed_analyses=0,
    analyses=0,
    evidence_since=None,
    unjudged_since=None,
    no_data_seconds=0,
    provider_error_seconds=0,
    canary_restarts_accepted=None,
)
"""What a canary has measured and counted: nothing, when a canary starts or ends."""


def step_label(p: Pass) -> str:
    steps, index = p.spec.rollout.steps, p.status.current_step or 0
    step = steps[index]
    share = f"{step.weight}%" if step.weight is not None else f"shadow, mirror {step.mirror}%"
    return f"step {index + 1}/{len(steps)} ({share})"


ANALYSIS_FAILED: Final = "AnalysisFailed"
CANARY_CRASHED: Final = "CanaryCrashed"
PAUSED_FOR_A_HUMAN: Final = frozenset(f"{cause}Paused" for cause in (ANALYSIS_FAILED, CANARY_CRASHED))
"""Progressing reasons of a canary `fail_canary` paused (autoRollback off): failed, it waits for a promote or an
abort and will not go on by itself."""


def fail_canary(
    p: Pass, action: FallbackAction, reason: str, *, against: bool | None = None, cause: str = ANALYSIS_FAILED
) -> Pass:
    """Roll back, or pause for a human: a canary paused after a Fail loses its traffic (stable covers it),
    one paused for lack of a verdict keeps it (nothing is known against it).

    `against` says whether evidence is against the canary (default: its last analysis is a Fail); `cause`
    names the pause in the Progressing condition (`<cause>Paused`), which a promote lifts.
    """
    if action is FallbackAction.ROLLBACK and p.spec.rollout.auto_rollback:
        return abort(p, Outcome.ROLLED_BACK, reason)
    if against is None:
        last = p.status.last_analysis
        against = last is not None and last.verdict is Verdict.FAIL
    return (
        p.but(canary_traffic=not against)
        .in_phase(Phase.PAUSED, True, f"{cause}Paused", f"{reason}; promote or abort with kubectl specfleet")
        .with_event("Paused", reason, warning=True)
    )


def abort(p: Pass, outcome: Outcome, reason: str) -> Pass:
    """Record the end at once; the canary retires (traffic off once stable has a Ready pod, pods later)."""
    revision = p.status.canary_revision
    assert revision is not None
    rolled_back = outcome is Outcome.ROLLED_BACK
    p = p.recording(outcome, revision, reason).with_event(
        "RolledBack" if rolled_back else "Aborted", f"canary {revision}: {reason}", warning=True
    )
    return (
        retire_canary(p)
        .with_status(rejected_revision=revision)
        .in_phase(Phase.ROLLED_BACK if rolled_back else Phase.ABORTED, False, outcome.value, reason)
    )


def promote(p: Pass, reason: str) -> Pass:
    """The stable Deployment takes the canary's revision; the canary stays until stable has rolled."""
    revision = p.status.canary_revision
    assert revision is not None
    return (
        reference_at_promotion(holdback_at_promotion(p), revision)
        .recording(Outcome.PROMOTED, revision, reason)
        .with_event("Promoted", f"canary {revision} promoted: {reason}")
        .with_status(
            step_anew(p.obs.now),  # the promotion's progress deadline counts from here
            stable_revision=revision,
            stable_serving=p.served_spec(revision).serving(),
            current_step=None,
        )
        .in_phase(Phase.PROGRESSING, True, "Promoting", f"stable rolling to {revision}")
        .but(canary_traffic=True)
    )


def retire_canary(p: Pass) -> Pass:
    """The canary leaves the rollout; its Deployment drains before it goes (see `drain`)."""
    revision = p.status.canary_revision
    p = p.with_status(
        FRESH_EVIDENCE, canary_revision=None, current_step=None, step_started_at=None, canary_started_at=None
    )
    return p.with_status(retiring_revision=revision, traffic_off_at=None) if revision is not None else p


def drain(p: Pass) -> Pass:
    """A retiring canary: traffic off once stable has a Ready pod (never to nothing), deleted DRAIN later.

    With `rollout.maxSurge` set, its pods move back to stable first (`decide._moved_targets`) and it keeps
    its traffic until stable's Ready pods alone cover `replicas - maxUnavailable`.
    """
    status, now = p.status, p.obs.now
    if status.retiring_revision is None:
        return p
    if status.canary_revision is not None:  # a new canary took the Deployment over
        return p.with_status(retiring_revision=None, traffic_off_at=None)
    if status.traffic_off_at is None:
        if p.obs.track(Track.STABLE).ready == 0:
            return p.but(canary_traffic=True)  # stable has nothing Ready: the canary keeps serving meanwhile
        limits = budget(p.spec)
        floor = limits.floor(p.spec.main_replicas) if limits is not None else 0
        if (
            p.obs.track(Track.CANARY).serving and p.obs.track(Track.STABLE).serving < floor
        ):  # its pods go back to stable one by one
            return p.but(canary_traffic=True)
        p = p.with_status(traffic_off_at=now)
    p = p.but(canary_traffic=False)
    ends = p.status.traffic_off_at
    assert ends is not None
    if now >= ends + DRAIN:
        return p.with_status(retiring_revision=None, traffic_off_at=None)
    return p.waking_at(ends + DRAIN)

"""Holdback: a control group on a reference config beside stable, and the speed-up measured against it.

With `rollout.holdback`, `replicas` of the fleet's pods (`<name>-holdback`) keep serving a reference
config (no speculation, or what stable served before its last promotion) whatever the rollout does; the
canary's steps share out the other replicas. While Healthy every fleet look measures both tracks over the
same window, and `judge.speedup` turns them into status.holdback.speedup; the drift comparison reads it.
"""

from specfleet.api.spec import HoldbackReference, SpeculativeDeploymentSpec, SpeculativeMethod, SpeculativeSpec
from specfleet.api.status import HoldbackStatus
from specfleet.api.vocabulary import Track
from specfleet.render.manifests import revision
from specfleet.rollout.state import Pass
from specfleet.rollout.types import TrackTarget


def reference_spec(p: Pass) -> SpeculativeDeploymentSpec | None:
    """The config the holdback serves: stable's without speculation, or what stable served before."""
    holdback, status = p.spec.rollout.holdback, p.status
    if holdback is None or status.stable_serving is None:
        return None
    kept = status.holdback.serving if status.holdback else None
    if holdback.reference is HoldbackReference.PREVIOUS_STABLE and kept:
        return p.spec.with_serving(kept).model_copy(update={"auto_tune": None})
    stable = p.spec.with_serving(status.stable_serving)
    return stable.model_copy(update={"auto_tune": None, "speculative": SpeculativeSpec(method=SpeculativeMethod.NONE)})


def keep_holdback(p: Pass) -> Pass:
    """status.holdback says what the holdback serves (or why none runs); a new reference is an event."""
    holdback = p.spec.rollout.holdback
    if holdback is None:
        return p.with_status(holdback=None) if p.status.holdback is not None else p
    status = p.status.holdback or HoldbackStatus()
    spec = reference_spec(p)
    if spec is None:
        return p
    if p.spec.holdback_replicas == 0:
        message = (
            f"replicas {p.spec.replicas} must exceed rollout.holdback.replicas {holdback.replicas} "
            "(stable keeps one): no holdback runs"
        )
        update = {"revision": None, "summary": "", "message": message, "speedup": None}
        return p.with_status(holdback=status.model_copy(update=update))
    target, summary = revision(spec), spec.summary()
    message = f"{p.spec.holdback_replicas} of {p.spec.replicas} replicas serve {holdback.reference.value}: {summary}"
    if status.revision != target:
        p = p.with_event("HoldbackStarted", f"holdback serves revision {target} ({summary}): {message}")
        status = status.model_copy(update={"speedup": None})
    return p.with_status(
        holdback=status.model_copy(update={"revision": target, "summary": summary, "message": message})
    )


def holdback_at_promotion(p: Pass) -> Pass:
    """With `reference: PreviousStable`, the config stable served until now becomes the holdback's."""
    holdback, status = p.spec.rollout.holdback, p.status.holdback
    if holdback is None or holdback.reference is not HoldbackReference.PREVIOUS_STABLE:
        return p
    return p.with_status(holdback=(status or HoldbackStatus()).model_copy(update={"serving": p.status.stable_serving}))


def holdback_target(p: Pass) -> TrackTarget | None:
    """The holdback Deployment the fleet should have (None: none, and any there is goes)."""
    status, spec = p.status.holdback, reference_spec(p)
    if status is None or status.revision is None or spec is None:
        return None
    return TrackTarget(status.revision, spec.serving(), p.spec.holdback_replicas)


def holdback_weight(p: Pass) -> int:
    """The holdback's HTTPRoute weight: its share of the replicas once one of its pods is Ready."""
    status = p.status.holdback
    if status is None or status.revision is None or p.obs.track(Track.HOLDBACK).revision != status.revision:
        return 0
    if p.obs.track(Track.HOLDBACK).ready == 0:
        return 0
    return max(1, round(100 * p.spec.holdback_replicas / p.spec.replicas))

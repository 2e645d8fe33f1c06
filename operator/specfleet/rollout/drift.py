"""Drift: keep judging the serving revision after promotion against what it measured as a canary.

The reference is the promoted canary's last analysis (alpha, p95 per-token latency, per-pod load, prompt
and output tokens per request). Each look while Healthy (`tuning.look_at_fleet`) is compared with it by
`judge.drift`; `rollout.drift.looks` agreeing looks in a row flip `SpeculationPaying` (hysteresis both
ways), never before `minDwell` after promotion. With `onDrift: Rollback` the fleet is then canaried back
to the reference config: the config stable served before (kept at promotion), or no speculation.
"""

from specfleet.api.durations import parse_duration
from specfleet.api.spec import DriftAction, SpeculativeDeploymentSpec, SpeculativeMethod, SpeculativeSpec
from specfleet.api.status import (
    ConditionStatus,
    DriftReference,
    DriftStatus,
    Speedup,
    TrafficProfile,
    TunedConfig,
)
from specfleet.api.vocabulary import ConditionType
from specfleet.judge import LOAD_TOLERANCE, DriftCheck, TrackEvidence, describe_mix, drift
from specfleet.judge.speedup import comparable
from specfleet.render.manifests import revision
from specfleet.rollout.holdback import reference_spec
from specfleet.rollout.state import Pass


def reference_at_promotion(p: Pass, promoted: str) -> Pass:
    """The drift baseline of a revision being promoted: its canary's last analysis."""
    last = p.status.last_analysis
    measured = last.canary if last is not None and last.revision == promoted else None
    enough = measured is not None and (measured.requests or 0) >= p.spec.rollout.guardrails.requests_needed
    mix = measured if enough else None  # a mean length over a few requests is no reference
    reference = DriftReference(
        revision=promoted,
        time=p.obs.now,
        acceptance_alpha=measured.acceptance_alpha if measured else None,
        token_latency_p95_seconds=measured.token_latency_p95_seconds if measured else None,
        requests_per_pod_per_second=measured.requests_per_pod_per_second if measured else None,
        requests=measured.requests if measured else None,
        prompt_tokens_per_request=mix.prompt_tokens_per_request if mix else None,
        output_tokens_per_request=mix.output_tokens_per_request if mix else None,
    )
    revert = p.status.drift.revert if p.status.drift else None
    p = p.with_status(drift=DriftStatus(reference=reference, previous=p.status.stable_serving, revert=revert))
    if any(c.type == ConditionType.SPECULATION_PAYING for c in p.status.conditions):
        p = p.with_condition(ConditionType.SPECULATION_PAYING, None, "Promoted", f"{promoted}: not judged yet")
    return p


def reverted_revision(p: Pass, desired: str) -> str | None:
    """With `onDrift: Rollback`, the reference config the fleet was rolled back to, while the spec stays."""
    settings = p.spec.rollout.drift
    revert = p.status.drift.revert if p.status.drift else None
    if settings is None or settings.on_drift is not DriftAction.ROLLBACK or revert is None:
        return None
    return revert.revision if revert.base == desired else None


def judge_drift(p: Pass, evidence: TrackEvidence, measured: Speedup | None = None) -> Pass:
    """Take one look's evidence (and the speed-up over a holdback) into the drift counters, the condition,
    events and (maybe) a rollback."""
    settings, stable = p.spec.rollout.drift, p.status.stable_revision
    status = p.status.drift or DriftStatus()
    reference = status.reference
    if settings is None or stable is None:
        return p
    unpromoted = f"revision {stable} was not canaried by this operator: no reference from its promotion"
    if reference is None or reference.revision != stable:
        if measured is None:
            return p.with_status(drift=status.model_copy(update={"message": f"{unpromoted} to compare with"}))
        check = DriftCheck(
            drifted=None,
            load_ratio=None,
            load_shifted=False,
            reasons=(f"{unpromoted}: judged against the holdback alone",),
        )
    elif p.obs.now < reference.time + parse_duration(settings.min_dwell):
        message = f"serving {stable} for less than minDwell {settings.min_dwell}: not judged yet"
        return p.with_status(drift=status.model_copy(update={"message": message}))
    else:
        guardrails, confidence = p.spec.rollout.guardrails, p.spec.rollout.analysis.confidence
        check = drift(settings, reference, evidence, guardrails, confidence)
    verdict, reasons = _against_holdback(check.drifted, check.reasons, measured)
    drifted = status.drifted_looks + 1 if verdict else 0
    steady = status.steady_looks + 1 if verdict is False else 0
    message = "; ".join(reasons)[:1024]
    p = _traffic_shift(p, status.load_shifted, check)
    p = _mix_shift(p, status.profile, check.profile)
    status = status.model_copy(
        update={
            "drifted_looks": drifted,
            "steady_looks": steady,
            "message": message,
            "load_ratio": check.load_ratio,
            "load_shifted": check.load_shifted,
        }
    )
    if check.profile is not None:  # a look without enough requests keeps the last estimate (and its shift)
        status = status.model_copy(update={"profile": check.profile})
    p = p.with_status(drift=status)
    paying = next((c.status for c in p.status.conditions if c.type == ConditionType.SPECULATION_PAYING), None)
    if drifted >= settings.looks and paying is not ConditionStatus.FALSE:
        text = f"{stable} drifted for {drifted} looks: {message}"
        p = p.with_condition(ConditionType.SPECULATION_PAYING, False, "Drifted", text)
        p = p.with_event("SpeculationNotPaying", text, warning=True)
        if settings.on_drift is DriftAction.ROLLBACK:
            p = _revert(p)
    elif steady >= settings.looks and paying is not ConditionStatus.TRUE:
        p = p.with_condition(ConditionType.SPECULATION_PAYING, True, "AsPromoted", f"{stable}: {message}")
        if paying is ConditionStatus.FALSE:
            p = p.with_event("SpeculationPayingAgain", f"{stable}: {message}")
    return p


def _against_holdback(
    drifted: bool | None, reasons: tuple[str, ...], measured: Speedup | None
) -> tuple[bool | None, tuple[str, ...]]:
    """With a holdback its speed-up joins the look's verdict, on its bounds and its load ratio's, never their
    estimates: stable surely slower than the control group (upper bound < 1) is drift at any load or mix,
    since both tracks see the same traffic, unless stable's pods surely carried more (load lower bound past
    1.25x); stable surely faster (lower bound >= 1) at load shown comparable is paying, even where the
    comparison with promotion could not judge (load or mix shifted). Between, not shown either way: no
    verdict, whatever the comparison with promotion says (it does not show the config pays)."""
    if measured is None or measured.lower is None or measured.upper is None:
        return drifted, reasons
    reasons = (*reasons, f"against the holdback: {measured.message}")
    heavier = measured.load_lower is not None and measured.load_lower > 1 + LOAD_TOLERANCE
    if drifted or (measured.upper < 1 and not heavier):
        return True, reasons
    load_lower, load_upper = measured.load_lower, measured.load_upper
    if measured.lower >= 1 and load_lower is not None and load_upper is not None and comparable(load_lower, load_upper):
        return False, reasons
    return None, reasons


def _traffic_shift(p: Pass, before: bool, now: DriftCheck) -> Pass:
    """An event when the per-pod load moves surely out of the comparable band around promotion's, once per move."""
    if now.load_shifted and not before and now.load_ratio is not None:
        message = (
            f"per-pod load is {now.load_ratio:.2f}x that at promotion: latency is compared only at comparable load"
        )
        return p.with_event("TrafficShifted", message)
    return p


def _mix_shift(p: Pass, before: TrafficProfile | None, now: TrafficProfile | None) -> Pass:
    """An event when prompt or output tokens per request move out of the comparable band around promotion's
    (`judge.drift.MIX_TOLERANCE`), once per move: a part already out at the last estimate is not named again."""
    moved = [part for part in now.shifted if before is None or part not in before.shifted] if now else []
    if now is None or not moved:
        return p
    message = (
        f"the length mix moved: {describe_mix(now, moved)}: per-token latency is compared only at a comparable mix"
    )
    return p.with_event("TrafficShifted", message)


def _reference_config(p: Pass) -> SpeculativeDeploymentSpec:
    """The config to return to: the holdback's (the control group it was judged against), else what stable
    served before its promotion, else no speculation."""
    control = reference_spec(p) if p.status.holdback and p.status.holdback.revision else None
    if control is not None:
        return control
    previous = p.status.drift.previous if p.status.drift else None
    if previous:
        return p.spec.with_serving(previous)
    served = p.served_spec(p.status.stable_revision)
    return served.model_copy(update={"speculative": SpeculativeSpec(method=SpeculativeMethod.NONE)})


def _revert(p: Pass) -> Pass:
    spec, desired = _reference_config(p), p.obs.desired_revision
    target = revision(spec)
    if desired is None or target in (p.status.stable_revision, p.status.rejected_revision):
        return p
    assert p.status.drift is not None
    revert = TunedConfig(base=desired, revision=target, serving=spec.serving(), time=p.obs.now)
    p = p.with_status(drift=p.status.drift.model_copy(update={"revert": revert}))
    return p.with_event("DriftRollback", f"canarying back to {target} ({spec.summary()})", warning=True)

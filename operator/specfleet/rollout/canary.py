"""A live canary: start, wait for its pods, judge it, end its step."""

from datetime import timedelta

from specfleet.api.durations import parse_duration
from specfleet.api.spec import FallbackAction
from specfleet.api.status import (
    Analysis,
    Outcome,
    Phase,
    Verdict,
)
from specfleet.render.manifests import canary_replicas
from specfleet.rollout.draft import _Draft
from specfleet.rollout.lifecycle import FRESH_EVIDENCE, _abort, _fail_canary, _promote, _step_label
from specfleet.rollout.vocabulary import PROMOTE_FULL, Command, ConditionType


def _start_canary(draft: _Draft, desired: str) -> None:
    previous = draft.status.canary_revision
    if previous is not None and previous != draft.status.stable_revision:
        draft.record(Outcome.SUPERSEDED, previous, f"replaced by revision {desired}", of_current_spec=False)
        draft.event("CanarySuperseded", f"canary {previous} replaced by {desired}")
    draft.update(
        canary_revision=desired,
        current_step=0,
        step_started_at=draft.obs.now,
        canary_started_at=draft.obs.now,
        last_analysis=None,
        **FRESH_EVIDENCE,
        retiring_revision=None,  # the canary Deployment is taken over by the new revision
        traffic_off_at=None,
    )
    draft.event(
        "CanaryStarted", f"canary {desired} ({draft.spec.summary()}) next to stable {draft.status.stable_revision}"
    )


def _clamp_step(draft: _Draft) -> None:
    """Steps removed mid-canary: continue at the new last step, started over (its pause and analyses anew)."""
    last = len(draft.spec.rollout.steps) - 1
    if (draft.status.current_step or 0) <= last:
        return
    draft.update(
        current_step=last, step_started_at=draft.obs.now, step_ready_at=None, step_ready_seconds=0, evidence_since=None
    )
    draft.event(
        "StepsChanged", f"the steps were shortened: canary {draft.status.canary_revision} at {_step_label(draft)}"
    )


def _progress_canary(draft: _Draft) -> None:
    """One look at a live canary: abort, judge, wait, step or promote."""
    _clamp_step(draft)
    spec, obs, status = draft.spec, draft.obs, draft.status
    revision = status.canary_revision
    assert revision is not None and status.current_step is not None
    step = spec.rollout.steps[status.current_step]
    wanted = canary_replicas(spec.replicas, step.weight)
    ready = obs.canary.revision == revision and obs.canary.ready >= wanted

    if draft.command(Command.ABORT) is not None:
        _abort(draft, Outcome.ABORTED, "aborted by the user")
        return
    if not ready:
        _wait_for_canary(draft, wanted)
        return

    draft.canary_traffic = True
    if status.step_ready_at is None:
        draft.update(step_ready_at=obs.now, evidence_since=obs.now)
    if _judge(draft):
        return
    promote = draft.command(Command.PROMOTE)
    if promote is not None and PROMOTE_FULL in promote.split("@")[0].split():
        _promote(draft, "promoted by the user (full)")
        return
    if promote is None and not _step_complete(draft):
        return
    step_index = draft.status.current_step
    assert step_index is not None
    if step_index >= len(spec.rollout.steps) - 1:
        if promote is not None:
            reason = "promoted by the user"
        elif obs.guarded:
            reason = "all steps passed"
        else:
            reason = "all steps' pauses elapsed, unguarded (no Prometheus: no analysis)"
        _promote(draft, reason)
        return
    draft.update(
        current_step=step_index + 1,
        step_started_at=obs.now,
        step_ready_at=None,
        step_ready_seconds=0,
        evidence_since=None,
        phase=Phase.PROGRESSING,
    )
    draft.event("StepAdvanced", f"canary {revision} to {_step_label(draft)}")
    draft.condition(ConditionType.PROGRESSING, True, "CanaryStep", _step_label(draft))


def _wait_for_canary(draft: _Draft, wanted: int) -> None:
    """The step's canary replicas are not all Ready: wait, within the progress deadline.

    The deadline bounds the step's total not-Ready time: time the canary was Ready pushes it back, so a
    canary that crashes after hours gets the rest of its budget and a flapping one still ends. Ready
    canary pods keep their traffic once the canary has served (a later step, or after a crash), so
    capacity does not drop while the new step's pods load.
    """
    spec, obs, status = draft.spec, draft.obs, draft.status
    if status.step_ready_at is not None:
        ready_for = max(0, int((obs.now - status.step_ready_at).total_seconds()))
        draft.update(step_ready_at=None, evidence_since=None, step_ready_seconds=status.step_ready_seconds + ready_for)
    started = draft.status.step_started_at or obs.now
    deadline = (
        started + parse_duration(spec.rollout.progress_deadline) + timedelta(seconds=draft.status.step_ready_seconds)
    )
    if obs.now >= deadline:
        detail = f": {obs.canary.unschedulable}" if obs.canary.unschedulable else ""
        _abort(
            draft,
            Outcome.ABORTED,
            f"ProgressDeadlineExceeded: canary not Ready within {spec.rollout.progress_deadline}{detail}",
        )
        return
    served = status.canary_weight > 0  # the canary was serving before this decision: it keeps its Ready pods
    draft.canary_traffic = served and obs.canary.revision == status.canary_revision and obs.canary.ready > 0
    draft.update(phase=Phase.PROGRESSING)
    waiting = obs.canary.unschedulable or f"{obs.canary.ready}/{wanted} canary replicas ready"
    draft.condition(ConditionType.PROGRESSING, True, "CanaryStarting", waiting)
    draft.wake.append(deadline)


def _no_baseline(draft: _Draft) -> bool:
    """Nothing to compare the canary with: stable has no Ready pod, or an HTTPRoute gives it no traffic."""
    step = draft.spec.rollout.steps[draft.status.current_step or 0]
    return draft.obs.stable.ready == 0 or (draft.obs.routed and step.weight >= 100)


def _step_complete(draft: _Draft) -> bool:
    """Whether the current step's pause is over and its analyses passed; sets phase and wake-ups if not."""
    spec, status, now = draft.spec, draft.status, draft.obs.now
    step = spec.rollout.steps[status.current_step or 0]
    label = _step_label(draft)
    if step.pause is not None and step.pause.duration is None:
        draft.update(phase=Phase.PAUSED)
        draft.condition(ConditionType.PROGRESSING, True, "ManualGate", f"{label}: waiting for promote")
        return False
    pause = parse_duration(step.pause.duration) if step.pause and step.pause.duration else timedelta(0)
    assert status.step_ready_at is not None
    ends = status.step_ready_at + pause
    passed = _analysis_passed_this_step(draft)
    if now >= ends and not passed and draft.obs.guarded and _no_baseline(draft):
        draft.update(phase=Phase.PAUSED)
        draft.condition(
            ConditionType.PROGRESSING,
            True,
            "NoBaseline",
            f"{label}: no baseline (stable has no Ready pod or no traffic), so the canary cannot pass; its "
            "absolute guardrails are still judged (a failure rolls back) and onNoData does not act; "
            "promote or abort with kubectl specfleet",
        )
        return False
    if now < ends or not passed:
        draft.update(phase=Phase.PROGRESSING)
        waiting = "pause" if now < ends else "a passing analysis"
        draft.condition(ConditionType.PROGRESSING, True, "CanaryStep", f"{label}: waiting for {waiting}")
        if now < ends:
            draft.wake.append(ends)
        return False
    return True


def _analysis_passed_this_step(draft: _Draft) -> bool:
    """Unguarded canaries advance on pauses alone; guarded ones need a Pass on evidence from this step only.

    The Pass's evidence must start no earlier than the moment the step's canary replicas were all Ready
    and span at least one analysis interval (or the whole window, if shorter).
    """
    if not draft.obs.guarded:
        return True
    last = draft.status.last_analysis
    started = draft.status.step_ready_at
    if last is None or last.revision != draft.status.canary_revision or last.verdict is not Verdict.PASS:
        return False
    if started is None:
        return False
    analysis = draft.spec.rollout.analysis
    needed = min(parse_duration(analysis.interval), parse_duration(analysis.window))
    span = timedelta(seconds=last.evidence_seconds) if last.evidence_seconds is not None else last.time - started
    return last.time - span >= started and span >= needed


def _judge(draft: _Draft) -> bool:
    """Take in a fresh analysis, act on a failure; True when the rollout was ended or paused by it."""
    spec, obs = draft.spec, draft.obs
    if not obs.guarded:
        return False
    if _paused_after_failure(draft):
        last = draft.status.last_analysis
        draft.canary_traffic = last is None or last.verdict is not Verdict.FAIL
        return True
    interval = parse_duration(spec.rollout.analysis.interval)
    analysis = obs.analysis
    if analysis is None or analysis.revision != draft.status.canary_revision:
        # never sooner than one interval of this step's evidence (nor one interval after the last look)
        due = (draft.status.evidence_since or obs.now) + interval
        last = draft.status.last_analysis
        if last is not None and last.revision == draft.status.canary_revision:
            due = max(due, last.time + interval)
        draft.analysis_due = obs.now >= due
        draft.wake.append(max(due, obs.now))
        return False
    previous = draft.status.last_analysis
    draft.update(last_analysis=analysis)
    if analysis.verdict is not Verdict.ERROR:
        draft.update(analyses=draft.status.analyses + 1)
    draft.wake.append(obs.now + interval)
    if analysis.verdict in (Verdict.PASS, Verdict.FAIL):
        draft.update(unjudged_since=None, no_data_seconds=0, provider_error_seconds=0)
    if analysis.verdict is Verdict.PASS:
        return False
    if analysis.verdict is Verdict.FAIL:
        failures = draft.status.failed_analyses + 1
        # the next failure must stand on evidence gathered after this one, so failures are independent
        draft.update(failed_analyses=failures, evidence_since=obs.now)
        reasons = "; ".join(analysis.reasons)
        draft.event("AnalysisFailed", f"canary {analysis.revision}: {reasons}", warning=True)
        if failures > spec.rollout.analysis.failure_limit:
            return _fail_canary(draft, FallbackAction.ROLLBACK, f"guardrail failed: {reasons}")
        return False
    return _no_verdict(draft, analysis, previous)


def _no_verdict(draft: _Draft, analysis: Analysis, previous: Analysis | None) -> bool:
    """An Inconclusive or Error verdict: count the time since the previous look against the previous
    look's own fallback, then act if this verdict's fallback has run out. Inconclusive time without a
    baseline is not counted (and onNoData does not act then): the missing evidence is stable's."""
    settings, status, no_baseline = draft.spec.rollout.analysis, draft.status, _no_baseline(draft)
    no_data, errors = status.no_data_seconds, status.provider_error_seconds
    unjudged = (Verdict.INCONCLUSIVE, Verdict.ERROR)
    if status.unjudged_since is not None and previous is not None and previous.verdict in unjudged:
        elapsed = max(0, int((analysis.time - previous.time).total_seconds()))
        if previous.verdict is Verdict.ERROR:
            errors += elapsed
        elif not no_baseline:
            no_data += elapsed
    draft.update(
        unjudged_since=status.unjudged_since or draft.obs.now, no_data_seconds=no_data, provider_error_seconds=errors
    )
    if analysis.verdict is Verdict.INCONCLUSIVE:
        if no_baseline:
            return False
        fallback, spent, what = settings.on_no_data, no_data, "no conclusive data"
    else:
        fallback, spent, what = settings.on_provider_error, errors, "Prometheus errors"
    if spent >= parse_duration(fallback.after).total_seconds():
        return _fail_canary(draft, fallback.action, f"{what} for {fallback.after}: {'; '.join(analysis.reasons)}")
    return False


def _paused_after_failure(draft: _Draft) -> bool:
    """A canary paused by a failure (autoRollback off) waits for a human: a promote for it lifts the pause."""
    paused = any(
        c.type == ConditionType.PROGRESSING and c.reason == "AnalysisFailedPaused" for c in draft.status.conditions
    )
    return paused and not draft.applies(Command.PROMOTE)

"""A live canary: start, wait for its pods, judge it, end its step.

`progress_canary` is a pipeline of transitions (Argo Rollouts' reconcile steps, as values): each takes
the pass and returns the next one; the first that makes the canary's move for this pass (ends it,
pauses it, or waits) returns it as `Decided`, and the rest are skipped.
"""

from collections.abc import Callable
from datetime import timedelta

from specfleet.api.durations import parse_duration
from specfleet.api.spec import FallbackAction, SpeculativeDeploymentSpec
from specfleet.api.status import Analysis, Outcome, Phase, PreflightStatus, Verdict
from specfleet.api.vocabulary import PROMOTE_FULL, Command, ConditionType, Track
from specfleet.render.manifests import canary_replicas
from specfleet.rollout.lifecycle import (
    ANALYSIS_FAILED,
    CANARY_CRASHED,
    FRESH_EVIDENCE,
    abort,
    fail_canary,
    promote,
    step_anew,
    step_label,
)
from specfleet.rollout.moves import budget
from specfleet.rollout.state import Decided, Pass
from specfleet.rollout.types import GpuRequest, PreflightState, TrackObservation

Transition = Callable[[Pass], Pass | Decided]

"""The cause of a pause for crashes (condition reason `CanaryCrashedPaused`)."""


def supersede_canary(p: Pass, desired: str) -> Pass:
    """A live canary replaced by revision `desired` is recorded as superseded (a promoted one is not)."""
    previous = p.status.canary_revision
    if previous is not None and previous != p.status.stable_revision:
        p = p.recording(Outcome.SUPERSEDED, previous, f"replaced by revision {desired}", of_current_spec=False)
        p = p.with_event("CanarySuperseded", f"canary {previous} replaced by {desired}")
    return p


def start_canary(p: Pass, desired: str) -> Pass:
    p = supersede_canary(p, desired)
    p = p.with_status(
        FRESH_EVIDENCE,
        canary_revision=desired,
        current_step=0,
        step_started_at=p.obs.now,
        canary_started_at=p.obs.now,
        canary_unguarded=p.spec.rollout.unguarded,
        last_analysis=None,
        retiring_revision=None,  # the canary Deployment is taken over by the new revision
        traffic_off_at=None,
    )
    return p.with_event(
        "CanaryStarted",
        f"canary {desired} ({p.served_spec(desired).summary()}) next to stable {p.status.stable_revision}",
    )


def progress_canary(p: Pass) -> Pass:
    """One look at a live canary: abort, wait for its pods, judge, hold the step, step or promote."""
    pipeline: tuple[Transition, ...] = (
        _clamp_step,
        _abort_if_asked,
        _hold_while_paused,
        _preflight,
        _fail_on_crashes,
        _wait_for_canary,
        _serve,
        _judge,
        _end_step,
    )
    for transition in pipeline:
        moved = transition(p)
        if isinstance(moved, Decided):
            return moved.p
        p = moved
    return p


def _clamp_step(p: Pass) -> Pass:
    """Steps removed mid-canary: continue at the new last step, started over (its pause and analyses anew)."""
    last = len(p.spec.rollout.steps) - 1
    if (p.status.current_step or 0) <= last:
        return p
    p = p.with_status(step_anew(p.obs.now), current_step=last)
    return p.with_event(
        "StepsChanged", f"the steps were shortened: canary {p.status.canary_revision} at {step_label(p)}"
    )


def _abort_if_asked(p: Pass) -> Pass | Decided:
    if not p.applies(Command.ABORT):
        return p
    return Decided(abort(p.acknowledging(Command.ABORT), Outcome.ABORTED, "aborted by the user"))


def _hold_while_paused(p: Pass) -> Pass | Decided:
    """`spec.paused`: the canary stays as it is (its traffic too) and nothing is judged; only an abort acts."""
    if not p.spec.paused:
        return p
    revision = p.status.canary_revision
    message = f"{step_label(p)} of canary {revision} paused by spec.paused; `kubectl specfleet resume` goes on"
    return Decided(p.but(canary_traffic=p.status.canary_weight > 0).in_phase(Phase.PAUSED, True, PAUSED, message))


PAUSED = "RolloutPaused"
"""The reason (condition) of a rollout frozen by `spec.paused`."""


def needs_preflight(p: Pass, spec: SpeculativeDeploymentSpec) -> bool:
    """Whether `spec` brings a drafter model stable does not serve (another model or revision)."""
    drafter = spec.speculative
    stable = (p.status.stable_serving or {}).get("speculative") or {}
    assert isinstance(stable, dict)
    serving_now = (stable.get("model"), stable.get("revision"))
    return drafter.model is not None and (drafter.model, drafter.revision) != serving_now


def _preflight(p: Pass) -> Pass | Decided:
    """A new drafter is checked by a preflight Job before its canary gets pods or traffic: wait for its
    verdict (within the progress deadline); a failed check aborts the canary, which never served."""
    revision, now = p.status.canary_revision, p.obs.now
    assert revision is not None
    done = p.status.preflight
    passed = done is not None and done.revision == revision and done.state == PreflightState.PASSED
    if passed or not needs_preflight(p, p.served_spec(revision)):
        return p
    seen = p.obs.preflights.get(revision)
    state = seen.state if seen is not None else PreflightState.RUNNING
    message = (seen.message if seen is not None else "")[:1024]
    if done is None or done.revision != revision or done.state != state.value or done.message != message:
        p = p.with_status(preflight=PreflightStatus(revision=revision, state=state.value, message=message, time=now))
    if state is PreflightState.PASSED:
        return p.with_event("PreflightPassed", f"canary {revision}: {message or 'drafter checked'}")
    if state is PreflightState.FAILED:
        p = p.with_event("PreflightFailed", f"canary {revision}: {message}", warning=True)
        return Decided(abort(p, Outcome.ABORTED, f"preflight failed: {message}"))
    started = p.status.step_started_at or now
    deadline = started + parse_duration(p.spec.rollout.progress_deadline)
    if now >= deadline:
        return Decided(abort(p, Outcome.ABORTED, f"preflight not done within {p.spec.rollout.progress_deadline}"))
    return Decided(
        p.but(preflight_wanted=True, canary_traffic=False)
        .in_phase(Phase.PROGRESSING, True, "Preflight", f"checking the drafter of canary {revision} (preflight Job)")
        .waking_at(deadline)
    )


def _fail_on_crashes(p: Pass) -> Pass | Decided:
    """A canary container OOM-killed, or the canary's restarts over `guardrails.maxCanaryRestarts`: roll
    back, or pause for a human when autoRollback is off (a promote then accepts the crashes seen so far).

    The evidence is the pods' status in the Kubernetes API, not Prometheus, so it is judged with or
    without one (an unguarded canary too), and before readiness (a crashing pod is seldom Ready; waiting
    would leave it to the progress deadline). It needs no confidence bound: a restart is a count, not a
    sample, and an OOM kill fails at once whatever the limit, because a config that does not fit its
    memory (a drafter's weights, a deeper k's buffers) is killed again under the same load. Only pods of
    the canary revision count, and pods are created for a revision, so these are the crashes since the
    canary started, read again from the pods after a restart. Stable's restarts are named beside as the
    baseline, never judged: its pods may be days old, and a broken stable is what a canary may be fixing.
    """
    canary, status = p.obs.track(Track.CANARY), p.status
    if _paused_by(p, CANARY_CRASHED):
        if not p.applies(Command.PROMOTE):
            return Decided(p.but(canary_traffic=False))
        accepted = canary.restarts if canary.revision == status.canary_revision else 0
        return p.with_status(canary_restarts_accepted=accepted)  # the promote itself is _end_step's
    if canary.revision != status.canary_revision or not canary.crashes:
        return p
    reason = crash_reason(p, canary, status.canary_restarts_accepted)
    if not reason:
        return p
    return Decided(
        fail_canary(p, FallbackAction.ROLLBACK, f"guardrail failed: {reason}", against=True, cause=CANARY_CRASHED)
    )


def crash_reason(p: Pass, track: TrackObservation, accepted: int | None = None, what: str = "canary") -> str:
    """Why `track`'s crashes fail it (an OOM kill, or restarts over `maxCanaryRestarts` beyond the `accepted`
    ones), with stable's restarts as the baseline; empty when they do not."""
    new_restarts = track.restarts - (accepted or 0)
    limit = p.spec.rollout.guardrails.max_canary_restarts
    baseline = f"stable pods: {p.obs.track(Track.STABLE).restarts} restarts"
    if track.oom_kills and (accepted is None or new_restarts > 0):
        c = track.oom_kills[0]
        restart = f" (restart {c.restarts})" if c.restarts else ""
        return f"{what} pod {c.pod} container {c.container} was OOMKilled{restart}; {baseline}"
    if new_restarts > limit:
        worst = sorted(track.crashes, key=lambda c: -c.restarts)[:3]
        pods = ", ".join(f"pod {c.pod} container {c.container}: {c.restarts}" for c in worst)
        return f"{what} containers restarted {new_restarts} times, over maxCanaryRestarts {limit} ({pods}); {baseline}"
    return ""


def step_replicas(p: Pass) -> int:
    """The current step's canary replicas; when pods move within maxSurge, stable keeps one to compare with."""
    total = p.spec.main_replicas
    wanted = canary_replicas(total, p.spec.rollout.steps[p.status.current_step or 0].share)
    return min(wanted, total - 1) if budget(p.spec) is not None and total > 1 else wanted


def _wait_for_canary(p: Pass) -> Pass | Decided:
    """The step's canary replicas are not all Ready: wait, within the progress deadline.

    The deadline bounds the step's total not-Ready time: time the canary was Ready pushes it back, so a
    canary that crashes after hours gets the rest of its budget and a flapping one still ends. Ready
    canary pods keep their traffic once the canary has served (a later step, or after a crash), so
    capacity does not drop while the new step's pods load. A step that was Ready keeps its evidence and
    its Ready time (`step_ready_seconds`, which its pause counts) while its pods are replaced: the watch goes
    on while its Ready pods serve (a failure it finds counts), no analysis is asked for, and the next one, once
    they are all Ready again, reads across the gap.
    """
    spec, obs, status, wanted = p.spec, p.obs, p.status, step_replicas(p)
    canary = obs.track(Track.CANARY)
    if canary.revision == status.canary_revision and canary.ready >= wanted:
        return p
    if status.step_ready_at is not None:
        # The step's evidence stays while the same revision's pods are replaced (a node lost): each pod's
        # series counts on its own, so a replaced pod costs its own samples, not the step's.
        same = canary.revision == status.canary_revision
        ready_for = max(0, int((obs.now - status.step_ready_at).total_seconds()))
        p = p.with_status(
            step_ready_at=None,
            evidence_since=status.evidence_since if same else None,
            step_ready_seconds=status.step_ready_seconds + ready_for,
        )
    moving = budget(spec) is not None
    if moving and canary.revision == status.canary_revision and canary.ready > status.ready_replicas.canary:
        p = p.with_status(step_progressed_at=obs.now)  # pods swapped one by one: each Ready pod is progress
    started = p.status.step_progressed_at or p.status.step_started_at or obs.now
    deadline = started + parse_duration(spec.rollout.progress_deadline) + timedelta(seconds=p.status.step_ready_seconds)
    if obs.now >= deadline:
        detail = f": {canary.unschedulable}" if canary.unschedulable else ""
        reason = f"ProgressDeadlineExceeded: canary not Ready within {spec.rollout.progress_deadline}{detail}"
        return Decided(abort(p, Outcome.ABORTED, reason))
    # The canary keeps its Ready pods' traffic once it has served; when pods move within maxSurge, each
    # Ready pod serves at once (the pods stable gave up for it are not serving either).
    served = status.canary_weight > 0 or moving
    p = p.but(canary_traffic=served and canary.revision == status.canary_revision and canary.ready > 0)
    reason, waiting = "CanaryStarting", canary.unschedulable or f"{canary.ready}/{wanted} canary replicas ready"
    if p.canary_traffic and p.judged and p.status.evidence_since is not None and not _paused_after_failure(p):
        # a step that was Ready and still serves on its Ready pods: the watch goes on (it can only fail them)
        watched = _watch(p)
        if isinstance(watched, Decided):
            return watched
        p = watched
    request = _capacity_request(p, wanted, moving)
    room = obs.room if request is not None and obs.room is not None and obs.room.request == request else None
    if room is not None and not room.fits:
        said = any(c.type == ConditionType.PROGRESSING and c.reason == NO_ROOM for c in status.conditions)
        reason, waiting = NO_ROOM, f"{room.describe()}; {_room_advice(p)}"
        p = p if said else p.with_event(NO_ROOM, f"canary {status.canary_revision}: {waiting}", warning=True)
    return Decided(p.but(capacity_due=request).in_phase(Phase.PROGRESSING, True, reason, waiting).waking_at(deadline))


NO_ROOM = "InsufficientCapacity"
"""The reason (condition and event) for canary pods that the nodes have no room for."""


def _capacity_request(p: Pass, wanted: int, moving: bool) -> GpuRequest | None:
    """The canary pods that have no node yet, whose room the shell should check; None when all have one.

    With pods on top of `replicas`, that is every pod of the step not placed. When pods move within
    maxSurge, the canary only asks for GPUs stable has given up, so the check is for a canary pod left
    Pending once nothing is terminating: another pod took the GPUs stable released.
    """
    obs, spec = p.obs, p.spec
    canary = obs.track(Track.CANARY)
    canary = canary if canary.revision == p.status.canary_revision else TrackObservation()
    if not moving:
        pods = wanted - canary.placed
    elif canary.unschedulable and not canary.terminating and not obs.track(Track.STABLE).terminating:
        pods = canary.replicas - canary.placed
    else:
        pods = 0
    accelerator = spec.accelerator
    products = tuple(accelerator.product_names)
    return GpuRequest(pods, spec.gpus_per_replica, accelerator.resource_name, products) if pods > 0 else None


def _room_advice(p: Pass) -> str:
    limits = budget(p.spec)
    if limits is None:
        return "set rollout.maxSurge: 0 to swap stable pods for canary pods instead"
    if limits.surge == 0:
        return "another pod took the GPUs stable gave up: stable gives up no more pods until the canary's are placed"
    return f"the {limits.surge} pods of rollout.maxSurge do not fit: set it lower (0 swaps stable pods for canary pods)"


def _serve(p: Pass) -> Pass:
    """Every canary replica of the step is Ready: it takes traffic, and this step's evidence starts now (or
    goes on, when pods of a step that was Ready were replaced)."""
    p = p.but(canary_traffic=True)
    if p.status.step_ready_at is not None:
        return p
    return p.with_status(step_ready_at=p.obs.now, evidence_since=p.status.evidence_since or p.obs.now)


def _end_step(p: Pass) -> Pass | Decided:
    """A promote for this canary, or the step's pause over with its analyses passed: next step, or promote."""
    given = p.pending(Command.PROMOTE) if p.applies(Command.PROMOTE) else None
    if given is not None:
        p = p.acknowledging(Command.PROMOTE)
        if PROMOTE_FULL in given.split("@")[0].split():
            return Decided(promote(p, "promoted by the user (full)"))
    else:
        held = _hold_step(p)
        if isinstance(held, Decided):
            return held
        p = held
    if p.measuring:  # an experiment's candidate is measured over its first step, then leaves
        return Decided(p.but(measured=True))
    step_index = p.status.current_step
    assert step_index is not None
    if step_index < len(p.spec.rollout.steps) - 1:
        p = p.with_status(
            step_anew(p.obs.now),
            current_step=step_index + 1,
        )
        p = p.with_event("StepAdvanced", f"canary {p.status.canary_revision} to {step_label(p)}")
        return p.in_phase(Phase.PROGRESSING, True, "CanaryStep", step_label(p))
    if given is not None:
        return Decided(promote(p, "promoted by the user"))
    if p.judged:
        return Decided(promote(p, "all steps passed"))
    return Decided(promote(p, "all steps' pauses elapsed, unguarded (spec.rollout.unguarded: no analysis)"))


def _no_baseline(p: Pass) -> bool:
    """Nothing to compare the canary with: stable has no Ready pod, or an HTTPRoute gives it no traffic."""
    step = p.spec.rollout.steps[p.status.current_step or 0]
    return p.obs.track(Track.STABLE).ready == 0 or (p.obs.routed and step.users >= 100)


def _hold_step(p: Pass) -> Pass | Decided:
    """Wait (`Decided`) unless the step's pause is over and its analyses passed; phase and wake-ups say why."""
    step = p.spec.rollout.steps[p.status.current_step or 0]
    label, now = step_label(p), p.obs.now
    if step.pause is not None and step.pause.duration is None:
        return Decided(p.in_phase(Phase.PAUSED, True, "ManualGate", f"{label}: waiting for promote"))
    pause = parse_duration(step.pause.duration) if step.pause and step.pause.duration else timedelta(0)
    if p.measuring:  # a candidate is measured over a whole analysis window
        pause = max(pause, parse_duration(p.spec.rollout.analysis.window))
    assert p.status.step_ready_at is not None
    ends = p.status.step_ready_at + pause - timedelta(seconds=p.status.step_ready_seconds)  # Ready time only
    passed = _analysis_passed_this_step(p)
    if now >= ends and not passed and p.judged and _no_baseline(p):
        until = (
            "resumes by itself once stable has a Ready pod again, or "
            if p.obs.track(Track.STABLE).ready == 0
            else "stays until the route gives stable traffic again, or "
        )
        message = (
            f"{label}: no baseline (stable has no Ready pod or no traffic), so the canary cannot pass; its "
            f"absolute guardrails are still judged (a failure rolls back) and onNoData does not act; {until}"
            "promote or abort with kubectl specfleet"
        )
        return Decided(p.in_phase(Phase.PAUSED, True, "NoBaseline", message))
    if now < ends:
        return Decided(p.in_phase(Phase.PROGRESSING, True, "CanaryStep", f"{label}: waiting for pause").waking_at(ends))
    if not passed:
        message = f"{label}: waiting for a passing analysis"
        return Decided(p.in_phase(Phase.PROGRESSING, True, "CanaryStep", message))
    return p


def _analysis_passed_this_step(p: Pass) -> bool:
    """Unguarded canaries advance on pauses alone; guarded ones need a Pass on evidence from this step only.

    The Pass's evidence must start no earlier than the step's evidence (`evidence_since`: when the step's
    canary replicas were first all Ready, or its last counted failure) and span at least one analysis
    interval (or the whole window, if shorter); an experiment's candidate needs the whole window, the
    evidence its measurements are read from.
    """
    if not p.judged:
        return True
    last, started = p.status.last_analysis, p.status.evidence_since
    if last is None or last.revision != p.status.canary_revision or last.verdict is not Verdict.PASS:
        return False
    if started is None:
        return False
    analysis = p.spec.rollout.analysis
    window = parse_duration(analysis.window)
    needed = window if p.measuring else min(parse_duration(analysis.interval), window)
    span = timedelta(seconds=last.evidence_seconds) if last.evidence_seconds is not None else last.time - started
    return last.time - span >= started and span >= needed


def _judge(p: Pass) -> Pass | Decided:
    """Ask for an analysis when one is due, or take in a fresh one and act on it (a failure ends the canary)."""
    if not p.judged:
        return p
    if _paused_after_failure(p):
        last = p.status.last_analysis
        return Decided(p.but(canary_traffic=last is None or last.verdict is not Verdict.FAIL))
    watched = _watch(p)
    if isinstance(watched, Decided):
        return watched
    p = watched
    analysis = p.obs.analysis
    if analysis is None or analysis.revision != p.status.canary_revision:
        return _ask_for_analysis(p)
    previous = p.status.last_analysis
    p = p.with_status(last_analysis=analysis).waking_at(p.obs.now + parse_duration(p.spec.rollout.analysis.interval))
    if analysis.verdict is not Verdict.ERROR:
        p = p.with_status(analyses=p.status.analyses + 1)
    if analysis.verdict is Verdict.PASS:
        return p.with_status(unjudged_since=None, no_data_seconds=0, provider_error_seconds=0)
    if analysis.verdict is Verdict.FAIL:
        return _count_failure(p.with_status(unjudged_since=None, no_data_seconds=0, provider_error_seconds=0), analysis)
    return _no_verdict(p, analysis, previous)


def _watch(p: Pass) -> Pass | Decided:
    """Ask for a watch of the canary's newest scrape on every pass (the shell judges each scrape once), or take
    in the failure one found: it counts as a failed analysis."""
    watch = p.obs.watch
    if watch is None:
        return p.but(watch_due=True)
    if watch.failure is None or watch.revision != p.status.canary_revision:
        return p
    cleared = p.with_status(
        last_analysis=watch.failure, unjudged_since=None, no_data_seconds=0, provider_error_seconds=0
    )
    return _count_failure(cleared, watch.failure)


def _ask_for_analysis(p: Pass) -> Pass:
    """Due one interval into this step's evidence, and one interval after the last look."""
    interval = parse_duration(p.spec.rollout.analysis.interval)
    due = (p.status.evidence_since or p.obs.now) + interval
    last = p.status.last_analysis
    if last is not None and last.revision == p.status.canary_revision:
        due = max(due, last.time + interval)
    return p.but(analysis_due=p.obs.now >= due).waking_at(max(due, p.obs.now))


def _count_failure(p: Pass, analysis: Analysis) -> Pass | Decided:
    """One more failed analysis; over the failure limit the canary is rolled back (or paused)."""
    failures = p.status.failed_analyses + 1
    # the next failure must stand on evidence gathered after this one, so failures are independent
    p = p.with_status(failed_analyses=failures, evidence_since=p.obs.now)
    reasons = "; ".join(analysis.reasons)
    p = p.with_event(ANALYSIS_FAILED, f"canary {analysis.revision}: {reasons}", warning=True)
    if failures > p.spec.rollout.analysis.failure_limit:
        return Decided(fail_canary(p, FallbackAction.ROLLBACK, f"guardrail failed: {reasons}"))
    return p


def _no_verdict(p: Pass, analysis: Analysis, previous: Analysis | None) -> Pass | Decided:
    """An Inconclusive or Error verdict: count the time since the previous look against the previous
    look's own fallback, then act if this verdict's fallback has run out. Inconclusive time without a
    baseline is not counted (and onNoData does not act then): the missing evidence is stable's."""
    settings, status, no_baseline = p.spec.rollout.analysis, p.status, _no_baseline(p)
    no_data, errors = status.no_data_seconds, status.provider_error_seconds
    unjudged = (Verdict.INCONCLUSIVE, Verdict.ERROR)
    if status.unjudged_since is not None and previous is not None and previous.verdict in unjudged:
        elapsed = max(0, int((analysis.time - previous.time).total_seconds()))
        if previous.verdict is Verdict.ERROR:
            errors += elapsed
        elif not no_baseline:
            no_data += elapsed
    p = p.with_status(
        unjudged_since=status.unjudged_since or p.obs.now, no_data_seconds=no_data, provider_error_seconds=errors
    )
    if analysis.verdict is Verdict.INCONCLUSIVE:
        if no_baseline:
            return p
        fallback, spent, what = settings.on_no_data, no_data, "no conclusive data"
    else:
        fallback, spent, what = settings.on_provider_error, errors, "Prometheus errors"
    if spent >= parse_duration(fallback.after).total_seconds():
        return Decided(fail_canary(p, fallback.action, f"{what} for {fallback.after}: {'; '.join(analysis.reasons)}"))
    return p


def _paused_by(p: Pass, cause: str) -> bool:
    """Whether the canary is paused by `fail_canary` for this cause (autoRollback off)."""
    return any(c.type == ConditionType.PROGRESSING and c.reason == f"{cause}Paused" for c in p.status.conditions)


def _paused_after_failure(p: Pass) -> bool:
    """A canary paused by a failure (autoRollback off) waits for a human: a promote for it lifts the pause."""
    return _paused_by(p, ANALYSIS_FAILED) and not p.applies(Command.PROMOTE)

"""An experiment over `spec.autoTune.candidates`: measure every candidate beside stable, then canary the best.

Side by side, when the replicas permit: every candidate gets its own slice (`<name>-candidate-<i>`, the
first step's share of the replicas) at once, serves its share of the fleet's traffic (the fleet Service
spreads requests over every Ready pod, so per-pod load is comparable) and is judged by every guardrail
against stable over the same windows. A slice is measured once a passing analysis covers a whole window
since its pods were all Ready; it keeps serving until every slice is done, so the others keep their load.
A slice that crashes, fails a guardrail, is not Ready within the progress deadline or gives no conclusive
analysis within `onNoData.after` past its first window fails and goes at once.

One after another, otherwise (one candidate to measure, no Prometheus, an HTTPRoute, a new drafter that
its preflight must check first, or too few replicas): each candidate is a canary of its own revision at
the first step's weight, measured over that step, then leaves; status.experiment.mode says why.

When all are done the winner (see `autotune.candidates.choose`) is canaried through all the steps under
the experiment's revision, and promoted as any canary; if none beats stable, stable stays and the
revision is held.
"""

from datetime import datetime

from specfleet.api.durations import parse_duration
from specfleet.api.spec import SpeculativeDeploymentSpec
from specfleet.api.status import (
    Analysis,
    CandidateResult,
    CandidateState,
    ExperimentStatus,
    Outcome,
    Phase,
    Verdict,
)
from specfleet.api.vocabulary import Command, ConditionType
from specfleet.autotune.candidates import Score, choose, depth
from specfleet.render.manifests import canary_replicas, revision
from specfleet.rollout.canary import (
    crash_reason,
    needs_preflight,
    progress_canary,
    start_canary,
    supersede_canary,
)
from specfleet.rollout.lifecycle import abort, retire_canary
from specfleet.rollout.state import Pass
from specfleet.rollout.tuning import drafter_of, with_points
from specfleet.rollout.types import TrackObservation

SEQUENTIAL = "one after another on the canary track, each at the first step's weight"
SIDE_BY_SIDE = "side by side: each candidate on its own slice of {replicas} beside stable, over the same windows"


def run_experiment(p: Pass, desired: str) -> Pass:
    """One pass of the experiment for revision `desired`: start it, measure the live candidate, or canary
    the chosen one."""
    experiment = p.status.experiment
    if experiment is None or experiment.revision != desired:
        p = _start(p, desired)
        assert p.status.experiment is not None
        if not p.status.experiment.side_by_side:
            return _next_candidate(p)
        if p.status.canary_revision is not None:  # the slices replace it: it drains first (see lifecycle.drain)
            p = retire_canary(supersede_canary(p, desired))
        return _measure_slices(p)
    if experiment.chosen is not None:
        if p.status.canary_revision != desired:
            return progress_canary(start_canary(p, desired))
        return progress_canary(p)
    if experiment.side_by_side:
        return _measure_slices(p)
    live = _live(p)
    if live is None or p.status.canary_revision != live.revision:
        return _next_candidate(p)
    if p.applies(Command.ABORT):
        return _abort(p.acknowledging(Command.ABORT), "aborted by the user")
    p = progress_canary(p.but(measuring=True))
    if p.measured:
        return _next_candidate(retire_canary(_measured(p, live, p.status.last_analysis)))
    if p.status.canary_revision is None:  # the candidate was rolled back or aborted
        reason = p.status.history[-1].reason if p.status.history else "ended"
        p = _mark(p, live.index, state=CandidateState.FAILED, reason=reason[:1024])
        return _next_candidate(p.with_status(rejected_revision=None))
    return _say_which(p, live)


def _start(p: Pass, desired: str) -> Pass:
    assert p.spec.auto_tune is not None
    candidates = []
    for index in range(len(p.spec.auto_tune.candidates)):
        spec = p.spec.candidate_spec(index)
        same = spec.serving() == p.status.stable_serving
        candidates.append(
            CandidateResult(
                index=index,
                revision=revision(spec),
                summary=spec.summary()[:1024],
                num_speculative_tokens=depth(spec),
                state=CandidateState.SAME_AS_STABLE if same else CandidateState.PENDING,
                token_latency_ratio=1.0 if same else None,
            )
        )
    why_not = _one_after_another_because(p, [c for c in candidates if c.state is CandidateState.PENDING])
    if why_not:
        mode = f"{SEQUENTIAL} ({why_not})"
    else:
        replicas = slice_replicas(p.spec)
        mode = SIDE_BY_SIDE.format(replicas=f"{replicas} replica{'s' if replicas > 1 else ''}")
        pending = CandidateState.PENDING
        candidates = [
            c.model_copy(update={"state": CandidateState.MEASURING, "started_at": p.obs.now})
            if c.state is pending
            else c
            for c in candidates
        ]
    experiment = ExperimentStatus(
        revision=desired, mode=mode, side_by_side=not why_not, candidates=candidates, started_at=p.obs.now
    )
    p = p.with_status(experiment=experiment)
    return p.with_event("ExperimentStarted", f"revision {desired}: {len(candidates)} candidates, {mode}")


def slice_replicas(spec: SpeculativeDeploymentSpec) -> int:
    """Replicas of one side-by-side candidate: the first step's share, as a sequential candidate gets."""
    return canary_replicas(spec.main_replicas, spec.rollout.steps[0].share)


def _one_after_another_because(p: Pass, pending: list[CandidateResult]) -> str:
    """Why the candidates cannot be measured side by side; empty when they can."""
    replicas, total = slice_replicas(p.spec), p.spec.main_replicas
    if len(pending) < 2:
        return "one candidate to measure"
    if not p.obs.prometheus:
        return "no Prometheus to measure them with"
    if p.obs.routed:
        return "an HTTPRoute splits the traffic and has no backend per candidate"
    if len(pending) * replicas >= total:
        return f"{len(pending)} slices of {replicas} would leave stable none of its {total} replicas"
    if any(needs_preflight(p, p.spec.candidate_spec(c.index)) for c in pending):
        return "a new drafter is checked by its preflight before it serves"
    return ""


def _live(p: Pass) -> CandidateResult | None:
    return next(iter(_measuring(p)), None)


def _mark(p: Pass, index: int, **changes: object) -> Pass:
    experiment = p.status.experiment
    assert experiment is not None
    candidates = [c.model_copy(update=changes) if c.index == index else c for c in experiment.candidates]
    return p.with_status(experiment=experiment.model_copy(update={"candidates": candidates}))


def _measured(p: Pass, live: CandidateResult, last: Analysis | None) -> Pass:
    """The candidate's measurement is over: keep its last passing analysis (candidate and stable, same window)."""
    if last is None or last.revision != live.revision or last.verdict is not Verdict.PASS:
        return _mark(p, live.index, state=CandidateState.FAILED, reason="no passing analysis: not measured")
    canary, stable = last.canary, last.stable
    latency = _ratio(canary.token_latency_mean_seconds, stable.token_latency_mean_seconds)
    throughput = _ratio(canary.generation_tokens_per_pod_per_second, stable.generation_tokens_per_pod_per_second)
    p = _mark(
        p,
        live.index,
        state=CandidateState.MEASURED if latency is not None else CandidateState.FAILED,
        token_latency_ratio=latency,
        throughput_ratio=throughput,
        canary=canary,
        stable=stable,
        reason="" if latency is not None else "no per-token latency measured",
    )
    stable_spec = p.served_spec(p.status.stable_revision)
    candidate = p.served_spec(live.revision)
    same_drafter = [(depth(candidate), canary)] if drafter_of(candidate) == drafter_of(stable_spec) else []
    p = with_points(p, stable_spec, [*same_drafter, (depth(stable_spec), stable)], p.obs.now)
    detail = f"mean per-token latency x{latency:.3f} of stable's" if latency is not None else "not measured"
    return p.with_event("CandidateMeasured", f"candidate {live.index} ({live.summary}): {detail}")


def _ratio(canary: float | None, stable: float | None) -> float | None:
    return canary / stable if canary is not None and stable else None


def _next_candidate(p: Pass) -> Pass:
    """Start the next pending candidate, or choose once none is left."""
    experiment = p.status.experiment
    assert experiment is not None
    pending = next((c for c in experiment.candidates if c.state is CandidateState.PENDING), None)
    if pending is None:
        return _choose(p)
    p = _mark(p, pending.index, state=CandidateState.MEASURING)
    return progress_canary(start_canary(p.but(measured=False), pending.revision).but(measuring=True))


def _choose(p: Pass) -> Pass:
    experiment = p.status.experiment
    assert experiment is not None and p.spec.auto_tune is not None
    scores = [
        Score(c.index, c.token_latency_ratio, c.throughput_ratio, c.num_speculative_tokens or 0)
        for c in experiment.candidates
        if c.state is CandidateState.MEASURED and c.token_latency_ratio is not None
    ]
    winner = choose(scores, p.spec.auto_tune.min_improvement)
    measured = {s.index for s in scores}
    candidates = [
        c.model_copy(update={"state": CandidateState.CHOSEN if c.index == winner else CandidateState.LOST})
        if c.index in measured
        else c
        for c in experiment.candidates
    ]
    p = p.with_status(
        experiment=experiment.model_copy(update={"candidates": candidates, "chosen": winner, "ended_at": p.obs.now})
    )
    p = p.but(measured=False, measuring=False)
    if winner is None:
        return _keep_stable(p)
    chosen = candidates[winner]
    p = p.with_event(
        "CandidateChosen",
        f"candidate {winner} ({chosen.summary}): mean per-token latency x{chosen.token_latency_ratio:.3f} of "
        f"stable's; canaried through every step as revision {experiment.revision}",
    )
    return progress_canary(start_canary(p, experiment.revision))


def _keep_stable(p: Pass) -> Pass:
    experiment = p.status.experiment
    assert experiment is not None and p.spec.auto_tune is not None
    margin = p.spec.auto_tune.min_improvement
    reason = f"no candidate beat stable's mean per-token latency by {margin:.0%}: stable kept"
    p = p.recording(Outcome.KEPT_STABLE, experiment.revision, reason, of_current_spec=False)
    p = p.with_event("ExperimentKeptStable", f"revision {experiment.revision}: {reason}", warning=True)
    p = p.with_status(rejected_revision=experiment.revision)
    return p.in_phase(Phase.HEALTHY, True, "ExperimentKeptStable", reason)


def _abort(p: Pass, reason: str) -> Pass:
    """The whole experiment ends: the live candidate retires (side by side: the slices go), the experiment's
    revision is held."""
    experiment = p.status.experiment
    assert experiment is not None
    for candidate in _measuring(p):
        p = _mark(p, candidate.index, state=CandidateState.FAILED, reason=reason)
    if experiment.side_by_side:
        p = p.recording(Outcome.ABORTED, experiment.revision, reason, of_current_spec=False)
        p = p.with_event("Aborted", f"experiment {experiment.revision}: {reason}", warning=True)
        p = p.in_phase(Phase.ABORTED, False, Outcome.ABORTED.value, reason)
    else:
        p = abort(p, Outcome.ABORTED, reason)
    experiment = p.status.experiment
    assert experiment is not None
    return p.with_status(
        rejected_revision=experiment.revision, experiment=experiment.model_copy(update={"ended_at": p.obs.now})
    )


def _measuring(p: Pass) -> list[CandidateResult]:
    """The candidates being measured (one after another: the live one; side by side: every live slice)."""
    assert p.status.experiment is not None
    return [c for c in p.status.experiment.candidates if c.state is CandidateState.MEASURING]


def _say_which(p: Pass, live: CandidateResult) -> Pass:
    """While a candidate progresses, the Progressing condition names it and how far the experiment is."""
    experiment = p.status.experiment
    assert experiment is not None
    condition = next((c for c in p.status.conditions if c.type == ConditionType.PROGRESSING), None)
    if p.status.phase is not Phase.PROGRESSING or condition is None or condition.reason == "Experiment":
        return p  # not progressing, or already said this pass
    started = sum(c.state is not CandidateState.PENDING for c in experiment.candidates)
    which = f"candidate {live.index} ({live.summary}), {started}/{len(experiment.candidates)} started"
    return p.in_phase(Phase.PROGRESSING, True, "Experiment", f"{which}: {condition.message}"[:1024])


def _measure_slices(p: Pass) -> Pass:
    """One pass of a side-by-side experiment: wait for, judge, measure or fail each live slice; choose once
    none is left. No canary is live meanwhile, so an abort is for the experiment."""
    if p.pending(Command.ABORT) is not None:
        return _abort(p.acknowledging(Command.ABORT), "aborted by the user")
    for candidate in _measuring(p):
        p = _look_at_slice(p, candidate)
    p = _measure_together(p)
    p = _when_to_measure(p)
    live = _measuring(p)
    if not live:
        return _choose(p)
    experiment = p.status.experiment
    assert experiment is not None
    serving = tuple(
        c.index for c in experiment.candidates if c.state in (CandidateState.MEASURING, CandidateState.MEASURED)
    )
    ready = sum(c.ready_at is not None for c in live)
    message = f"{len(live)} of {len(experiment.candidates)} candidates measuring side by side, {ready} of them Ready"
    return p.but(canary_traffic=True, slices=serving).in_phase(Phase.PROGRESSING, True, "Experiment", message)


def _look_at_slice(p: Pass, candidate: CandidateResult) -> Pass:
    """One slice: failed by its crashes or its deadline, waited for until Ready (and a replaced canary has
    drained), then judged by its fresh analysis, if any."""
    spec, now = p.spec, p.obs.now
    seen = p.obs.candidates.get(candidate.index, TrackObservation())
    own = seen.revision == candidate.revision
    crashed = crash_reason(p, seen, what=f"candidate {candidate.index}") if own else ""
    if crashed:
        return _fail_slice(p, candidate, f"guardrail failed: {crashed}")
    if not own or seen.ready < slice_replicas(spec) or p.status.retiring_revision is not None:
        deadline = (candidate.started_at or now) + parse_duration(spec.rollout.progress_deadline)
        if now >= deadline:
            detail = f": {seen.unschedulable}" if seen.unschedulable else ""
            return _fail_slice(p, candidate, f"not Ready within {spec.rollout.progress_deadline}{detail}")
        return _mark(p, candidate.index, ready_at=None).waking_at(deadline)
    ready_at = candidate.ready_at or now
    p = _mark(p, candidate.index, ready_at=ready_at)
    analysis = p.obs.candidate_analyses.get(candidate.index)
    if analysis is None or analysis.revision != candidate.revision:
        return p
    looks = candidate.looks + (analysis.verdict is not Verdict.ERROR)
    p = _mark(p, candidate.index, looks=looks, looked_at=analysis.time, reason="; ".join(analysis.reasons)[:1024])
    if analysis.verdict is Verdict.FAIL:
        return _fail_slice(p, candidate, f"guardrail failed: {'; '.join(analysis.reasons)}")
    return p


def _measure_together(p: Pass) -> Pass:
    """The live slices are measured at one look, once every one of them passes on a whole window: a slice that
    passes first keeps measuring (its evidence grows with the others'), so every ratio to stable is read over
    the same range. A slice that fails leaves; the others go on."""
    live = _measuring(p)
    fresh = [(c, p.obs.candidate_analyses.get(c.index)) for c in live]
    passed = [
        (c, a)
        for c, a in fresh
        if a is not None and a.revision == c.revision and a.verdict is Verdict.PASS and c.ready_at is not None
        if _covers_a_window(p, a, c.ready_at)
    ]
    if not live or len(passed) < len(live):
        return p
    for candidate, analysis in passed:
        p = _measured(p, candidate, analysis)
    return p


def _when_to_measure(p: Pass) -> Pass:
    """The live slices are analysed together, once the last of them has been Ready for a whole window (so
    each reads the same window), then every interval; `onNoData.after` past that first window, the ones
    still without a passing analysis fail."""
    live = _measuring(p)
    if not live or any(c.ready_at is None for c in live):
        return p  # a slice still starting (within its deadline) holds the others' first window
    settings, now = p.spec.rollout.analysis, p.obs.now
    first = max(c.ready_at for c in live if c.ready_at is not None) + parse_duration(settings.window)
    give_up = first + parse_duration(settings.on_no_data.after)
    if now >= give_up:
        for candidate in live:
            last = candidate.reason or "no analysis"
            p = _fail_slice(p, candidate, f"no passing analysis within {settings.on_no_data.after}: {last}")
        return p
    looked = [c.looked_at for c in live if c.looked_at is not None]
    due = max(first, max(looked) + parse_duration(settings.interval)) if looked else first
    if now >= due:
        p = p.but(candidate_analyses_due=tuple(c.index for c in live))
    return p.waking_at(max(due, now)).waking_at(give_up)


def _covers_a_window(p: Pass, analysis: Analysis, ready_at: datetime) -> bool:
    """The analysis reads a whole window, all of it from after the slice's pods were Ready."""
    window = parse_duration(p.spec.rollout.analysis.window).total_seconds()
    span = analysis.evidence_seconds or 0
    return span >= window and analysis.time.timestamp() - span >= ready_at.timestamp()


def _fail_slice(p: Pass, candidate: CandidateResult, reason: str) -> Pass:
    """The slice cannot win: marked Failed, its Deployment goes at once (it no longer counts for the others)."""
    p = _mark(p, candidate.index, state=CandidateState.FAILED, reason=reason[:1024])
    return p.with_event("CandidateFailed", f"candidate {candidate.index} ({candidate.summary}): {reason}", warning=True)

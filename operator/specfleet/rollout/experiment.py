"""An experiment over `spec.autoTune.candidates`: measure each candidate as a canary, then canary the best.

The candidates go one after another through the canary track. Each is a canary of its own revision at the
first step's weight, judged by every guardrail as any canary is; once that step is over (its pause and a
passing analysis) its measurements go into `status.experiment` and it leaves. A candidate that fails a
guardrail, its preflight or its deadline is marked Failed and the next one starts. When all are done the
winner (see `autotune.candidates.choose`) is canaried through all the steps under the experiment's
revision, and promoted as any canary; if none beats stable, stable stays and the revision is held.
"""

from specfleet.api.status import CandidateResult, CandidateState, ExperimentStatus, Outcome, Phase, Verdict
from specfleet.api.vocabulary import Command, ConditionType
from specfleet.autotune.candidates import Score, candidate_spec, choose, depth
from specfleet.render.manifests import revision
from specfleet.rollout.canary import progress_canary, start_canary
from specfleet.rollout.lifecycle import abort, retire_canary
from specfleet.rollout.state import Pass
from specfleet.rollout.tuning import drafter_of, with_points

MODE = "sequential: one candidate after another on the canary track, each at the first step's weight"


def run_experiment(p: Pass, desired: str) -> Pass:
    """One pass of the experiment for revision `desired`: start it, measure the live candidate, or canary
    the chosen one."""
    experiment = p.status.experiment
    if experiment is None or experiment.revision != desired:
        return _next_candidate(_start(p, desired))
    if experiment.chosen is not None:
        if p.status.canary_revision != desired:
            return progress_canary(start_canary(p, desired))
        return progress_canary(p)
    live = _live(p)
    if live is None or p.status.canary_revision != live.revision:
        return _next_candidate(p)
    if p.applies(Command.ABORT):
        return _abort(p.acknowledging(Command.ABORT), "aborted by the user")
    p = progress_canary(p.but(measuring=True))
    if p.measured:
        return _next_candidate(retire_canary(_measured(p, live)))
    if p.status.canary_revision is None:  # the candidate was rolled back or aborted
        reason = p.status.history[-1].reason if p.status.history else "ended"
        p = _mark(p, live.index, state=CandidateState.FAILED, reason=reason[:1024])
        return _next_candidate(p.with_status(rejected_revision=None))
    return _say_which(p, live)


def _start(p: Pass, desired: str) -> Pass:
    assert p.spec.auto_tune is not None
    candidates = []
    for index in range(len(p.spec.auto_tune.candidates)):
        spec = candidate_spec(p.spec, index)
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
    experiment = ExperimentStatus(revision=desired, mode=MODE, candidates=candidates, started_at=p.obs.now)
    p = p.with_status(experiment=experiment)
    return p.with_event("ExperimentStarted", f"revision {desired}: {len(candidates)} candidates, {MODE}")


def _live(p: Pass) -> CandidateResult | None:
    assert p.status.experiment is not None
    return next((c for c in p.status.experiment.candidates if c.state is CandidateState.MEASURING), None)


def _mark(p: Pass, index: int, **changes: object) -> Pass:
    experiment = p.status.experiment
    assert experiment is not None
    candidates = [c.model_copy(update=changes) if c.index == index else c for c in experiment.candidates]
    return p.with_status(experiment=experiment.model_copy(update={"candidates": candidates}))


def _measured(p: Pass, live: CandidateResult) -> Pass:
    """The candidate's step is over: keep its last passing analysis (canary and stable, same window)."""
    last = p.status.last_analysis
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
    return progress_canary(start_canary(p.but(decided=False, measured=False), pending.revision).but(measuring=True))


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
    p = p.but(decided=False, measured=False, measuring=False)
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
    return (
        p.with_status(rejected_revision=experiment.revision)
        .in_phase(Phase.HEALTHY, True, "ExperimentKeptStable", reason)
        .but(decided=True)
    )


def _abort(p: Pass, reason: str) -> Pass:
    """The whole experiment ends: the live candidate retires, the experiment's revision is held."""
    live = _live(p)
    if live is not None:
        p = _mark(p, live.index, state=CandidateState.FAILED, reason=reason)
    p = abort(p, Outcome.ABORTED, reason)
    experiment = p.status.experiment
    assert experiment is not None
    return p.with_status(
        rejected_revision=experiment.revision, experiment=experiment.model_copy(update={"ended_at": p.obs.now})
    )


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

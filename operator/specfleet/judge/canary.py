"""`judge`: one verdict of every guardrail on both tracks' evidence since the step started, with the
false-verdict budget split over the guardrails judged (`judged_guardrails`).

Each built-in guardrail is one module of `judge/guardrails/` (what it judges and why, from vLLM's source, is
in its docstring and docs/judge.md); the custom guardrails (`judge.custom`) and output equivalence
(`judge.equivalence`) are judged beside them, on the same budget.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial

from specfleet.api.spec import Guardrails
from specfleet.api.status import GuardrailCheck, Measurements, Verdict
from specfleet.judge import wording
from specfleet.judge.custom import custom_check
from specfleet.judge.equivalence import PairTally, output_equivalence
from specfleet.judge.evidence import TrackEvidence, measurements
from specfleet.judge.guardrail import Look
from specfleet.judge.guardrails import GUARDRAILS
from specfleet.judge.verdicts import Check
from specfleet.stats import look_budget, sequence_z, z_score


@dataclass(frozen=True)
class Judgement:
    verdict: Verdict
    reasons: tuple[str, ...]
    canary: Measurements
    stable: Measurements
    checks: tuple[GuardrailCheck, ...] = ()
    seconds: float | None = None
    """The span of evidence a watch's failure stands on (its shortest failing range, or the step's whole
    evidence when an error guardrail failed over it); None for an analysis, whose span the shell knows."""


WATCH_SHARE = 0.5
"""The watch's share of the trailing half of the false-failure budget; the analyses' window check spends the rest."""
WHOLE_STEP_GUARDRAILS = frozenset({"maxErrorRateIncrease", "maxErrorRate"})
"""The guardrails a watch also checks over the step's whole evidence, on the analyses' own confidence sequence:
errors are counts, so a whole step of them is one cheap query, and a small excess shows only over many requests."""
OVER_THE_STEP = "over the step's"
"""How a whole-step failure's reason starts (`watch`)."""


@dataclass(frozen=True)
class Recent:
    """Both tracks' evidence over a trailing range alone, checked for failures only: a canary that turns bad
    late in a long step is caught without waiting for its bad evidence to outweigh its good start. Its bounds
    are for one look (`look_budget`) numbered `look`: the analysis's number for the trailing `analysis.window`,
    the scrape's number since the canary started for a watch's ranges."""

    canary: TrackEvidence
    stable: TrackEvidence
    seconds: float
    look: int


def _computed(guardrail: str, check: Callable[[], Check]) -> Check:
    """`check()`, or Inconclusive when the evidence breaks its arithmetic. The schema admits limits at their
    bounds and Prometheus answers any finite number (a counter's increase extrapolated to 1e308 or to 1e-320):
    what such evidence cannot show is not judged, so it never passes, and the analysis still ends in a verdict
    (`onNoData` then applies, as for missing data)."""
    try:
        return check()
    except (ArithmeticError, ValueError) as error:
        said = f"{type(error).__name__}: {error}"
        return Check(Verdict.INCONCLUSIVE, f"{guardrail} cannot be computed from this evidence ({said})", guardrail)


def _checks(look: Look, speculative: bool) -> list[Check]:
    """The registry's guardrails the spec turns on, in its order, with the custom ones after those that need no
    requests; those that do are judged only once the canary has `minRequests` (else one `minRequests` check
    says what is missing)."""
    g, canary = look.guardrails, look.canary
    judged = [(guardrail, limit) for guardrail in GUARDRAILS if (limit := guardrail.limit(g)) is not None]
    judged = [(guardrail, limit) for guardrail, limit in judged if guardrail.judged(g, speculative)]
    checks = [
        _computed(guardrail.name, partial(guardrail.check, look, limit))
        for guardrail, limit in judged
        if not guardrail.needs_requests
    ]
    for custom in g.custom:  # each with its own minimum of events
        checks.append(_computed(f"custom:{custom.name}", partial(custom_check, look, custom)))
    if canary.requests < g.requests_needed:
        needs = f"need {g.requests_needed}"
        if canary.requests > 0:
            needs += f": {look.growth().more(g.requests_needed / canary.requests)}"
        checks.append(Check(Verdict.INCONCLUSIVE, f"{canary.requests:.0f} canary requests ({needs})", "minRequests"))
        return checks
    checks += [
        _computed(guardrail.name, partial(guardrail.check, look, limit))
        for guardrail, limit in judged
        if guardrail.needs_requests
    ]
    return checks


def _error_checks(look: Look, speculative: bool) -> list[Check]:
    """`WHOLE_STEP_GUARDRAILS` that are on, judged as `_checks` would (nothing before `minRequests`)."""
    g = look.guardrails
    if look.canary.requests < g.requests_needed:
        return []
    return [
        _computed(guardrail.name, partial(guardrail.check, look, limit))
        for guardrail in GUARDRAILS
        if guardrail.name in WHOLE_STEP_GUARDRAILS
        and (limit := guardrail.limit(g)) is not None
        and guardrail.judged(g, speculative)
    ]


def judged_guardrails(guardrails: Guardrails, speculative: bool) -> int:
    """Guardrails with a confidence bound, over which the false-verdict budget is split: the registry's that
    are on and `bounded` (the KV level is not), each custom guardrail, and output equivalence when enabled."""
    built_in = sum(g.bounded and g.judged(guardrails, speculative) for g in GUARDRAILS)
    return built_in + len(guardrails.custom) + int(guardrails.output_equivalence.enabled)


def _failures(
    recent: Recent, guardrails: Guardrails, speculative: bool, z: float, named: str, same: bool
) -> list[Check]:
    """The guardrails that surely fail over the trailing range alone, each bound `z` standard errors wide."""
    trailing = Look(guardrails, recent.canary, recent.stable, lambda _: z, named, same)
    return [c for c in _checks(trailing, speculative) if c.verdict is Verdict.FAIL]


def _with_recent_failures(checks: list[Check], failed: list[Check], seconds: float) -> list[Check]:
    """The trailing-window check's failures replace what the whole step's evidence did not fail."""
    by_guardrail = {c.guardrail: c for c in failed}
    last = f"over the last {wording.span(seconds)}: "
    return [
        replace(by_guardrail[c.guardrail], message=last + by_guardrail[c.guardrail].message)
        if c.verdict is not Verdict.FAIL and c.guardrail in by_guardrail
        else c
        for c in checks
    ]


def _sequence(
    guardrails: Guardrails,
    canary: TrackEvidence,
    stable: TrackEvidence,
    speculative: bool,
    confidence: float,
    steps: int,
    same_drafter: bool,
) -> Look:
    """A look at the step's evidence on the confidence sequences of `judge`: at (1 - confidence) / (2 x `steps` x
    guardrails) a side, valid at every look however many."""
    per_check = (1 - confidence) / 2 / (max(1, steps) * judged_guardrails(guardrails, speculative))
    named = f"{confidence * 100:g}%"
    return Look(guardrails, canary, stable, lambda n: sequence_z(n, per_check), named, same_drafter, per_check)


def judge(
    guardrails: Guardrails,
    canary: TrackEvidence,
    stable: TrackEvidence,
    *,
    speculative: bool,
    confidence: float,
    steps: int = 1,
    same_drafter: bool = False,
    recent: Recent | None = None,
    pairs: PairTally | None = None,
) -> Judgement:
    """Judge the canary's evidence since its step started against the guardrails and stable's evidence over
    the same range.

    Each guardrail's bounds are a confidence sequence at (1 - confidence) / (2 x `steps` x guardrails) a side:
    a canary within a limit is failed, and one past it passes, with at most that probability at any look of
    a step. Promotion needs a Pass at every step, a rollback a Fail at any: over a whole rollout neither
    happens wrongly more often than (1 - confidence) / 2 through these bounds. The other half of the
    false-failure budget is spent by `recent`, the trailing-window check.

    `same_drafter`: stable serves the canary's drafter (the canary changes k, say). The acceptance floor
    then fails the canary only when its alpha is also surely below stable's: a drafter under the floor on
    both tracks is not what the canary changes, and rolling back to it would not help.

    `pairs`: the greedy prompt pairs compared so far (`guardrails.outputEquivalence`), judged on the same
    budget; the trailing-window check does not read them (they are counts, not a rate over a window).
    """
    budget, named = (1 - confidence) / 2, f"{confidence * 100:g}%"
    tests = judged_guardrails(guardrails, speculative)
    sequence = _sequence(guardrails, canary, stable, speculative, confidence, steps, same_drafter)
    checks = _checks(sequence, speculative)
    if guardrails.output_equivalence.enabled:
        checks.append(output_equivalence(guardrails.output_equivalence, pairs, sequence.z, named))
    if recent is not None:
        z = z_score(look_budget(budget * (1 - WATCH_SHARE), max(1, recent.look)) / tests)
        failed = _failures(recent, guardrails, speculative, z, f"{named} over all looks", same_drafter)
        checks = _with_recent_failures(checks, failed, recent.seconds)
    verdict = next(
        (v for v in (Verdict.FAIL, Verdict.INCONCLUSIVE) if any(c.verdict is v for c in checks)), Verdict.PASS
    )
    shown = checks if verdict is Verdict.PASS else [c for c in checks if c.verdict is verdict]
    return Judgement(
        verdict,
        tuple(c.message for c in shown),
        measurements(canary),
        measurements(stable),
        tuple(c.record() for c in checks),
    )


def watch(
    guardrails: Guardrails,
    ranges: Sequence[Recent],
    *,
    speculative: bool,
    confidence: float,
    same_drafter: bool = False,
    steps: int = 1,
    whole_step: tuple[TrackEvidence, TrackEvidence] | None = None,
) -> Judgement | None:
    """The fail-only check of a new scrape: every guardrail on each trailing range of `ranges` alone (a few
    scrapes long, all ending at the scrape), and the error guardrails (`WHOLE_STEP_GUARDRAILS`) on `whole_step`,
    both tracks' finished requests since the step's evidence began; a Judgement that fails with the first
    failure of each guardrail, or None when nothing fails (a watch never passes a canary, nor holds one).

    The whole step is judged on the analyses' own confidence sequences (`judge`, with the rollout's `steps`):
    they hold at every look, however often, so the watch's looks at them spend no false-failure budget of
    their own, and a failure there is one the next analysis would report on the same evidence.

    Its bounds are one look's, numbered by the scrape (`Recent.look`), at `WATCH_SHARE` of the trailing half
    of the false-failure budget split over the guardrails and the ranges: over a canary's every scrape a good
    canary is failed by its watches with probability at most (1 - confidence) / 2 x WATCH_SHARE, when each
    number is looked at once (the shell's rule; a look repeated on the same samples decides the same).
    """
    failed: dict[str, Check] = {}
    seconds: float | None = None
    if whole_step is not None:
        sequence = _sequence(guardrails, *whole_step, speculative, confidence, steps, same_drafter)
        over = f"{OVER_THE_STEP} {wording.span(whole_step[0].seconds)}: "
        for check in _error_checks(sequence, speculative):
            if check.verdict is Verdict.FAIL:
                failed[check.guardrail] = replace(check, message=over + check.message)
                seconds = whole_step[0].seconds
    if not ranges and not failed:
        return None
    named = f"{confidence * 100:g}% over all looks"
    budget = (1 - confidence) / 2 * WATCH_SHARE / (judged_guardrails(guardrails, speculative) * max(1, len(ranges)))
    for recent in ranges:
        z = z_score(look_budget(budget, max(1, recent.look)))
        for check in _failures(recent, guardrails, speculative, z, named, same_drafter):
            last = f"over the last {wording.span(recent.seconds)}: "
            failed.setdefault(check.guardrail, replace(check, message=last + check.message))
    if not failed:
        return None
    canary, stable = (ranges[0].canary, ranges[0].stable) if ranges or whole_step is None else whole_step
    return Judgement(
        Verdict.FAIL,
        tuple(c.message for c in failed.values()),
        measurements(canary),
        measurements(stable),
        tuple(c.record() for c in failed.values()),
        seconds=seconds if seconds is not None else ranges[0].seconds,
    )

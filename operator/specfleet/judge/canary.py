"""The canary's guardrails, each judged on both tracks' evidence since the step started, and `judge`, which
makes one verdict of them.

What is judged, and why (facts from vLLM's source, see docs/judge.md):
- latency: the p95 and the mean over requests of the per-token latency (`request_time_per_output_token`),
  canary vs stable. The p95 is set by the prompts the drafter guesses worst; the mean follows the typical
  request (and tokens/s per user). vLLM's inter-token latency is a per-*step* time (a speculative step
  emits several tokens), so it is only an optional absolute stutter ceiling;
- acceptance: alpha = drafts whose first token was accepted / drafts, which does not depend on k (the
  accepted/drafted ratio is E[accepted] / k and falls as k grows);
- errors: the canary's error rate against stable's; client aborts are not errors;
- throughput (optional): the share of offered requests each track completes (finished + growth of the
  waiting queue), canary against stable at comparable per-pod load: a canary that cannot keep up leaves
  a growing queue, while at the same offered load a healthy one completes what arrives, as stable does;
- queue time and KV-cache usage: reported for both tracks, with optional absolute ceilings on the canary.
"""

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial

from specfleet.api.spec import Guardrails
from specfleet.api.status import GuardrailCheck, Measurements, Verdict
from specfleet.judge import wording
from specfleet.judge.custom import custom_check
from specfleet.judge.equivalence import PairTally, output_equivalence
from specfleet.judge.evidence import LATENCY_QUANTILE, TrackEvidence, measurements
from specfleet.judge.verdicts import (
    Bounds,
    Check,
    Growth,
    at_load,
    bounded,
    difference_bounds,
    relative_bounds,
    still_needs,
)
from specfleet.stats import (
    Binned,
    binned_sd,
    common_bounds,
    log_quantile_se,
    look_budget,
    quantile_bounds,
    rate_ratio_bounds,
    requests_to_bound,
    sequence_z,
    wilson_bounds,
    z_score,
)

RESOLUTION = 0.1
"""A p95 inside a bucket wider than this (or than the regression limit, if larger) cannot be resolved."""
SAME_DRAFTER_MARGIN = 0.05
"""With stable's drafter (another k), a canary under the acceptance floor passes it when its alpha is shown
within this of stable's: alpha does not depend on k, so the floor both miss is the drafter's."""


@dataclass(frozen=True)
class Judgement:
    verdict: Verdict
    reasons: tuple[str, ...]
    canary: Measurements
    stable: Measurements
    checks: tuple[GuardrailCheck, ...] = ()


@dataclass(frozen=True)
class Recent:
    """Both tracks' evidence over the trailing `analysis.window` alone, checked for failures only: a canary
    that turns bad late in a long step is caught without waiting for its bad evidence to outweigh its good
    start. Its bounds are for one look (`look_budget`), the analysis's number `look`."""

    canary: TrackEvidence
    stable: TrackEvidence
    seconds: float
    look: int


@dataclass(frozen=True)
class Look:
    """One look at a canary: the guardrails, both tracks' evidence, and how wide the bounds are."""

    guardrails: Guardrails
    canary: TrackEvidence
    stable: TrackEvidence
    z: Callable[[float], float]
    """How many standard errors a bound lies from its estimate, given the samples it stands on."""
    confidence: str
    """How the bounds are named in reasons, e.g. `99%` (over all looks)."""
    same_drafter: bool = False
    """Stable runs the canary's drafter (another k, say): its acceptance is the baseline, not the canary's doing."""

    def load_ratio(self) -> float | None:
        canary, stable = self.canary.per_pod_load, self.stable.per_pod_load
        return canary / stable if canary is not None and stable else None

    def load_ratio_lower_bound(self) -> float | None:
        """The lower bound of `load_ratio`, the tracks' finished requests read as Poisson counts."""
        load, requests = self.load_ratio(), self.canary.requests
        if load is None or requests <= 0:
            return None
        return rate_ratio_bounds(load, requests, self.stable.requests, self.z(requests))[0]

    def growth(self) -> Growth:
        """The canary's requests and the time they took: what most checks need more of."""
        return Growth(self.canary.requests, self.canary.seconds)


def _alpha_bounds(look: Look, alpha: float, trials: float) -> Bounds:
    return lambda factor: wilson_bounds(alpha * trials * factor, trials * factor, look.z(trials * factor))


def _acceptance(look: Look) -> Check:
    g, c = look.guardrails, look.canary
    drafted = c.draft_tokens or 0.0
    name = "minAcceptanceAlpha"
    if drafted < g.min_draft_tokens:
        growth = Growth(drafted, c.seconds, "draft tokens").more(g.min_draft_tokens / drafted) if drafted else None
        needs = f"needs {g.min_draft_tokens}" + (f": {growth}" if growth else "")
        return Check(Verdict.INCONCLUSIVE, f"{drafted:.0f} draft tokens ({needs})", name, needs=growth)
    alpha = c.alpha
    if alpha is None:
        return Check(Verdict.INCONCLUSIVE, "no per-position acceptance counters for the canary", name)
    if not 0 <= alpha <= 1:  # counters read from different scrapes; never judge on that
        return Check(Verdict.INCONCLUSIVE, f"acceptance counters disagree ({alpha:.2f} of drafts accepted)", name)
    bounds = _alpha_bounds(look, alpha, c.effective_drafts)
    lower, upper = bounds(1.0)
    text = f"acceptance alpha {alpha:.2f} ({look.confidence} bounds {lower:.2f}-{upper:.2f})"
    floor = g.min_acceptance_alpha
    if look.same_drafter and lower < floor and (shared := _as_stable(look, alpha, bounds, text)) is not None:
        return shared
    return bounded(
        name,
        text,
        estimate=alpha,
        bounds=bounds,
        limit=floor,
        growth=look.growth(),
        show=wording.alpha,
        ceiling=False,
        word="floor",
    )


def _as_stable(look: Look, alpha: float, bounds: Bounds, text: str) -> Check | None:
    """Stable serves the canary's drafter (another k): a floor both tracks miss is the drafter's, not this
    change's. The canary then passes when its alpha is shown within SAME_DRAFTER_MARGIN of stable's, and fails
    only when it is also surely below stable's. None without stable's counters (the floor alone decides)."""
    s, floor = look.stable, look.guardrails.min_acceptance_alpha
    stable_alpha = s.judgeable_alpha(look.guardrails.min_draft_tokens)
    if stable_alpha is None:
        return None
    theirs = _alpha_bounds(look, stable_alpha, s.effective_drafts)

    def difference(factor: float) -> tuple[float, float]:
        return difference_bounds(alpha, bounds(factor), stable_alpha, theirs(factor))

    lowest, highest = difference(1.0)
    said = (
        f"{text}: below the floor {floor:.2f} as stable's with the same drafter ({stable_alpha:.2f}; "
        f"{look.confidence} bounds of the difference {lowest:+.2f} to {highest:+.2f}, "
        f"margin {SAME_DRAFTER_MARGIN:.2f})"
    )
    lower, upper = bounds(1.0)
    found = Check(Verdict.INCONCLUSIVE, said, "minAcceptanceAlpha", alpha, lower, upper, floor)
    if upper < floor and highest < -SAME_DRAFTER_MARGIN:
        return replace(
            found, verdict=Verdict.FAIL, message=f"{text}: upper bound < {floor:.2f}, and surely below stable's"
        )
    if lowest >= -SAME_DRAFTER_MARGIN:
        return replace(found, verdict=Verdict.PASS, message=f"{said}: the drafter, not this change")
    needs = still_needs(difference, -SAME_DRAFTER_MARGIN, ceiling=False, growth=look.growth())
    return replace(found, message=f"{said}, not yet shown within the margin ({needs})", needs=needs)


def _too_few_requests(look: Look, canary: Binned, stable: Binned, name: str) -> Check | None:
    need = look.guardrails.requests_needed
    if canary.total < need or stable.total < need:
        return Check(
            Verdict.INCONCLUSIVE,
            f"{canary.total:.0f} canary and {stable.total:.0f} stable requests finished (need {need} each)",
            name,
        )
    return None


def _coarse_bucket(data: Binned, value: float, limit: float) -> str | None:
    lower, upper = data.bucket_of(value)
    if lower > 0 and upper / lower - 1 <= max(limit, RESOLUTION):
        return None
    shown = "+Inf" if math.isinf(upper) else wording.ms(upper)
    return f"({wording.ms(lower)}, {shown}]"


def _against_stable(look: Look, name: str, text: str, *, log_ratio: float, bounds: Bounds, limit: float) -> Check:
    """A relative latency guardrail: the verdict on canary / stable - 1, kept only where per-pod load allows."""
    check = bounded(
        name,
        text,
        estimate=math.expm1(log_ratio),
        bounds=bounds,
        limit=limit,
        growth=look.growth(),
        show=wording.whole_pct,
    )
    return at_load(
        check, load=look.load_ratio(), lowest=look.load_ratio_lower_bound(), verb="carried", noun="per-pod load"
    )


def _token_latency(look: Look) -> Check:
    g, name = look.guardrails, "maxTokenLatencyP95Regression"
    c_data, s_data = look.canary.token_latency, look.stable.token_latency
    if c_data is None or s_data is None:
        which = "canary" if c_data is None else "stable"
        return Check(Verdict.INCONCLUSIVE, f"no per-token latency histogram for the {which} track", name)
    shared = common_bounds(c_data, s_data)
    if not shared:
        return Check(Verdict.INCONCLUSIVE, "the tracks' per-token latency histograms share no bucket bound", name)
    canary, stable = c_data.on(shared), s_data.on(shared)
    if (short := _too_few_requests(look, canary, stable, name)) is not None:
        return short
    c_p95, s_p95 = canary.value_at(LATENCY_QUANTILE), stable.value_at(LATENCY_QUANTILE)
    limit = g.max_token_latency_p95_regression
    for which, data, value in (("canary", canary, c_p95), ("stable", stable, s_p95)):
        if (bucket := _coarse_bucket(data, value, limit)) is not None:
            return Check(
                Verdict.INCONCLUSIVE,
                f"{which} per-token p95 lies in bucket {bucket}, too coarse to judge a {limit:.0%} limit: give both "
                "tracks finer buckets (--custom-histogram-buckets, vLLM >= 0.32)",
                name,
            )
    c_effect, s_effect = look.canary.latency_design_effect, look.stable.latency_design_effect
    samples = min(canary.total / c_effect, stable.total / s_effect)
    needed = requests_to_bound(LATENCY_QUANTILE, look.z(samples))
    if samples < needed:  # the normal bound on a p95 is not trusted on fewer: neither pass nor fail
        missing = look.growth().more(needed / samples)
        per_track = math.ceil(needed * max(c_effect, s_effect))
        text = f"per-token p95 {wording.ms(c_p95)} vs stable {wording.ms(s_p95)}: a bound needs {per_track} "
        text += f"requests per track ({missing})"
        return Check(Verdict.INCONCLUSIVE, text, name, c_p95 / s_p95 - 1, limit=limit, needs=missing)
    log_ratio = math.log(c_p95 / s_p95)
    standard_error = math.hypot(
        log_quantile_se(canary, LATENCY_QUANTILE) * math.sqrt(c_effect),
        log_quantile_se(stable, LATENCY_QUANTILE) * math.sqrt(s_effect),
    )
    bounds = relative_bounds(log_ratio, standard_error, look.z, samples)
    lowest, highest = bounds(1.0)
    layout = "" if len(shared) == len(c_data.bounds) == len(s_data.bounds) else f" (on the {len(shared)} shared bounds)"
    text = (
        f"per-token p95 {wording.ms(c_p95)} vs stable {wording.ms(s_p95)}: "
        f"{wording.signed_pct(math.expm1(log_ratio))}, "
        f"{look.confidence} bounds {wording.signed_pct(lowest)} to {wording.signed_pct(highest)}{layout}"
    )
    return _against_stable(look, name, text, log_ratio=log_ratio, bounds=bounds, limit=limit)


def _token_latency_mean(look: Look) -> Check:
    """The mean per-token latency, canary vs stable: the typical request, which the p95 misses (a config that
    slows most requests while the worst-guessed prompts set the p95). Delta method on the log of the ratio of
    the histograms' means (`_sum / _count`, exact), each with the spread of its buckets."""
    name, limit = "maxTokenLatencyMeanRegression", look.guardrails.max_token_latency_mean_regression
    c, s = look.canary, look.stable
    if c.token_latency is None or s.token_latency is None or not c.token_latency_mean or not s.token_latency_mean:
        which = "canary" if c.token_latency is None or not c.token_latency_mean else "stable"
        return Check(Verdict.INCONCLUSIVE, f"no per-token latency mean for the {which} track", name)
    if (short := _too_few_requests(look, c.token_latency, s.token_latency, name)) is not None:
        return short
    c_mean, s_mean = c.token_latency_mean, s.token_latency_mean
    c_n, s_n = c.token_latency.total / c.latency_design_effect, s.token_latency.total / s.latency_design_effect
    standard_error = math.hypot(
        binned_sd(c.token_latency) / (c_mean * math.sqrt(c_n)), binned_sd(s.token_latency) / (s_mean * math.sqrt(s_n))
    )
    log_ratio = math.log(c_mean / s_mean)
    bounds = relative_bounds(log_ratio, standard_error, look.z, min(c_n, s_n))
    lowest, highest = bounds(1.0)
    text = (
        f"per-token mean {wording.ms(c_mean)} vs stable {wording.ms(s_mean)}: "
        f"{wording.signed_pct(math.expm1(log_ratio))}, "
        f"{look.confidence} bounds {wording.signed_pct(lowest)} to {wording.signed_pct(highest)}"
    )
    return _against_stable(look, name, text, log_ratio=log_ratio, bounds=bounds, limit=limit)


def p95_ceiling(
    look: Look,
    guardrail: str,
    *,
    label: str,
    data: Binned | None,
    ceiling: float,
    show: Callable[[float], str],
    samples: float | None = None,
) -> Check:
    """An absolute ceiling on a canary p95, on the distribution-free bounds of a quantile. `samples`: how many
    independent samples the observations stand for, when fewer than their count."""
    if data is None or data.total <= 0:
        return Check(Verdict.INCONCLUSIVE, f"no {label.removesuffix(' p95')} histogram for the canary", guardrail)
    n = data.total if samples is None else min(samples, data.total)

    def bounds(factor: float) -> tuple[float, float]:
        q = quantile_bounds(data, LATENCY_QUANTILE, look.z(n * factor), samples=n * factor)
        return q.lower, q.upper

    estimate, (lower, upper) = data.value_at(LATENCY_QUANTILE), bounds(1.0)
    shown_upper = "+Inf" if math.isinf(upper) else show(upper)
    text = f"{label} {show(estimate)} ({look.confidence} bounds {show(lower)} to {shown_upper})"
    return bounded(
        guardrail,
        text,
        estimate=estimate,
        bounds=bounds,
        limit=ceiling,
        growth=look.growth(),
        show=show,
        word="ceiling",
    )


def _step_latency(look: Look, ceiling: float) -> Check:
    """Per-step latency observations of one step share its duration: count requests as the samples."""
    return p95_ceiling(
        look,
        "maxStepLatencyP95Seconds",
        label="per-step p95",
        data=look.canary.step_latency,
        ceiling=ceiling,
        show=wording.ms,
        samples=look.canary.requests,
    )


def _queue_time(look: Look, ceiling: float) -> Check:
    return p95_ceiling(
        look,
        "maxQueueTimeP95Seconds",
        label="queue time p95",
        data=look.canary.queue_time,
        ceiling=ceiling,
        show=wording.duration,
    )


def _throughput(look: Look, limit: float) -> Check:
    """The share of offered requests the canary completes against stable's: a binomial bound on each share
    (offered requests are the trials), the two combined on the log of their ratio as for latency."""
    g, c, s, name = look.guardrails, look.canary, look.stable, "maxThroughputDrop"
    if s.requests < g.requests_needed:
        text = f"{s.requests:.0f} stable requests (need {g.requests_needed}) for throughput"
        return Check(Verdict.INCONCLUSIVE, text, name)
    c_offered, s_offered = c.offered, s.offered
    if c_offered is None or s_offered is None:
        which = "canary" if c_offered is None else "stable"
        return Check(Verdict.INCONCLUSIVE, f"no waiting-queue gauge for the {which} track: throughput not judged", name)
    if c.requests <= 0 or s.requests <= 0:
        return Check(Verdict.INCONCLUSIVE, "no finished requests to judge throughput on", name)
    c_share, s_share = c.requests / c_offered, s.requests / s_offered

    def bounds(factor: float) -> tuple[float, float]:
        """Bounds on the drop, 1 - canary share / stable share."""
        z = look.z(min(c_offered, s_offered) * factor)
        c_low, c_up = wilson_bounds(c.requests * factor, c_offered * factor, z)
        s_low, s_up = wilson_bounds(s.requests * factor, s_offered * factor, z)
        log_ratio = math.log(c_share / s_share)
        worse = math.hypot(math.log(c_share / c_low) if c_low > 0 else math.inf, math.log(s_up / s_share))
        better = math.hypot(math.log(c_up / c_share), math.log(s_share / s_low) if s_low > 0 else math.inf)
        return -math.expm1(log_ratio + better), -math.expm1(log_ratio - worse)

    drop = 1 - c_share / s_share
    lowest, highest = bounds(1.0)
    text = f"completed {c_share:.1%} of offered requests vs stable {s_share:.1%}"
    c_rate, s_rate = c.per_pod_second(c_offered), s.per_pod_second(s_offered)
    load = c_rate / s_rate if c_rate is not None and s_rate else None
    if c_rate is not None and s_rate is not None:
        text += f" at {c_rate:.2f} vs {s_rate:.2f} offered requests/s per pod"
    c_tokens, s_tokens = c.per_pod_second(c.generation_tokens), s.per_pod_second(s.generation_tokens)
    if c_tokens is not None and s_tokens is not None:
        text += f" ({c_tokens:.0f} vs {s_tokens:.0f} output tokens/s per pod)"
    text += f": drop {drop:.1%}, {look.confidence} bounds {lowest:.1%} to {highest:.1%}"
    check = bounded(name, text, estimate=drop, bounds=bounds, limit=limit, growth=look.growth(), show=wording.whole_pct)
    least = None if load is None else rate_ratio_bounds(load, c_offered, s_offered, look.z(c_offered))[0]
    return at_load(check, load=load, lowest=least, verb="were offered", noun="load")


def _kv_cache(look: Look, ceiling: float) -> Check:
    """A level read from a gauge, not a sample of requests: judged on its average over the range."""
    mean, peak, name = look.canary.kv_cache_usage_mean, look.canary.kv_cache_usage_max, "maxKvCacheUsage"
    if mean is None or not 0 <= mean <= 1:
        return Check(Verdict.INCONCLUSIVE, "no KV-cache usage gauge for the canary", name)
    text = f"KV-cache usage {mean:.0%} on average" + (f" (max {peak:.0%})" if peak is not None else "")
    if mean > ceiling:
        return Check(Verdict.FAIL, f"{text} > ceiling {ceiling:.0%}", name, mean, limit=ceiling)
    return Check(Verdict.PASS, f"{text}, ceiling {ceiling:.0%}", name, mean, limit=ceiling)


def _error_rate(look: Look, ceiling: float) -> Check:
    c = look.canary
    rate = c.errors / c.requests

    def bounds(factor: float) -> tuple[float, float]:
        return wilson_bounds(c.errors * factor, c.requests * factor, look.z(c.requests * factor))

    lower, upper = bounds(1.0)
    text = f"error rate {rate:.2%} ({look.confidence} bounds {lower:.2%} to {upper:.2%})"
    return bounded(
        "maxErrorRate",
        text,
        estimate=rate,
        bounds=bounds,
        limit=ceiling,
        growth=look.growth(),
        show=wording.share,
        word="ceiling",
    )


def _error_rate_increase(look: Look) -> Check:
    """The canary's error rate minus stable's, with Newcombe's hybrid score bounds (from two Wilson bounds)."""
    g, c, s, name = look.guardrails, look.canary, look.stable, "maxErrorRateIncrease"
    if s.requests < g.requests_needed:
        return Check(Verdict.INCONCLUSIVE, f"{s.requests:.0f} stable requests (need {g.requests_needed})", name)
    c_rate, s_rate = c.errors / c.requests, s.errors / s.requests

    def bounds(factor: float) -> tuple[float, float]:
        z = look.z(min(c.requests, s.requests) * factor)
        c_bounds = wilson_bounds(c.errors * factor, c.requests * factor, z)
        s_bounds = wilson_bounds(s.errors * factor, s.requests * factor, z)
        return difference_bounds(c_rate, c_bounds, s_rate, s_bounds)

    lowest, highest = bounds(1.0)
    text = (
        f"error rate {c_rate:.2%} vs stable {s_rate:.2%}: {c_rate - s_rate:+.2%}, "
        f"{look.confidence} bounds {lowest:+.2%} to {highest:+.2%}"
    )
    return bounded(
        name,
        text,
        estimate=c_rate - s_rate,
        bounds=bounds,
        limit=g.max_error_rate_increase,
        growth=look.growth(),
        show=wording.share,
    )


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
    g, canary = look.guardrails, look.canary
    checks: list[Check] = []
    if speculative:
        checks.append(_computed("minAcceptanceAlpha", lambda: _acceptance(look)))
    if (kv_ceiling := g.max_kv_cache_usage) is not None:
        checks.append(_computed("maxKvCacheUsage", lambda: _kv_cache(look, kv_ceiling)))
    for custom in g.custom:  # each with its own minimum of events
        checks.append(_computed(f"custom:{custom.name}", partial(custom_check, look, custom)))
    if canary.requests < g.requests_needed:
        needs = f"need {g.requests_needed}"
        if canary.requests > 0:
            needs += f": {look.growth().more(g.requests_needed / canary.requests)}"
        checks.append(Check(Verdict.INCONCLUSIVE, f"{canary.requests:.0f} canary requests ({needs})", "minRequests"))
        return checks
    checks.append(_computed("maxTokenLatencyP95Regression", lambda: _token_latency(look)))
    checks.append(_computed("maxTokenLatencyMeanRegression", lambda: _token_latency_mean(look)))
    if (step_ceiling := g.max_step_latency_p95_seconds) is not None:
        checks.append(_computed("maxStepLatencyP95Seconds", lambda: _step_latency(look, step_ceiling)))
    if (queue_ceiling := g.max_queue_time_p95_seconds) is not None:
        checks.append(_computed("maxQueueTimeP95Seconds", lambda: _queue_time(look, queue_ceiling)))
    if (drop := g.max_throughput_drop) is not None:
        checks.append(_computed("maxThroughputDrop", lambda: _throughput(look, drop)))
    if (error_ceiling := g.max_error_rate) is not None:
        checks.append(_computed("maxErrorRate", lambda: _error_rate(look, error_ceiling)))
    checks.append(_computed("maxErrorRateIncrease", lambda: _error_rate_increase(look)))
    return checks


def judged_guardrails(guardrails: Guardrails, speculative: bool) -> int:
    """Guardrails with a confidence bound, over which the false-verdict budget is split (the KV level has none;
    each custom guardrail has one)."""
    g = guardrails
    optional = (
        g.max_error_rate,
        g.max_step_latency_p95_seconds,
        g.max_throughput_drop,
        g.max_queue_time_p95_seconds,
        *g.custom,
    )
    return 3 + int(speculative) + sum(limit is not None for limit in optional) + int(g.output_equivalence.enabled)


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
    per_check = budget / (max(1, steps) * tests)
    sequence = Look(guardrails, canary, stable, lambda n: sequence_z(n, per_check), named, same_drafter)
    checks = _checks(sequence, speculative)
    if guardrails.output_equivalence.enabled:
        checks.append(output_equivalence(guardrails.output_equivalence, pairs, sequence.z, named))
    if recent is not None:
        z = z_score(look_budget(budget, max(1, recent.look)) / tests)
        trailing = Look(guardrails, recent.canary, recent.stable, lambda _: z, f"{named} over all looks", same_drafter)
        failed = [c for c in _checks(trailing, speculative) if c.verdict is Verdict.FAIL]
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

"""The shapes of check several guardrails share: a latency histogram compared with stable's on the bucket
bounds both have, a ratio against stable kept only where per-pod load allows, a ceiling on a canary p95."""

import math
from collections.abc import Callable

from specfleet.api.status import Verdict
from specfleet.judge import wording
from specfleet.judge.evidence import LATENCY_QUANTILE
from specfleet.judge.guardrail import Look
from specfleet.judge.verdicts import Bounds, Check, at_load, bounded, relative_bounds
from specfleet.stats import Binned, common_bounds, log_quantile_se, quantile_bounds, requests_to_bound

RESOLUTION = 0.1
"""A p95 inside a bucket wider than this (or than the regression limit, if larger) cannot be resolved."""


def too_few_requests(look: Look, canary: Binned, stable: Binned, name: str) -> Check | None:
    need = look.guardrails.requests_needed
    if canary.total < need or stable.total < need:
        return Check(
            Verdict.INCONCLUSIVE,
            f"{canary.total:.0f} canary and {stable.total:.0f} stable requests finished (need {need} each)",
            name,
        )
    return None


def coarse_bucket(data: Binned, value: float, limit: float) -> str | None:
    lower, upper = data.bucket_of(value)
    if lower > 0 and upper / lower - 1 <= max(limit, RESOLUTION):
        return None
    shown = "+Inf" if math.isinf(upper) else wording.ms(upper)
    return f"({wording.ms(lower)}, {shown}]"


def against_stable(look: Look, name: str, text: str, *, log_ratio: float, bounds: Bounds, limit: float) -> Check:
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


def p95_against_stable(
    look: Look,
    name: str,
    *,
    label: str,
    canary_data: Binned | None,
    stable_data: Binned | None,
    limit: float,
    finer: str,
) -> Check:
    """The canary's p95 of a per-request latency histogram against stable's: the delta method on the log of
    their ratio, each quantile's standard error from its buckets, the requests as samples shrunk by the
    batch's design effect. `label` names the latency in reasons (`per-token`); `finer` says how to get finer
    buckets when a p95 lies in one too coarse for the limit."""
    if canary_data is None or stable_data is None:
        which = "canary" if canary_data is None else "stable"
        return Check(Verdict.INCONCLUSIVE, f"no {label} latency histogram for the {which} track", name)
    shared = common_bounds(canary_data, stable_data)
    if not shared:
        return Check(Verdict.INCONCLUSIVE, f"the tracks' {label} latency histograms share no bucket bound", name)
    canary, stable = canary_data.on(shared), stable_data.on(shared)
    if (short := too_few_requests(look, canary, stable, name)) is not None:
        return short
    c_p95, s_p95 = canary.value_at(LATENCY_QUANTILE), stable.value_at(LATENCY_QUANTILE)
    for which, data, value in (("canary", canary, c_p95), ("stable", stable, s_p95)):
        if (bucket := coarse_bucket(data, value, limit)) is not None:
            return Check(
                Verdict.INCONCLUSIVE,
                f"{which} {label} p95 lies in bucket {bucket}, too coarse to judge a {limit:.0%} limit: {finer}",
                name,
            )
    c_effect, s_effect = look.canary.latency_design_effect, look.stable.latency_design_effect
    samples = min(canary.total / c_effect, stable.total / s_effect)
    needed = requests_to_bound(LATENCY_QUANTILE, look.z(samples))
    if samples < needed:  # the normal bound on a p95 is not trusted on fewer: neither pass nor fail
        missing = look.growth().more(needed / samples)
        per_track = math.ceil(needed * max(c_effect, s_effect))
        text = f"{label} p95 {wording.ms(c_p95)} vs stable {wording.ms(s_p95)}: a bound needs {per_track} "
        text += f"requests per track ({missing})"
        return Check(Verdict.INCONCLUSIVE, text, name, c_p95 / s_p95 - 1, limit=limit, needs=missing)
    log_ratio = math.log(c_p95 / s_p95)
    standard_error = math.hypot(
        log_quantile_se(canary, LATENCY_QUANTILE) * math.sqrt(c_effect),
        log_quantile_se(stable, LATENCY_QUANTILE) * math.sqrt(s_effect),
    )
    bounds = relative_bounds(log_ratio, standard_error, look.z, samples)
    lowest, highest = bounds(1.0)
    whole = len(shared) == len(canary_data.bounds) == len(stable_data.bounds)
    layout = "" if whole else f" (on the {len(shared)} shared bounds)"
    text = (
        f"{label} p95 {wording.ms(c_p95)} vs stable {wording.ms(s_p95)}: "
        f"{wording.signed_pct(math.expm1(log_ratio))}, "
        f"{look.confidence} bounds {wording.signed_pct(lowest)} to {wording.signed_pct(highest)}{layout}"
    )
    return against_stable(look, name, text, log_ratio=log_ratio, bounds=bounds, limit=limit)


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

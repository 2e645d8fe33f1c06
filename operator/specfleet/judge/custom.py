"""User-defined guardrails (`guardrails.custom`), judged with the built-in guardrails' statistics. Pure.

- a rate (`events` / `total`, two counters) as the error-rate increase is: a Wilson bound on each track's
  share, Newcombe's hybrid bounds on their difference, at the same confidence-sequence z;
- a latency (a histogram's quantile) as the per-token p95 is: both tracks on the bucket bounds they share,
  the quantile's log standard error from the buckets, bounds on canary / stable - 1, kept only where the
  tracks carried comparable per-pod load.

Each is a `Check` named `custom:<name>`, Inconclusive without data (a metric Prometheus does not have is
"no data", never a Pass) or with fewer than `minEvents` events on either track.
"""

import math
from collections.abc import Callable
from dataclasses import replace
from typing import Protocol

from specfleet.api.custom_guardrails import CustomGuardrail, LatencyGuardrail, RateGuardrail
from specfleet.api.status import Verdict
from specfleet.judge import wording
from specfleet.judge.evidence import CustomReading, TrackEvidence
from specfleet.judge.verdicts import Check, Growth, at_load, bounded, difference_bounds, relative_bounds
from specfleet.stats import Binned, common_bounds, log_quantile_se, requests_to_bound, wilson_bounds

RESOLUTION = 0.1
"""A quantile inside a bucket wider than this (or than the regression limit, if larger) cannot be resolved:
the built-in per-token p95's rule."""
TOLERANCE = 1.01
"""Events up to 1% over total are read as all of it: Prometheus extrapolates each counter's increase on its
own, so two counters from the same scrapes can disagree by a fraction."""
QUANTILE_SPREAD = 0.02
"""Half-width in probability over which the quantile function's slope is read (narrower near 0 and 1)."""


class Looking(Protocol):
    """What a custom check needs of the judge's look (`canary.Look`)."""

    @property
    def canary(self) -> TrackEvidence: ...
    @property
    def stable(self) -> TrackEvidence: ...
    @property
    def z(self) -> Callable[[float], float]: ...
    @property
    def confidence(self) -> str: ...
    def load_ratio(self) -> float | None: ...
    def load_ratio_lower_bound(self) -> float | None: ...


def _reading(evidence: TrackEvidence, name: str) -> CustomReading:
    return evidence.custom.get(name, CustomReading())


def _values(histogram: str) -> Callable[[float], str]:
    """Seconds read as times; other units as plain numbers."""
    return wording.ms if histogram.endswith("_seconds") else (lambda value: f"{value:.4g}")


def _selected(guardrail: CustomGuardrail) -> str:
    labels = guardrail.match_labels
    return "" if not labels else " {" + ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


def _rate(look: Looking, guardrail: CustomGuardrail, rate: RateGuardrail) -> Check:
    name, selected = guardrail.check_name, _selected(guardrail)
    c, s = _reading(look.canary, guardrail.name), _reading(look.stable, guardrail.name)
    for which, reading in (("canary", c), ("stable", s)):
        for metric, value in ((rate.total, reading.total), (rate.events, reading.events)):
            if value is None:
                return Check(Verdict.INCONCLUSIVE, f"no data for {metric}{selected} on the {which} track", name)
    assert c.total is not None and s.total is not None and c.events is not None and s.events is not None
    c_total, s_total, need = c.total, s.total, guardrail.min_events
    growth = Growth(c_total, look.canary.seconds, f"canary {rate.total} events")
    if c_total < need or s_total < need:
        more = growth.more(need / c_total) if 0 < c_total < need else None
        text = f"{c_total:.0f} canary and {s_total:.0f} stable {rate.total}{selected} events "
        text += f"(need {need} each" + (f": {more})" if more else ")")
        return Check(Verdict.INCONCLUSIVE, text, name, needs=more)
    if not (0 <= c.events <= c_total * TOLERANCE and 0 <= s.events <= s_total * TOLERANCE):
        return Check(Verdict.INCONCLUSIVE, f"{rate.events}{selected} counts more events than {rate.total}", name)
    c_events, s_events = min(c.events, c_total), min(s.events, s_total)
    # The worsening is the change of the share of bad events: the events themselves, or the rest of total.
    c_bad = c_total - c_events if rate.higher_is_better else c_events
    s_bad = s_total - s_events if rate.higher_is_better else s_events

    def bounds(factor: float) -> tuple[float, float]:
        z = look.z(min(c_total, s_total) * factor)
        c_bounds = wilson_bounds(c_bad * factor, c_total * factor, z)
        s_bounds = wilson_bounds(s_bad * factor, s_total * factor, z)
        return difference_bounds(c_bad / c_total, c_bounds, s_bad / s_total, s_bounds)

    lowest, highest = bounds(1.0)
    worsening = c_bad / c_total - s_bad / s_total
    direction = "fall" if rate.higher_is_better else "rise"
    text = (
        f"{name}: {rate.events} / {rate.total}{selected} {c_events / c_total:.2%} vs stable "
        f"{s_events / s_total:.2%}: {direction} {worsening:+.2%}, {look.confidence} bounds {lowest:+.2%} to "
        f"{highest:+.2%}"
    )
    return bounded(
        name, text, estimate=worsening, bounds=bounds, limit=rate.max_worsening, growth=growth, show=wording.share
    )


def _coarse_bucket(data: Binned, value: float, limit: float, show: Callable[[float], str]) -> str | None:
    lower, upper = data.bucket_of(value)
    if lower > 0 and upper / lower - 1 <= max(limit, RESOLUTION):
        return None
    return f"({show(lower)}, {'+Inf' if math.isinf(upper) else show(upper)}]"


def _latency(look: Looking, guardrail: CustomGuardrail, latency: LatencyGuardrail) -> Check:
    name, selected, q = guardrail.check_name, _selected(guardrail), latency.quantile
    label, show = f"{latency.histogram}{selected} p{q * 100:g}", _values(latency.histogram)
    c_data, s_data = _reading(look.canary, guardrail.name).histogram, _reading(look.stable, guardrail.name).histogram
    if c_data is None or s_data is None:
        which = "canary" if c_data is None else "stable"
        text = f"no data for {latency.histogram}_bucket{selected} on the {which} track (a histogram is needed)"
        return Check(Verdict.INCONCLUSIVE, text, name)
    shared = common_bounds(c_data, s_data)
    if not shared:
        return Check(Verdict.INCONCLUSIVE, f"the tracks' {latency.histogram} histograms share no bucket bound", name)
    canary, stable = c_data.on(shared), s_data.on(shared)
    need = guardrail.min_events
    growth = Growth(canary.total, look.canary.seconds, f"canary {latency.histogram} observations")
    if canary.total < need or stable.total < need:
        more = growth.more(need / canary.total) if 0 < canary.total < need else None
        text = f"{canary.total:.0f} canary and {stable.total:.0f} stable {latency.histogram}{selected} observations "
        text += f"(need {need} each" + (f": {more})" if more else ")")
        return Check(Verdict.INCONCLUSIVE, text, name, needs=more)
    c_value, s_value = canary.value_at(q), stable.value_at(q)
    limit = latency.max_regression
    for which, data, value in (("canary", canary, c_value), ("stable", stable, s_value)):
        if (bucket := _coarse_bucket(data, value, limit, show)) is not None:
            text = f"{which} {label} lies in bucket {bucket}, too coarse to judge a {limit:.0%} limit: give the "
            text += "histogram finer buckets"
            return Check(Verdict.INCONCLUSIVE, text, name)
    c_effect, s_effect = look.canary.latency_design_effect, look.stable.latency_design_effect
    samples = min(canary.total / c_effect, stable.total / s_effect)
    needed = requests_to_bound(q, look.z(samples))
    if samples < needed:
        missing = growth.more(needed / samples)
        text = f"{label} {show(c_value)} vs stable {show(s_value)}: a bound needs "
        text += f"{math.ceil(needed * max(c_effect, s_effect))} observations per track ({missing})"
        return Check(Verdict.INCONCLUSIVE, text, name, c_value / s_value - 1, limit=limit, needs=missing)
    log_ratio = math.log(c_value / s_value)
    spread = min(QUANTILE_SPREAD, q / 2, (1 - q) / 2)
    standard_error = math.hypot(
        log_quantile_se(canary, q, spread) * math.sqrt(c_effect),
        log_quantile_se(stable, q, spread) * math.sqrt(s_effect),
    )
    bounds = relative_bounds(log_ratio, standard_error, look.z, samples)
    lowest, highest = bounds(1.0)
    text = (
        f"{name}: {label} {show(c_value)} vs stable {show(s_value)}: {wording.signed_pct(math.expm1(log_ratio))}, "
        f"{look.confidence} bounds {wording.signed_pct(lowest)} to {wording.signed_pct(highest)}"
    )
    check = bounded(
        name, text, estimate=math.expm1(log_ratio), bounds=bounds, limit=limit, growth=growth, show=wording.whole_pct
    )
    return at_load(
        check, load=look.load_ratio(), lowest=look.load_ratio_lower_bound(), verb="carried", noun="per-pod load"
    )


def custom_check(look: Looking, guardrail: CustomGuardrail) -> Check:
    """One custom guardrail's verdict on both tracks' evidence; its reason starts with the check's name."""
    if guardrail.rate is not None:
        found = _rate(look, guardrail, guardrail.rate)
    else:
        assert guardrail.latency is not None
        found = _latency(look, guardrail, guardrail.latency)
    named = f"{guardrail.check_name}: "
    return found if found.message.startswith(named) else replace(found, message=named + found.message)

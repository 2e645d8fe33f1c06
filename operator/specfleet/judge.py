"""Guardrails + the evidence of both tracks -> a verdict. Pure, and total: every input gives one of four answers.

- Fail: a guardrail's confidence bound is past its limit (the reason carries the estimate and the bound).
  Evidence of harm wins over missing evidence elsewhere.
- Inconclusive: too few samples to bound a measure, buckets too coarse to resolve it, per-pod loads too
  different to compare, or no data; never read as a pass (Flagger #1095).
- Pass: every guardrail was measured and its estimate is within the limit. An estimate past the limit
  whose bound is not (yet) is inconclusive: more evidence will tell.
- Error: Prometheus could not be asked (decided by the caller, which has the exception).

What is judged, and why (facts from vLLM's source, see docs/judge.md):
- latency: the p95 over requests of the per-token latency (`request_time_per_output_token`), canary vs
  stable on the histogram bounds both tracks share. vLLM's inter-token latency is a per-*step* time (a
  speculative step emits several tokens), so it is only an optional absolute stutter ceiling;
- acceptance: alpha = drafts whose first token was accepted / drafts, which does not depend on k (the
  accepted/drafted ratio is E[accepted] / k and falls as k grows);
- errors: the canary's error rate against stable's; client aborts are not errors;
- throughput (optional): the share of offered requests each track completes (finished + growth of the
  waiting queue), canary against stable at comparable per-pod load: a canary that cannot keep up leaves
  a growing queue, while at the same offered load a healthy one completes what arrives, as stable does;
- queue time and KV-cache usage: reported for both tracks, with optional absolute ceilings on the canary.

Each analysis is one look of a sequential test: look n spends (1 - confidence) / (n (n + 1)) of the
false-failure budget, split over the guardrails (`specfleet.stats`).
"""

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from specfleet.api.spec import DriftSpec, Guardrails
from specfleet.api.status import DriftReference, Measurements, Speedup, TrafficProfile, Verdict
from specfleet.metrics import names
from specfleet.stats import (
    Binned,
    binned_sd,
    common_bounds,
    log_quantile_se,
    look_error,
    quantile_bounds,
    requests_to_bound,
    t_score,
    wilson_bounds,
    z_score,
)

LATENCY_QUANTILE = 0.95
ACCEPTANCE_ICC = 0.1
"""Assumed correlation of acceptance between drafts of one request (they share its prompt): the drafts
count as drafts / (1 + (drafts per request - 1) x ICC) independent trials (Kish's design effect). 0.1
means requests' own alphas spread with a standard deviation up to about 0.13 around alpha 0.8."""
LOAD_TOLERANCE = 0.25
"""Per-pod request rates of the two tracks within this factor (1.25x) count as comparable load."""
MIN_SLICES = 4
"""Fewest slices of a window whose spread bounds the speed-up (batch means); with fewer, requests alone do."""
RESOLUTION = 0.1
"""A p95 inside a bucket wider than this (or than the regression limit, if larger) cannot be resolved."""


@dataclass(frozen=True)
class TrackEvidence:
    """What Prometheus holds about one track over the evidence range: increases of counters and buckets."""

    token_latency: Binned | None = None
    """`vllm:request_time_per_output_token_seconds`, one observation per finished request."""
    step_latency: Binned | None = None
    """`vllm:inter_token_latency_seconds`, one observation per request per engine step."""
    ttft: Binned | None = None
    queue_time: Binned | None = None
    """`vllm:request_queue_time_seconds`, one observation per finished request."""
    finished: Mapping[str, float] = field(default_factory=dict)
    """Finished requests by `finished_reason`."""
    drafts: float | None = None
    draft_tokens: float | None = None
    accepted_tokens: float | None = None
    accepted_per_position: tuple[float, ...] = ()
    generation_tokens: float | None = None
    prompt_tokens: float | None = None
    """`vllm:prompt_tokens_total`: prompt tokens prefilled over the range."""
    preemptions: float | None = None
    token_latency_mean: float | None = None
    """Mean per-token latency over finished requests (the per-token histogram's sum / count)."""
    token_latency_slices: tuple[float, ...] = ()
    """The same mean over consecutive equal slices of the range (fleet looks with a holdback): requests
    of one slice share its batches, so the spread between slices, not between requests, bounds a ratio."""
    step_latency_mean: float | None = None
    """Mean engine step (the step-latency histogram's sum / count)."""
    batch_mean: float | None = None
    """Requests running per pod (`vllm:num_requests_running`), averaged over the range: the batch size."""
    waiting_growth: float | None = None
    """Growth of the waiting queue (`vllm:num_requests_waiting`, summed over pods) over the range."""
    kv_cache_usage_mean: float | None = None
    kv_cache_usage_max: float | None = None
    request_rate_per_pod: tuple[float, ...] = ()
    seconds: float = 0.0

    @property
    def requests(self) -> float:
        """Finished requests, client aborts excluded (vLLM does not count them; older versions did)."""
        return sum(v for reason, v in self.finished.items() if reason != names.ABORT_FINISH_REASON)

    @property
    def errors(self) -> float:
        return self.finished.get(names.ERROR_FINISH_REASON, 0.0)

    @property
    def per_pod_load(self) -> float | None:
        rates = self.request_rate_per_pod
        return sum(rates) / len(rates) if rates else None

    @property
    def offered(self) -> float | None:
        """Requests that arrived over the range: finished, plus those still waiting that were not before.

        Running requests are left out: their number is bounded by the batch and ramps up with every new
        step's traffic, while the waiting queue grows without bound only when a pod cannot keep up.
        """
        return None if self.waiting_growth is None else self.requests + max(0.0, self.waiting_growth)

    @property
    def served_fraction(self) -> float | None:
        return _ratio(self.requests, self.offered)

    def per_pod_second(self, count: float | None) -> float | None:
        pods = len(self.request_rate_per_pod)
        return _ratio(count, self.seconds * pods) if pods else None


@dataclass(frozen=True)
class Judgement:
    verdict: Verdict
    reasons: tuple[str, ...]
    canary: Measurements
    stable: Measurements


@dataclass(frozen=True)
class _Check:
    verdict: Verdict
    message: str


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator or denominator <= 0:
        return None
    return numerator / denominator


def _quantile(data: Binned | None, q: float) -> float | None:
    if data is None or data.total <= 0:
        return None
    value = data.value_at(q)
    return value if math.isfinite(value) else None


def _rounded(value: float | None, digits: int = 6) -> float | None:
    return None if value is None or not math.isfinite(value) else round(value, digits)


def measurements(evidence: TrackEvidence) -> Measurements:
    """Point estimates for status and dashboards (the bounds are in the verdict's reasons)."""
    e = evidence
    positions = e.accepted_per_position
    return Measurements(
        acceptance_alpha=_rounded(_ratio(positions[0], e.drafts) if positions else None, 4),
        acceptance_rate=_rounded(_ratio(e.accepted_tokens, e.draft_tokens), 4),
        mean_accepted_length=_rounded(
            1 + accepted if (accepted := _ratio(e.accepted_tokens, e.drafts)) is not None else None, 4
        ),
        acceptance_per_position=[round(v, 4) for p in positions if (v := _ratio(p, e.drafts)) is not None],
        token_latency_mean_seconds=_rounded(e.token_latency_mean),
        token_latency_p50_seconds=_rounded(_quantile(e.token_latency, 0.5)),
        token_latency_p95_seconds=_rounded(_quantile(e.token_latency, LATENCY_QUANTILE)),
        step_latency_p95_seconds=_rounded(_quantile(e.step_latency, LATENCY_QUANTILE)),
        step_latency_mean_seconds=_rounded(e.step_latency_mean),
        batch_size_mean=_rounded(e.batch_mean, 3),
        ttft_p95_seconds=_rounded(_quantile(e.ttft, LATENCY_QUANTILE)),
        error_rate=_rounded(_ratio(e.errors, e.requests)),
        generation_tokens_per_second=_rounded(_ratio(e.generation_tokens, e.seconds), 3),
        requests_per_pod_per_second=_rounded(e.per_pod_load, 4),
        generation_tokens_per_pod_per_second=_rounded(e.per_pod_second(e.generation_tokens), 3),
        served_fraction=_rounded(e.served_fraction, 4),
        queue_time_p95_seconds=_rounded(_quantile(e.queue_time, LATENCY_QUANTILE)),
        kv_cache_usage_mean=_rounded(e.kv_cache_usage_mean, 4),
        kv_cache_usage_max=_rounded(e.kv_cache_usage_max, 4),
        preemptions_per_second=_rounded(_ratio(e.preemptions, e.seconds), 4),
        draft_tokens=_rounded(e.draft_tokens, 1),
        requests=_rounded(e.requests, 1),
        prompt_tokens_per_request=_rounded(_ratio(e.prompt_tokens, e.requests), 1),
        output_tokens_per_request=_rounded(_ratio(e.generation_tokens, e.requests), 1),
    )


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms" if seconds < 0.01 else f"{seconds * 1000:.1f} ms"


def _duration(seconds: float) -> str:
    return f"{seconds:.2f} s" if seconds >= 1 else _ms(seconds)


def _pct(value: float) -> str:
    return "+inf%" if math.isinf(value) else f"{value:+.0%}"


@dataclass(frozen=True)
class _Context:
    guardrails: Guardrails
    canary: TrackEvidence
    stable: TrackEvidence
    error: float
    """False-failure probability each guardrail may spend at this look."""
    confidence: str
    """How the bounds are named in reasons, e.g. `99%` (over all looks)."""
    same_drafter: bool = False
    """Stable runs the canary's drafter (another k, say): its acceptance is the baseline, not the canary's doing."""

    @property
    def z(self) -> float:
        return z_score(self.error)

    def load_ratio(self) -> float | None:
        canary, stable = self.canary.per_pod_load, self.stable.per_pod_load
        return canary / stable if canary is not None and stable else None


def _acceptance(ctx: _Context) -> _Check:
    g, c = ctx.guardrails, ctx.canary
    drafted = c.draft_tokens or 0.0
    if drafted < g.min_draft_tokens:
        return _Check(Verdict.INCONCLUSIVE, f"{drafted:.0f} draft tokens (need {g.min_draft_tokens})")
    if not c.accepted_per_position or not c.drafts:
        return _Check(Verdict.INCONCLUSIVE, "no per-position acceptance counters for the canary")
    alpha = c.accepted_per_position[0] / c.drafts
    if not 0 <= alpha <= 1:  # counters read from different scrapes; never judge on that
        return _Check(Verdict.INCONCLUSIVE, f"acceptance counters disagree ({alpha:.2f} of drafts accepted)")
    drafts_per_request = c.drafts / max(c.requests, 1.0)
    trials = c.drafts / (1 + max(0.0, drafts_per_request - 1) * ACCEPTANCE_ICC)
    lower, upper = wilson_bounds(alpha * trials, trials, ctx.z)
    text = f"acceptance alpha {alpha:.2f} ({ctx.confidence} bounds {lower:.2f}-{upper:.2f})"
    baseline = _stable_alpha_lower(ctx) if ctx.same_drafter else None
    if upper < g.min_acceptance_alpha and baseline is not None and upper >= baseline:
        return _Check(
            Verdict.PASS,
            f"{text}: below the floor {g.min_acceptance_alpha:.2f}, as stable's with the same drafter "
            f"(lower bound {baseline:.2f}): the drafter, not this change",
        )
    if upper < g.min_acceptance_alpha:
        return _Check(Verdict.FAIL, f"{text}: upper bound < {g.min_acceptance_alpha:.2f}")
    if alpha < g.min_acceptance_alpha:
        return _Check(Verdict.INCONCLUSIVE, f"{text}: below the floor {g.min_acceptance_alpha:.2f}, not yet surely")
    return _Check(Verdict.PASS, f"{text}, floor {g.min_acceptance_alpha:.2f}")


def _stable_alpha_lower(ctx: _Context) -> float | None:
    """The lower confidence bound of stable's alpha, counted as the canary's is; None without its counters."""
    s = ctx.stable
    if not s.accepted_per_position or not s.drafts or (s.draft_tokens or 0.0) < ctx.guardrails.min_draft_tokens:
        return None
    alpha = s.accepted_per_position[0] / s.drafts
    if not 0 <= alpha <= 1:
        return None
    trials = s.drafts / (1 + max(0.0, s.drafts / max(s.requests, 1.0) - 1) * ACCEPTANCE_ICC)
    return wilson_bounds(alpha * trials, trials, ctx.z)[0]


def _latency_samples(ctx: _Context, canary: Binned, stable: Binned) -> _Check | None:
    need = ctx.guardrails.min_requests
    if canary.total < need or stable.total < need:
        return _Check(
            Verdict.INCONCLUSIVE,
            f"{canary.total:.0f} canary and {stable.total:.0f} stable requests finished (need {need} each)",
        )
    return None


def _coarse_bucket(data: Binned, value: float, limit: float) -> str | None:
    lower, upper = data.bucket_of(value)
    if lower > 0 and upper / lower - 1 <= max(limit, RESOLUTION):
        return None
    shown = "+Inf" if math.isinf(upper) else _ms(upper)
    return f"({_ms(lower)}, {shown}]"


def _token_latency(ctx: _Context) -> _Check:
    g = ctx.guardrails
    c_data, s_data = ctx.canary.token_latency, ctx.stable.token_latency
    if c_data is None or s_data is None:
        which = "canary" if c_data is None else "stable"
        return _Check(Verdict.INCONCLUSIVE, f"no per-token latency histogram for the {which} track")
    shared = common_bounds(c_data, s_data)
    if not shared:
        return _Check(Verdict.INCONCLUSIVE, "the tracks' per-token latency histograms share no bucket bound")
    canary, stable = c_data.on(shared), s_data.on(shared)
    if (short := _latency_samples(ctx, canary, stable)) is not None:
        return short
    c_p95, s_p95 = canary.value_at(LATENCY_QUANTILE), stable.value_at(LATENCY_QUANTILE)
    limit = g.max_token_latency_p95_regression
    for name, data, value in (("canary", canary, c_p95), ("stable", stable, s_p95)):
        if (bucket := _coarse_bucket(data, value, limit)) is not None:
            return _Check(
                Verdict.INCONCLUSIVE,
                f"{name} per-token p95 lies in bucket {bucket}, too coarse to judge a {limit:.0%} limit: give both "
                "tracks finer buckets (--custom-histogram-buckets, vLLM >= 0.32)",
            )
    log_ratio = math.log(c_p95 / s_p95)
    error = math.hypot(log_quantile_se(canary, LATENCY_QUANTILE), log_quantile_se(stable, LATENCY_QUANTILE))
    change = math.exp(log_ratio) - 1
    lowest, highest = math.expm1(log_ratio - ctx.z * error), math.expm1(log_ratio + ctx.z * error)
    layout = "" if len(shared) == len(c_data.bounds) == len(s_data.bounds) else f" (on the {len(shared)} shared bounds)"
    text = (
        f"per-token p95 {_ms(c_p95)} vs stable {_ms(s_p95)}: {_pct(change)}, "
        f"{ctx.confidence} bounds {_pct(lowest)} to {_pct(highest)}{layout}"
    )
    load = ctx.load_ratio()
    bounded = min(canary.total, stable.total) >= requests_to_bound(LATENCY_QUANTILE, ctx.z)
    if not bounded:  # the normal bound is not trusted with this few requests: never fail on it
        text += f" (a bound at this look needs {requests_to_bound(LATENCY_QUANTILE, ctx.z)} requests per track)"
    return _against_stable(
        text, bounded and lowest > limit, change > limit, limit, load, ("carried", "per-pod load"), ": lower bound"
    )


def _against_stable(
    text: str, surely: bool, over: bool, limit: float, load: float | None, words: tuple[str, str], failed: str = ""
) -> _Check:
    """The verdict of a canary-vs-stable check: past the limit `surely` (its bound) fails, unless the canary
    carried more load than stable; past it by the estimate alone (`over`) waits; a canary that carried less
    load than stable cannot pass."""
    verb, noun = words
    if surely:
        if load is not None and load > 1 + LOAD_TOLERANCE:
            return _Check(Verdict.INCONCLUSIVE, f"{text}, but canary pods {verb} {load:.2f}x stable's {noun}")
        return _Check(Verdict.FAIL, f"{text}{failed} > limit {limit:.0%}")
    if over:
        return _Check(Verdict.INCONCLUSIVE, f"{text}: above the limit {limit:.0%}, not yet surely")
    if load is not None and load < 1 / (1 + LOAD_TOLERANCE):
        return _Check(Verdict.INCONCLUSIVE, f"{text}, but canary pods {verb} only {load:.2f}x stable's {noun}")
    return _Check(Verdict.PASS, f"{text}, limit {limit:.0%}")


def _step_latency(ctx: _Context, ceiling: float) -> _Check:
    """Per-step latency observations of one step share its duration: count requests as the samples."""
    return _p95_ceiling(ctx, "per-step p95", ctx.canary.step_latency, ceiling, _ms, samples=ctx.canary.requests)


def _p95_ceiling(
    ctx: _Context, label: str, data: Binned | None, ceiling: float, show: Callable[[float], str], **bounds: Any
) -> _Check:
    """An absolute ceiling on a canary p95: Fail once its lower bound is past it, Inconclusive while only
    the estimate is."""
    if data is None or data.total <= 0:
        return _Check(Verdict.INCONCLUSIVE, f"no {label.removesuffix(' p95')} histogram for the canary")
    q = quantile_bounds(data, LATENCY_QUANTILE, ctx.z, **bounds)
    text = f"{label} {show(q.estimate)} (lower {ctx.confidence} bound {show(q.lower)})"
    if q.lower > ceiling:
        return _Check(Verdict.FAIL, f"{text} > ceiling {show(ceiling)}")
    if q.estimate > ceiling:
        return _Check(Verdict.INCONCLUSIVE, f"{text}: above the ceiling {show(ceiling)}, not yet surely")
    return _Check(Verdict.PASS, f"{text}, ceiling {show(ceiling)}")


def _throughput(ctx: _Context, limit: float) -> _Check:
    """The share of offered requests the canary completes against stable's: a binomial bound on each share
    (offered requests are the trials), the two combined on the log of their ratio as for latency."""
    g, c, s = ctx.guardrails, ctx.canary, ctx.stable
    if s.requests < g.min_requests:
        return _Check(Verdict.INCONCLUSIVE, f"{s.requests:.0f} stable requests (need {g.min_requests}) for throughput")
    c_offered, s_offered = c.offered, s.offered
    if c_offered is None or s_offered is None:
        which = "canary" if c_offered is None else "stable"
        return _Check(Verdict.INCONCLUSIVE, f"no waiting-queue gauge for the {which} track: throughput not judged")
    if c.requests <= 0 or s.requests <= 0:
        return _Check(Verdict.INCONCLUSIVE, "no finished requests to judge throughput on")
    c_share, s_share = c.requests / c_offered, s.requests / s_offered
    _, c_upper = wilson_bounds(c.requests, c_offered, ctx.z)
    s_lower, _ = wilson_bounds(s.requests, s_offered, ctx.z)
    ratio = c_share / s_share
    error = math.hypot(math.log(c_upper / c_share), math.log(s_share / s_lower))
    drop, lowest = 1 - ratio, -math.expm1(math.log(ratio) + error)
    text = f"completed {c_share:.1%} of offered requests vs stable {s_share:.1%}"
    c_rate, s_rate = c.per_pod_second(c_offered), s.per_pod_second(s_offered)
    load = c_rate / s_rate if c_rate is not None and s_rate else None
    if c_rate is not None and s_rate is not None:
        text += f" at {c_rate:.2f} vs {s_rate:.2f} offered requests/s per pod"
    c_tokens, s_tokens = c.per_pod_second(c.generation_tokens), s.per_pod_second(s.generation_tokens)
    if c_tokens is not None and s_tokens is not None:
        text += f" ({c_tokens:.0f} vs {s_tokens:.0f} output tokens/s per pod)"
    text += f": drop {drop:.1%}, lower {ctx.confidence} bound {lowest:.1%}"
    return _against_stable(text, lowest > limit, drop > limit, limit, load, ("were offered", "load"))


def _queue_time(ctx: _Context, ceiling: float) -> _Check:
    return _p95_ceiling(ctx, "queue time p95", ctx.canary.queue_time, ceiling, _duration)


def _kv_cache(ctx: _Context, ceiling: float) -> _Check:
    """A level read from a gauge, not a sample of requests: judged on its average over the range."""
    mean, peak = ctx.canary.kv_cache_usage_mean, ctx.canary.kv_cache_usage_max
    if mean is None or not 0 <= mean <= 1:
        return _Check(Verdict.INCONCLUSIVE, "no KV-cache usage gauge for the canary")
    text = f"KV-cache usage {mean:.0%} on average" + (f" (max {peak:.0%})" if peak is not None else "")
    if mean > ceiling:
        return _Check(Verdict.FAIL, f"{text} > ceiling {ceiling:.0%}")
    return _Check(Verdict.PASS, f"{text}, ceiling {ceiling:.0%}")


def _errors(ctx: _Context) -> list[_Check]:
    g, c, s = ctx.guardrails, ctx.canary, ctx.stable
    checks = []
    rate = c.errors / c.requests
    if g.max_error_rate is not None:
        lower, _ = wilson_bounds(c.errors, c.requests, ctx.z)
        text = f"error rate {rate:.2%} (lower {ctx.confidence} bound {lower:.2%})"
        failed = lower > g.max_error_rate
        checks.append(
            _Check(
                Verdict.FAIL if failed else Verdict.PASS,
                f"{text} {'>' if failed else 'within'} ceiling {g.max_error_rate:.2%}",
            )
        )
    if s.requests < g.min_requests:
        checks.append(_Check(Verdict.INCONCLUSIVE, f"{s.requests:.0f} stable requests (need {g.min_requests})"))
        return checks
    c_rate, s_rate = c.errors / c.requests, s.errors / s.requests
    c_lower, _ = wilson_bounds(c.errors, c.requests, ctx.z)
    _, s_upper = wilson_bounds(s.errors, s.requests, ctx.z)
    lowest = c_rate - s_rate - math.hypot(c_rate - c_lower, s_upper - s_rate)  # Newcombe's hybrid score bound
    limit = g.max_error_rate_increase
    text = f"error rate {c_rate:.2%} vs stable {s_rate:.2%}, lower {ctx.confidence} bound of the increase"
    if lowest > limit:
        checks.append(_Check(Verdict.FAIL, f"{text} {lowest:+.2%} > limit {limit:.2%}"))
    else:
        checks.append(_Check(Verdict.PASS, f"{text} {lowest:+.2%}, limit {limit:.2%}"))
    return checks


def speedup(
    stable: TrackEvidence, holdback: TrackEvidence, guardrails: Guardrails, confidence: float, time: datetime
) -> Speedup:
    """Stable's speed-up over the holdback (`rollout.holdback`) over one window: holdback mean per-token
    latency / stable's, with bounds on the log of the ratio at `confidence` for this window alone. Its error
    is the larger of the delta method's (each mean's histogram spread / sqrt(requests)) and, with at least
    MIN_SLICES slices of the window, the batch means' (the spread of the slices' log ratios, with Student's t):
    requests that share batches are not independent, so the first alone is too narrow.

    The mean, not the p95: it is what tokens/s per user follows, and unbiased by k (docs/autotune.md); both
    tracks see the same traffic split by pod, so their loads match without being asked to.
    """
    need = guardrails.min_requests
    if stable.requests < need or holdback.requests < need:
        message = f"{stable.requests:.0f} stable and {holdback.requests:.0f} holdback requests finished (need {need})"
        return Speedup(time=time, message=message)
    s_mean, h_mean = stable.token_latency_mean, holdback.token_latency_mean
    if not s_mean or not h_mean or stable.token_latency is None or holdback.token_latency is None:
        return Speedup(time=time, message="no per-token latency histogram for both tracks")
    error = math.hypot(
        binned_sd(stable.token_latency) / (s_mean * math.sqrt(stable.requests)),
        binned_sd(holdback.token_latency) / (h_mean * math.sqrt(holdback.requests)),
    )
    z = z_score((1 - confidence) / 2)
    slices = [
        math.log(h / s)
        for s, h in zip(stable.token_latency_slices, holdback.token_latency_slices, strict=False)
        if s > 0 and h > 0
    ]
    if len(slices) >= MIN_SLICES:  # batch means: the slices' spread, with the t quantile of so few
        mean = sum(slices) / len(slices)
        spread = math.sqrt(sum((r - mean) ** 2 for r in slices) / (len(slices) - 1))
        t = t_score((1 - confidence) / 2, len(slices) - 1)
        error = max(error, spread / math.sqrt(len(slices)) * t / z)  # scaled so that z x error is t x its own
    log_ratio = math.log(h_mean / s_mean)
    estimate, lower, upper = math.exp(log_ratio), math.exp(log_ratio - z * error), math.exp(log_ratio + z * error)
    s_tokens, h_tokens = (
        stable.per_pod_second(stable.generation_tokens),
        holdback.per_pod_second(holdback.generation_tokens),
    )
    load = _ratio(stable.per_pod_load, holdback.per_pod_load)
    message = (
        f"per-token latency {_ms(s_mean)} vs holdback {_ms(h_mean)} (means): speed-up {estimate:.3f}x, "
        f"{confidence * 100:g}% bounds {lower:.3f}-{upper:.3f}"
    )
    if load is not None and not 1 / (1 + LOAD_TOLERANCE) <= load <= 1 + LOAD_TOLERANCE:
        message += f"; stable pods carried {load:.2f}x the holdback's per-pod load: not comparable"
    return Speedup(
        time=time,
        estimate=_rounded(estimate, 4),
        lower=_rounded(lower, 4),
        upper=_rounded(upper, 4),
        stable_token_latency_mean_seconds=_rounded(s_mean),
        holdback_token_latency_mean_seconds=_rounded(h_mean),
        throughput_ratio=_rounded(_ratio(s_tokens, h_tokens), 4),
        load_ratio=_rounded(load, 4),
        message=message,
    )


def judge(
    guardrails: Guardrails,
    canary: TrackEvidence,
    stable: TrackEvidence,
    *,
    speculative: bool,
    confidence: float,
    look: int,
    same_drafter: bool = False,
) -> Judgement:
    """Judge the canary's evidence against the guardrails and against stable's evidence over the same range.

    `same_drafter`: stable serves the canary's drafter (the canary changes k, say). The acceptance floor
    then fails the canary only when its alpha is also surely below stable's: a drafter under the floor on
    both tracks is not what the canary changes, and rolling back to it would not help.
    """
    g = guardrails
    optional = (g.max_error_rate, g.max_step_latency_p95_seconds, g.max_throughput_drop, g.max_queue_time_p95_seconds)
    tests = 2 + int(speculative) + sum(limit is not None for limit in optional)
    error = look_error(1 - confidence, max(1, look)) / tests
    ctx = _Context(g, canary, stable, error, f"{confidence * 100:g}%", same_drafter)
    checks: list[_Check] = []
    if speculative:
        checks.append(_acceptance(ctx))
    if g.max_kv_cache_usage is not None:
        checks.append(_kv_cache(ctx, g.max_kv_cache_usage))
    if canary.requests < g.min_requests:
        checks.append(_Check(Verdict.INCONCLUSIVE, f"{canary.requests:.0f} canary requests (need {g.min_requests})"))
    else:
        checks.append(_token_latency(ctx))
        if g.max_step_latency_p95_seconds is not None:
            checks.append(_step_latency(ctx, g.max_step_latency_p95_seconds))
        if g.max_queue_time_p95_seconds is not None:
            checks.append(_queue_time(ctx, g.max_queue_time_p95_seconds))
        if g.max_throughput_drop is not None:
            checks.append(_throughput(ctx, g.max_throughput_drop))
        checks.extend(_errors(ctx))
    verdict = next(
        (v for v in (Verdict.FAIL, Verdict.INCONCLUSIVE) if any(c.verdict is v for c in checks)), Verdict.PASS
    )
    shown = checks if verdict is Verdict.PASS else [c for c in checks if c.verdict is verdict]
    return Judgement(verdict, tuple(c.message for c in shown), measurements(canary), measurements(stable))


@dataclass(frozen=True)
class DriftCheck:
    """One look at the serving fleet against what it measured when promoted."""

    drifted: bool | None
    """True: surely drifted on some measure; False: every measure judged and within its limit; None: not
    enough evidence to tell (or the load is not comparable and acceptance was not judged)."""
    load_ratio: float | None
    """Per-pod load now / at promotion."""
    reasons: tuple[str, ...]
    profile: TrafficProfile | None = None
    """The length mix now against promotion's; None without enough evidence (or no mix at promotion)."""


MIX_TOLERANCE = 1.5
"""Prompt and output tokens per finished request within this factor (1/1.5x to 1.5x) of their values at
promotion count as the same length mix. Per-token latency depends on the lengths (each decoded token attends
over the prompt and the tokens before it; longer prompts put more prefill into the decoding steps), so a p95
taken on another mix is not comparable with the promoted one. The band is wider than the load's 1.25x
because a window's mean length is noisier than its request rate: request lengths are heavy-tailed
(log-normal, sigma about 0.8 to 1), so the mean of `minRequests` (100) requests can be 1.3-1.4x off the
traffic's at 99.9%; a factor of 1.5 is a move of the traffic itself, not sampling."""
MIX_PARTS = ("prompt", "output")


def _outside(ratio: float | None, tolerance: float) -> bool:
    return ratio is not None and not 1 / tolerance <= ratio <= tolerance


def length_mix(reference: DriftReference, now: TrackEvidence, guardrails: Guardrails) -> TrafficProfile | None:
    """Prompt and output tokens per finished request over the window (vLLM's token counters) against their
    values at promotion. None with fewer than `guardrails.minRequests` finished requests, or when neither
    length was measured at promotion. A part is `shifted` when its ratio is outside `MIX_TOLERANCE`."""
    if now.requests < guardrails.min_requests:
        return None
    prompt = _ratio(now.prompt_tokens, now.requests)
    output = _ratio(now.generation_tokens, now.requests)
    prompt_ratio = _ratio(prompt, reference.prompt_tokens_per_request)
    output_ratio = _ratio(output, reference.output_tokens_per_request)
    if prompt_ratio is None and output_ratio is None:
        return None
    ratios = dict(zip(MIX_PARTS, (prompt_ratio, output_ratio), strict=True))
    return TrafficProfile(
        prompt_tokens_per_request=_rounded(prompt, 1),
        output_tokens_per_request=_rounded(output, 1),
        prompt_tokens_ratio=_rounded(prompt_ratio, 3),
        output_tokens_ratio=_rounded(output_ratio, 3),
        shifted=[part for part, ratio in ratios.items() if _outside(ratio, MIX_TOLERANCE)],
    )


def describe_mix(profile: TrafficProfile, parts: list[str] | None = None) -> str:
    """The shifted parts of the mix (or `parts`) with the numbers, e.g. `output tokens per request 384 (3.00x
    that at promotion)`."""
    values = {
        "prompt": (profile.prompt_tokens_per_request, profile.prompt_tokens_ratio),
        "output": (profile.output_tokens_per_request, profile.output_tokens_ratio),
    }
    shown = [
        f"{part} tokens per request {value:.0f} ({ratio:.2f}x that at promotion)"
        for part in (profile.shifted if parts is None else parts)
        if (value := values[part][0]) is not None and (ratio := values[part][1]) is not None
    ]
    return ", ".join(shown)


def drift(
    settings: DriftSpec,
    reference: DriftReference,
    now: TrackEvidence,
    guardrails: Guardrails,
    confidence: float,
) -> DriftCheck:
    """Compare the fleet's evidence over one window with what it measured as a canary at promotion.

    Alpha does not depend on the load, so it is judged whatever the load: drift when its upper bound is
    more than `maxAcceptanceDrop` below the promoted alpha. Latency is judged only at comparable per-pod
    load (within 25%): drift when the lower bound of its p95 is more than `maxTokenLatencyIncrease` above
    the promoted p95, and only at a comparable length mix (`length_mix`: prompt and output tokens per
    request within `MIX_TOLERANCE` of promotion's; an unmeasured mix does not stop it). Each bound is at
    `confidence` for this look alone; `DriftSpec.looks` looks in a row
    make the verdict (the state machine's hysteresis), which is what keeps noise from flapping it.
    """
    error = (1 - confidence) / 2
    ctx = _Context(guardrails, now, now, error, f"{confidence * 100:g}%")
    checks: list[_Check] = []
    if reference.acceptance_alpha is not None and now.accepted_per_position and now.drafts:
        floor = reference.acceptance_alpha - settings.max_acceptance_drop
        alpha = now.accepted_per_position[0] / now.drafts
        trials = now.drafts / (1 + max(0.0, now.drafts / max(now.requests, 1.0) - 1) * ACCEPTANCE_ICC)
        if 0 <= alpha <= 1 and (now.draft_tokens or 0.0) >= guardrails.min_draft_tokens:
            _, upper = wilson_bounds(alpha * trials, trials, ctx.z)
            promoted = reference.acceptance_alpha
            text = f"acceptance alpha {alpha:.2f} (upper bound {upper:.2f}) vs {promoted:.2f} at promotion"
            verdict = Verdict.FAIL if upper < floor else Verdict.PASS
            checks.append(_Check(verdict, f"{text}: {'below' if upper < floor else 'within'} the drop limit"))
    load = None
    if now.per_pod_load is not None and reference.requests_per_pod_per_second:
        load = now.per_pod_load / reference.requests_per_pod_per_second
    mix = length_mix(reference, now, guardrails)
    latency = now.token_latency
    if reference.token_latency_p95_seconds and latency is not None and now.requests >= guardrails.min_requests:
        ceiling = reference.token_latency_p95_seconds * (1 + settings.max_token_latency_increase)
        shifts = [f"per-pod load {load:.2f}x that at promotion"] if _outside(load, 1 + LOAD_TOLERANCE) else []
        if mix is not None and mix.shifted:
            shifts.append(describe_mix(mix))
        if shifts:
            checks.append(_Check(Verdict.INCONCLUSIVE, f"{'; '.join(shifts)}: latency not comparable"))
        elif load is not None:
            checks.append(_p95_ceiling(ctx, "per-token p95", latency, ceiling, _ms, samples=now.requests))
    reasons = tuple(c.message for c in checks)
    if any(c.verdict is Verdict.FAIL for c in checks):
        return DriftCheck(True, load, reasons, mix)
    judged = len(checks) == 2 and all(c.verdict is Verdict.PASS for c in checks)
    return DriftCheck(False if judged else None, load, reasons or ("not enough evidence this window",), mix)

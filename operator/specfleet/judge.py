"""Guardrails + the evidence of both tracks -> a verdict. Pure, and total: every input gives one of four answers.

Each guardrail is two one-sided tests on confidence bounds (the equivalence-testing rule):
- Fail: the bound on the good side is past the limit: the canary is surely worse than allowed. Evidence
  of harm wins over missing evidence elsewhere.
- Pass: the bound on the bad side is within the limit: the evidence *shows* the canary within it. An
  estimate past the limit, or too little evidence to bound it, is never a Pass.
- Inconclusive: the bounds straddle the limit, or too few samples, buckets too coarse, per-pod loads too
  different to compare, or no data; the reason says what it still needs (Flagger #1095).
- Error: Prometheus could not be asked (decided by the caller, which has the exception).

The evidence is everything since the step started, and the bounds are a confidence sequence
(`specfleet.stats.sequence_z`): valid at every look at once, narrowing as the evidence grows.

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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime

from specfleet.api.spec import DriftSpec, Guardrails
from specfleet.api.status import DriftReference, GuardrailCheck, Measurements, Speedup, TrafficProfile, Verdict
from specfleet.metrics import names
from specfleet.stats import (
    Binned,
    binned_sd,
    common_bounds,
    log_quantile_se,
    look_error,
    quantile_bounds,
    requests_to_bound,
    sequence_z,
    t_score,
    wilson_bounds,
    z_score,
)

LATENCY_QUANTILE = 0.95
ACCEPTANCE_ICC = 0.1
"""Assumed correlation of acceptance between drafts of one request (they share its prompt): the drafts
count as drafts / (1 + (drafts per request - 1) x ICC) independent trials (Kish's design effect). 0.1
means requests' own alphas spread with a standard deviation up to about 0.13 around alpha 0.8."""
LATENCY_ICC = 0.2
"""Assumed correlation of the per-token latencies of requests that share a pod's batches: a track's requests
count as requests / (1 + (batch - 1) x 0.2) independent samples (Kish's design effect), the batch read by
Little's law. Measured by benchmarks/judge_roc.py on A/A canaries: the mean's estimate / its independent-
requests standard error had a variance of 0.9 at 2 requests/s per pod (batch 1.1), 1.1 at 4 (1.9) and
2.0 at 12 (7.0): 1 + 6 x 0.17; the p95's up to 1.4."""
LOAD_TOLERANCE = 0.25
"""Per-pod request rates of the two tracks within this factor (1.25x) count as comparable load."""
MIN_SLICES = 4
"""Fewest slices of a window whose spread bounds the speed-up (batch means); with fewer, requests alone do."""
RESOLUTION = 0.1
"""A p95 inside a bucket wider than this (or than the regression limit, if larger) cannot be resolved."""
SAME_DRAFTER_MARGIN = 0.05
"""With stable's drafter (another k), a canary under the acceptance floor passes it when its alpha is shown
within this of stable's: alpha does not depend on k, so the floor both miss is the drafter's."""


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
    def batch(self) -> float | None:
        """Requests running per pod, by Little's law: per-pod arrival rate x decode time per request (mean time
        per output token x output tokens per request)."""
        tokens = _ratio(self.generation_tokens, self.requests)
        if self.per_pod_load is None or self.token_latency_mean is None or tokens is None:
            return None
        return self.per_pod_load * self.token_latency_mean * tokens

    @property
    def latency_design_effect(self) -> float:
        """How many requests count as one independent per-token latency sample (1 without a batch to read)."""
        batch = self.batch
        return 1.0 if batch is None else 1 + max(0.0, batch - 1) * LATENCY_ICC

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


def _whole_pct(value: float) -> str:
    return f"{value:.0%}"


def _share(value: float) -> str:
    return f"{value:.2%}"


def _alpha(value: float) -> str:
    return f"{value:.2f}"


def _about(count: float) -> str:
    """A count as a user reads an estimate: two significant figures, thousands separated."""
    return f"{float(f'{count:.2g}'):,.0f}"


def _span(seconds: float) -> str:
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    if seconds < 90 * 60:
        return f"{round(seconds / 60)} min"
    return f"{seconds / 3600:.1f} h"


@dataclass(frozen=True)
class Growth:
    """How a check's evidence grows, to say what it still needs: its count now and its rate."""

    count: float
    seconds: float
    unit: str = "canary requests"

    def more(self, factor: float) -> str:
        """`factor` times the evidence now, as what is missing: `~1,900 more canary requests, ~4 min at the
        current rate`."""
        if factor > MAX_GROWTH:
            return f"over {MAX_GROWTH:,.0f}x the {self.unit} so far"
        missing = self.count * (factor - 1)
        text = f"~{_about(missing)} more {self.unit}"
        if self.count > 0 and self.seconds > 0:
            text += f", ~{_span(missing / (self.count / self.seconds))} at the current rate"
        return text


Bounds = Callable[[float], tuple[float, float]]
"""A check's (lower, upper) bounds with its evidence grown by a factor, its estimates unchanged."""
MAX_GROWTH = 1000.0
"""Evidence beyond this many times the current is not projected: an estimate on its limit is said to be so."""


@dataclass(frozen=True)
class _Check:
    verdict: Verdict
    message: str
    guardrail: str = ""
    estimate: float | None = None
    lower: float | None = None
    upper: float | None = None
    limit: float | None = None
    needs: str | None = None

    def record(self) -> GuardrailCheck:
        return GuardrailCheck(
            guardrail=self.guardrail,
            verdict=self.verdict,
            estimate=_rounded(self.estimate),
            lower=_rounded(self.lower),
            upper=_rounded(self.upper),
            limit=_rounded(self.limit),
            needs=self.needs,
        )


@dataclass(frozen=True)
class Judgement:
    verdict: Verdict
    reasons: tuple[str, ...]
    canary: Measurements
    stable: Measurements
    checks: tuple[GuardrailCheck, ...] = ()


@dataclass(frozen=True)
class _Context:
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

    def growth(self, unit: str = "canary requests") -> Growth:
        return Growth(self.canary.requests, self.canary.seconds, unit)


def _decided(lower: float, upper: float, limit: float, ceiling: bool) -> bool:
    return (lower > limit or upper <= limit) if ceiling else (upper < limit or lower >= limit)


def _needs(bounds: Bounds, limit: float, ceiling: bool, growth: Growth) -> str:
    """The smallest growth of the evidence (in steps of 5%) at which the bounds would settle the check."""
    factor = 1.05
    while factor <= MAX_GROWTH:
        if _decided(*bounds(factor), limit, ceiling):
            return growth.more(factor)
        factor *= 1.05
    return "the estimate sits on the limit: more evidence may not settle it"


def _bounded(
    guardrail: str,
    text: str,
    estimate: float,
    bounds: Bounds,
    limit: float,
    growth: Growth,
    show: Callable[[float], str],
    *,
    ceiling: bool = True,
    word: str = "limit",
) -> _Check:
    """The symmetric verdict of one guardrail (two one-sided tests): Fail when the bound on the good side is
    past the limit, Pass when the bound on the bad side is within it, Inconclusive while they straddle it.
    `ceiling`: larger is worse (else the limit is a floor); `word` names the limit in the reason."""
    lower, upper = bounds(1.0)
    shown = f"{word} {show(limit)}"
    found = {"guardrail": guardrail, "estimate": estimate, "lower": lower, "upper": upper, "limit": limit}
    if ceiling and lower > limit:
        return _Check(Verdict.FAIL, f"{text}: lower bound > {shown}", **found)
    if not ceiling and upper < limit:
        return _Check(Verdict.FAIL, f"{text}: upper bound < {show(limit)}", **found)
    if _decided(lower, upper, limit, ceiling):
        return _Check(Verdict.PASS, f"{text}, {shown}", **found)
    needs = _needs(bounds, limit, ceiling, growth)
    side = "past" if (estimate > limit if ceiling else estimate < limit) else "within"
    state = "not yet surely" if side == "past" else "not yet shown"
    return _Check(Verdict.INCONCLUSIVE, f"{text}: {side} the {shown}, {state} ({needs})", needs=needs, **found)


def _trials(evidence: TrackEvidence) -> float:
    """Drafts as independent trials: drafts of one request share its prompt (Kish's design effect)."""
    drafts = evidence.drafts or 0.0
    return drafts / (1 + max(0.0, drafts / max(evidence.requests, 1.0) - 1) * ACCEPTANCE_ICC)


def _alpha_of(evidence: TrackEvidence, min_draft_tokens: int) -> float | None:
    """Drafts whose first token was accepted / drafts; None without enough drafts or with counters that
    disagree (read from different scrapes)."""
    e = evidence
    if not e.accepted_per_position or not e.drafts or (e.draft_tokens or 0.0) < min_draft_tokens:
        return None
    alpha = e.accepted_per_position[0] / e.drafts
    return alpha if 0 <= alpha <= 1 else None


def _alpha_bounds(ctx: _Context, alpha: float, trials: float) -> Bounds:
    return lambda factor: wilson_bounds(alpha * trials * factor, trials * factor, ctx.z(trials * factor))


def _acceptance(ctx: _Context) -> _Check:
    g, c = ctx.guardrails, ctx.canary
    drafted = c.draft_tokens or 0.0
    name = "minAcceptanceAlpha"
    if drafted < g.min_draft_tokens:
        growth = Growth(drafted, c.seconds, "draft tokens").more(g.min_draft_tokens / drafted) if drafted else None
        needs = f"needs {g.min_draft_tokens}" + (f": {growth}" if growth else "")
        return _Check(Verdict.INCONCLUSIVE, f"{drafted:.0f} draft tokens ({needs})", name, needs=growth)
    if not c.accepted_per_position or not c.drafts:
        return _Check(Verdict.INCONCLUSIVE, "no per-position acceptance counters for the canary", name)
    alpha = c.accepted_per_position[0] / c.drafts
    if not 0 <= alpha <= 1:  # counters read from different scrapes; never judge on that
        return _Check(Verdict.INCONCLUSIVE, f"acceptance counters disagree ({alpha:.2f} of drafts accepted)", name)
    bounds = _alpha_bounds(ctx, alpha, _trials(c))
    lower, upper = bounds(1.0)
    text = f"acceptance alpha {alpha:.2f} ({ctx.confidence} bounds {lower:.2f}-{upper:.2f})"
    floor = g.min_acceptance_alpha
    if ctx.same_drafter and lower < floor and (shared := _as_stable(ctx, alpha, bounds, text)) is not None:
        return shared
    return _bounded(name, text, alpha, bounds, floor, ctx.growth(), _alpha, ceiling=False, word="floor")


def _as_stable(ctx: _Context, alpha: float, bounds: Bounds, text: str) -> _Check | None:
    """Stable serves the canary's drafter (another k): a floor both tracks miss is the drafter's, not this
    change's. The canary then passes when its alpha is shown within SAME_DRAFTER_MARGIN of stable's, and fails
    only when it is also surely below stable's. None without stable's counters (the floor alone decides)."""
    s, floor = ctx.stable, ctx.guardrails.min_acceptance_alpha
    stable_alpha = _alpha_of(s, ctx.guardrails.min_draft_tokens)
    if stable_alpha is None:
        return None
    theirs = _alpha_bounds(ctx, stable_alpha, _trials(s))

    def difference(factor: float) -> tuple[float, float]:
        (c_low, c_up), (s_low, s_up) = bounds(factor), theirs(factor)
        change = alpha - stable_alpha
        return change - math.hypot(alpha - c_low, s_up - stable_alpha), change + math.hypot(
            c_up - alpha, stable_alpha - s_low
        )

    lowest, highest = difference(1.0)
    said = (
        f"{text}: below the floor {floor:.2f} as stable's with the same drafter ({stable_alpha:.2f}; "
        f"{ctx.confidence} bounds of the difference {lowest:+.2f} to {highest:+.2f}, margin {SAME_DRAFTER_MARGIN:.2f})"
    )
    lower, upper = bounds(1.0)
    found = {"guardrail": "minAcceptanceAlpha", "estimate": alpha, "lower": lower, "upper": upper, "limit": floor}
    if upper < floor and highest < -SAME_DRAFTER_MARGIN:
        return _Check(Verdict.FAIL, f"{text}: upper bound < {floor:.2f}, and surely below stable's", **found)
    if lowest >= -SAME_DRAFTER_MARGIN:
        return _Check(Verdict.PASS, f"{said}: the drafter, not this change", **found)
    needs = _needs(difference, -SAME_DRAFTER_MARGIN, False, ctx.growth())
    return _Check(Verdict.INCONCLUSIVE, f"{said}, not yet shown within the margin ({needs})", needs=needs, **found)


def _latency_samples(ctx: _Context, canary: Binned, stable: Binned, name: str) -> _Check | None:
    need = ctx.guardrails.min_requests
    if canary.total < need or stable.total < need:
        return _Check(
            Verdict.INCONCLUSIVE,
            f"{canary.total:.0f} canary and {stable.total:.0f} stable requests finished (need {need} each)",
            name,
        )
    return None


def _coarse_bucket(data: Binned, value: float, limit: float) -> str | None:
    lower, upper = data.bucket_of(value)
    if lower > 0 and upper / lower - 1 <= max(limit, RESOLUTION):
        return None
    shown = "+Inf" if math.isinf(upper) else _ms(upper)
    return f"({_ms(lower)}, {shown}]"


def _relative(ctx: _Context, log_ratio: float, error: float, samples: float) -> Bounds:
    """Bounds on a canary/stable ratio - 1 from the log ratio's standard error, which falls as 1/sqrt(growth)."""

    def bounds(factor: float) -> tuple[float, float]:
        half = ctx.z(samples * factor) * error / math.sqrt(factor)
        return math.expm1(log_ratio - half), math.expm1(log_ratio + half)

    return bounds


def _token_latency(ctx: _Context) -> _Check:
    g, name = ctx.guardrails, "maxTokenLatencyP95Regression"
    c_data, s_data = ctx.canary.token_latency, ctx.stable.token_latency
    if c_data is None or s_data is None:
        which = "canary" if c_data is None else "stable"
        return _Check(Verdict.INCONCLUSIVE, f"no per-token latency histogram for the {which} track", name)
    shared = common_bounds(c_data, s_data)
    if not shared:
        return _Check(Verdict.INCONCLUSIVE, "the tracks' per-token latency histograms share no bucket bound", name)
    canary, stable = c_data.on(shared), s_data.on(shared)
    if (short := _latency_samples(ctx, canary, stable, name)) is not None:
        return short
    c_p95, s_p95 = canary.value_at(LATENCY_QUANTILE), stable.value_at(LATENCY_QUANTILE)
    limit = g.max_token_latency_p95_regression
    for which, data, value in (("canary", canary, c_p95), ("stable", stable, s_p95)):
        if (bucket := _coarse_bucket(data, value, limit)) is not None:
            return _Check(
                Verdict.INCONCLUSIVE,
                f"{which} per-token p95 lies in bucket {bucket}, too coarse to judge a {limit:.0%} limit: give both "
                "tracks finer buckets (--custom-histogram-buckets, vLLM >= 0.32)",
                name,
            )
    c_effect, s_effect = ctx.canary.latency_design_effect, ctx.stable.latency_design_effect
    samples = min(canary.total / c_effect, stable.total / s_effect)
    needed = requests_to_bound(LATENCY_QUANTILE, ctx.z(samples))
    if samples < needed:  # the normal bound on a p95 is not trusted on fewer: neither pass nor fail
        missing = Growth(ctx.canary.requests, ctx.canary.seconds).more(needed / samples)
        per_track = math.ceil(needed * max(c_effect, s_effect))
        text = f"per-token p95 {_ms(c_p95)} vs stable {_ms(s_p95)}: a bound needs {per_track} requests per track"
        return _Check(Verdict.INCONCLUSIVE, f"{text} ({missing})", name, c_p95 / s_p95 - 1, limit=limit, needs=missing)
    log_ratio = math.log(c_p95 / s_p95)
    error = math.hypot(
        log_quantile_se(canary, LATENCY_QUANTILE) * math.sqrt(c_effect),
        log_quantile_se(stable, LATENCY_QUANTILE) * math.sqrt(s_effect),
    )
    bounds = _relative(ctx, log_ratio, error, samples)
    lowest, highest = bounds(1.0)
    layout = "" if len(shared) == len(c_data.bounds) == len(s_data.bounds) else f" (on the {len(shared)} shared bounds)"
    text = (
        f"per-token p95 {_ms(c_p95)} vs stable {_ms(s_p95)}: {_pct(math.expm1(log_ratio))}, "
        f"{ctx.confidence} bounds {_pct(lowest)} to {_pct(highest)}{layout}"
    )
    check = _bounded(name, text, math.expm1(log_ratio), bounds, limit, ctx.growth(), _whole_pct)
    return _at_load(check, ctx.load_ratio(), ("carried", "per-pod load"))


def _token_latency_mean(ctx: _Context) -> _Check:
    """The mean per-token latency, canary vs stable: the typical request, which the p95 misses (a config that
    slows most requests while the worst-guessed prompts set the p95). Delta method on the log of the ratio of
    the histograms' means (`_sum / _count`, exact), each with the spread of its buckets."""
    name, limit = "maxTokenLatencyMeanRegression", ctx.guardrails.max_token_latency_mean_regression
    c, s = ctx.canary, ctx.stable
    if c.token_latency is None or s.token_latency is None or not c.token_latency_mean or not s.token_latency_mean:
        which = "canary" if c.token_latency is None or not c.token_latency_mean else "stable"
        return _Check(Verdict.INCONCLUSIVE, f"no per-token latency mean for the {which} track", name)
    if (short := _latency_samples(ctx, c.token_latency, s.token_latency, name)) is not None:
        return short
    c_mean, s_mean = c.token_latency_mean, s.token_latency_mean
    c_n, s_n = c.token_latency.total / c.latency_design_effect, s.token_latency.total / s.latency_design_effect
    error = math.hypot(
        binned_sd(c.token_latency) / (c_mean * math.sqrt(c_n)), binned_sd(s.token_latency) / (s_mean * math.sqrt(s_n))
    )
    log_ratio = math.log(c_mean / s_mean)
    bounds = _relative(ctx, log_ratio, error, min(c_n, s_n))
    lowest, highest = bounds(1.0)
    text = (
        f"per-token mean {_ms(c_mean)} vs stable {_ms(s_mean)}: {_pct(math.expm1(log_ratio))}, "
        f"{ctx.confidence} bounds {_pct(lowest)} to {_pct(highest)}"
    )
    check = _bounded(name, text, math.expm1(log_ratio), bounds, limit, ctx.growth(), _whole_pct)
    return _at_load(check, ctx.load_ratio(), ("carried", "per-pod load"))


def _at_load(check: _Check, load: float | None, words: tuple[str, str]) -> _Check:
    """A canary-vs-stable verdict at unequal per-pod load keeps only what holds despite it: a canary that
    carried more than stable cannot fail, one that carried less cannot pass."""
    verb, noun = words
    if check.verdict is Verdict.FAIL and load is not None and load > 1 + LOAD_TOLERANCE:
        message = f"{check.message}, but canary pods {verb} {load:.2f}x stable's {noun}"
        return replace(check, verdict=Verdict.INCONCLUSIVE, message=message)
    if check.verdict is Verdict.PASS and load is not None and load < 1 / (1 + LOAD_TOLERANCE):
        message = f"{check.message}, but canary pods {verb} only {load:.2f}x stable's {noun}"
        return replace(check, verdict=Verdict.INCONCLUSIVE, message=message)
    return check


def _step_latency(ctx: _Context, ceiling: float) -> _Check:
    """Per-step latency observations of one step share its duration: count requests as the samples."""
    return _p95_ceiling(
        ctx, "maxStepLatencyP95Seconds", "per-step p95", ctx.canary.step_latency, ceiling, _ms, ctx.canary.requests
    )


def _p95_ceiling(
    ctx: _Context,
    guardrail: str,
    label: str,
    data: Binned | None,
    ceiling: float,
    show: Callable[[float], str],
    samples: float | None = None,
) -> _Check:
    """An absolute ceiling on a canary p95, on the distribution-free bounds of a quantile."""
    if data is None or data.total <= 0:
        return _Check(Verdict.INCONCLUSIVE, f"no {label.removesuffix(' p95')} histogram for the canary", guardrail)
    n = data.total if samples is None else min(samples, data.total)

    def bounds(factor: float) -> tuple[float, float]:
        q = quantile_bounds(data, LATENCY_QUANTILE, ctx.z(n * factor), samples=n * factor)
        return q.lower, q.upper

    estimate, (lower, upper) = data.value_at(LATENCY_QUANTILE), bounds(1.0)
    shown_upper = "+Inf" if math.isinf(upper) else show(upper)
    text = f"{label} {show(estimate)} ({ctx.confidence} bounds {show(lower)} to {shown_upper})"
    return _bounded(guardrail, text, estimate, bounds, ceiling, ctx.growth(), show, word="ceiling")


def _throughput(ctx: _Context, limit: float) -> _Check:
    """The share of offered requests the canary completes against stable's: a binomial bound on each share
    (offered requests are the trials), the two combined on the log of their ratio as for latency."""
    g, c, s, name = ctx.guardrails, ctx.canary, ctx.stable, "maxThroughputDrop"
    if s.requests < g.min_requests:
        text = f"{s.requests:.0f} stable requests (need {g.min_requests}) for throughput"
        return _Check(Verdict.INCONCLUSIVE, text, name)
    c_offered, s_offered = c.offered, s.offered
    if c_offered is None or s_offered is None:
        which = "canary" if c_offered is None else "stable"
        return _Check(
            Verdict.INCONCLUSIVE, f"no waiting-queue gauge for the {which} track: throughput not judged", name
        )
    if c.requests <= 0 or s.requests <= 0:
        return _Check(Verdict.INCONCLUSIVE, "no finished requests to judge throughput on", name)
    c_share, s_share = c.requests / c_offered, s.requests / s_offered

    def bounds(factor: float) -> tuple[float, float]:
        """Bounds on the drop, 1 - canary share / stable share."""
        z = ctx.z(min(c_offered, s_offered) * factor)
        c_low, c_up = wilson_bounds(c.requests * factor, c_offered * factor, z)
        s_low, s_up = wilson_bounds(s.requests * factor, s_offered * factor, z)
        ratio = math.log(c_share / s_share)
        worse = math.hypot(math.log(c_share / c_low) if c_low > 0 else math.inf, math.log(s_up / s_share))
        better = math.hypot(math.log(c_up / c_share), math.log(s_share / s_low) if s_low > 0 else math.inf)
        return -math.expm1(ratio + better), -math.expm1(ratio - worse)

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
    text += f": drop {drop:.1%}, {ctx.confidence} bounds {lowest:.1%} to {highest:.1%}"
    check = _bounded(name, text, drop, bounds, limit, ctx.growth(), _whole_pct)
    return _at_load(check, load, ("were offered", "load"))


def _queue_time(ctx: _Context, ceiling: float) -> _Check:
    return _p95_ceiling(ctx, "maxQueueTimeP95Seconds", "queue time p95", ctx.canary.queue_time, ceiling, _duration)


def _kv_cache(ctx: _Context, ceiling: float) -> _Check:
    """A level read from a gauge, not a sample of requests: judged on its average over the range."""
    mean, peak, name = ctx.canary.kv_cache_usage_mean, ctx.canary.kv_cache_usage_max, "maxKvCacheUsage"
    if mean is None or not 0 <= mean <= 1:
        return _Check(Verdict.INCONCLUSIVE, "no KV-cache usage gauge for the canary", name)
    text = f"KV-cache usage {mean:.0%} on average" + (f" (max {peak:.0%})" if peak is not None else "")
    found = {"guardrail": name, "estimate": mean, "limit": ceiling}
    if mean > ceiling:
        return _Check(Verdict.FAIL, f"{text} > ceiling {ceiling:.0%}", **found)
    return _Check(Verdict.PASS, f"{text}, ceiling {ceiling:.0%}", **found)


def _error_rate(ctx: _Context, ceiling: float) -> _Check:
    c = ctx.canary
    rate = c.errors / c.requests

    def bounds(factor: float) -> tuple[float, float]:
        return wilson_bounds(c.errors * factor, c.requests * factor, ctx.z(c.requests * factor))

    lower, upper = bounds(1.0)
    text = f"error rate {rate:.2%} ({ctx.confidence} bounds {lower:.2%} to {upper:.2%})"
    return _bounded("maxErrorRate", text, rate, bounds, ceiling, ctx.growth(), _share, word="ceiling")


def _error_increase(ctx: _Context) -> _Check:
    """The canary's error rate minus stable's, with Newcombe's hybrid score bounds (from two Wilson bounds)."""
    g, c, s, name = ctx.guardrails, ctx.canary, ctx.stable, "maxErrorRateIncrease"
    if s.requests < g.min_requests:
        return _Check(Verdict.INCONCLUSIVE, f"{s.requests:.0f} stable requests (need {g.min_requests})", name)
    c_rate, s_rate = c.errors / c.requests, s.errors / s.requests

    def bounds(factor: float) -> tuple[float, float]:
        z = ctx.z(min(c.requests, s.requests) * factor)
        c_low, c_up = wilson_bounds(c.errors * factor, c.requests * factor, z)
        s_low, s_up = wilson_bounds(s.errors * factor, s.requests * factor, z)
        change = c_rate - s_rate
        return change - math.hypot(c_rate - c_low, s_up - s_rate), change + math.hypot(c_up - c_rate, s_rate - s_low)

    lowest, highest = bounds(1.0)
    text = (
        f"error rate {c_rate:.2%} vs stable {s_rate:.2%}: {c_rate - s_rate:+.2%}, "
        f"{ctx.confidence} bounds {lowest:+.2%} to {highest:+.2%}"
    )
    return _bounded(name, text, c_rate - s_rate, bounds, g.max_error_rate_increase, ctx.growth(), _share)


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


@dataclass(frozen=True)
class Recent:
    """Both tracks' evidence over the trailing `analysis.window` alone, checked for failures only: a canary
    that turns bad late in a long step is caught without waiting for its bad evidence to outweigh its good
    start. Its bounds are for one look (`look_error`), the analysis's number `look`."""

    canary: TrackEvidence
    stable: TrackEvidence
    seconds: float
    look: int


def _checks(ctx: _Context, speculative: bool) -> list[_Check]:
    g, canary = ctx.guardrails, ctx.canary
    checks: list[_Check] = []
    if speculative:
        checks.append(_acceptance(ctx))
    if g.max_kv_cache_usage is not None:
        checks.append(_kv_cache(ctx, g.max_kv_cache_usage))
    if canary.requests < g.min_requests:
        needs = f"need {g.min_requests}"
        if canary.requests > 0:
            needs += f": {ctx.growth().more(g.min_requests / canary.requests)}"
        checks.append(_Check(Verdict.INCONCLUSIVE, f"{canary.requests:.0f} canary requests ({needs})", "minRequests"))
        return checks
    checks.append(_token_latency(ctx))
    checks.append(_token_latency_mean(ctx))
    if g.max_step_latency_p95_seconds is not None:
        checks.append(_step_latency(ctx, g.max_step_latency_p95_seconds))
    if g.max_queue_time_p95_seconds is not None:
        checks.append(_queue_time(ctx, g.max_queue_time_p95_seconds))
    if g.max_throughput_drop is not None:
        checks.append(_throughput(ctx, g.max_throughput_drop))
    if g.max_error_rate is not None:
        checks.append(_error_rate(ctx, g.max_error_rate))
    checks.append(_error_increase(ctx))
    return checks


def judged_guardrails(guardrails: Guardrails, speculative: bool) -> int:
    """Guardrails with a confidence bound, over which the error budget is split (the KV level has none)."""
    g = guardrails
    optional = (g.max_error_rate, g.max_step_latency_p95_seconds, g.max_throughput_drop, g.max_queue_time_p95_seconds)
    return 3 + int(speculative) + sum(limit is not None for limit in optional)


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
    """
    g, error, named = guardrails, (1 - confidence) / 2, f"{confidence * 100:g}%"
    tests = judged_guardrails(g, speculative)
    ctx = _Context(g, canary, stable, lambda n: sequence_z(n, error / (max(1, steps) * tests)), named, same_drafter)
    checks = _checks(ctx, speculative)
    if recent is not None:
        z = z_score(look_error(error, max(1, recent.look)) / tests)
        late = _Context(g, recent.canary, recent.stable, lambda _: z, f"{named} over all looks", same_drafter)
        failed = {c.guardrail: c for c in _checks(late, speculative) if c.verdict is Verdict.FAIL}
        last = f"over the last {_span(recent.seconds)}: "
        checks = [
            replace(failed[c.guardrail], message=last + failed[c.guardrail].message)
            if c.verdict is not Verdict.FAIL and c.guardrail in failed
            else c
            for c in checks
        ]
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
    z = z_score((1 - confidence) / 2)
    ctx = _Context(guardrails, now, now, lambda _: z, f"{confidence * 100:g}%")
    checks: list[_Check] = []
    alpha = _alpha_of(now, guardrails.min_draft_tokens)
    if reference.acceptance_alpha is not None and alpha is not None:
        floor = reference.acceptance_alpha - settings.max_acceptance_drop
        _, upper = wilson_bounds(alpha * _trials(now), _trials(now), z)
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
            check = _p95_ceiling(ctx, "", "per-token p95", latency, ceiling, _ms, now.requests)
            if check.verdict is Verdict.INCONCLUSIVE and check.estimate is not None and check.estimate <= ceiling:
                check = replace(check, verdict=Verdict.PASS)  # drift: not surely past is within; looks in a row decide
            checks.append(check)
    reasons = tuple(c.message for c in checks)
    if any(c.verdict is Verdict.FAIL for c in checks):
        return DriftCheck(True, load, reasons, mix)
    judged = len(checks) == 2 and all(c.verdict is Verdict.PASS for c in checks)
    return DriftCheck(False if judged else None, load, reasons or ("not enough evidence this window",), mix)

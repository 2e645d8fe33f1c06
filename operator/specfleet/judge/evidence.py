"""What Prometheus holds about one track over a range, and the point estimates read from it.

The formulas every check shares live here once: alpha (drafts whose first token was accepted / drafts),
drafts and requests as independent samples (Kish's design effect), the batch by Little's law.
"""

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from specfleet.api.status import Measurements
from specfleet.metrics import names
from specfleet.stats import Binned

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


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """numerator / denominator; None without a positive denominator, or when the quotient is past what a float
    holds (a count over a subnormal one): no measurement, rather than an infinity that status cannot hold."""
    if numerator is None or not denominator or denominator <= 0:
        return None
    quotient = numerator / denominator
    return quotient if math.isfinite(quotient) else None


def rounded(value: float | None, digits: int = 6) -> float | None:
    return None if value is None or not math.isfinite(value) else round(value, digits)


def quantile(data: Binned | None, q: float) -> float | None:
    if data is None or data.total <= 0:
        return None
    value = data.value_at(q)
    return value if math.isfinite(value) else None


@dataclass(frozen=True)
class CustomReading:
    """One custom guardrail on one track (`guardrails.custom`): its counters' increases, or its histogram.
    None where Prometheus has no such series."""

    events: float | None = None
    total: float | None = None
    histogram: Binned | None = None


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
    """`vllm:prompt_tokens_total`: prompt tokens of the requests admitted over the range."""
    prefix_cache_hits: float | None = None
    """`vllm:prefix_cache_hits_total`: of those, tokens the prefix cache held (not computed); None when not
    exposed (counted as none)."""
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
    custom: Mapping[str, CustomReading] = field(default_factory=dict)
    """Readings of `guardrails.custom`, by guardrail name."""

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
    def alpha(self) -> float | None:
        """Drafts whose first token was accepted / drafts, which does not depend on k. As read: counters from
        different scrapes can put it outside [0, 1]."""
        positions = self.accepted_per_position
        return ratio(positions[0], self.drafts) if positions else None

    @property
    def effective_drafts(self) -> float:
        """Drafts as independent trials: drafts of one request share its prompt (Kish's design effect)."""
        drafts = self.drafts or 0.0
        return drafts / (1 + max(0.0, drafts / max(self.requests, 1.0) - 1) * ACCEPTANCE_ICC)

    def judgeable_alpha(self, min_draft_tokens: int) -> float | None:
        """`alpha`, or None without `min_draft_tokens` draft tokens or with counters that disagree."""
        alpha = self.alpha
        if alpha is None or (self.draft_tokens or 0.0) < min_draft_tokens:
            return None
        return alpha if 0 <= alpha <= 1 else None

    @property
    def batch(self) -> float | None:
        """Requests running per pod, by Little's law: per-pod arrival rate x decode time per request (mean time
        per output token x output tokens per request)."""
        tokens = ratio(self.generation_tokens, self.requests)
        if self.per_pod_load is None or self.token_latency_mean is None or tokens is None:
            return None
        return self.per_pod_load * self.token_latency_mean * tokens

    @property
    def prefilled_tokens(self) -> float | None:
        """Prompt tokens computed over the range: the prompts' tokens less the prefix cache's hits."""
        if self.prompt_tokens is None:
            return None
        return max(0.0, self.prompt_tokens - (self.prefix_cache_hits or 0.0))

    @property
    def prefill_tokens_per_step(self) -> float | None:
        """Prompt tokens prefilled per engine step per pod: the step latency is observed once per decoding
        request per step, so prefilled tokens / its count is the prefill per decoding request of a step."""
        per_request = ratio(self.prefilled_tokens, self.step_latency.total if self.step_latency else None)
        return None if per_request is None or self.batch_mean is None else per_request * self.batch_mean

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
        return ratio(self.requests, self.offered)

    def per_pod_second(self, count: float | None) -> float | None:
        pods = len(self.request_rate_per_pod)
        return ratio(count, self.seconds * pods) if pods else None


def measurements(evidence: TrackEvidence) -> Measurements:
    """Point estimates for status and dashboards (the bounds are in the verdict's reasons)."""
    e = evidence
    return Measurements(
        acceptance_alpha=rounded(e.alpha, 4),
        acceptance_rate=rounded(ratio(e.accepted_tokens, e.draft_tokens), 4),
        mean_accepted_length=rounded(
            1 + accepted if (accepted := ratio(e.accepted_tokens, e.drafts)) is not None else None, 4
        ),
        acceptance_per_position=[round(v, 4) for p in e.accepted_per_position if (v := ratio(p, e.drafts)) is not None],
        token_latency_mean_seconds=rounded(e.token_latency_mean),
        token_latency_p50_seconds=rounded(quantile(e.token_latency, 0.5)),
        token_latency_p95_seconds=rounded(quantile(e.token_latency, LATENCY_QUANTILE)),
        step_latency_p95_seconds=rounded(quantile(e.step_latency, LATENCY_QUANTILE)),
        step_latency_mean_seconds=rounded(e.step_latency_mean),
        batch_size_mean=rounded(e.batch_mean, 3),
        prefill_tokens_per_step=rounded(e.prefill_tokens_per_step, 2),
        prefill_tokens_per_output_token=rounded(ratio(e.prefilled_tokens, e.generation_tokens), 4),
        ttft_p95_seconds=rounded(quantile(e.ttft, LATENCY_QUANTILE)),
        error_rate=rounded(ratio(e.errors, e.requests)),
        generation_tokens_per_second=rounded(ratio(e.generation_tokens, e.seconds), 3),
        requests_per_pod_per_second=rounded(e.per_pod_load, 4),
        generation_tokens_per_pod_per_second=rounded(e.per_pod_second(e.generation_tokens), 3),
        served_fraction=rounded(e.served_fraction, 4),
        queue_time_p95_seconds=rounded(quantile(e.queue_time, LATENCY_QUANTILE)),
        kv_cache_usage_mean=rounded(e.kv_cache_usage_mean, 4),
        kv_cache_usage_max=rounded(e.kv_cache_usage_max, 4),
        preemptions_per_second=rounded(ratio(e.preemptions, e.seconds), 4),
        draft_tokens=rounded(e.draft_tokens, 1),
        requests=rounded(e.requests, 1),
        prompt_tokens_per_request=rounded(ratio(e.prompt_tokens, e.requests), 1),
        output_tokens_per_request=rounded(ratio(e.generation_tokens, e.requests), 1),
    )

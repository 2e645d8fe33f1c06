"""`maxTokenLatencyMeanRegression`: the canary's mean per-token latency against stable's: the typical request,
which the p95 misses (a config that slows most requests while the worst-guessed prompts set the p95). Delta
method on the log of the ratio of the histograms' means (`_sum / _count`, exact), each with the spread of its
buckets."""

import math

from specfleet.api.status import Verdict
from specfleet.judge import wording
from specfleet.judge.comparisons import against_stable, too_few_requests
from specfleet.judge.guardrail import Guardrail, Look, Reads
from specfleet.judge.verdicts import Check, relative_bounds
from specfleet.metrics import names
from specfleet.stats import binned_sd


class TokenLatencyMean(Guardrail):
    name = "maxTokenLatencyMeanRegression"
    field = "max_token_latency_mean_regression"
    metrics = (names.TIME_PER_OUTPUT_TOKEN,)
    label = "mean per token vs stable"
    reads = Reads.CHANGE
    judged_on = "canary mean per-token latency / stable's - 1"
    tune_when = (
        "the typical request's speed (what tokens/s per user follows): the p95 misses a config that slows most requests"
    )

    def check(self, look: Look, limit: float) -> Check:
        name, c, s = self.name, look.canary, look.stable
        if c.token_latency is None or s.token_latency is None or not c.token_latency_mean or not s.token_latency_mean:
            which = "canary" if c.token_latency is None or not c.token_latency_mean else "stable"
            return Check(Verdict.INCONCLUSIVE, f"no per-token latency mean for the {which} track", name)
        if (short := too_few_requests(look, c.token_latency, s.token_latency, name)) is not None:
            return short
        c_mean, s_mean = c.token_latency_mean, s.token_latency_mean
        c_n, s_n = c.token_latency.total / c.latency_design_effect, s.token_latency.total / s.latency_design_effect
        standard_error = math.hypot(
            binned_sd(c.token_latency) / (c_mean * math.sqrt(c_n)),
            binned_sd(s.token_latency) / (s_mean * math.sqrt(s_n)),
        )
        log_ratio = math.log(c_mean / s_mean)
        bounds = relative_bounds(log_ratio, standard_error, look.z, min(c_n, s_n))
        lowest, highest = bounds(1.0)
        text = (
            f"per-token mean {wording.ms(c_mean)} vs stable {wording.ms(s_mean)}: "
            f"{wording.signed_pct(math.expm1(log_ratio))}, "
            f"{look.confidence} bounds {wording.signed_pct(lowest)} to {wording.signed_pct(highest)}"
        )
        return against_stable(look, name, text, log_ratio=log_ratio, bounds=bounds, limit=limit)


GUARDRAIL = TokenLatencyMean()

"""`maxTokenLatencyP95Regression`: the canary's p95 per-token latency (each request's decode time per output
token, what a streaming user feels) against stable's, set by the prompts the drafter guesses worst."""

from specfleet.judge.comparisons import p95_against_stable
from specfleet.judge.guardrail import Guardrail, Look, Reads
from specfleet.judge.verdicts import Check
from specfleet.metrics import names


class TokenLatencyP95(Guardrail):
    name = "maxTokenLatencyP95Regression"
    field = "max_token_latency_p95_regression"
    metrics = (names.TIME_PER_OUTPUT_TOKEN,)
    label = "p95 per token vs stable"
    reads = Reads.CHANGE
    judged_on = "canary p95 per-token latency / stable's - 1"
    tune_when = (
        "latency matters more (lower; 0 = no slowdown can ever be shown, so nothing passes) or throughput more (higher)"
    )

    def check(self, look: Look, limit: float) -> Check:
        return p95_against_stable(
            look,
            self.name,
            label="per-token",
            canary_data=look.canary.token_latency,
            stable_data=look.stable.token_latency,
            limit=limit,
            finer="give both tracks finer buckets (--custom-histogram-buckets, vLLM >= 0.32)",
        )


GUARDRAIL = TokenLatencyP95()

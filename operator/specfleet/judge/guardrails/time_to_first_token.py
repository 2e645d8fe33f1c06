"""`maxTimeToFirstTokenP95Regression` (opt-in): the canary's p95 time to first token against stable's. A draft
model prefills every prompt beside the target, so a speculative config can delay the first token while it
speeds every later one: the per-token latency, which starts after the first token, cannot see it.

vLLM observes `vllm:time_to_first_token_seconds` once per request, so it is compared as the per-token p95 is
(the requests as samples, shrunk by the batch's design effect). Its default buckets are too coarse for a
relative limit (1 s to 2.5 s is one bucket): a p95 in a bucket wider than the limit is Inconclusive until
both tracks get finer ones."""

from specfleet.judge.comparisons import p95_against_stable
from specfleet.judge.guardrail import Guardrail, Look, Reads
from specfleet.judge.verdicts import Check
from specfleet.metrics import names


class TimeToFirstTokenP95(Guardrail):
    name = "maxTimeToFirstTokenP95Regression"
    field = "max_time_to_first_token_p95_regression"
    metrics = (names.TIME_TO_FIRST_TOKEN,)
    label = "p95 TTFT vs stable"
    reads = Reads.CHANGE
    judged_on = "canary p95 time to first token (`vllm:time_to_first_token_seconds`) / stable's - 1"
    tune_when = (
        "a drafter's prefill must not delay the first token: 0.2 fails a canary whose p95 TTFT is surely 20% "
        "over stable's; needs finer `time_to_first_token` buckets than vLLM's (`engine.extraArgs`)"
    )

    def check(self, look: Look, limit: float) -> Check:
        return p95_against_stable(
            look,
            self.name,
            label="TTFT",
            canary_data=look.canary.ttft,
            stable_data=look.stable.ttft,
            limit=limit,
            finer=(
                "give both tracks finer time_to_first_token buckets (--custom-histogram-buckets in "
                "engine.extraArgs, with the inter_token_latency ones, vLLM >= 0.32)"
            ),
        )


GUARDRAIL = TimeToFirstTokenP95()

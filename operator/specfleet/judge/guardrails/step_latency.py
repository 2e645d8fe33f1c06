"""`maxStepLatencyP95Seconds`: an absolute stutter ceiling on the canary's p95 engine-step latency (vLLM's
inter-token latency, one observation per request per step). The observations of one step share its duration,
so the requests count as the samples."""

from specfleet.judge import wording
from specfleet.judge.comparisons import p95_ceiling
from specfleet.judge.guardrail import Guardrail, Look, Reads
from specfleet.judge.verdicts import Check
from specfleet.metrics import names


class StepLatencyP95(Guardrail):
    name = "maxStepLatencyP95Seconds"
    field = "max_step_latency_p95_seconds"
    metrics = (names.INTER_TOKEN_LATENCY,)
    label = "p95 per step"
    reads = Reads.MILLISECONDS
    judged_on = "canary p95 per-step latency (stutter)"
    fails_when = "lower bound > ceiling"
    passes_when = "upper bound <= ceiling"
    tune_when = "users notice stutter: a ceiling on the per-step p95 (higher under speculation)"

    def check(self, look: Look, limit: float) -> Check:
        return p95_ceiling(
            look,
            self.name,
            label="per-step p95",
            data=look.canary.step_latency,
            ceiling=limit,
            show=wording.ms,
            samples=look.canary.requests,
        )


GUARDRAIL = StepLatencyP95()

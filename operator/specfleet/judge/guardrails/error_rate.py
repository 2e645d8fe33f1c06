"""`maxErrorRate`: an absolute ceiling on the canary's share of requests that end in error (bounds for Bernoulli
counts: `Look.share_bounds`)."""

from specfleet.judge import wording
from specfleet.judge.guardrail import Guardrail, Look, Reads
from specfleet.judge.verdicts import Check, bounded
from specfleet.metrics import names


class ErrorRate(Guardrail):
    name = "maxErrorRate"
    field = "max_error_rate"
    metrics = (names.REQUEST_SUCCESS,)
    label = "error rate"
    reads = Reads.SHARE
    judged_on = "canary error rate"
    fails_when = "lower bound > ceiling"
    passes_when = "upper bound <= ceiling"
    tune_when = "you have an absolute error budget, whatever stable does"

    def check(self, look: Look, limit: float) -> Check:
        c = look.canary
        rate = c.errors / c.requests

        def bounds(factor: float) -> tuple[float, float]:
            return look.share_bounds(c.errors * factor, c.requests * factor, limit)

        lower, upper = bounds(1.0)
        text = f"error rate {rate:.2%} ({look.confidence} bounds {lower:.2%} to {upper:.2%})"
        return bounded(
            self.name,
            text,
            estimate=rate,
            bounds=bounds,
            limit=limit,
            growth=look.growth(),
            show=wording.share,
            word="ceiling",
        )


GUARDRAIL = ErrorRate()

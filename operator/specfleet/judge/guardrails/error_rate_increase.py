"""`maxErrorRateIncrease`: the canary's error rate minus stable's, with Newcombe's hybrid bounds from each
track's bounds for Bernoulli counts (`Look.share_bounds`). Client aborts are not errors."""

from specfleet.api.status import Verdict
from specfleet.judge import wording
from specfleet.judge.guardrail import Guardrail, Look, Reads
from specfleet.judge.verdicts import Check, bounded, difference_bounds
from specfleet.metrics import names


class ErrorRateIncrease(Guardrail):
    name = "maxErrorRateIncrease"
    field = "max_error_rate_increase"
    metrics = (names.REQUEST_SUCCESS,)
    label = "error rate vs stable"
    reads = Reads.POINTS
    judged_on = "canary error rate - stable's"
    tune_when = (
        "showing a canary within 1 point takes ~810 of its requests: at low traffic give the step time (or "
        "`onNoData.after`), or accept a looser limit knowingly"
    )

    def check(self, look: Look, limit: float) -> Check:
        g, c, s, name = look.guardrails, look.canary, look.stable, self.name
        if s.requests < g.requests_needed:
            return Check(Verdict.INCONCLUSIVE, f"{s.requests:.0f} stable requests (need {g.requests_needed})", name)
        c_rate, s_rate = c.errors / c.requests, s.errors / s.requests

        def bounds(factor: float) -> tuple[float, float]:
            c_bounds = look.share_bounds(c.errors * factor, c.requests * factor, limit)
            s_bounds = look.share_bounds(s.errors * factor, s.requests * factor, limit)
            return difference_bounds(c_rate, c_bounds, s_rate, s_bounds)

        lowest, highest = bounds(1.0)
        text = (
            f"error rate {c_rate:.2%} vs stable {s_rate:.2%}: {c_rate - s_rate:+.2%}, "
            f"{look.confidence} bounds {lowest:+.2%} to {highest:+.2%}"
        )
        return bounded(
            name,
            text,
            estimate=c_rate - s_rate,
            bounds=bounds,
            limit=limit,
            growth=look.growth(),
            show=wording.share,
        )


GUARDRAIL = ErrorRateIncrease()

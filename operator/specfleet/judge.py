"""Guardrails + what was measured -> a verdict. Pure, and total: every input gives one of four answers.

- Pass: enough samples, every guardrail holds.
- Fail: a guardrail is broken by a measurement that had enough samples behind it (the reasons carry the
  numbers). Evidence of harm wins over missing evidence elsewhere.
- Inconclusive: too few samples, or empty / NaN answers; never read as a pass (Flagger #1095).
- Error: Prometheus could not be asked (decided by the caller, which has the exception).
"""

import math
from dataclasses import dataclass

from specfleet.api.spec import Guardrails
from specfleet.api.status import Measurements, Verdict


@dataclass(frozen=True)
class Judgement:
    verdict: Verdict
    reasons: tuple[str, ...] = ()


def _known(value: float | None) -> float | None:
    return None if value is None or math.isnan(value) or math.isinf(value) else value


def judge(guardrails: Guardrails, canary: Measurements, stable: Measurements, *, speculative: bool) -> Judgement:
    """Judge the canary against the guardrails and against the stable track in the same window."""
    failures: list[str] = []
    missing: list[str] = []

    requests = _known(canary.requests) or 0.0
    enough_requests = requests >= guardrails.min_requests
    if not enough_requests:
        missing.append(f"{requests:.0f} canary requests finished in the window (need {guardrails.min_requests})")

    if speculative:
        drafted = _known(canary.draft_tokens) or 0.0
        acceptance = _known(canary.acceptance_rate)
        if drafted < guardrails.min_draft_tokens:
            missing.append(f"{drafted:.0f} draft tokens in the window (need {guardrails.min_draft_tokens})")
        elif acceptance is None:
            missing.append("no acceptance rate")
        elif acceptance < guardrails.min_acceptance_rate:
            failures.append(f"acceptance rate {acceptance:.3f} < {guardrails.min_acceptance_rate:.2f}")

    if enough_requests:
        itl = _known(canary.itl_p95_seconds)
        errors = _known(canary.error_rate)
        if errors is None:
            missing.append("no canary error rate")
        elif errors > guardrails.max_error_rate:
            failures.append(f"error rate {errors:.2%} > {guardrails.max_error_rate:.2%}")
        if itl is None:
            missing.append("no canary p95 inter-token latency")
        else:
            if guardrails.max_itl_p95_seconds is not None and itl > guardrails.max_itl_p95_seconds:
                failures.append(f"p95 ITL {itl * 1000:.1f} ms > {guardrails.max_itl_p95_seconds * 1000:.1f} ms")
            baseline = _known(stable.itl_p95_seconds)
            stable_requests = _known(stable.requests) or 0.0
            if baseline is None or baseline <= 0 or stable_requests < guardrails.min_requests:
                missing.append("no stable p95 inter-token latency to compare with")
            elif itl > baseline * (1 + guardrails.max_itl_p95_regression):
                failures.append(
                    f"p95 ITL {itl * 1000:.1f} ms is {itl / baseline - 1:.0%} above stable {baseline * 1000:.1f} ms "
                    f"(limit {guardrails.max_itl_p95_regression:.0%})"
                )

    if failures:
        return Judgement(Verdict.FAIL, tuple(failures))
    if missing:
        return Judgement(Verdict.INCONCLUSIVE, tuple(missing))
    return Judgement(Verdict.PASS)

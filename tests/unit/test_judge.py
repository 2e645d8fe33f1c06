"""The judge, table-driven: each row is guardrails + measurements -> verdict and the reason's words."""

import math

import pytest

from specfleet.api.spec import Guardrails
from specfleet.api.status import Measurements, Verdict
from specfleet.judge import judge

GUARDS = Guardrails(
    min_acceptance_rate=0.6, max_itl_p95_regression=0.1, max_error_rate=0.01, min_draft_tokens=500, min_requests=20
)
GOOD = dict(acceptance_rate=0.72, draft_tokens=5000, requests=200, itl_p95_seconds=0.030, error_rate=0.0)
STABLE = Measurements(itl_p95_seconds=0.030, requests=400, acceptance_rate=0.7, draft_tokens=9000)


def canary(**changes: float | None) -> Measurements:
    return Measurements(**{**GOOD, **changes})


CASES = [
    ("healthy canary", canary(), STABLE, Verdict.PASS, ""),
    ("low acceptance", canary(acceptance_rate=0.41), STABLE, Verdict.FAIL, "acceptance rate 0.410 < 0.60"),
    ("slow drafter", canary(itl_p95_seconds=0.039), STABLE, Verdict.FAIL, "30% above stable"),
    ("within regression budget", canary(itl_p95_seconds=0.032), STABLE, Verdict.PASS, ""),
    ("errors", canary(error_rate=0.05), STABLE, Verdict.FAIL, "error rate 5.00% > 1.00%"),
    ("too few drafts", canary(draft_tokens=100), STABLE, Verdict.INCONCLUSIVE, "100 draft tokens"),
    ("too few requests", canary(requests=3), STABLE, Verdict.INCONCLUSIVE, "3 canary requests"),
    ("empty acceptance", canary(acceptance_rate=None), STABLE, Verdict.INCONCLUSIVE, "no acceptance rate"),
    ("NaN acceptance", canary(acceptance_rate=math.nan), STABLE, Verdict.INCONCLUSIVE, "no acceptance rate"),
    ("NaN latency", canary(itl_p95_seconds=math.nan), STABLE, Verdict.INCONCLUSIVE, "no canary p95"),
    ("no stable baseline", canary(), Measurements(), Verdict.INCONCLUSIVE, "no stable p95"),
    ("harm beats missing baseline", canary(acceptance_rate=0.2), Measurements(), Verdict.FAIL, "acceptance rate"),
    (
        "low acceptance on few drafts is not judged",
        canary(acceptance_rate=0.1, draft_tokens=10),
        STABLE,
        Verdict.INCONCLUSIVE,
        "draft tokens",
    ),
]


@pytest.mark.parametrize(("case", "canary_values", "stable", "verdict", "reason"), CASES, ids=[c[0] for c in CASES])
def test_judge(case: str, canary_values: Measurements, stable: Measurements, verdict: Verdict, reason: str) -> None:
    result = judge(GUARDS, canary_values, stable, speculative=True)
    assert result.verdict is verdict, result.reasons
    assert reason in " ".join(result.reasons)


def test_absolute_latency_ceiling() -> None:
    guards = GUARDS.model_copy(update={"max_itl_p95_seconds": 0.025})
    result = judge(guards, canary(), STABLE, speculative=True)
    assert result.verdict is Verdict.FAIL and "p95 ITL 30.0 ms > 25.0 ms" in result.reasons[0]


def test_every_failed_guardrail_is_reported() -> None:
    result = judge(GUARDS, canary(acceptance_rate=0.3, error_rate=0.2), STABLE, speculative=True)
    assert len(result.reasons) == 2


def test_a_canary_without_speculation_is_judged_on_latency_and_errors_only() -> None:
    result = judge(GUARDS, canary(acceptance_rate=None, draft_tokens=None), STABLE, speculative=False)
    assert result.verdict is Verdict.PASS

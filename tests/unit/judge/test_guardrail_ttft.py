"""`maxTimeToFirstTokenP95Regression`: the canary's p95 time to first token against stable's, opt-in. A drafter
prefills every prompt too, so a speculative config can delay the first token while it speeds the rest."""

import dataclasses
import math
import random

from specfleet.api.spec import Guardrails
from specfleet.api.status import Verdict
from specfleet.judge import TrackEvidence, judge, judged_guardrails

from judgekit import binned, track

NAME = "maxTimeToFirstTokenP95Regression"
VLLM_DEFAULT = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
    80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
"""vLLM's default time_to_first_token buckets (`TIME_TO_FIRST_TOKEN_BUCKETS`, vllm/v1/metrics/buckets.py, 0.32.0)."""
FINE = tuple(0.01 * 1.06**i for i in range(120))
"""Buckets 6% wide from 10 ms to ~11 s, as `--custom-histogram-buckets` can give time_to_first_token."""


def with_ttft(evidence: TrackEvidence, *, seed: int, ttft_ms: float, bounds: tuple[float, ...] = FINE) -> TrackEvidence:
    """The track's requests, each with a time to first token log-normal around `ttft_ms`."""
    rng = random.Random(seed)
    samples = [rng.lognormvariate(math.log(ttft_ms / 1000), 0.3) for _ in range(int(evidence.requests))]
    return dataclasses.replace(evidence, ttft=binned(samples, bounds))


def ttft_judgement(guardrails: Guardrails, canary_ms: float, stable_ms: float) -> tuple[Verdict, tuple[str, ...]]:
    """The TTFT check's verdict, and the reasons of the whole judgement."""
    canary = with_ttft(track(seed=1, alpha=0.8), seed=11, ttft_ms=canary_ms)
    stable = with_ttft(track(seed=2, alpha=0.8), seed=12, ttft_ms=stable_ms)
    result = judge(guardrails, canary, stable, speculative=True, confidence=0.99)
    (check,) = [c for c in result.checks if c.guardrail == NAME]
    return check.verdict, result.reasons


LIMIT = Guardrails.model_validate({NAME: 0.2})


def test_off_by_default_and_counted_in_the_budget_when_set() -> None:
    canary, stable = track(seed=1, alpha=0.8), track(seed=2, alpha=0.8)
    plain = judge(Guardrails(), canary, stable, speculative=True, confidence=0.99)
    assert NAME not in {c.guardrail for c in plain.checks}
    assert judged_guardrails(LIMIT, True) == judged_guardrails(Guardrails(), True) + 1


def test_a_canary_whose_first_token_comes_much_later_fails() -> None:
    """A drafter whose prefill adds 60% to the first token, on 2,500 requests a track."""
    verdict, reasons = ttft_judgement(LIMIT, canary_ms=320, stable_ms=200)
    assert verdict is Verdict.FAIL
    assert any(r.startswith("TTFT p95 ") and "lower bound > limit 20%" in r for r in reasons)


def test_a_canary_with_stables_first_token_time_passes() -> None:
    verdict, reasons = ttft_judgement(LIMIT, canary_ms=200, stable_ms=200)
    assert verdict is Verdict.PASS
    assert any(r.startswith("TTFT p95 ") and r.endswith(", limit 20%") for r in reasons)


def test_a_slowdown_within_the_limit_is_not_failed() -> None:
    verdict, _ = ttft_judgement(LIMIT, canary_ms=210, stable_ms=200)
    assert verdict is not Verdict.FAIL


def test_vllms_default_buckets_are_too_coarse_for_the_limit_around_a_second() -> None:
    """(1 s, 2.5 s] is a bucket of vLLM's defaults: a p95 in it cannot show 20% either way."""
    canary = with_ttft(track(seed=1), seed=11, ttft_ms=1300, bounds=VLLM_DEFAULT)
    stable = with_ttft(track(seed=2), seed=12, ttft_ms=1200, bounds=VLLM_DEFAULT)
    result = judge(LIMIT, canary, stable, speculative=False, confidence=0.99)
    (check,) = [c for c in result.checks if c.guardrail == NAME]
    assert check.verdict is Verdict.INCONCLUSIVE
    assert any("too coarse" in r and "time_to_first_token" in r for r in result.reasons)


def test_no_ttft_histogram_is_inconclusive() -> None:
    result = judge(LIMIT, track(seed=1), track(seed=2), speculative=False, confidence=0.99)
    (check,) = [c for c in result.checks if c.guardrail == NAME]
    assert check.verdict is Verdict.INCONCLUSIVE

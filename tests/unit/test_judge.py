"""The judge on evidence drawn from what a user's fleet has: a drafter's alpha and k, a latency change, errors.

Each track is built from per-request samples (every request its own acceptance and its own time per
output token), binned on the rendered bucket layout as Prometheus would hold them; the tests state
the effect, never the number the judge should see.
"""

import math
import random

import pytest

from specfleet.api.spec import Guardrails
from specfleet.api.status import Verdict
from specfleet.judge import TrackEvidence, judge
from specfleet.render.argv import FINE_ITL_BUCKETS
from specfleet.stats import Binned

VLLM_DEFAULT_ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0)
GUARDS = Guardrails()
CONFIDENCE = 0.99


def _binned(samples: list[float], bounds: tuple[float, ...]) -> Binned:
    ordered = sorted(samples)
    counts: dict[float, float] = {}
    i = 0
    for bound in bounds:
        while i < len(ordered) and ordered[i] <= bound:
            i += 1
        counts[bound] = float(i)
    binned = Binned.from_buckets({**counts, math.inf: float(len(ordered))})
    assert binned is not None
    return binned


def track(
    *,
    seed: int,
    alpha: float | None = None,
    k: int = 4,
    requests: int = 1500,
    token_ms: float = 5.0,
    spread: float = 0.2,
    error_share: float = 0.0,
    aborts: int = 0,
    rate_per_pod: float = 4.0,
    drafts_per_request: int = 30,
    bounds: tuple[float, ...] = tuple(FINE_ITL_BUCKETS),
) -> TrackEvidence:
    """A track's evidence: `requests` finished requests, their per-token latency log-normal around `token_ms`."""
    rng = random.Random(seed)
    per_token = [rng.lognormvariate(math.log(token_ms / 1000), spread) for _ in range(requests)]
    positions = [0.0] * k
    drafts = accepted = 0
    if alpha is not None:
        for _ in range(requests):
            own = min(0.99, max(0.01, rng.gauss(alpha, 0.1)))  # each request's prompt has its own acceptance
            for _ in range(drafts_per_request):
                drafts += 1
                for position in range(k):
                    if rng.random() >= own:
                        break
                    positions[position] += 1
                    accepted += 1
    errors = sum(rng.random() < error_share for _ in range(requests))
    tokens_per_step = 1 + (accepted / drafts if drafts else 0)
    return TrackEvidence(
        token_latency=_binned(per_token, bounds),
        step_latency=_binned([t * tokens_per_step for t in per_token], bounds),
        finished={"stop": float(requests - errors), "error": float(errors), "abort": float(aborts)},
        drafts=float(drafts) if alpha is not None else None,
        draft_tokens=float(drafts * k) if alpha is not None else None,
        accepted_tokens=float(accepted) if alpha is not None else None,
        accepted_per_position=tuple(positions) if alpha is not None else (),
        request_rate_per_pod=(rate_per_pod,),
        seconds=300.0,
    )


def verdict_of(canary: TrackEvidence, stable: TrackEvidence, *, look: int = 1, guards: Guardrails = GUARDS):
    return judge(guards, canary, stable, speculative=canary.drafts is not None, confidence=CONFIDENCE, look=look)


STABLE = track(seed=100)


@pytest.mark.parametrize("k", range(1, 9))
def test_a_good_drafter_passes_the_acceptance_guardrail_at_every_depth(k: int) -> None:
    result = verdict_of(track(seed=k, alpha=0.8, k=k, requests=400), STABLE)
    assert not any("acceptance" in r and "upper bound <" in r for r in result.reasons), result.reasons
    assert result.canary.acceptance_alpha == pytest.approx(0.8, abs=0.03)


@pytest.mark.parametrize("k", range(1, 9))
def test_a_bad_drafter_fails_the_acceptance_guardrail_at_every_depth(k: int) -> None:
    result = verdict_of(track(seed=k, alpha=0.3, k=k, requests=400), STABLE)
    assert result.verdict is Verdict.FAIL
    assert any(r.startswith("acceptance alpha") and "upper bound < 0.60" in r for r in result.reasons)


def test_accepted_over_drafted_falls_with_k_while_alpha_does_not() -> None:
    shallow = verdict_of(track(seed=1, alpha=0.8, k=1, requests=300), STABLE).canary
    deep = verdict_of(track(seed=1, alpha=0.8, k=5, requests=300), STABLE).canary
    assert deep.acceptance_rate is not None and shallow.acceptance_rate is not None
    assert deep.acceptance_rate < 0.6 < shallow.acceptance_rate
    assert deep.acceptance_alpha == pytest.approx(shallow.acceptance_alpha, abs=0.03)


def test_an_a_a_canary_passes_with_every_guardrail_explained() -> None:
    result = verdict_of(track(seed=7, alpha=0.8), track(seed=8, alpha=0.8))
    assert result.verdict is Verdict.PASS, result.reasons
    assert any(r.startswith("acceptance alpha") for r in result.reasons)
    assert any(r.startswith("per-token p95") and "limit 10%" in r for r in result.reasons)
    assert any(r.startswith("error rate") for r in result.reasons)


def test_a_much_slower_canary_fails_on_its_lower_bound() -> None:
    result = verdict_of(track(seed=9, token_ms=6.9), track(seed=10, token_ms=5.4))
    assert result.verdict is Verdict.FAIL
    reason = next(r for r in result.reasons if r.startswith("per-token p95"))
    assert "vs stable" in reason and "lower bound > limit 10%" in reason


def test_a_regression_within_the_limit_is_not_failed() -> None:
    result = verdict_of(track(seed=11, token_ms=5.2), track(seed=12, token_ms=5.0))
    assert result.verdict is Verdict.PASS, result.reasons


def test_later_looks_need_stronger_evidence() -> None:
    canary, stable = track(seed=13, token_ms=6.0, requests=1200), track(seed=14, token_ms=5.0, requests=1200)
    assert verdict_of(canary, stable, look=1).verdict is Verdict.FAIL
    later = verdict_of(canary, stable, look=500)
    assert later.verdict is Verdict.INCONCLUSIVE and "not yet surely" in later.reasons[0]


def test_below_min_requests_latency_is_not_judged() -> None:
    result = verdict_of(track(seed=15, requests=60), track(seed=16, requests=60))
    assert result.verdict is Verdict.INCONCLUSIVE
    assert result.reasons == ("60 canary requests (need 100)",)


def test_too_few_requests_for_a_bound_can_pass_but_never_fail() -> None:
    guards = GUARDS.model_copy(update={"min_requests": 10})
    slower = verdict_of(track(seed=15, requests=60, token_ms=10.0), track(seed=16, requests=60), guards=guards)
    assert slower.verdict is Verdict.INCONCLUSIVE
    assert "a bound at this look needs" in slower.reasons[0] and "not yet surely" in slower.reasons[0]
    alike = verdict_of(track(seed=17, requests=60), track(seed=18, requests=60), guards=guards)
    assert alike.verdict is Verdict.PASS, alike.reasons


def test_a_coarse_stable_layout_is_judged_on_shared_bounds_and_not_passed() -> None:
    """A stable on vLLM 0.31 keeps vLLM's default buckets; a 50% slower canary must not pass."""
    canary = track(seed=17, token_ms=7.5)
    stable = track(seed=18, token_ms=5.0, bounds=VLLM_DEFAULT_ITL_BUCKETS)
    result = verdict_of(canary, stable)
    assert result.verdict is not Verdict.PASS
    assert "too coarse" in " ".join(result.reasons)


def test_a_lighter_loaded_canary_cannot_pass_on_latency() -> None:
    result = verdict_of(track(seed=19, rate_per_pod=1.0), track(seed=20, rate_per_pod=3.0))
    assert result.verdict is Verdict.INCONCLUSIVE
    assert "per-pod load" in result.reasons[0]


def test_a_heavier_loaded_slower_canary_is_not_failed_on_latency() -> None:
    result = verdict_of(track(seed=21, token_ms=7.0, rate_per_pod=3.0), track(seed=22, rate_per_pod=1.0))
    assert result.verdict is Verdict.INCONCLUSIVE


def test_errors_are_judged_against_stable_and_aborts_are_not_errors() -> None:
    failing = verdict_of(track(seed=23, error_share=0.05), track(seed=24, error_share=0.0))
    assert failing.verdict is Verdict.FAIL
    assert any(r.startswith("error rate") and "> limit 1.00%" in r for r in failing.reasons)
    aborted = verdict_of(track(seed=25, aborts=300), track(seed=26))
    assert aborted.verdict is Verdict.PASS and aborted.canary.error_rate == 0


def test_errors_shared_by_both_tracks_do_not_fail_the_canary() -> None:
    result = verdict_of(track(seed=27, error_share=0.04), track(seed=28, error_share=0.04))
    assert result.verdict is Verdict.PASS, result.reasons


def test_optional_absolute_ceilings() -> None:
    guards = GUARDS.model_copy(update={"max_error_rate": 0.001, "max_step_latency_p95_seconds": 0.004})
    result = verdict_of(track(seed=29, error_share=0.03), track(seed=30, error_share=0.03), guards=guards)
    assert result.verdict is Verdict.FAIL
    assert any("> ceiling 0.10%" in r for r in result.reasons)
    assert any(r.startswith("per-step p95") and "> ceiling 4.00 ms" in r for r in result.reasons)


def test_harm_wins_over_missing_evidence() -> None:
    result = verdict_of(track(seed=31, alpha=0.2, requests=300), TrackEvidence())
    assert result.verdict is Verdict.FAIL


def test_counters_that_disagree_are_not_judged() -> None:
    """More first-position acceptances than drafts: the counters came from different scrapes."""
    canary = track(seed=34, alpha=0.8, requests=300)
    odd = TrackEvidence(**{**canary.__dict__, "accepted_per_position": (canary.drafts * 1.3, 0.0, 0.0, 0.0)})
    result = verdict_of(odd, STABLE)
    assert result.verdict is Verdict.INCONCLUSIVE
    assert "acceptance counters disagree (1.30 of drafts accepted)" in result.reasons


def test_no_data_at_all_is_inconclusive_not_a_pass() -> None:
    result = judge(GUARDS, TrackEvidence(), TrackEvidence(), speculative=True, confidence=CONFIDENCE, look=1)
    assert result.verdict is Verdict.INCONCLUSIVE
    assert "draft tokens" in result.reasons[0]


def test_a_canary_without_speculation_is_judged_on_latency_and_errors_only() -> None:
    result = verdict_of(track(seed=32), track(seed=33))
    assert result.verdict is Verdict.PASS
    assert not any("acceptance" in r for r in result.reasons)

"""The judge on evidence drawn from what a user's fleet has: a drafter's alpha and k, a latency change, errors.

Each track is built from per-request samples (every request its own acceptance and its own time per
output token), binned on the rendered bucket layout as Prometheus would hold them; the tests state
the effect, never the number the judge should see.
"""

import bisect
import dataclasses
import itertools
import math
import random

import pytest

from specfleet.api.spec import Guardrails
from specfleet.api.status import Verdict
from specfleet.judge import TrackEvidence, judge, measurements
from specfleet.render.argv import FINE_ITL_BUCKETS
from specfleet.stats import Binned

from judgekit import binned, track

VLLM_DEFAULT_ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0)
GUARDS = Guardrails()
CONFIDENCE = 0.99


def verdict_of(canary: TrackEvidence, stable: TrackEvidence, *, guards: Guardrails = GUARDS):
    return judge(guards, canary, stable, speculative=canary.drafts is not None, confidence=CONFIDENCE)


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


def test_a_regression_well_within_the_limits_is_shown_within_them() -> None:
    result = verdict_of(track(seed=11, token_ms=5.05), track(seed=12, token_ms=5.0))
    assert result.verdict is Verdict.PASS, result.reasons


def test_bounds_narrow_as_the_evidence_grows() -> None:
    """Evidence accumulates over a step: each look's bounds are narrower than the one before (a confidence
    sequence, valid at every look at once, instead of a fixed window judged at ever stricter levels)."""
    widths = []
    for requests in (600, 1200, 2400, 4800):
        result = verdict_of(track(seed=13, token_ms=5.2, requests=requests), track(seed=14, requests=requests))
        check = next(c for c in result.checks if c.guardrail == "maxTokenLatencyP95Regression")
        assert check.lower is not None and check.upper is not None, check
        widths.append(check.upper - check.lower)
    assert widths == sorted(widths, reverse=True), widths


def test_below_min_requests_latency_is_not_judged() -> None:
    result = verdict_of(track(seed=15, requests=60), track(seed=16, requests=60))
    assert result.verdict is Verdict.INCONCLUSIVE
    assert len(result.reasons) == 1 and result.reasons[0].startswith("60 canary requests (need 100: ~40 more")


def test_too_few_requests_for_a_bound_neither_pass_nor_fail() -> None:
    guards = GUARDS.model_copy(update={"min_requests": 10})
    slower = verdict_of(track(seed=15, requests=60, token_ms=10.0), track(seed=16, requests=60), guards=guards)
    alike = verdict_of(track(seed=17, requests=60), track(seed=18, requests=60), guards=guards)
    assert alike.verdict is Verdict.INCONCLUSIVE, alike.reasons
    p95 = next(r for r in alike.reasons if r.startswith("per-token p95"))
    assert "a bound needs" in p95 and "more canary requests" in p95, p95
    for result in (slower, alike):
        check = next(c for c in result.checks if c.guardrail == "maxTokenLatencyP95Regression")
        assert check.verdict is Verdict.INCONCLUSIVE and check.needs, check


def test_a_coarse_stable_layout_is_judged_on_shared_bounds_and_not_passed() -> None:
    """A stable on vLLM 0.31 keeps vLLM's default buckets: the p95 cannot be resolved, so it is not passed;
    the mean (exact, from `_sum / _count`) still catches a 50% slower canary."""
    canary = track(seed=17, token_ms=7.5)
    stable = track(seed=18, token_ms=5.0, bounds=VLLM_DEFAULT_ITL_BUCKETS)
    result = verdict_of(canary, stable)
    assert result.verdict is Verdict.FAIL
    assert any(r.startswith("per-token mean") and "lower bound > limit 5%" in r for r in result.reasons)
    p95 = next(c for c in result.checks if c.guardrail == "maxTokenLatencyP95Regression")
    assert p95.verdict is Verdict.INCONCLUSIVE and p95.estimate is None


def test_a_lighter_loaded_canary_cannot_pass_on_latency() -> None:
    result = verdict_of(track(seed=19, rate_per_pod=1.0), track(seed=20, rate_per_pod=3.0))
    assert result.verdict is Verdict.INCONCLUSIVE
    assert "per-pod load" in result.reasons[0]


def test_a_pass_needs_evidence_that_the_canary_carried_comparable_load() -> None:
    """A lighter canary looks faster, so a latency Pass stands only where the bound shows the canary's pods
    carried at least 0.8x stable's per-pod load. Measured at 0.85x on 2,500 canary requests, the load could be
    0.77x (Poisson counts), and the Pass waits; 20,000 requests at 0.85x show it, as 2,500 at 1.0x do."""

    def verdict(requests: int, load: float) -> Verdict:
        canary = track(seed=40, requests=requests, rate_per_pod=4.0 * load)
        return verdict_of(canary, track(seed=41, requests=3 * requests, rate_per_pod=4.0)).verdict

    assert verdict(2500, 1.0) is Verdict.PASS
    result = verdict_of(track(seed=40, requests=2500, rate_per_pod=3.4), track(seed=41, requests=7500))
    assert result.verdict is Verdict.INCONCLUSIVE, result.reasons
    assert any("0.85x stable's per-pod load" in r and "lower bound" in r for r in result.reasons), result.reasons
    assert verdict(20_000, 0.85) is Verdict.PASS


def test_a_heavier_loaded_slower_canary_is_not_failed_on_latency() -> None:
    result = verdict_of(track(seed=21, token_ms=7.0, rate_per_pod=3.0), track(seed=22, rate_per_pod=1.0))
    assert result.verdict is Verdict.INCONCLUSIVE


def test_a_heavier_load_excuses_a_latency_fail_only_where_its_bound_shows_it() -> None:
    """A canary 40% slower, measured at 1.3x stable's per-pod load on 300 requests: its pods could have carried
    stable's load (the ratio's lower bound is under 1.25x), so the Fail stands; at 3x on 2,500 requests it is
    surely heavier, and the Fail is withheld."""
    thin = verdict_of(track(seed=42, token_ms=7.0, requests=300, rate_per_pod=5.2), track(seed=43, requests=900))
    assert thin.verdict is Verdict.FAIL, thin.reasons
    heavy = verdict_of(track(seed=21, token_ms=7.0, rate_per_pod=3.0), track(seed=22, rate_per_pod=1.0))
    assert heavy.verdict is Verdict.INCONCLUSIVE
    assert any("carried 3.00x stable's per-pod load (lower bound" in r for r in heavy.reasons), heavy.reasons


def test_errors_are_judged_against_stable_and_aborts_are_not_errors() -> None:
    failing = verdict_of(track(seed=23, error_share=0.05), track(seed=24, error_share=0.0))
    assert failing.verdict is Verdict.FAIL
    assert any(r.startswith("error rate") and "> limit 1.00%" in r for r in failing.reasons)
    aborted = verdict_of(track(seed=25, aborts=300), track(seed=26))
    assert aborted.verdict is Verdict.PASS and aborted.canary.error_rate == 0


def test_errors_shared_by_both_tracks_do_not_fail_the_canary() -> None:
    result = verdict_of(track(seed=27, error_share=0.04), track(seed=28, error_share=0.04))
    assert result.verdict is not Verdict.FAIL, result.reasons


def test_optional_absolute_ceilings() -> None:
    guards = GUARDS.model_copy(update={"max_error_rate": 0.001, "max_step_latency_p95_seconds": 0.004})
    result = verdict_of(track(seed=29, error_share=0.03), track(seed=30, error_share=0.03), guards=guards)
    assert result.verdict is Verdict.FAIL
    assert any("> ceiling 0.10%" in r for r in result.reasons)
    assert any(r.startswith("per-step p95") and "> ceiling 4.00 ms" in r for r in result.reasons)


def test_a_step_p95_over_its_ceiling_that_the_bound_does_not_confirm_yet_is_inconclusive_not_a_pass() -> None:
    """The module's rule: an estimate past a limit whose bound is not (yet) past it waits for more evidence."""
    canary, stable = track(seed=41, requests=150), track(seed=42)
    estimate = verdict_of(canary, stable).canary.step_latency_p95_seconds
    assert estimate is not None
    guards = GUARDS.model_copy(update={"max_step_latency_p95_seconds": estimate * 0.97})
    result = verdict_of(canary, stable, guards=guards)
    step = next(r for r in result.reasons if r.startswith("per-step p95"))
    assert "not yet surely" in step, step
    assert result.verdict is Verdict.INCONCLUSIVE, result.reasons


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
    result = judge(GUARDS, TrackEvidence(), TrackEvidence(), speculative=True, confidence=CONFIDENCE)
    assert result.verdict is Verdict.INCONCLUSIVE
    assert "draft tokens" in result.reasons[0]


def test_a_canary_without_speculation_is_judged_on_latency_and_errors_only() -> None:
    result = verdict_of(track(seed=32), track(seed=33))
    assert result.verdict is Verdict.PASS
    assert not any("acceptance" in r for r in result.reasons)


# Serving capacity: throughput at comparable load, queue time, KV-cache pressure.

VLLM_REQUEST_LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0)
CAPACITY_GUARDS = Guardrails(max_throughput_drop=0.1)


def serving(
    *,
    seed: int,
    offered: float,
    capacity: float,
    pods: int = 1,
    seconds: float = 600.0,
    wait_s: float = 0.05,
    kv_cache: float | None = 0.4,
    output_tokens: int = 200,
) -> TrackEvidence:
    """A track whose `pods` are each offered `offered` requests/s (Poisson) and can complete `capacity`.

    Below capacity a pod completes what arrives and its waiting queue only jitters; above, it completes
    at capacity and the rest waits. Each finished request waited about `wait_s` before being scheduled.
    """
    rng = random.Random(seed)
    arrivals = sum(_poisson(rng, offered * seconds) for _ in range(pods))
    if offered < capacity:
        growth = sum(rng.randint(-3, 3) for _ in range(pods))
        completed = arrivals - max(0, growth)
    else:
        completed = min(arrivals, sum(_poisson(rng, capacity * seconds) for _ in range(pods)))
        growth = arrivals - completed
    base = track(seed=seed, requests=completed)
    waits = [rng.expovariate(1 / wait_s) for _ in range(completed)]
    return dataclasses.replace(
        base,
        queue_time=binned(waits, VLLM_REQUEST_LATENCY_BUCKETS),
        generation_tokens=float(completed * output_tokens),
        waiting_growth=float(growth),
        kv_cache_usage_mean=kv_cache,
        kv_cache_usage_max=None if kv_cache is None else min(1.0, kv_cache * 1.5),
        preemptions=0.0,
        request_rate_per_pod=(completed / seconds / pods,) * pods,
        seconds=seconds,
    )


def _poisson(rng: random.Random, mean: float) -> int:
    return max(0, round(rng.gauss(mean, math.sqrt(mean))))


def _reason(result, start: str) -> str:
    return next(r for r in result.reasons if r.startswith(start))


@pytest.mark.parametrize("limit", [0.1, 0.0])
def test_an_a_a_canary_never_fails_on_throughput(limit: float) -> None:
    guards = Guardrails(max_throughput_drop=limit)
    for seed in range(40):
        canary = serving(seed=seed, offered=4.0, capacity=6.0)
        stable = serving(seed=1000 + seed, offered=4.0, capacity=6.0, pods=3)
        result = verdict_of(canary, stable, guards=guards)
        assert not any(r.startswith("completed") and "> limit" in r for r in result.reasons), result.reasons


def test_an_a_a_canary_passes_with_throughput_queue_and_kv_limits_set() -> None:
    guards = Guardrails(max_throughput_drop=0.1, max_queue_time_p95_seconds=1.0, max_kv_cache_usage=0.9)
    result = verdict_of(
        serving(seed=1, offered=4.0, capacity=6.0), serving(seed=2, offered=4.0, capacity=6.0), guards=guards
    )
    assert result.verdict is Verdict.PASS, result.reasons
    assert "limit 10%" in _reason(result, "completed")
    assert "output tokens/s per pod" in _reason(result, "completed")
    assert "ceiling 1.00 s" in _reason(result, "queue time p95")
    assert "ceiling 90%" in _reason(result, "KV-cache usage")


def test_a_saturated_canary_fails_throughput_with_its_bound() -> None:
    """Offered 4 requests/s per pod, the canary's config lets a pod complete only 3 (a drafter that eats KV)."""
    canary = serving(seed=3, offered=4.0, capacity=3.0)
    stable = serving(seed=4, offered=4.0, capacity=6.0, pods=3)
    result = verdict_of(canary, stable, guards=CAPACITY_GUARDS)
    assert result.verdict is Verdict.FAIL
    assert "> limit 10%" in _reason(result, "completed")
    assert result.canary.served_fraction is not None and result.stable.served_fraction is not None
    assert result.canary.served_fraction < 0.8 < 0.99 < result.stable.served_fraction


def test_a_saturated_canary_passes_when_the_guardrail_is_unset() -> None:
    result = verdict_of(serving(seed=3, offered=4.0, capacity=3.0), serving(seed=4, offered=4.0, capacity=6.0))
    assert not any(r.startswith("completed") for r in result.reasons)
    assert result.verdict is not Verdict.FAIL


def test_a_slightly_saturated_canary_on_thin_evidence_is_inconclusive() -> None:
    """30 s of traffic: the canary completes 15% less than it is offered, but that is not yet sure."""
    canary = serving(seed=5, offered=4.0, capacity=3.4, seconds=30.0)
    stable = serving(seed=6, offered=4.0, capacity=6.0, seconds=30.0)
    result = verdict_of(canary, stable, guards=Guardrails(max_throughput_drop=0.1, min_requests=50))
    assert result.verdict is Verdict.INCONCLUSIVE, result.reasons
    assert "not yet surely" in _reason(result, "completed")


def test_too_few_requests_leave_throughput_unjudged() -> None:
    canary = serving(seed=7, offered=0.2, capacity=0.1)
    stable = serving(seed=8, offered=0.2, capacity=6.0)
    result = verdict_of(canary, stable, guards=Guardrails(max_throughput_drop=0.1, min_requests=100))
    assert result.verdict is Verdict.INCONCLUSIVE
    assert not any(r.startswith("completed") for r in result.reasons)


def test_a_canary_offered_less_than_stable_cannot_pass_throughput() -> None:
    canary = serving(seed=9, offered=2.0, capacity=6.0)
    stable = serving(seed=10, offered=4.0, capacity=6.0)
    result = verdict_of(canary, stable, guards=CAPACITY_GUARDS)
    assert result.verdict is Verdict.INCONCLUSIVE
    assert "but canary pods were offered 0.5" in _reason(result, "completed")
    assert "not yet shown 0.80x or more" in _reason(result, "completed")


def test_a_canary_offered_more_than_stable_cannot_fail_throughput() -> None:
    """Traffic split by weight: one canary pod takes twice a stable pod's share, beyond what either can serve."""
    canary = serving(seed=11, offered=8.0, capacity=6.0)
    stable = serving(seed=12, offered=4.0, capacity=6.0, pods=3)
    result = verdict_of(canary, stable, guards=CAPACITY_GUARDS)
    assert result.verdict is Verdict.INCONCLUSIVE
    assert "but canary pods were offered 1.9" in _reason(result, "completed")


@pytest.mark.parametrize("track_without_gauge", ["canary", "stable"])
def test_no_waiting_queue_gauge_leaves_throughput_inconclusive(track_without_gauge: str) -> None:
    tracks = {
        "canary": serving(seed=13, offered=4.0, capacity=6.0),
        "stable": serving(seed=14, offered=4.0, capacity=6.0),
    }
    tracks[track_without_gauge] = dataclasses.replace(tracks[track_without_gauge], waiting_growth=None)
    result = verdict_of(tracks["canary"], tracks["stable"], guards=CAPACITY_GUARDS)
    assert result.verdict is Verdict.INCONCLUSIVE
    assert f"no waiting-queue gauge for the {track_without_gauge} track: throughput not judged" in result.reasons


def test_a_queue_time_ceiling_fails_a_canary_whose_requests_wait() -> None:
    guards = Guardrails(max_queue_time_p95_seconds=1.0)
    canary = serving(seed=15, offered=4.0, capacity=6.0, wait_s=3.0)
    result = verdict_of(canary, serving(seed=16, offered=4.0, capacity=6.0), guards=guards)
    assert result.verdict is Verdict.FAIL
    assert "> ceiling 1.00 s" in _reason(result, "queue time p95")
    assert result.canary.queue_time_p95_seconds is not None and result.canary.queue_time_p95_seconds > 5


def test_a_kv_cache_ceiling_fails_a_canary_under_sustained_pressure() -> None:
    guards = Guardrails(max_kv_cache_usage=0.9)
    canary = serving(seed=17, offered=4.0, capacity=6.0, kv_cache=0.97)
    result = verdict_of(canary, serving(seed=18, offered=4.0, capacity=6.0), guards=guards)
    assert result.verdict is Verdict.FAIL
    assert _reason(result, "KV-cache usage") == "KV-cache usage 97% on average (max 100%) > ceiling 90%"


def test_unset_queue_and_kv_limits_never_fail_but_are_reported() -> None:
    canary = serving(seed=19, offered=4.0, capacity=6.0, wait_s=5.0, kv_cache=1.0)
    result = verdict_of(canary, serving(seed=20, offered=4.0, capacity=6.0))
    assert result.verdict is Verdict.PASS, result.reasons
    assert result.canary.kv_cache_usage_mean == 1.0 and result.canary.queue_time_p95_seconds is not None
    assert result.canary.preemptions_per_second == 0.0


@pytest.mark.parametrize("kv_cache", [None, math.nan, 1.7])
def test_an_odd_kv_cache_answer_is_inconclusive(kv_cache: float | None) -> None:
    canary = serving(seed=21, offered=4.0, capacity=6.0, kv_cache=kv_cache)
    result = verdict_of(canary, serving(seed=22, offered=4.0, capacity=6.0), guards=Guardrails(max_kv_cache_usage=0.9))
    assert result.verdict is Verdict.INCONCLUSIVE
    assert "no KV-cache usage gauge for the canary" in result.reasons


def test_no_queue_time_histogram_is_inconclusive() -> None:
    canary = dataclasses.replace(serving(seed=23, offered=4.0, capacity=6.0), queue_time=None)
    guards = Guardrails(max_queue_time_p95_seconds=1.0)
    result = verdict_of(canary, serving(seed=24, offered=4.0, capacity=6.0), guards=guards)
    assert result.verdict is Verdict.INCONCLUSIVE
    assert "no queue time histogram for the canary" in result.reasons


def test_a_drafter_under_the_floor_on_both_tracks_does_not_fail_a_canary_that_only_changes_k() -> None:
    """Stable serves the drafter at alpha 0.5 (k=5); a canary at k=3 with it is not what lowered alpha."""
    stable = track(seed=200, alpha=0.5, k=5)
    canary = track(seed=201, alpha=0.5, k=3)
    kept = judge(GUARDS, canary, stable, speculative=True, confidence=CONFIDENCE, same_drafter=True)
    assert kept.verdict is not Verdict.FAIL, kept.reasons
    assert any("as stable's with the same drafter" in r for r in kept.reasons)
    alone = judge(GUARDS, canary, stable, speculative=True, confidence=CONFIDENCE)
    assert alone.verdict is Verdict.FAIL  # a new drafter at 0.5 is held to the floor


def test_a_canary_that_lowers_the_shared_drafters_acceptance_still_fails_the_floor() -> None:
    stable = track(seed=210, alpha=0.55, k=5, requests=400)
    canary = track(seed=211, alpha=0.25, k=3, requests=400)
    result = judge(GUARDS, canary, stable, speculative=True, confidence=CONFIDENCE, same_drafter=True)
    assert result.verdict is Verdict.FAIL
    assert any("upper bound < 0.60" in r for r in result.reasons)


# A Pass is evidence that the canary is within its limits, never the absence of evidence against it.


def test_a_six_percent_error_rate_on_240_requests_is_not_a_pass() -> None:
    """1 request in 16 fails on the canary, none on stable: too little to show it within 1 point of stable."""
    for seed in range(20):
        canary, stable = track(seed=301 + seed, error_share=0.05, requests=240), track(seed=340 + seed, requests=720)
        result = verdict_of(canary, stable)
        assert result.verdict is not Verdict.PASS, result.reasons


def test_a_p95_seven_percent_slower_on_240_requests_is_not_a_pass() -> None:
    result = verdict_of(track(seed=303, token_ms=5.35, requests=240), track(seed=304, requests=720))
    assert result.verdict is not Verdict.PASS, result.reasons


def test_an_estimate_past_the_error_limit_is_never_a_pass() -> None:
    guards = GUARDS.model_copy(update={"min_requests": 50})
    for seed in range(20):
        canary = track(seed=310 + seed, error_share=0.03, requests=120)
        result = verdict_of(canary, track(seed=330 + seed), guards=guards)
        assert result.verdict is not Verdict.PASS, result.reasons


def _sequential_outcome(*, seed: int, slower: float = 1.0, error_share: float = 0.0, looks: int = 20) -> Verdict:
    """One canary's step judged at every look on all its evidence so far: 4 requests/s per pod, one canary and
    three stable pods, a look every 30 s. The first Pass or Fail ends the step (the most a Pass can do)."""
    rng = random.Random(seed)
    bounds = tuple(FINE_ITL_BUCKETS)
    per_look = 120  # one pod at 4 requests/s for 30 s

    class Growing:
        def __init__(self, pods: int, token_ms: float, share: float) -> None:
            self.counts, self.total, self.errors, self.sum = [0] * (len(bounds) + 1), 0, 0, 0.0
            self.pods, self.token_ms, self.share = pods, token_ms, share

        def add(self) -> None:
            for _ in range(per_look * self.pods):
                value = rng.lognormvariate(math.log(self.token_ms / 1000), 0.2)
                self.counts[bisect.bisect_left(bounds, value)] += 1
                self.total, self.sum = self.total + 1, self.sum + value
                self.errors += rng.random() < self.share

        def evidence(self, seconds: float) -> TrackEvidence:
            cumulative = list(itertools.accumulate(self.counts))
            binned = Binned(bounds, tuple(float(c) for c in cumulative))
            return TrackEvidence(
                token_latency=binned,
                token_latency_mean=self.sum / self.total,
                finished={"stop": float(self.total - self.errors), "error": float(self.errors)},
                request_rate_per_pod=(4.0,) * self.pods,
                seconds=seconds,
            )

    canary, stable = Growing(1, 5.0 * slower, error_share), Growing(3, 5.0, 0.0)
    for look in range(1, looks + 1):
        canary.add()
        stable.add()
        seconds = 30.0 * look
        verdict = verdict_of(canary.evidence(seconds), stable.evidence(seconds)).verdict
        if verdict is not Verdict.INCONCLUSIVE:
            return verdict
    return Verdict.INCONCLUSIVE


@pytest.mark.parametrize(
    ("effect", "wrong"),
    [
        ({}, Verdict.FAIL),  # A/A: failed no more often than the confidence allows
        ({"slower": 1.2}, Verdict.PASS),  # twice the p95 limit (four times the mean's): never promoted
        ({"error_share": 0.02}, Verdict.PASS),  # twice the error limit
    ],
)
def test_over_many_looks_wrong_verdicts_stay_within_the_confidence(effect: dict, wrong: Verdict) -> None:
    outcomes = [_sequential_outcome(seed=seed, **effect) for seed in range(100)]
    assert outcomes.count(wrong) <= 1, outcomes.count(wrong)
    assert outcomes.count(Verdict.INCONCLUSIVE) < 100  # the looks decide something: the test can fail


@pytest.mark.parametrize(("batch", "prefill"), [(4.0, 30.0), (64.0, 140.0), (256.0, 0.0)])
def test_the_prompts_a_step_prefills_are_read_from_the_counters(batch: float, prefill: float) -> None:
    """vLLM observes the step latency once per decoding request per step, and counts every prompt token once:
    over 2,000 steps of `batch` decoding requests that each prefill `prefill` prompt tokens, the counters give
    back the prefill per step."""
    steps = 2000
    evidence = TrackEvidence(
        step_latency=binned([0.01] * int(steps * batch), tuple(FINE_ITL_BUCKETS)),
        prompt_tokens=steps * prefill,
        batch_mean=batch,
    )
    assert measurements(evidence).prefill_tokens_per_step == pytest.approx(prefill, abs=0.01)
    assert measurements(TrackEvidence(prompt_tokens=100.0, batch_mean=batch)).prefill_tokens_per_step is None


def test_prompt_tokens_the_prefix_cache_held_are_not_counted_as_prefilled() -> None:
    """vLLM counts every prompt token in `prompt_tokens`, and those it found cached in `prefix_cache_hits`: a
    shared 400-token system prompt before 112 new tokens leaves 112 to compute per request."""
    requests, steps_per_request, batch = 1000, 100, 32.0
    evidence = TrackEvidence(
        step_latency=binned([0.01] * (requests * steps_per_request), tuple(FINE_ITL_BUCKETS)),
        prompt_tokens=requests * 512.0,
        prefix_cache_hits=requests * 400.0,
        generation_tokens=requests * 224.0,
        batch_mean=batch,
        finished={"stop": float(requests)},
    )
    read = measurements(evidence)
    assert read.prefill_tokens_per_step == pytest.approx(112 / steps_per_request * batch)
    assert read.prefill_tokens_per_output_token == pytest.approx(112 / 224)
    assert read.prompt_tokens_per_request == 512.0  # the traffic's mix, as drift compares it, is unchanged

"""Confidence bounds of the judge: binomial, binned quantiles, and the spending over looks."""

import math
import random
from collections.abc import Callable

import pytest

from specfleet.judge.verdicts import difference_bounds
from specfleet.render.argv import FINE_ITL_BUCKETS
from specfleet.stats import (
    Binned,
    binomial_sequence_bounds,
    common_bounds,
    look_budget,
    quantile_bounds,
    rate_ratio_bounds,
    requests_to_bound,
    sequence_z,
    wilson_bounds,
    z_score,
)


def binned(samples: list[float], bounds: tuple[float, ...] = tuple(FINE_ITL_BUCKETS)) -> Binned:
    counts = {b: float(sum(1 for s in samples if s <= b)) for b in bounds}
    return Binned.from_buckets({**counts, math.inf: float(len(samples))})


def test_looks_spend_at_most_the_budget_however_many_there_are() -> None:
    spent = sum(look_budget(0.01, n) for n in range(1, 100_001))
    assert spent < 0.01
    assert spent == pytest.approx(0.01, rel=1e-4)


def test_wilson_bounds_hold_their_level() -> None:
    rng = random.Random(1)
    z = z_score(0.025)
    misses = 0
    for _ in range(2000):
        p = rng.uniform(0.05, 0.95)
        n = rng.randint(20, 400)
        successes = sum(rng.random() < p for _ in range(n))
        lower, upper = wilson_bounds(successes, n, z)
        misses += not lower <= p <= upper
    assert misses / 2000 <= 0.05 + 0.015  # two one-sided 2.5% bounds


def test_wilson_bounds_without_trials_say_nothing() -> None:
    assert wilson_bounds(0, 0, 2.0) == (0.0, 1.0)


def test_quantile_is_interpolated_like_histogram_quantile() -> None:
    data = Binned.from_buckets({0.1: 50.0, 0.2: 90.0, 0.4: 100.0, math.inf: 100.0})
    assert data is not None
    assert data.value_at(0.5) == pytest.approx(0.1)
    assert data.value_at(0.7) == pytest.approx(0.15)
    assert data.value_at(0.95) == pytest.approx(0.3)
    assert data.value_at(0.25) == pytest.approx(0.05)


def test_a_quantile_beyond_the_last_bound_is_unbounded() -> None:
    data = Binned.from_buckets({0.1: 10.0, math.inf: 100.0})
    assert data is not None and data.value_at(0.95) == math.inf


def test_histograms_without_inf_bucket_are_not_read() -> None:
    assert Binned.from_buckets({0.1: 10.0}) is None


def test_counts_are_made_monotone() -> None:
    data = Binned.from_buckets({0.1: 10.0, 0.2: 9.5, math.inf: 12.0})
    assert data is not None and data.cumulative == (10.0, 10.0, 12.0)


def test_two_layouts_are_compared_on_the_bounds_they_share() -> None:
    rng = random.Random(2)
    samples = [rng.lognormvariate(math.log(0.02), 0.3) for _ in range(1000)]
    coarse = binned(samples, (0.01, 0.025, 0.05, 0.075, 0.1))
    fine = binned(samples, (0.01, 0.015, 0.02, 0.025, 0.03, 0.05, 0.1))
    shared = common_bounds(coarse, fine)
    assert shared == (0.01, 0.025, 0.05, 0.1)
    assert coarse.on(shared) == fine.on(shared)  # same observations, same counts: like with like


def test_quantile_bounds_cover_the_true_p95() -> None:
    rng = random.Random(3)
    z = z_score(0.01)
    true_p95 = math.exp(math.log(0.005) + 1.6449 * 0.25)
    misses_low = misses_high = 0
    for _ in range(400):
        samples = [rng.lognormvariate(math.log(0.005), 0.25) for _ in range(600)]
        q = quantile_bounds(binned(samples), 0.95, z)
        assert q.lower <= q.estimate <= q.upper
        misses_low += q.lower > true_p95
        misses_high += q.upper < true_p95
    assert misses_low / 400 <= 0.01 + 0.015
    assert misses_high / 400 <= 0.01 + 0.015


def test_a_p95_needs_enough_requests_to_be_bounded_above() -> None:
    z = z_score(0.001)
    need = requests_to_bound(0.95, z)
    rng = random.Random(4)
    samples = [rng.uniform(0.001, 0.01) for _ in range(need)]
    assert math.isfinite(quantile_bounds(binned(samples), 0.95, z).upper)
    assert math.isinf(quantile_bounds(binned(samples[:-1]), 0.95, z).upper)


def test_fewer_independent_samples_widen_the_bounds() -> None:
    rng = random.Random(5)
    data = binned([rng.uniform(0.001, 0.01) for _ in range(2000)])
    z = z_score(0.01)
    assert quantile_bounds(data, 0.95, z, samples=200).lower < quantile_bounds(data, 0.95, z).lower


def test_a_confidence_sequence_holds_at_every_look_at_once() -> None:
    """Random walks watched at every sample: the mixture boundary is crossed by at most `error` of them, where
    a fixed-sample bound at the same level is crossed by most (looking again and again is free only for the first)."""
    rng = random.Random(3)
    error, walks, samples = 0.05, 1000, 1000
    fixed = z_score(error)
    crossed_sequence = crossed_fixed = 0
    for _ in range(walks):
        total, sequence, once = 0.0, False, False
        for n in range(1, samples + 1):
            total += rng.gauss(0.0, 1.0)
            z = total / math.sqrt(n)
            sequence = sequence or z > sequence_z(n, error)
            once = once or z > fixed
        crossed_sequence += sequence
        crossed_fixed += once
    assert crossed_sequence / walks <= error
    assert crossed_fixed / walks > 3 * error


def test_a_confidence_sequence_narrows_as_evidence_grows() -> None:
    widths = [sequence_z(n, 0.001) / math.sqrt(n) for n in (100, 200, 400, 800, 1600, 3200)]
    assert widths == sorted(widths, reverse=True)
    assert 1 < sequence_z(1000, 0.001) / z_score(0.001) < 1.5  # the price of looking at will, at a canary's size


def _bernoulli_path(rng: random.Random, rate: float, looks: list[int]) -> list[float]:
    """Successes of one sequence of Bernoulli trials, read at each of `looks` (trial counts, increasing)."""
    path, successes, done = [], 0, 0
    for n in looks:
        successes += sum(rng.random() < rate for _ in range(n - done))
        path.append(float(successes))
        done = n
    return path


GEOMETRIC_LOOKS = sorted({round(20 * 1.1**i) for i in range(50)})
"""Looks at 20 trials and every 10% more, to about 2,100: as the judge looks, at every analysis of a growing step."""


@pytest.mark.parametrize("rate", [0.003, 0.01, 0.05])
def test_a_bernoulli_confidence_sequence_holds_at_every_look_at_once(rate: float) -> None:
    """1,000 sequences of requests failing at `rate`, each looked at 40 times: each bound is crossed in at most
    its error's share of them, where Wilson's fixed-sample bound at the same level is crossed more often."""
    rng = random.Random(int(rate * 1000) + 7)
    error, sequences, scale = 0.05, 1000, 0.01
    above = below = fixed_below = 0
    for _ in range(sequences):
        path = _bernoulli_path(rng, rate, GEOMETRIC_LOOKS)
        bounds = [binomial_sequence_bounds(s, n, error, scale) for s, n in zip(path, GEOMETRIC_LOOKS, strict=True)]
        above += any(lower > rate for lower, _ in bounds)
        below += any(upper < rate for _, upper in bounds)
        fixed = [wilson_bounds(s, n, z_score(error)) for s, n in zip(path, GEOMETRIC_LOOKS, strict=True)]
        fixed_below += any(upper < rate for _, upper in fixed)
    assert above / sequences <= error
    assert below / sequences <= error
    if rate > 0:
        assert fixed_below > below


def test_errors_as_counts_show_a_clean_canary_within_a_point_sooner_than_a_normal_sequence() -> None:
    """0 errors: the Bernoulli sequence shows the rate under 1 point in about half the requests the normal
    mixture around Wilson's bound needed (at the judge's per-side error of 0.00125)."""
    budget = 0.00125

    def needed(upper: Callable[[float], float]) -> int:
        return next(n for n in range(100, 5000, 10) if upper(n) <= 0.01)

    counts = needed(lambda n: binomial_sequence_bounds(0, n, budget, 0.01)[1])
    normal = needed(lambda n: wilson_bounds(0, n, sequence_z(n, budget))[1])
    assert counts < 0.6 * normal
    assert 700 < counts < 900


def test_a_canary_at_twice_the_error_limit_is_shown_past_it_near_what_knowing_its_rate_would_need() -> None:
    """2% errors against a clean stable with 1.5x the canary's requests (two canary pods beside three stable):
    the lower bound's mixture, centred at twice the limit with the spread of a rate measured on ~1,700
    requests, shows it past 1 point within 1.2x the requests Wald's sequential test needs on average when it
    knows the rate is 2% (log(1 / e) / KL(2% || 1%), ~1,710 at the judge's per-side error of 0.00125), which
    no mixture can beat on these counts (none exceeds the likelihood ratio at the observed rate)."""
    budget, limit, rate = 0.00125, 0.01, 0.02
    divergence = rate * math.log(rate / limit) + (1 - rate) * math.log((1 - rate) / (1 - limit))
    wald = math.log(1 / budget) / divergence

    def past(n: int) -> bool:
        canary = binomial_sequence_bounds(rate * n, n, budget, limit)
        stable = binomial_sequence_bounds(0, 1.5 * n, budget, limit)
        return difference_bounds(rate, canary, 0.0, stable)[0] > limit

    counts = next(n for n in range(500, 5000, 5) if past(n))
    assert wald < counts < 1.2 * wald


def test_a_bernoulli_sequence_reads_fractional_counts_and_says_nothing_without_trials() -> None:
    assert binomial_sequence_bounds(0, 0, 0.01, 0.01) == (0.0, 1.0)
    lower, upper = binomial_sequence_bounds(12.5, 1000.4, 0.01, 0.01)
    assert 0 < lower < 12.5 / 1000.4 < upper < 1
    assert binomial_sequence_bounds(5, 5, 0.01, 0.01)[1] == 1.0


def test_the_difference_of_two_error_rates_holds_at_every_look_at_once() -> None:
    """A canary exactly one point worse than stable (on the limit: the worst case for a false verdict), stable
    with 3x its requests: over 1,000 sequences looked at 40 times, Newcombe's bounds from each track's
    Bernoulli sequence put the difference past it (a false Fail) or short of it in at most the error's share."""
    rng = random.Random(11)
    error, sequences, limit = 0.05, 1000, 0.01
    stable_rate, canary_rate = 0.002, 0.012
    stable_looks = [3 * n for n in GEOMETRIC_LOOKS]
    past = short = 0
    for _ in range(sequences):
        canary = _bernoulli_path(rng, canary_rate, GEOMETRIC_LOOKS)
        stable = _bernoulli_path(rng, stable_rate, stable_looks)
        seen = []
        for c, s, n in zip(canary, stable, GEOMETRIC_LOOKS, strict=True):
            c_bounds = binomial_sequence_bounds(c, n, error, limit)
            s_bounds = binomial_sequence_bounds(s, 3 * n, error, limit)
            seen.append(difference_bounds(c / n, c_bounds, s / (3 * n), s_bounds))
        past += any(lower > limit for lower, _ in seen)
        short += any(upper < limit for _, upper in seen)
    assert past / sequences <= error
    assert short / sequences <= error


def test_a_load_ratio_bound_holds_at_every_look_at_once() -> None:
    """Both tracks at the same per-pod load (1 canary pod, 3 stable): the Poisson rate ratio's bounds at the
    confidence sequence's z put the ratio away from 1 in at most the error's share of 1,000 steps looked at
    every 10 s for 20 minutes at 2 requests/s per pod."""
    rng = random.Random(5)
    error, steps = 0.05, 1000
    wrong = 0
    for _ in range(steps):
        canary = stable = 0
        crossed = False
        for _ in range(120):
            canary += _poisson(rng, 20.0)
            stable += _poisson(rng, 60.0)
            if canary and stable:
                estimate = canary / (stable / 3)
                lower, upper = rate_ratio_bounds(estimate, canary, stable, sequence_z(canary, error))
                crossed = crossed or lower > 1 or upper < 1
        wrong += crossed
    assert wrong / steps <= 2 * error  # both sides together


def _poisson(rng: random.Random, mean: float) -> int:
    """A Poisson count by its exponential gaps (the standard library has no sampler)."""
    count, elapsed = 0, rng.expovariate(1.0)
    while elapsed < mean:
        count += 1
        elapsed += rng.expovariate(1.0)
    return count

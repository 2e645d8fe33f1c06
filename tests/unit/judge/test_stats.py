"""Confidence bounds of the judge: binomial, binned quantiles, and the spending over looks."""

import math
import random

import pytest

from specfleet.render.argv import FINE_ITL_BUCKETS
from specfleet.stats import (
    Binned,
    common_bounds,
    look_budget,
    quantile_bounds,
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

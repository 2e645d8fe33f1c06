"""Confidence bounds for the canary judge: binomial counts and quantiles of binned (histogram) data. Pure.

The judge looks at a live canary again and again, on evidence that grows from the start of its step. Its
bounds are a *confidence sequence* (`sequence_z`): they hold at every amount of evidence at once, so looking
as often as one likes never raises the chance of a wrong verdict, and they narrow as evidence grows
(Howard, Ramdas, McAuliffe, Sekhon 2021). `look_budget` is the older construction, a union bound over looks
(look n spends budget / (n (n + 1))): it still bounds the trailing-window check that catches a canary turning
bad late in a long step, where the evidence does not accumulate. Shares of requests (errors) are counts, not
normal sums: their sequence is built for Bernoulli trials (`binomial_sequence_bounds`).
"""

import math
from bisect import bisect_left
from dataclasses import dataclass
from statistics import NormalDist

_NORMAL = NormalDist()
SEQUENCE_SAMPLES = 100.0
"""Samples at which the mixture of `sequence_z` is centred: its bounds are tightest from about 10x this
(a canary judged on one to a few thousand requests) and widen only logarithmically beyond."""


def look_budget(budget: float, look: int) -> float:
    """The false-failure probability spent at look `look` (1-based): all looks together spend `budget`."""
    return budget / (look * (look + 1))


def sequence_z(samples: float, budget: float) -> float:
    """How many standard errors from its estimate a one-sided bound lies after `samples` samples, so that it
    is crossed with probability at most `budget` at *any* sample count, however often it is looked at.

    The one-sided normal-mixture boundary of Howard et al. (2021, eq. 14) on a standardised sum, with its
    mixture variance set at SEQUENCE_SAMPLES samples: sqrt(2 (1 + 1/u) log(sqrt(1 + u) / (2 budget) + 1)) with
    u = samples / SEQUENCE_SAMPLES. With the standard error estimated from the data it is the asymptotic
    confidence sequence of Waudby-Smith et al. (2021). About 4.2 at 1,000 samples for a budget of 0.0006, where a
    bound for one fixed look would use 3.2: the price of looking at will.
    """
    u = max(samples, 1e-9) / SEQUENCE_SAMPLES
    return math.sqrt(2 * (1 + 1 / u) * math.log(math.sqrt(1 + u) / (2 * budget) + 1))


def _log_mixture(successes: float, trials: float, p: float, prior: tuple[float, float]) -> float:
    """log of the beta-binomial mixture martingale at rate `p`: the likelihood of the counts averaged over a
    Beta(a, b) distribution of rates, over their likelihood at `p`, in closed form."""
    a, b = prior
    failures = trials - successes
    mixed = _log_beta(a + successes, b + failures) - _log_beta(a, b)
    at_p = (successes * math.log(p) if successes > 0 else 0.0) + (failures * math.log1p(-p) if failures > 0 else 0.0)
    return mixed - at_p


def _log_beta(a: float, b: float) -> float:
    return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)


SHOWS_WITHIN_SHAPE = 0.5
"""Shape `a` of the mixture that bounds a share from above, Beta(0.5, 0.5 / scale): most of its weight near 0,
its mean at the scale, so a clean track is shown under a limit of that scale in few requests."""
SHOWS_PAST_SHAPE = 32.0
"""Shape `a` of the mixture that bounds a share from below, Beta(32, 16 / scale): its mean at twice the scale,
where a share past a limit of that scale should be caught soonest, and its spread (~18% of it) a share's
standard error at about 1,700 requests, where a share at twice a 1-point limit is shown past it (a mixture's
bound is tightest where its spread matches the estimate's). Beta(4, 2 / scale), spread half its mean,
needed ~10% more requests there (benchmarks/error_bounds.py)."""
_ITERATIONS = 200
_PRECISION = 1e-9
"""Relative precision of a bound (its figures are shown to three)."""


def binomial_sequence_bounds(successes: float, trials: float, budget: float, scale: float) -> tuple[float, float]:
    """One-sided bounds of a Bernoulli rate from `successes` in `trials` (fractional counts allowed), each
    crossed with probability at most `budget` at *any* number of trials, however often it is looked at.

    Each bound is the edge of a beta-binomial mixture confidence sequence (Robbins 1970; Howard et al. 2021,
    section 3): the rates whose mixture martingale stays under 1 / budget (Ville's inequality). It is exact for
    counts, unlike a normal bound, which is too wide at 0 errors and too narrow at a few. The upper and lower
    bound each use their own mixture, fixed in advance by `scale` (the limit the share is judged against):
    each is a whole confidence sequence, of which only one side is read. With no trials the bounds are (0, 1).
    """
    if trials <= 0:
        return 0.0, 1.0
    successes = min(max(successes, 0.0), trials)
    scale = min(max(scale, 1e-6), 1.0)
    threshold = math.log(1 / budget)
    rate, failures = successes / trials, trials - successes
    within = (SHOWS_WITHIN_SHAPE, SHOWS_WITHIN_SHAPE / scale)
    past = (SHOWS_PAST_SHAPE, SHOWS_PAST_SHAPE / (2 * scale))

    def edge(inside: float, outside: float, prior: tuple[float, float]) -> float:
        """Where the log-mixture crosses the threshold between a rate inside the sequence's set and one outside
        it: Newton's method kept inside the bracket, else bisection. The set is an interval (the log-mixture
        is convex in the rate, and at most 0 at the observed rate)."""
        guess = (inside + outside) / 2
        for _ in range(_ITERATIONS):
            excess = _log_mixture(successes, trials, guess, prior) - threshold
            if excess < 0:
                inside = guess
            else:
                outside = guess
            if abs(outside - inside) <= _PRECISION * outside:
                break
            slope = failures / (1 - guess) - successes / guess
            step = guess - excess / slope if slope else math.nan
            between = min(inside, outside) < step < max(inside, outside)
            guess = step if between else (inside + outside) / 2
        return inside

    top, bottom = math.nextafter(1.0, 0.0), 5e-324
    upper, lower = 1.0, 0.0
    if rate < top and _log_mixture(successes, trials, top, within) >= threshold:
        upper = edge(rate, top, within)
    if rate > bottom and _log_mixture(successes, trials, bottom, past) >= threshold:
        lower = edge(rate, bottom, past)
    return lower, upper


def z_score(tail: float) -> float:
    """One-sided normal quantile: P(Z > z) = tail."""
    return _NORMAL.inv_cdf(1 - tail)


def t_score(tail: float, df: float) -> float:
    """One-sided Student t quantile, P(T > t) = tail, by the Cornish-Fisher expansion around the normal's
    (within 1% of the exact value from 4 degrees of freedom at 99%)."""
    z = z_score(tail)
    return (
        z
        + (z**3 + z) / (4 * df)
        + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3)
    )


def wilson_bounds(successes: float, trials: float, z: float) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion (well-behaved near 0 and 1, unlike the Wald interval).

    `trials` may be an effective (fractional) count; with no trials the bounds are (0, 1).
    """
    if trials <= 0:
        return 0.0, 1.0
    p = min(1.0, max(0.0, successes / trials))
    z2 = z * z
    # The textbook form divided by trials: multiplied through by them, so a count as small or as large as a
    # float holds neither underflows nor overflows (1 / 5e-324 squared is infinite).
    centre = (p * trials + z2 / 2) / (trials + z2)
    half = z * math.sqrt(p * (1 - p) * trials + z2 / 4) / (trials + z2)
    return max(0.0, centre - half), min(1.0, centre + half)


def rate_ratio_bounds(estimate: float, events: float, reference_events: float | None, z: float) -> tuple[float, float]:
    """Bounds of a ratio of two Poisson rates read from `events` and `reference_events` counts (log scale:
    standard error sqrt(1/a + 1/b)). A reference without its count counts as exact; no events, no bounds."""
    if events <= 0 or estimate <= 0:
        return 0.0, math.inf
    variance = 1 / events + (1 / reference_events if reference_events else 0.0)
    half = z * math.sqrt(variance)
    return estimate * math.exp(-half), estimate * math.exp(half)


@dataclass(frozen=True)
class Binned:
    """A Prometheus histogram over a range: cumulative counts at each finite upper bound `le`, then +Inf.

    Cumulative counts at a bound do not depend on the other bounds, so two layouts are compared exactly
    on the bounds they share (`on`).
    """

    bounds: tuple[float, ...]
    cumulative: tuple[float, ...]
    """len(bounds) + 1 values, non-decreasing; the last is the +Inf bucket, i.e. the total."""

    @classmethod
    def from_buckets(cls, buckets: dict[float, float]) -> "Binned | None":
        """`{le: cumulative count}` as Prometheus answers `sum by (le) (increase(x_bucket[r]))`; None without +Inf.

        Counts are made monotone (a scrape racing a counter can break it by a fraction).
        """
        if math.inf not in buckets:
            return None
        bounds = tuple(sorted(b for b in buckets if math.isfinite(b)))
        running, cumulative = 0.0, []
        for bound in (*bounds, math.inf):
            running = max(running, max(0.0, buckets[bound]))
            cumulative.append(running)
        return cls(bounds, tuple(cumulative))

    @property
    def total(self) -> float:
        return self.cumulative[-1]

    def on(self, bounds: tuple[float, ...]) -> "Binned":
        """The same observations on a subset of this layout's bounds."""
        index = {b: i for i, b in enumerate(self.bounds)}
        return Binned(bounds, (*tuple(self.cumulative[index[b]] for b in bounds), self.total))

    def value_at(self, probability: float) -> float:
        """The value below which `probability` of the observations lie, interpolated linearly inside a bucket
        from its lower bound (0 for the first) as `histogram_quantile` does. +Inf beyond the last finite bound.
        """
        if probability <= 0:
            return 0.0
        if probability > 1:
            return math.inf
        rank = probability * self.total
        i = bisect_left(self.cumulative, rank)
        if i >= len(self.bounds):
            return math.inf
        lower = self.bounds[i - 1] if i > 0 else 0.0
        below = self.cumulative[i - 1] if i > 0 else 0.0
        inside = self.cumulative[i] - below
        if inside <= 0:
            return self.bounds[i]
        return lower + (self.bounds[i] - lower) * (rank - below) / inside

    def bucket_of(self, value: float) -> tuple[float, float]:
        """The (lower, upper] bounds of the bucket holding `value`."""
        i = bisect_left(self.bounds, value)
        lower = self.bounds[i - 1] if i > 0 else 0.0
        return lower, self.bounds[i] if i < len(self.bounds) else math.inf


def common_bounds(a: Binned, b: Binned) -> tuple[float, ...]:
    """Bounds both layouts have: the finest layout on which the two tracks are judged like with like."""
    return tuple(sorted(set(a.bounds) & set(b.bounds)))


@dataclass(frozen=True)
class QuantileBounds:
    estimate: float
    lower: float
    upper: float


def quantile_bounds(data: Binned, q: float, z: float, samples: float | None = None) -> QuantileBounds:
    """Point estimate and one-sided bounds (each at the level of `z`) of the q-quantile.

    The count of observations below the true quantile is binomial(n, q), so the bound is where the
    empirical CDF reaches q -/+ z sqrt(q (1 - q) / n) (distribution-free; the position inside a bucket
    is interpolated). `samples` is the number of independent observations when it is not the count
    (observations that share a cause, or evidence projected to grow); the upper bound is +Inf when n is too
    small to bound it.
    """
    n = data.total if samples is None else samples
    if n <= 0:
        return QuantileBounds(math.nan, 0.0, math.inf)
    spread = z * math.sqrt(q * (1 - q) / n)
    return QuantileBounds(data.value_at(q), data.value_at(q - spread), data.value_at(q + spread))


def log_quantile_se(data: Binned, q: float, spread: float = 0.02) -> float:
    """Standard error of log(q-quantile) by the delta method: sqrt(q (1 - q) / n) x Q'(q) / Q(q).

    The slope Q' of the quantile function is read from the binned CDF over q -/+ `spread`, so a
    distribution with a long tail above q gets a wide error. +Inf when the data cannot say.
    """
    n = data.total
    estimate, below, above = data.value_at(q), data.value_at(q - spread), data.value_at(q + spread)
    if n <= 0 or not 0 < estimate < math.inf or not math.isfinite(above):
        return math.inf
    slope = (above - below) / (2 * spread)
    return math.sqrt(q * (1 - q) / n) * slope / estimate


def binned_sd(data: Binned) -> float:
    """Standard deviation of the observations, each taken at its bucket's midpoint (the last finite bound
    for the +Inf bucket, so a long tail is understated: keep the buckets wide enough to hold it). NaN when empty."""
    n = data.total
    if n <= 0:
        return math.nan
    points, weights, below, lower = [], [], 0.0, 0.0
    for bound, cumulative in zip((*data.bounds, math.inf), data.cumulative, strict=True):
        upper = bound if math.isfinite(bound) else lower
        points.append((lower + upper) / 2)
        weights.append(cumulative - below)
        below, lower = cumulative, upper
    mean = sum(p * w for p, w in zip(points, weights, strict=True)) / n
    return math.sqrt(max(0.0, sum(w * (p - mean) ** 2 for p, w in zip(points, weights, strict=True)) / n))


def requests_to_bound(q: float, z: float) -> int:
    """Fewest observations for which the upper bound of the q-quantile is finite (q + z sd < 1)."""
    return math.floor(z * z * q * (1 - q) / (1 - q) ** 2) + 1

"""Load-aware depth: from step times measured at several loads, the depth k that pays at each batch size.

Pure functions. The operator measures, per analysis window and track, the mean engine-step time (vLLM's
inter-token-latency histogram sum / count: one observation per request per step), the mean number of
running requests per pod (the batch B) and the depth k the steps ran at: a `LoadPoint`. From points at two
or more batch levels and two or more depths, `fit_step_model` fits the simulator's shape of a step
(docs/simulator.md, `specfleet_workshop.sim.model.step_seconds`):

    step(k, B) = h + g(k) d max(1, n / K) + max(m + v B, m (B (k + 1) + P) / K)

h is the fixed cost of a step, d one drafter pass (g(k) = k passes of n = B tokens for sequential drafters,
one pass of n = B k tokens for parallel ones), m the memory-bound target pass (weights), v the KV cache one
running request adds to it, and K the knee: past K tokens per pass (the roofline's ridge, where computing
them takes as long as streaming the weights) the target pass grows with the tokens it computes: the B (k + 1)
it verifies and the P prompt tokens of the requests admitted into the step (their prefill). P is measured with
each point (prompt tokens / inter-token-latency count x B: the prompts a decode step carries) and predicted
from the traffic's mix, B x (prefilled tokens per output token) x (tokens per step): a request enters as one
finishes. On busy pods P is a third of a pass or more; left out, the bend looks like a knee far below the
true one.
Drafter passes reach the same ridge at n = K tokens; the fit takes a whole drafter pass as weight streaming
there, while the simulator keeps its fixed part (`draft_pass_overhead_ms`) flat: past K requests per pod
(K / k for parallel drafters) the fit overstates drafting by that part, a few percent of the step.

Per-token latency is step time / tokens per step, the tokens following from the measured per-position
acceptance. `propose_schedule` picks, per power-of-two bucket of batch sizes, the depth (0 = no
speculation) with the lowest predicted per-token latency and writes the result as
`num_speculative_tokens_per_batch_size` rows (vLLM >= 0.24).

Engines older than 0.24 cannot switch speculation off by batch size at all: vLLM 0.10.0-0.16.0 accept
`disable_by_batch_size` but their V1 engine never reads it (it was the V0 engine's; vllm-project/vllm#35060
removed the dead key), and 0.17-0.23 refuse it. `Proposal.disable_above` is therefore shown, not rendered:
on those engines the only lever is a lower static k (`BucketPrediction` says which k wins at the load the
fleet sees).
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from specfleet.api.spec import BatchSizeDepth
from specfleet.render.vllm_versions import SPECULATIVE_KEYS, VllmVersion

MARGIN = 0.03
"""Hysteresis: a schedule is proposed only when, at some batch size, its depth is predicted more than 3%
faster per token than the depth served there now. Mean step times over an analysis window move by well
under a percent from window to window (5% log-normal noise per step, thousands of steps), so 3% keeps noise
from churning proposals while a knee (tens of percent) still shows."""

TIE = 0.01
"""Depths predicted within 1% of the fastest tie, and the smallest of them wins (less drafting work for the
same speed, as an experiment's ties go to the smaller k); this also keeps near-equal depths from
alternating between neighbouring buckets."""

LEVEL_GAP = 1.25
"""Batch sizes (or tokens per pass) within 25% of each other count as one level: an experiment's
candidates run at roughly, not exactly, the same batch."""

SCHEDULE_KEY = "num_speculative_tokens_per_batch_size"

_RMS_FLOOR = 1e-4
"""Relative fit errors below 0.01% count as equal when fits are compared (exact data fits exactly)."""
_RANK_TOLERANCE = 1e-9


def engine_takes_schedule(version: VllmVersion) -> bool:
    """Whether this vLLM release has `num_speculative_tokens_per_batch_size` (from 0.24.0)."""
    return SPECULATIVE_KEYS[SCHEDULE_KEY].covers(version)


@dataclass(frozen=True)
class LoadPoint:
    """One measurement: mean step time at a batch size and depth, over one analysis window of one track."""

    k: int
    """Depth the steps ran at (0 without speculation)."""
    batch: float
    """Mean running requests per pod (`vllm:num_requests_running`)."""
    step_seconds: float
    """Mean engine-step time: inter-token-latency sum / count."""
    samples: float
    """Step observations behind the mean (inter-token-latency count): the point's weight in the fit."""
    prefill_tokens: float = 0.0
    """Mean prompt tokens prefilled per step (prompt tokens / inter-token-latency count x batch)."""

    def __post_init__(self) -> None:
        if self.k < 0 or not self.batch > 0 or not self.step_seconds > 0 or not self.samples > 0:
            raise ValueError(f"invalid load point {self}: k >= 0, batch, step_seconds and samples > 0 required")
        if not self.prefill_tokens >= 0:
            raise ValueError(f"invalid load point {self}: prefill_tokens >= 0 required")
        if not all(math.isfinite(v) for v in (self.batch, self.step_seconds, self.samples, self.prefill_tokens)):
            raise ValueError(f"invalid load point {self}: values must be finite")

    @property
    def tokens_per_pass(self) -> float:
        """Tokens the target pass computes: B (k + 1) verified, and the prompts prefilled with them."""
        return self.batch * (self.k + 1) + self.prefill_tokens


@dataclass(frozen=True)
class StepFit:
    """The fitted step-time model `step(k, B)` of the module docstring, with c = m / K."""

    overhead_seconds: float
    """h. Without a knee in the data it cannot be told from the target pass and is 0 (m holds both)."""
    target_seconds: float
    """m: the memory-bound target pass (its weights)."""
    kv_seconds_per_request: float
    """v: what each running request's KV cache adds to the memory-bound pass (0 when not identified)."""
    knee_tokens: float | None
    """K: tokens per pass at which compute time equals the weight-streaming time m; None when no measured
    step was past it."""
    draft_pass_seconds: float
    """d: one drafter pass below the knee, its fixed cost included."""
    parallel_drafter: bool
    """One drafter pass of B k tokens per step (dflash, dspark, parallel drafting) instead of k passes of B."""
    batch_levels: tuple[float, ...]
    """The batch levels the points came from."""
    max_tokens_per_pass: float
    """Highest B (k + 1) measured."""
    rms_relative_error: float
    """Root mean square of (fitted - measured) / measured over the points, weighted by samples."""

    @property
    def compute_seconds_per_token(self) -> float | None:
        """c = m / K: the target pass's time per verified token past the knee."""
        return self.target_seconds / self.knee_tokens if self.knee_tokens else None

    def draft_seconds(self, k: int, batch: float) -> float:
        """The drafter's share of a step at depth k with `batch` running requests."""
        return self.draft_pass_seconds * _drafter_passes(k, batch, self.parallel_drafter, self.knee_tokens)

    def step_seconds(self, k: int, batch: float, prefill_tokens: float = 0.0) -> float:
        """Predicted mean step time at depth k with `batch` running requests and `prefill_tokens` prompt tokens."""
        memory = self.target_seconds + self.kv_seconds_per_request * batch
        knee = self.knee_tokens
        tokens = batch * (k + 1) + prefill_tokens
        target = memory if knee is None else max(memory, self.target_seconds * tokens / knee)
        return self.overhead_seconds + self.draft_seconds(k, batch) + target


@dataclass(frozen=True)
class NoFit:
    """The points cannot identify the model; `reason` says what is missing."""

    reason: str


def _levels(values: Sequence[float], gap: float = LEVEL_GAP) -> list[float]:
    """Group values within `gap` (ratio) of their group's smallest; the groups' means, ascending."""
    groups: list[list[float]] = []
    for value in sorted(values):
        if groups and value <= groups[-1][0] * gap:
            groups[-1].append(value)
        else:
            groups.append([value])
    return [sum(g) / len(g) for g in groups]


def _least_squares(columns: list[list[float]], y: list[float], weights: list[float]) -> list[float] | None:
    """Weighted least squares by modified Gram-Schmidt; None when the columns are (nearly) dependent."""
    root = [math.sqrt(w) for w in weights]
    scaled = [[value * r for value, r in zip(column, root, strict=True)] for column in columns]
    norms = [math.sqrt(sum(v * v for v in column)) for column in scaled]
    if any(n == 0 for n in norms):
        return None
    basis = [[v / n for v in column] for column, n in zip(scaled, norms, strict=True)]
    q: list[list[float]] = []
    r = [[0.0] * len(basis) for _ in basis]
    for j, column in enumerate(basis):
        v = list(column)
        for i, qi in enumerate(q):
            r[i][j] = sum(a * b for a, b in zip(qi, v, strict=True))
            v = [a - r[i][j] * b for a, b in zip(v, qi, strict=True)]
        r[j][j] = math.sqrt(sum(a * a for a in v))
        if r[j][j] < _RANK_TOLERANCE:
            return None
        q.append([a / r[j][j] for a in v])
    target = [value * w for value, w in zip(y, root, strict=True)]
    qty = [sum(a * b for a, b in zip(qi, target, strict=True)) for qi in q]
    beta = [0.0] * len(q)
    for j in reversed(range(len(q))):
        beta[j] = (qty[j] - sum(r[j][i] * beta[i] for i in range(j + 1, len(q)))) / r[j][j]
    return [b / n for b, n in zip(beta, norms, strict=True)]


def _drafter_passes(k: int, batch: float, parallel: bool, knee: float | None) -> float:
    """Drafter passes of a step in units of one pass below the knee: k (or 1) passes, each longer past it."""
    passes, tokens = (min(k, 1), batch * k) if parallel else (k, batch)
    return passes * (max(1.0, tokens / knee) if knee else 1.0)


def _fit_with_split(
    points: Sequence[LoadPoint], compute: frozenset[int], knee: float | None, parallel: bool
) -> dict[str, float] | None:
    """Least squares of h, m, v, d at a given knee, with the points in `compute` past it; None if not identified.

    Coefficients that come out negative where only >= 0 makes sense (h, v, d) are fixed at 0 and the rest
    refitted; m must come out positive.
    """
    memory = [i for i in range(len(points)) if i not in compute]
    columns: dict[str, list[float]] = {}
    if knee is not None:
        columns["h"] = [1.0] * len(points)
        columns["m"] = [p.tokens_per_pass / knee if i in compute else 1.0 for i, p in enumerate(points)]
    else:
        columns["m"] = [1.0] * len(points)  # overhead and target pass together
    if len(_levels([points[i].batch for i in memory])) >= 2:
        columns["v"] = [0.0 if i in compute else p.batch for i, p in enumerate(points)]
    columns["d"] = [_drafter_passes(p.k, p.batch, parallel, knee) for p in points]
    y = [p.step_seconds for p in points]
    weights = [p.samples / (p.step_seconds * p.step_seconds) for p in points]  # relative error, by samples
    while True:
        names = list(columns)
        beta = _least_squares([columns[n] for n in names], y, weights)
        if beta is None:
            return None
        fitted = dict(zip(names, beta, strict=True))
        negative = [n for n in ("h", "v", "d") if fitted.get(n, 0.0) < 0]
        if not negative:
            break
        del columns[min(negative, key=lambda n: fitted[n])]
    return fitted if fitted["m"] > 0 else None


def _fit_at(points: Sequence[LoadPoint], knee: float | None, parallel: bool) -> StepFit | None:
    """The best fit with the knee at `knee` tokens per pass (None: no knee), or None if the points cannot pin it.

    Which points are past the knee follows from the fit itself (m + v B against m B (k + 1) / K): start from
    tokens per pass >= K and re-split until it settles. A knee needs at least one point on either side.
    """
    compute: frozenset[int] = frozenset()
    if knee is not None:
        compute = frozenset(i for i, p in enumerate(points) if p.tokens_per_pass >= knee)
    seen: set[frozenset[int]] = set()
    fit = None
    while compute not in seen:
        seen.add(compute)
        if knee is not None and not 0 < len(compute) < len(points):
            return None
        fitted = _fit_with_split(points, compute, knee, parallel)
        if fitted is None:
            return None
        fit = StepFit(
            overhead_seconds=fitted.get("h", 0.0),
            target_seconds=fitted["m"],
            kv_seconds_per_request=fitted.get("v", 0.0),
            knee_tokens=knee,
            draft_pass_seconds=fitted.get("d", 0.0),
            parallel_drafter=parallel,
            batch_levels=tuple(_levels([p.batch for p in points])),
            max_tokens_per_pass=max(p.tokens_per_pass for p in points),
            rms_relative_error=_relative_rms(fitted, points, knee, parallel),
        )
        if knee is None:
            return fit
        memory_bound = [fit.target_seconds + fit.kv_seconds_per_request * p.batch for p in points]
        compute = frozenset(
            i for i, p in enumerate(points) if fit.target_seconds * p.tokens_per_pass / knee > memory_bound[i]
        )
    return fit


def _relative_rms(fitted: dict[str, float], points: Sequence[LoadPoint], knee: float | None, parallel: bool) -> float:
    fit = StepFit(
        fitted.get("h", 0.0), fitted["m"], fitted.get("v", 0.0), knee, fitted.get("d", 0.0), parallel, (), 0.0, 0.0
    )
    total = sum(p.samples for p in points)
    return math.sqrt(
        sum(p.samples * ((fit.step_seconds(p.k, p.batch, p.prefill_tokens) / p.step_seconds - 1) ** 2) for p in points)
        / total
    )


def _score(fit: StepFit, n: int) -> float:
    """Akaike's criterion over relative errors: a knee (two more parameters) must earn its keep."""
    parameters = 3 + (2 if fit.knee_tokens is not None else 0)
    return n * math.log(max(fit.rms_relative_error, _RMS_FLOOR) ** 2) + 2 * parameters


_KNEE_GRID = 64
"""Knees tried between a quarter of the smallest and the largest tokens per pass measured, before refining."""
_AIC_BAND = 2.0
"""Knees whose Akaike score is within 2 of the best fit the points about as well: when they span more than
`LEVEL_GAP`, the points do not place the knee."""


def fit_step_model(points: Sequence[LoadPoint], *, parallel_drafter: bool = False) -> StepFit | NoFit:
    """Fit `step(k, B)` to the points, or say why they cannot identify it.

    Needs points at two or more batch levels (the load axis) and two or more depths (the drafter's cost
    per pass; the stable and canary tracks of any canary give two). At a given knee the model is linear in
    h, m, v and d, so the knee is searched (a log grid, then golden-section refinement around the best) and
    the rest solved by weighted least squares on relative errors; the memory-bound model without a knee
    competes on Akaike's criterion, so a knee is found only where the data bend. Where they bend but knees
    over a range wider than `LEVEL_GAP` fit about as well (typically one load past the knee, whose step time
    any knee below it explains with another overhead), the answer is NoFit: the knee is not placed.
    """
    if not points:
        return NoFit("no load points measured")
    batches = _levels([p.batch for p in points])
    if len(batches) < 2:
        return NoFit(
            f"all {len(points)} load points are at one batch level (about {batches[0]:.3g} running requests "
            "per pod): how the step time grows with load needs two or more"
        )
    depths = sorted({p.k for p in points})
    if len(depths) < 2:
        return NoFit(
            f"all load points ran at k={depths[0]}: the drafter's cost per pass needs steps at two or more "
            "depths (an experiment's candidates, or stable and canary of a canary)"
        )
    n = len(points)
    low = min(p.tokens_per_pass for p in points) / 4
    high = max(p.tokens_per_pass for p in points)
    step = (high / low) ** (1 / (_KNEE_GRID - 1))
    grid = [low * step**i for i in range(_KNEE_GRID)]
    fits = [(knee, _fit_at(points, knee, parallel_drafter)) for knee in grid]
    scored = [(_score(fit, n), knee) for knee, fit in fits if fit is not None]
    flat = _fit_at(points, None, parallel_drafter)
    if not scored:
        return flat or NoFit("no step-time model fits the load points with positive costs")
    best_score, around = min(scored)
    bent = _golden_knee(points, around / step, around * step, parallel_drafter) or _fit_at(
        points, around, parallel_drafter
    )
    assert bent is not None
    best_score = min(best_score, _score(bent, n))
    if flat is not None and _score(flat, n) <= best_score:
        return flat
    assert bent.knee_tokens is not None
    band = [bent.knee_tokens] + [knee for score, knee in scored if score <= best_score + _AIC_BAND]
    if max(band) / min(band) > LEVEL_GAP:
        return NoFit(
            f"the step time bends with load, but a knee anywhere from {min(band):.0f} to {max(band):.0f} tokens "
            "per pass fits the points: placing it needs loads past it at two or more tokens per pass"
        )
    return bent


def _golden_knee(points: Sequence[LoadPoint], low: float, high: float, parallel: bool) -> StepFit | None:
    """The best fit with a knee in [low, high], by golden-section search on log K."""
    ratio = (math.sqrt(5) - 1) / 2
    a, b = math.log(low), math.log(high)

    def error(log_knee: float) -> float:
        fit = _fit_at(points, math.exp(log_knee), parallel)
        return math.inf if fit is None else fit.rms_relative_error

    c, d = b - ratio * (b - a), a + ratio * (b - a)
    fc, fd = error(c), error(d)
    for _ in range(40):
        if fc <= fd:
            b, d, fd = d, c, fc
            c = b - ratio * (b - a)
            fc = error(c)
        else:
            a, c, fc = c, d, fd
            d = a + ratio * (b - a)
            fd = error(d)
    candidates = [f for f in (_fit_at(points, math.exp(x), parallel) for x in (c, d)) if f is not None]
    return min(candidates, key=lambda f: f.rms_relative_error, default=None)


def expected_tokens_per_step(acceptance_per_position: Sequence[float], k: int) -> float:
    """Tokens a request gains per step at depth k: 1 (the bonus token) + sum over i < k of P(token i accepted).

    `acceptance_per_position[i]` is the share of drafts whose token at position i was accepted (already a
    product of the conditional rates; made non-increasing and clamped to [0, 1] against noise). Depths
    beyond the measured positions extrapolate with the last conditional rate (position n-1 over n-2, or
    position 0 alone): `extrapolated_depths` says which these are. Steps without a draft (an n-gram lookup
    that found none) are not counted: for such drafters this overstates the tokens per step.
    """
    reach, shares = 1.0, []
    for share in acceptance_per_position:
        reach = min(reach, max(0.0, share))
        shares.append(reach)
    if k > len(shares):
        if not shares:
            raise ValueError(f"no acceptance measured: cannot predict tokens per step at k={k}")
        previous = shares[-2] if len(shares) >= 2 else 1.0  # position 0's rate is conditional on nothing
        rate = shares[-1] / previous if previous > 0 else 0.0
        while len(shares) < k:
            shares.append(shares[-1] * rate)
    return 1.0 + sum(shares[:k])


def extrapolated_depths(acceptance_per_position: Sequence[float], ks: Sequence[int]) -> tuple[int, ...]:
    """The depths among `ks` whose tokens per step are extrapolated beyond the measured positions."""
    return tuple(sorted(k for k in set(ks) if k > len(acceptance_per_position)))


def predicted_token_latency(
    fit: StepFit,
    acceptance_per_position: Sequence[float],
    k: int,
    batch: float,
    prefill_tokens_per_output_token: float = 0.0,
) -> float:
    """Predicted mean time per output token at depth k and `batch` running requests: step time / tokens per step.

    The step carries the prompts of the requests that replace the finished ones: `batch` x tokens per step x
    the traffic's prefilled tokens per output token.
    """
    tokens = expected_tokens_per_step(acceptance_per_position, k)
    prefill = batch * tokens * prefill_tokens_per_output_token
    return fit.step_seconds(k, batch, prefill) / tokens


def depth_for_batch(k: int, schedule: Sequence[BatchSizeDepth], batch: int) -> int:
    """The depth vLLM runs a step of `batch` requests at, as `build_dynamic_sd_schedule_lookup` fills its table.

    A batch in a range gets its depth; in a gap or past the last range it keeps the depth of the range
    before it; every depth is capped at k (`num_speculative_tokens`).
    """
    depth = k
    for row in sorted(schedule, key=lambda r: r.start):
        if batch < row.start:
            break
        depth = row.num_tokens
        if batch <= row.end:
            break
    return min(k, depth)


def batch_buckets(max_batch: int) -> tuple[tuple[int, int], ...]:
    """Power-of-two ranges [1, 1], [2, 3], [4, 7], ... up to and including `max_batch`."""
    if max_batch < 1:
        raise ValueError(f"max_batch must be >= 1, got {max_batch}")
    starts = [1 << i for i in range(max_batch.bit_length())]
    ends = [s - 1 for s in starts[1:]] + [max_batch]
    return tuple(zip(starts, ends, strict=True))


@dataclass(frozen=True)
class BucketPrediction:
    """Why a range of batch sizes gets its depth: the predicted per-token latency of every depth tried."""

    start: int
    end: int
    batch: float
    """Where the predictions are made: the geometric middle of start and end."""
    seconds_per_token: tuple[tuple[int, float], ...]
    """(k, predicted per-token latency) for each depth tried."""
    current_k: int
    """The depth the fleet runs at this batch now."""
    current_seconds: float
    """Predicted per-token latency at `current_k`."""
    k: int
    """The depth proposed: the fastest (the smallest within `TIE` of it)."""
    beyond_measured: bool
    """The batch is above every batch level measured: the knee's slope is extrapolated."""

    @property
    def seconds(self) -> float:
        """Predicted per-token latency at the proposed depth."""
        return dict(self.seconds_per_token)[self.k]

    @property
    def gain(self) -> float:
        """Relative per-token latency saved against the current depth (0.2 = 20% faster)."""
        return 1 - self.seconds / self.current_seconds


@dataclass(frozen=True)
class Proposal:
    """A batch-size schedule of the depth, or why there is none."""

    schedule: tuple[BatchSizeDepth, ...] | None
    """Rows for `num_speculative_tokens_per_batch_size`, contiguous from 1 to max_batch (vLLM keeps the last
    depth above it); None: no change is proposed."""
    reason: str
    buckets: tuple[BucketPrediction, ...] = ()
    disable_above: int | None = None
    """The largest batch that still speculates when every larger one is best without speculation (0: none
    should); None when speculation pays at the largest batch. What `disable_by_batch_size` would have said:
    no vLLM release before 0.24 acts on it (module docstring)."""
    fit: StepFit | None = None
    extrapolated_ks: tuple[int, ...] = ()
    """Depths whose tokens per step were extrapolated beyond the measured positions."""

    @property
    def max_k(self) -> int:
        """The deepest depth of the schedule: what `num_speculative_tokens` must be at least (vLLM caps at it)."""
        return max((row.num_tokens for row in self.schedule or ()), default=0)


def _merged(buckets: Sequence[BucketPrediction]) -> tuple[BatchSizeDepth, ...]:
    rows: list[tuple[int, int, int]] = []
    for b in buckets:
        if rows and rows[-1][2] == b.k:
            rows[-1] = (rows[-1][0], b.end, b.k)
        else:
            rows.append((b.start, b.end, b.k))
    return tuple(BatchSizeDepth(start=s, end=e, num_tokens=k) for s, e, k in rows)


def _disable_above(buckets: Sequence[BucketPrediction]) -> int | None:
    if not buckets or buckets[-1].k != 0:
        return None
    first_off = len(buckets)
    while first_off > 0 and buckets[first_off - 1].k == 0:
        first_off -= 1
    return buckets[first_off].start - 1


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.3g} ms"


def _range(start: int, end: int) -> str:
    return str(start) if start == end else f"{start}-{end}"


def propose_schedule(
    points: Sequence[LoadPoint],
    acceptance_per_position: Sequence[float],
    ks: Sequence[int],
    max_batch: int,
    *,
    current_k: int,
    current_schedule: Sequence[BatchSizeDepth] = (),
    margin: float = MARGIN,
    parallel_drafter: bool = False,
    prefill_tokens_per_output_token: float = 0.0,
) -> Proposal:
    """The depth per power-of-two batch bucket up to `max_batch` with the lowest predicted per-token latency.

    `ks` are the depths to choose from (0 = no speculation); `current_k` and `current_schedule` are what the
    fleet serves (`num_speculative_tokens` and its schedule); `prefill_tokens_per_output_token` is the traffic's
    mix, which sets the prompts prefilled per step at each batch. The schedule is proposed only when some bucket's
    depth is predicted more than `margin` faster per token than its current one (then every bucket gets its
    best depth, so re-proposing from the same measurements once it is applied proposes nothing). Without a
    knee in the data nothing is proposed: below it speculation's cost per step does not grow with the batch
    (the KV cache makes the step longer whatever k), so there is nothing to back off from; which k pays at
    low load is an experiment's question.
    """
    if not ks or any(not 0 <= k <= 64 for k in ks):
        raise ValueError(f"ks must be depths in 0..64, got {list(ks)}")
    if not (math.isfinite(prefill_tokens_per_output_token) and prefill_tokens_per_output_token >= 0):
        raise ValueError(f"prefill_tokens_per_output_token must be >= 0, got {prefill_tokens_per_output_token}")
    fit = fit_step_model(points, parallel_drafter=parallel_drafter)
    if isinstance(fit, NoFit):
        return Proposal(schedule=None, reason=fit.reason)
    depths = sorted(set(ks))
    if not acceptance_per_position and any([*depths, current_k]):
        return Proposal(schedule=None, reason="no per-position acceptance measured: tokens per step unknown", fit=fit)
    top_batch = max(p.batch for p in points)
    mix = prefill_tokens_per_output_token
    buckets = []
    for start, end in batch_buckets(max_batch):
        batch = math.sqrt(start * end)
        latencies = tuple((k, predicted_token_latency(fit, acceptance_per_position, k, batch, mix)) for k in depths)
        current = depth_for_batch(current_k, current_schedule, round(batch))
        current_seconds = predicted_token_latency(fit, acceptance_per_position, current, batch, mix)
        fastest = min(seconds for _, seconds in latencies)
        chosen = min(k for k, seconds in latencies if seconds <= fastest * (1 + TIE))
        buckets.append(
            BucketPrediction(start, end, batch, latencies, current, current_seconds, chosen, batch > top_batch)
        )
    shown = Proposal(
        schedule=None,
        reason="",
        buckets=tuple(buckets),
        disable_above=_disable_above(buckets),
        fit=fit,
        extrapolated_ks=extrapolated_depths(acceptance_per_position, [*depths, current_k]),
    )
    if fit.knee_tokens is None:
        return replace(
            shown,
            reason=f"no knee in the load measured (up to {fit.max_tokens_per_pass:.0f} tokens per pass, memory-bound "
            "throughout; telling a knee from KV-cache growth needs two loads past it): speculation's cost does not "
            "grow with the batch there",
        )
    changed = [b for b in buckets if b.gain > margin]
    if not changed:
        return replace(
            shown,
            reason=f"no batch size gains more than {margin:.0%} per token over the depths served now "
            f"(knee at {fit.knee_tokens:.0f} tokens per pass)",
        )
    schedule = _merged(buckets)
    largest = max(changed, key=lambda b: b.gain)
    rows = ", ".join(f"{_range(r.start, r.end)}: k={r.num_tokens}" for r in schedule)
    return replace(
        shown,
        schedule=schedule,
        reason=f"{rows}; at batch {_range(largest.start, largest.end)} k={largest.k} is predicted "
        f"{_ms(largest.seconds)} per token against {_ms(largest.current_seconds)} at k={largest.current_k} "
        f"(knee at {fit.knee_tokens:.0f} tokens per pass)",
    )

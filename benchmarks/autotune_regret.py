"""Benchmark: how close an auto-tune experiment's choice of k comes to the best k, which the oracle knows.

Each draw is a user's situation, drawn at random (seeded): the drafter's per-token acceptance alpha, its
spread over requests and its decay over draft positions, the drafter's cost (the scenario's `draft_cost`),
the load (requests/s per pod) and the GPU (MI300X, MI325X or MI355X), for Llama-3.1-8B with EAGLE-3. For
each draw an experiment runs as the operator runs it, with the API's defaults: every candidate k in turn is
a canary of 1 pod next to the stable pods (the same load per pod), judged by the real judge with the default
guardrails at every analysis interval over the window, and measured by the first passing analysis once
its first step is over (pause and a whole window); a failure, or `onNoData` of inconclusive analyses, marks
it Failed. A candidate with stable's k is not measured (SameAsStable). The evidence includes the mean
per-token latency (the histogram's `_sum` increase over its `_count` increase, as `increase()` reads them), so
the judge's Measurements carry it as the operator's do; as `specfleet.rollout.experiment` does, each measured
candidate's score is its mean per-token latency / stable's and its output tokens/s per pod / stable's (same
window), and `specfleet.autotune.candidates.choose` picks the winner.

The oracle (`specfleet_workshop.sim.oracle`) gives each config's mean per-token latency at the draw's load in closed
form. The figure of merit is the speed-up over no speculation of the config the fleet ends up serving (the
winner, or stable when nothing wins) as a fraction of the best speed-up among the candidates and stable.
"noise-free" applies the same ranking rule to the oracle's latency ratios (throughput ratios all 1: the
load is an arrival rate), to separate what the rule costs from what the measurement noise costs. "old" is
the operator's ranking before it changed (median per-token latency ratios; ties to the highest throughput
ratio, then the smaller k); two more rows change one of the two at a time, to show what each change did.

    python benchmarks/autotune_regret.py                  # 24 draws, the figures in docs/autotune.md
    python benchmarks/autotune_regret.py --draws 4 --no-plot

It starts no cluster and no server, only `--workers` worker processes (as benchmarks/judge_roc.py does).
"""

import argparse
import dataclasses
import json
import multiprocessing
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from specfleet.api.durations import parse_duration
from specfleet.api.spec import (
    DEFAULT_MIN_IMPROVEMENT,
    DEFAULT_NUM_SPECULATIVE_TOKENS,
    DEFAULT_STEPS,
    AnalysisSpec,
    Guardrails,
)
from specfleet.api.status import Measurements, Verdict
from specfleet.autotune.candidates import THROUGHPUT_TIE, TIE, Score, choose
from specfleet.hardware import BY_SHORT_NAME, PRODUCTS
from specfleet.judge import judge
from specfleet.render.argv import FINE_ITL_BUCKETS
from specfleet_workshop.devcluster.process import signals_as_interrupts
from specfleet_workshop.sim.engine import Engine
from specfleet_workshop.sim.oracle import Setup, token_latency

from benchkit import markdown_table
from judge_roc import Snapshot, _worker_started, evidence, snapshot

GOAL = 0.97
BUCKET_ARGS = ("--custom-histogram-buckets", json.dumps({"inter_token_latency": FINE_ITL_BUCKETS}))
"""What the renderer gives every pod: 6%-wide buckets, so per-token latencies are resolved."""


def _seconds(duration: str) -> float:
    return parse_duration(duration).total_seconds()


_ANALYSIS = AnalysisSpec()
_FIRST_PAUSE = DEFAULT_STEPS[0].pause.duration if DEFAULT_STEPS[0].pause else None


@dataclass(frozen=True)
class Experiment:
    """How the operator measures each candidate: the API's defaults, unless a test shortens them."""

    candidates: tuple[int, ...] = (1, 2, 3, 4, 5, 6, 8)
    stable_k: int = DEFAULT_NUM_SPECULATIVE_TOKENS
    """What stable serves (0: no speculation). Default: the depth a spec without numSpeculativeTokens runs."""
    stable_pods: int = 3
    pause: float = _seconds(_FIRST_PAUSE or "0s")
    """The first step's pause; its weight (10%) is 1 candidate pod next to the stable pods."""
    interval: float = _seconds(_ANALYSIS.interval)
    window: float = _seconds(_ANALYSIS.window)
    on_no_data: float = _seconds(_ANALYSIS.on_no_data.after)
    confidence: float = _ANALYSIS.confidence
    guardrails: Guardrails = field(default_factory=Guardrails)
    min_improvement: float = DEFAULT_MIN_IMPROVEMENT
    warmup: float = 120.0
    """Simulated seconds the stable pods serve before the candidate's pod is Ready (and starts empty)."""
    pod_start: float = 120.0
    """A candidate pod's start until Ready (model load, graph capture): counted in the experiment's time only."""


@dataclass(frozen=True)
class Draw:
    """One user's situation, as scenario knobs."""

    index: int
    gpu: str
    acceptance: float
    acceptance_spread: float
    decay: float
    draft_cost: float
    load: float

    def setup(self) -> Setup:
        knobs = {
            "acceptance": self.acceptance,
            "acceptance_spread": self.acceptance_spread,
            "decay": self.decay,
            "draft_cost": self.draft_cost,
            "load": self.load,
        }
        return Setup(gpu=BY_SHORT_NAME[self.gpu], knobs=knobs)


def draws(count: int, seed: int) -> list[Draw]:
    """alpha 0.6-0.9 (the mean over requests, from the default acceptance floor up), spread 0.02-0.2, decay
    0.85-1, draft cost 0.02-0.3 and load 1-40 requests/s per pod (both log-uniform), any of the three GPUs."""
    rng = random.Random(seed)
    return [
        Draw(
            index=i,
            gpu=rng.choice(PRODUCTS).short_name,
            acceptance=round(rng.uniform(0.6, 0.9), 3),
            acceptance_spread=round(rng.uniform(0.02, 0.2), 3),
            decay=round(rng.uniform(0.85, 1.0), 3),
            draft_cost=round(10 ** rng.uniform(-1.7, -0.52), 3),
            load=round(10 ** rng.uniform(0, 1.6), 2),
        )
        for i in range(count)
    ]


@dataclass(frozen=True)
class Measured:
    """One candidate's step: the analysis that decided it, and what it measured (canary and stable)."""

    k: int
    verdict: Verdict
    """PASS: measured; FAIL: a guardrail failed; INCONCLUSIVE: onNoData rolled it back."""
    seconds: float
    """From Ready to the decision."""
    canary: Measurements
    stable: Measurements

    def ratio(self, field_name: str) -> float | None:
        """Canary's measurement / stable's, as `rollout.experiment` divides them; None if either is missing."""
        if self.verdict is not Verdict.PASS:
            return None
        canary, stable = getattr(self.canary, field_name), getattr(self.stable, field_name)
        return canary / stable if canary is not None and stable else None

    @property
    def mean_ratio(self) -> float | None:
        """What the operator ranks by: mean per-token latency / stable's (None: it marks the candidate Failed)."""
        return self.ratio("token_latency_mean_seconds")

    @property
    def p50_ratio(self) -> float | None:
        """What the operator ranked by before: median per-token latency / stable's."""
        return self.ratio("token_latency_p50_seconds")

    @property
    def throughput_ratio(self) -> float | None:
        """Output tokens/s per pod / stable's: the tie-break."""
        return self.ratio("generation_tokens_per_pod_per_second")


def _window_mean(now: tuple[float, float], then: tuple[float, float]) -> float | None:
    """Mean observation between two (sum, count) readings, as `increase(_sum) / increase(_count)`; None (NaN
    in Prometheus, which the operator reads as no value) without observations."""
    count = now[1] - then[1]
    return (now[0] - then[0]) / count if count else None


def _latency_sums(engines: list[Engine]) -> tuple[float, float]:
    """(sum, count) of the per-token latency histogram over a track's pods."""
    return (
        sum(e.metrics.time_per_output_token.total for e in engines),
        sum(e.metrics.time_per_output_token.count for e in engines),
    )


def measure(job: tuple[Draw, int, Experiment, int]) -> Measured:
    """Canary candidate k next to the stable pods, judged every interval until its first step is decided."""
    draw, k, experiment, seed = job
    setup = draw.setup()

    def pod(depth: int, pod_seed: int, start: float) -> Engine:
        args, config = setup.pod(depth, BUCKET_ARGS)
        return Engine(config, args.histogram_buckets, random.Random(pod_seed), start)

    ready = experiment.warmup
    canary = [pod(k, seed, ready)]
    stable = [pod(experiment.stable_k, seed + 1 + i, 0.0) for i in range(experiment.stable_pods)]
    needed = max(experiment.pause, experiment.window)  # a candidate is measured over a whole window

    def read(elapsed: float) -> tuple[Snapshot, Snapshot, tuple[float, float], tuple[float, float]]:
        for engine in (*canary, *stable):
            engine.advance_to(ready + elapsed)
        return (
            snapshot([e.metrics for e in canary]),
            snapshot([e.metrics for e in stable]),
            _latency_sums(canary),
            _latency_sums(stable),
        )

    readings = [read(0.0)]
    look, unjudged = 0, 0.0
    while True:
        look += 1
        elapsed = look * experiment.interval
        readings.append(read(elapsed))
        span = look * experiment.interval  # everything since the candidate was Ready, as the operator reads it
        (c_now, s_now, c_sums, s_sums), (c_then, s_then, c_sums_then, s_sums_then) = readings[look], readings[0]
        canary_evidence = dataclasses.replace(
            evidence(c_now, c_then, span, True), token_latency_mean=_window_mean(c_sums, c_sums_then)
        )
        stable_evidence = dataclasses.replace(
            evidence(s_now, s_then, span, experiment.stable_k > 0), token_latency_mean=_window_mean(s_sums, s_sums_then)
        )
        result = judge(
            experiment.guardrails,
            canary_evidence,
            stable_evidence,
            speculative=True,
            same_drafter=experiment.stable_k
            > 0,  # every candidate is stable's drafter at another k, as the operator says
            confidence=experiment.confidence,
        )
        verdict = result.verdict
        if verdict is Verdict.PASS:
            unjudged = 0.0
        elif verdict is not Verdict.FAIL:
            unjudged += experiment.interval
        if (
            verdict is Verdict.FAIL
            or (verdict is Verdict.PASS and elapsed >= needed)
            or (verdict is not Verdict.PASS and unjudged >= experiment.on_no_data)
        ):
            return Measured(k, verdict, elapsed, result.canary, result.stable)


def oracle(job: tuple[Draw, tuple[int, ...]]) -> dict[int, float]:
    """The oracle's mean per-token latency of each depth at the draw's load."""
    draw, depths = job
    setup = draw.setup()
    return {k: token_latency(setup.config(k)) for k in depths}


@dataclass(frozen=True)
class Outcome:
    """One draw's experiment, next to what the oracle knows."""

    draw: Draw
    latency: dict[int, float]
    """Oracle mean per-token latency by k (0: no speculation)."""
    measured: list[Measured]
    chosen: int | None
    """The winner's k as the operator chooses it (mean ratios, `candidates.choose`), or None: stable stays."""
    old: int | None
    """What the operator chose before (median ratios, `old_choose`)."""
    by_median: int | None
    """What `candidates.choose` chooses on the median ratios: the old statistic with today's tie-break."""
    old_ties: int | None
    """What `old_choose` chooses on the mean ratios: today's statistic with the old tie-break."""
    noise_free: int | None
    """What `candidates.choose` chooses on the oracle's latency ratios (throughput ratios 1: the load is an
    arrival rate), among the candidates the operator measured."""
    stable_k: int

    @property
    def served(self) -> int:
        return self.stable_k if self.chosen is None else self.chosen

    @property
    def best(self) -> int:
        """The oracle's best among the candidates and stable (ties: the smaller k)."""
        return min(sorted(({*self.latency} - {0}) | {self.stable_k}), key=lambda k: self.latency[k])

    def speedup(self, k: int) -> float:
        return self.latency[0] / self.latency[k]

    def fraction(self, k: int | None) -> float:
        """Speed-up of what is served with this choice over the oracle-best speed-up."""
        return self.speedup(self.stable_k if k is None else k) / self.speedup(self.best)


Rule = Callable[[Sequence[Score], float], int | None]


def old_choose(scores: Sequence[Score], min_improvement: float) -> int | None:
    """`candidates.choose` before the ranking changed (`git show 7f2325f^:operator/specfleet/autotune/candidates.py`),
    kept for comparison: ties within `TIE` go to the highest throughput ratio, then to the smallest k."""
    eligible = [s for s in scores if s.token_latency_ratio <= 1 - min_improvement]
    if not eligible:
        return None
    best = min(s.token_latency_ratio for s in eligible)
    tied = [s for s in eligible if s.token_latency_ratio <= best * (1 + TIE)]
    winner = min(tied, key=lambda s: (-(s.throughput_ratio or 0.0), s.k, s.token_latency_ratio, s.index))
    return winner.index


def scores(
    measured: list[Measured],
    ratio: Callable[[Measured], float | None],
    throughput: Callable[[Measured], float | None],
) -> list[Score]:
    """As `rollout.experiment` scores them: every candidate that passed and has a latency ratio (the operator
    marks one without it Failed), by its index in `measured`."""
    return [
        Score(index, value, throughput(m), m.k)
        for index, m in enumerate(measured)
        if m.verdict is Verdict.PASS and (value := ratio(m)) is not None
    ]


def _winner(measured: list[Measured], ranked: list[Score], rule: Rule, min_improvement: float) -> int | None:
    """The k `rule` picks; None: stable stays."""
    winner = rule(ranked, min_improvement)
    return None if winner is None else measured[winner].k


def decide(draw: Draw, latency: dict[int, float], measured: list[Measured], experiment: Experiment) -> Outcome:
    """The operator's choice, the old operator's, each change alone, and today's rule on the oracle's ratios."""

    def oracle_ratio(m: Measured) -> float | None:
        """Among the candidates the operator measured."""
        return None if m.mean_ratio is None else latency[m.k] / latency[experiment.stable_k]

    def throughput(m: Measured) -> float | None:
        return m.throughput_ratio

    margin = experiment.min_improvement
    by_mean = scores(measured, lambda m: m.mean_ratio, throughput)
    by_median = scores(measured, lambda m: m.p50_ratio, throughput)
    return Outcome(
        draw=draw,
        latency=latency,
        measured=measured,
        chosen=_winner(measured, by_mean, choose, margin),
        old=_winner(measured, by_median, old_choose, margin),
        by_median=_winner(measured, by_median, choose, margin),
        old_ties=_winner(measured, by_mean, old_choose, margin),
        noise_free=_winner(measured, scores(measured, oracle_ratio, lambda _: 1.0), choose, margin),
        stable_k=experiment.stable_k,
    )


def run(chosen_draws: list[Draw], experiment: Experiment, workers: int, seed: int) -> list[Outcome]:
    """Every draw's candidates measured and its oracle evaluated, in `workers` processes."""
    measured_ks = [k for k in experiment.candidates if k != experiment.stable_k]
    jobs = [(d, k, experiment, seed * 1_000_000 + d.index * 1000 + k * 10) for d in chosen_draws for k in measured_ks]
    depths = tuple(sorted({0, experiment.stable_k, *experiment.candidates}))
    # Pool, not ProcessPoolExecutor: leaving its `with` terminates and joins the workers, even on Ctrl-C.
    with signals_as_interrupts(), multiprocessing.Pool(workers, initializer=_worker_started) as pool:
        results = pool.map(measure, jobs, chunksize=1)
        latencies = pool.map(oracle, [(d, depths) for d in chosen_draws], chunksize=1)
    per_draw = len(measured_ks)
    return [
        decide(d, latencies[i], results[i * per_draw : (i + 1) * per_draw], experiment)
        for i, d in enumerate(chosen_draws)
    ]


def experiment_seconds(outcome: Outcome, experiment: Experiment, side_by_side: bool = False) -> float:
    """Simulated time of the experiment: each measured candidate's pod start and step, one after another; or
    side by side, the pods starting together and the longest measurement."""
    if side_by_side:
        return experiment.pod_start + max(m.seconds for m in outcome.measured)
    return sum(experiment.pod_start + m.seconds for m in outcome.measured)


def _measured_cell(m: Measured, chosen: int | None) -> str:
    if m.verdict is not Verdict.PASS:
        return f"{m.k}: {'fail' if m.verdict is Verdict.FAIL else 'no data'}"
    ratio = m.mean_ratio
    return f"{m.k}: {ratio:.3f}{'*' if m.k == chosen else ''}" if ratio is not None else f"{m.k}: -"


def _summary(name: str, fractions: list[float]) -> str:
    return (
        f"{name}: median {statistics.median(fractions):.1%}, worst {min(fractions):.1%},"
        f" {sum(f >= GOAL for f in fractions)}/{len(fractions)} draws >= {GOAL:.0%}"
    )


def _bias_by_k(outcomes: list[Outcome], ratio: Callable[[Measured], float | None], stable_k: int) -> str:
    """Per k: mean and sd of (measured ratio / the oracle's mean ratio - 1) over the draws where k passed."""
    errors: dict[int, list[float]] = {}
    for o in outcomes:
        for m in o.measured:
            if (value := ratio(m)) is not None:
                errors.setdefault(m.k, []).append(value / (o.latency[m.k] / o.latency[stable_k]) - 1)
    return ", ".join(
        f"k={k} {statistics.mean(e):+.1%} (sd {statistics.stdev(e) if len(e) > 1 else 0.0:.1%}, n={len(e)})"
        for k, e in sorted(errors.items())
    )


def _ties(outcomes: list[Outcome], ratio: Callable[[Measured], float | None], winner: Callable[[Outcome], int | None],
          min_improvement: float) -> str:  # fmt: skip
    """How often the `TIE` band around the best eligible ratio held several candidates, how often the winner
    was not the smallest k in it (throughput decided), and how often it was the oracle's best of the band."""
    won, banded, deeper, right, losses = 0, 0, 0, 0, []
    for o in outcomes:
        chosen = winner(o)
        if chosen is None:
            continue
        won += 1
        values = {m.k: v for m in o.measured if (v := ratio(m)) is not None and v <= 1 - min_improvement}
        band = [k for k, v in values.items() if v <= min(values.values()) * (1 + TIE)]
        if len(band) > 1:
            banded += 1
            deeper += chosen != min(band)
            truth = min(band, key=lambda k: o.latency[k])
            right += chosen == truth
            losses.append(1 - o.latency[truth] / o.latency[chosen])
    return (
        f"{banded} of {won} draws with a winner had 2+ candidates within {TIE:.0%}; throughput picked a deeper k"
        f" in {deeper}; the oracle's best of the band won in {right}"
        + (f" (loss in the others up to {max(losses):.1%})" if banded > right else "")
    )


def _throughput_noise(outcomes: list[Outcome], split: float = 5.0) -> str:
    """Output tokens/s per pod, candidate / stable - 1, over the measured candidates, below and above `split`
    requests/s per pod: at a fixed arrival rate this is chance (the window's arrivals and lengths), not speed."""
    parts = []
    for name, low in ((f"< {split:g} req/s/pod", True), (f">= {split:g}", False)):
        errors = [
            r - 1
            for o in outcomes
            if (o.draw.load < split) == low
            for m in o.measured
            if m.mean_ratio is not None and (r := m.throughput_ratio) is not None
        ]
        if len(errors) > 1:
            beyond = sum(abs(e) > THROUGHPUT_TIE for e in errors)
            parts.append(
                f"{name}: sd {statistics.stdev(errors):.1%}, {beyond}/{len(errors)} beyond {THROUGHPUT_TIE:.0%}"
                f" (range {min(errors):+.1%} to {max(errors):+.1%})"
            )
    return "; ".join(parts) or "too few measured candidates"


ROWS: dict[str, Callable[[Outcome], int | None]] = {
    "the experiment (mean per-token latency, candidates.choose)": lambda o: o.chosen,
    "old: median, throughput first in ties (the operator before)": lambda o: o.old,
    "mean, throughput first in ties (today's statistic, the old ties)": lambda o: o.old_ties,
    "median, candidates.choose (the old statistic, today's ties)": lambda o: o.by_median,
    "noise-free (candidates.choose on the oracle's ratios)": lambda o: o.noise_free,
}


def report(outcomes: list[Outcome], experiment: Experiment) -> str:
    rows = []
    for o in outcomes:
        d = o.draw
        rows.append(
            [
                str(d.index),
                d.gpu,
                f"{d.acceptance:.2f} / {d.acceptance_spread:.2f} / {d.decay:.2f}",
                f"{d.draft_cost:.3f}",
                f"{d.load:.1f}",
                f"{o.best} (x{o.speedup(o.best):.2f})",
                f"{o.served}{'' if o.chosen is not None else ' (stable)'} (x{o.speedup(o.served):.2f})",
                f"{o.fraction(o.chosen):.1%}",
                f"{o.old or o.stable_k}: {o.fraction(o.old):.1%}",
                f"{o.fraction(o.noise_free):.1%}",
                " ".join(_measured_cell(m, o.chosen) for m in o.measured),
            ]
        )
    headers = ["draw", "GPU", "alpha / spread / decay", "draft cost", "req/s/pod", "oracle best k (speed-up)",
               "served k", "of oracle", "old: k, of oracle", "noise-free",
               "k: mean ratio to stable (* chosen)"]  # fmt: skip
    failed = sum(m.mean_ratio is None for o in outcomes for m in o.measured)
    total = sum(len(o.measured) for o in outcomes)
    times = [experiment_seconds(o, experiment) / 60 for o in outcomes]
    together = [experiment_seconds(o, experiment, side_by_side=True) / 60 for o in outcomes]
    step = max(experiment.pause, experiment.window) / 60
    nominal = len(outcomes[0].measured) * (experiment.pod_start / 60 + step)
    count = len(outcomes)
    margin = experiment.min_improvement
    lines = [markdown_table(headers, rows), ""]
    for name, winner in ROWS.items():
        exact = sum((winner(o) or o.stable_k) == o.best for o in outcomes)
        lines.append(_summary(name, [o.fraction(winner(o)) for o in outcomes]) + f", exact oracle k {exact}/{count}")
    lines[2] += f"; goal: median >= {GOAL:.0%}"
    lines += [
        f"{failed}/{total} candidates failed a guardrail or had no data",
        "ties, the experiment: " + _ties(outcomes, lambda m: m.mean_ratio, lambda o: o.chosen, margin),
        "ties, old: " + _ties(outcomes, lambda m: m.p50_ratio, lambda o: o.old, margin),
        "output tokens/s per pod, candidate / stable - 1: " + _throughput_noise(outcomes),
        "measured mean ratio / oracle mean ratio - 1: "
        + _bias_by_k(outcomes, lambda m: m.mean_ratio, experiment.stable_k),
        "measured p50 ratio / oracle mean ratio - 1: "
        + _bias_by_k(outcomes, lambda m: m.p50_ratio, experiment.stable_k),
        f"experiment time one after another: median {statistics.median(times):.0f} min, longest {max(times):.0f} min"
        f" (nominal {nominal:.0f} min: {len(outcomes[0].measured)} candidates x"
        f" ({experiment.pod_start / 60:.0f} min pod start + {step:.0f} min step)); side by side (replicas"
        f" permitting): median {statistics.median(together):.0f} min, longest {max(together):.0f} min",
    ]
    return "\n".join(lines)


def plot(outcomes: list[Outcome], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = {
        "experiment (mean per-token latency, 5-minute windows)": [o.fraction(o.chosen) for o in outcomes],
        "old: median per-token latency, throughput first in ties": [o.fraction(o.old) for o in outcomes],
        "mean per-token latency, throughput first in ties": [o.fraction(o.old_ties) for o in outcomes],
        "the operator's rule on the oracle's ratios (noise-free)": [o.fraction(o.noise_free) for o in outcomes],
    }
    ranks = range(1, len(outcomes) + 1)
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for (label, fractions), style in zip(series.items(), ("o-", "^-", "v:", "s--"), strict=True):
        ax.plot(ranks, sorted(f * 100 for f in fractions), style, label=label, alpha=0.8)
    ax.axhline(GOAL * 100, color="grey", linestyle=":", linewidth=1, label=f"{GOAL:.0%}")
    ax.set_xlabel("draw, sorted by fraction")
    ax.set_ylabel("speed-up served / oracle-best speed-up (%)")
    lowest = min(min(f) for f in series.values()) * 100
    ax.set_ylim(min(90.0, lowest - 1), 100.5)
    ax.set_title("Auto-tune: the served config against the oracle's best k, per draw")
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--draws", type=int, default=24)
    parser.add_argument("--candidates", default="1,2,3,4,5,6,8", help="candidate depths k, comma-separated")
    parser.add_argument("--stable-k", type=int, default=DEFAULT_NUM_SPECULATIVE_TOKENS, help="0: no speculation")
    parser.add_argument("--stable-pods", type=int, default=3)
    parser.add_argument("--pod-start", type=float, default=120.0, help="seconds from a candidate pod's start to Ready")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--plot", type=Path, default=Path(__file__).parent.parent / "docs" / "autotune-regret.png")
    parser.add_argument("--no-plot", action="store_true")
    args = parser.parse_args()
    experiment = Experiment(
        candidates=tuple(int(k) for k in args.candidates.split(",")),
        stable_k=args.stable_k,
        stable_pods=args.stable_pods,
        pod_start=args.pod_start,
    )
    started = time.monotonic()
    print(f"settings: Llama-3.1-8B + EAGLE-3, candidates k={experiment.candidates}, stable k={experiment.stable_k}"
          f" on {experiment.stable_pods} pods + 1 candidate pod, first step {experiment.pause:.0f}s, analysis every"
          f" {experiment.interval:.0f}s over {experiment.window:.0f}s, default guardrails, minImprovement"
          f" {experiment.min_improvement:.0%}, seed {args.seed}")  # fmt: skip
    outcomes = run(draws(args.draws, args.seed), experiment, args.workers, args.seed)
    print(report(outcomes, experiment))
    if not args.no_plot:
        plot(outcomes, args.plot)
        print(f"\nplot: {args.plot}")
    print(f"\n{args.draws} draws in {time.monotonic() - started:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()

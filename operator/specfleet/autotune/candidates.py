"""An experiment's candidates: the configs they stand for, and which one wins. Pure functions.

The ranking is by the mean per-token latency of each candidate relative to stable over the candidate's
own window: candidates measured one after another see different load, and the ratio to stable in the
same window cancels what the load does to both (as the canary judge compares canary and stable). The
mean, not the median: with acceptance spread over requests a deeper k spreads their latencies, so the
median ratio is biased by k (+4.6% at k=1 to -1.5% at k=8 in benchmarks/autotune_regret.py) and the
mean ratio is not (within 1%, with half the spread).
"""

from collections.abc import Sequence
from dataclasses import dataclass

from specfleet.api.spec import DEFAULT_NUM_SPECULATIVE_TOKENS, SpeculativeDeploymentSpec, SpeculativeMethod
from specfleet.api.status import ExperimentStatus

TIE = 0.01
"""Latency ratios within 1% of the best are a tie, decided by throughput, then by the smaller k."""
THROUGHPUT_TIE = 0.05
"""Output tokens/s per pod decide a tie only when 5% apart: at a fixed arrival rate two pods differ by ~3.4%
over 5 minutes by chance (benchmarks/autotune_regret.py), so a smaller gap would pick a k at random."""


def spec_for_revision(
    spec: SpeculativeDeploymentSpec, experiment: ExperimentStatus | None, revision: str | None
) -> SpeculativeDeploymentSpec:
    """The spec whose serving part renders `revision`: an experiment's candidate (its own revision, or the
    experiment's revision once it is chosen), else the spec itself."""
    if experiment is None or not spec.candidates or revision is None:
        return spec
    if revision == experiment.revision and experiment.chosen is not None:
        return spec.candidate_spec(experiment.chosen)
    for candidate in experiment.candidates:
        if candidate.revision == revision and candidate.index < len(spec.candidates):
            return spec.candidate_spec(candidate.index)
    return spec


def base_spec(spec: SpeculativeDeploymentSpec) -> SpeculativeDeploymentSpec:
    """The spec without its candidates: what a new fleet serves first, before any experiment."""
    return spec.model_copy(update={"auto_tune": None})


def depth(spec: SpeculativeDeploymentSpec) -> int:
    """k of a spec's speculative config; 0 without speculation."""
    speculative = spec.speculative
    if speculative.method is SpeculativeMethod.NONE:
        return 0
    return speculative.num_speculative_tokens or DEFAULT_NUM_SPECULATIVE_TOKENS


@dataclass(frozen=True)
class Score:
    """What ranks one measured candidate that passed every guardrail."""

    index: int
    token_latency_ratio: float
    """Median per-token latency / stable's, same window: lower is better."""
    throughput_ratio: float | None
    """Output tokens/s per pod / stable's, same window: higher is better (unknown ranks last)."""
    k: int


def choose(scores: Sequence[Score], min_improvement: float) -> int | None:
    """The winning candidate's index, or None when none beats stable by `min_improvement`.

    The best latency ratio wins; ratios within `TIE` of it tie, and the tie goes to the smallest k (less
    drafting work for the same speed) unless another tied candidate completes `THROUGHPUT_TIE` more
    output tokens/s per pod (then the highest throughput).
    """
    eligible = [s for s in scores if s.token_latency_ratio <= 1 - min_improvement]
    if not eligible:
        return None
    best = min(s.token_latency_ratio for s in eligible)
    tied = sorted((s for s in eligible if s.token_latency_ratio <= best * (1 + TIE)), key=lambda s: (s.k, s.index))
    smallest = tied[0]
    busiest = max(tied, key=lambda s: s.throughput_ratio or 0.0)
    floor = (smallest.throughput_ratio or 0.0) * (1 + THROUGHPUT_TIE)
    return (busiest if (busiest.throughput_ratio or 0.0) > floor else smallest).index

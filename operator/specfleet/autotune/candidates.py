"""An experiment's candidates: the configs they stand for, and which one wins. Pure functions.

The ranking is by the median per-token latency of each candidate relative to stable over the candidate's
own window: candidates measured one after another see different load, and the ratio to stable in the
same window cancels what the load does to both (as the canary judge compares canary and stable).
"""

from collections.abc import Sequence
from dataclasses import dataclass

from specfleet.api.spec import DEFAULT_NUM_SPECULATIVE_TOKENS, SpeculativeDeploymentSpec, SpeculativeMethod
from specfleet.api.status import ExperimentStatus

TIE = 0.01
"""Latency ratios within 1% of the best are a tie, decided by throughput, then by the smaller k."""


def candidate_spec(spec: SpeculativeDeploymentSpec, index: int) -> SpeculativeDeploymentSpec:
    """The fleet's spec serving candidate `index` (without candidates: what a candidate's pods render)."""
    assert spec.auto_tune is not None
    speculative = spec.auto_tune.candidates[index].applied_to(spec.speculative)
    return spec.model_copy(update={"speculative": speculative, "auto_tune": None})


def spec_for_revision(
    spec: SpeculativeDeploymentSpec, experiment: ExperimentStatus | None, revision: str | None
) -> SpeculativeDeploymentSpec:
    """The spec whose serving part renders `revision`: an experiment's candidate (its own revision, or the
    experiment's revision once it is chosen), else the spec itself."""
    if experiment is None or spec.auto_tune is None or revision is None:
        return spec
    if revision == experiment.revision and experiment.chosen is not None:
        return candidate_spec(spec, experiment.chosen)
    for candidate in experiment.candidates:
        if candidate.revision == revision and candidate.index < len(spec.auto_tune.candidates):
            return candidate_spec(spec, candidate.index)
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

    The best latency ratio wins; ratios within `TIE` of it tie, and the tie goes to the highest
    throughput ratio, then to the smallest k (less drafting work for the same speed).
    """
    eligible = [s for s in scores if s.token_latency_ratio <= 1 - min_improvement]
    if not eligible:
        return None
    best = min(s.token_latency_ratio for s in eligible)
    tied = [s for s in eligible if s.token_latency_ratio <= best * (1 + TIE)]
    winner = min(tied, key=lambda s: (-(s.throughput_ratio or 0.0), s.k, s.token_latency_ratio, s.index))
    return winner.index

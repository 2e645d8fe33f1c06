"""Output equivalence: does the canary answer greedy prompts with stable's token ids? Pure.

Speculative decoding is meant to be lossless: with greedy sampling a speculative engine returns the tokens
the plain model returns. Each prompt sent to both tracks gives a pair: identical, or diverging at the first
position where the token ids differ. The share of identical pairs is a binomial share and is judged as every
guardrail is (two one-sided tests on Wilson bounds that hold at every look).

What the share is a share of: the prompts are sent in turn, round after round, so the pairs are draws from
the fixed prompt set (stratified, which bounds no wider than uniform draws would). A Pass says the canary
answers *these prompts* identically at least `minIdentical` of the time; pick prompts like your traffic.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from specfleet.api.spec import OutputEquivalence
from specfleet.api.status import OutputPairs, Verdict
from specfleet.judge import wording
from specfleet.judge.verdicts import Check, Growth, bounded
from specfleet.stats import wilson_bounds

GUARDRAIL = "outputEquivalence"
KEPT_POSITIONS = 20
"""First-divergence positions kept (the earliest pairs'), enough for a reason; the counts hold the rest."""
SHOWN_POSITIONS = 5


@dataclass(frozen=True)
class Comparison:
    """One prompt's answers from both tracks."""

    identical: bool
    first_divergence: int | None
    """0-based index of the first token id that differs (the shorter answer's length when one is a prefix
    of the other); None when identical."""


def compare(canary: Sequence[int], stable: Sequence[int]) -> Comparison:
    """Token ids of the two answers -> identical, or where they first differ."""
    for position, (mine, theirs) in enumerate(zip(canary, stable, strict=False)):
        if mine != theirs:
            return Comparison(False, position)
    if len(canary) != len(stable):
        return Comparison(False, min(len(canary), len(stable)))
    return Comparison(True, None)


@dataclass(frozen=True)
class PairTally:
    """The pairs compared so far for one canary: counts and the first divergences, never the prompts."""

    pairs: int = 0
    identical: int = 0
    first_divergences: tuple[int, ...] = ()
    """Where the first differing pairs diverged (up to KEPT_POSITIONS of them, in the order found)."""
    seconds: float = 0.0
    """Time over which the pairs were collected: how fast more arrive."""

    @property
    def differed(self) -> int:
        return self.pairs - self.identical

    def add(self, found: Comparison) -> "PairTally":
        positions = self.first_divergences
        if found.first_divergence is not None and len(positions) < KEPT_POSITIONS:
            positions = (*positions, found.first_divergence)
        return replace(
            self, pairs=self.pairs + 1, identical=self.identical + found.identical, first_divergences=positions
        )


def tally(pairs: OutputPairs | None, now: datetime) -> PairTally | None:
    """What status keeps of the pairs, as the judge reads it."""
    if pairs is None:
        return None
    seconds = max(0.0, (now - pairs.since).total_seconds()) if pairs.since is not None else 0.0
    return PairTally(pairs.pairs, pairs.identical, tuple(pairs.first_divergences), seconds)


def _where(counted: PairTally) -> str:
    if not counted.differed:
        return ""
    positions = counted.first_divergences[:SHOWN_POSITIONS]
    if not positions:
        return ""
    shown = ", ".join(str(p) for p in positions)
    more = ", ..." if counted.differed > len(positions) else ""
    first = min(counted.first_divergences)
    return f"; first differences at token {shown}{more} (earliest {first})"


def output_equivalence(
    settings: OutputEquivalence, counted: PairTally | None, z: Callable[[float], float], confidence: str
) -> Check:
    """The share of identical pairs against `minIdentical`: Fail when its upper bound is below, Pass only when
    its lower bound is at or above, and no verdict before `minPairs` pairs."""
    if counted is None or counted.pairs == 0:
        return Check(Verdict.INCONCLUSIVE, f"no prompt pairs compared yet (need {settings.min_pairs})", GUARDRAIL)
    growth = Growth(float(counted.pairs), counted.seconds, "prompt pairs")
    summary = f"{counted.differed} of {counted.pairs} prompt pairs differed{_where(counted)}"
    if counted.pairs < settings.min_pairs:
        needs = growth.more(settings.min_pairs / counted.pairs)
        return Check(
            Verdict.INCONCLUSIVE, f"{summary} (need {settings.min_pairs} pairs: {needs})", GUARDRAIL, needs=needs
        )
    share = counted.identical / counted.pairs

    def bounds(factor: float) -> tuple[float, float]:
        trials = counted.pairs * factor
        return wilson_bounds(counted.identical * factor, trials, z(trials))

    lower, upper = bounds(1.0)
    text = (
        f"{summary}: identical {wording.share(share)} "
        f"({confidence} bounds {wording.share(lower)} to {wording.share(upper)})"
    )
    return bounded(
        GUARDRAIL,
        text,
        estimate=share,
        bounds=bounds,
        limit=settings.min_identical,
        growth=growth,
        show=wording.share,
        ceiling=False,
        word="floor",
    )

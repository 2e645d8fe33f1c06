"""One guardrail's verdict from its bounds: the two one-sided tests every check shares, and what a check that
cannot decide yet still needs.

- Fail: the bound on the good side is past the limit: the canary is surely worse than allowed.
- Pass: the bound on the bad side is within the limit: the evidence *shows* the canary within it.
- Inconclusive: the bounds straddle the limit; the reason says how much more evidence would settle it.
"""

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from specfleet.api.status import GuardrailCheck, Verdict
from specfleet.judge import wording
from specfleet.judge.evidence import rounded

Bounds = Callable[[float], tuple[float, float]]
"""A check's (lower, upper) bounds with its evidence grown by a factor, its estimates unchanged."""
MAX_GROWTH = 1000.0
"""Evidence beyond this many times the current is not projected: an estimate on its limit is said to be so."""
GROWTH_STEP = 1.05
"""What a check still needs is projected in steps of 5% more evidence."""
LOAD_TOLERANCE = 0.25
"""Per-pod request rates of the two tracks within this factor (1.25x) count as comparable load."""


@dataclass(frozen=True)
class Check:
    """One guardrail's verdict, the reason a user reads, and the numbers status records."""

    verdict: Verdict
    message: str
    guardrail: str = ""
    estimate: float | None = None
    lower: float | None = None
    upper: float | None = None
    limit: float | None = None
    needs: str | None = None

    def record(self) -> GuardrailCheck:
        return GuardrailCheck(
            guardrail=self.guardrail,
            verdict=self.verdict,
            estimate=rounded(self.estimate),
            lower=rounded(self.lower),
            upper=rounded(self.upper),
            limit=rounded(self.limit),
            needs=self.needs,
        )


@dataclass(frozen=True)
class Growth:
    """How a check's evidence grows, to say what it still needs: its count now and its rate."""

    count: float
    seconds: float
    unit: str = "canary requests"

    def more(self, factor: float) -> str:
        """`factor` times the evidence now, as what is missing: `~1,900 more canary requests, ~4 min at the
        current rate`."""
        if factor > MAX_GROWTH:
            return f"over {MAX_GROWTH:,.0f}x the {self.unit} so far"
        missing = self.count * (factor - 1)
        text = f"~{wording.about(missing)} more {self.unit}"
        if self.count > 0 and self.seconds > 0:
            text += f", ~{wording.span(missing / (self.count / self.seconds))} at the current rate"
        return text


def settled(lower: float, upper: float, limit: float, *, ceiling: bool) -> bool:
    """Whether bounds decide a limit either way (a ceiling: larger is worse; else a floor)."""
    return (lower > limit or upper <= limit) if ceiling else (upper < limit or lower >= limit)


def still_needs(bounds: Bounds, limit: float, *, ceiling: bool, growth: Growth) -> str:
    """The smallest growth of the evidence (in GROWTH_STEP steps) at which the bounds would settle the check."""
    factor = GROWTH_STEP
    while factor <= MAX_GROWTH:
        if settled(*bounds(factor), limit, ceiling=ceiling):
            return growth.more(factor)
        factor *= GROWTH_STEP
    return "the estimate sits on the limit: more evidence may not settle it"


def bounded(
    guardrail: str,
    text: str,
    *,
    estimate: float,
    bounds: Bounds,
    limit: float,
    growth: Growth,
    show: Callable[[float], str],
    ceiling: bool = True,
    word: str = "limit",
) -> Check:
    """The symmetric verdict of one guardrail (two one-sided tests): Fail when the bound on the good side is
    past the limit, Pass when the bound on the bad side is within it, Inconclusive while they straddle it.
    `ceiling`: larger is worse (else the limit is a floor); `word` names the limit in the reason."""
    lower, upper = bounds(1.0)
    shown = f"{word} {show(limit)}"
    found = Check(Verdict.INCONCLUSIVE, text, guardrail, estimate, lower, upper, limit)
    if ceiling and lower > limit:
        return replace(found, verdict=Verdict.FAIL, message=f"{text}: lower bound > {shown}")
    if not ceiling and upper < limit:
        return replace(found, verdict=Verdict.FAIL, message=f"{text}: upper bound < {show(limit)}")
    if settled(lower, upper, limit, ceiling=ceiling):
        return replace(found, verdict=Verdict.PASS, message=f"{text}, {shown}")
    needs = still_needs(bounds, limit, ceiling=ceiling, growth=growth)
    side = "past" if (estimate > limit if ceiling else estimate < limit) else "within"
    state = "not yet surely" if side == "past" else "not yet shown"
    return replace(found, message=f"{text}: {side} the {shown}, {state} ({needs})", needs=needs)


def relative_bounds(log_ratio: float, standard_error: float, z: Callable[[float], float], samples: float) -> Bounds:
    """Bounds on a canary/stable ratio - 1 from the log ratio's standard error, which falls as 1/sqrt(growth)."""

    def bounds(factor: float) -> tuple[float, float]:
        half = z(samples * factor) * standard_error / math.sqrt(factor)
        return math.expm1(log_ratio - half), math.expm1(log_ratio + half)

    return bounds


def difference_bounds(
    canary: float, canary_bounds: tuple[float, float], stable: float, stable_bounds: tuple[float, float]
) -> tuple[float, float]:
    """Bounds on canary - stable from each one's own bounds (Newcombe's hybrid score interval): each side of
    the difference combines the canary's and stable's distances to their opposite bounds in quadrature."""
    (c_low, c_up), (s_low, s_up) = canary_bounds, stable_bounds
    change = canary - stable
    return change - math.hypot(canary - c_low, s_up - stable), change + math.hypot(c_up - canary, stable - s_low)


def at_load(check: Check, *, load: float | None, lowest: float | None, verb: str, noun: str) -> Check:
    """A canary-vs-stable verdict at unequal per-pod load keeps only what holds despite it, each by the bound of
    the load ratio, never its estimate: a canary whose pods surely `verb` (carried) more of stable's `noun`
    (per-pod load: `lowest`, the ratio's lower bound, past 1.25x) cannot fail, and one passes only where
    `lowest` shows it carried comparable load, 0.8x or more (a lighter canary looks faster: a point estimate
    of 0.85x on 2,500 requests is consistent with 0.77x)."""
    if check.verdict is Verdict.FAIL and load is not None and lowest is not None and lowest > 1 + LOAD_TOLERANCE:
        message = f"{check.message}, but canary pods {verb} {load:.2f}x stable's {noun} (lower bound {lowest:.2f}x)"
        return replace(check, verdict=Verdict.INCONCLUSIVE, message=message)
    comparable = 1 / (1 + LOAD_TOLERANCE)
    if check.verdict is Verdict.PASS and load is not None and (lowest is None or lowest < comparable):
        bound = "no bound" if lowest is None else f"lower bound {lowest:.2f}x"
        message = (
            f"{check.message}, but canary pods {verb} {load:.2f}x stable's {noun} ({bound}): "
            f"not yet shown {comparable:.2f}x or more"
        )
        return replace(check, verdict=Verdict.INCONCLUSIVE, message=message)
    return check

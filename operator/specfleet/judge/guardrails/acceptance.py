"""`minAcceptanceAlpha`: the canary's acceptance alpha (drafts whose first token the target accepted /
drafts) against a floor, on Wilson bounds of drafts as independent trials. With stable's drafter (another
k), a floor both tracks miss is the drafter's, not this change's."""

from dataclasses import replace

from specfleet.api.status import Verdict
from specfleet.judge import wording
from specfleet.judge.guardrail import Guardrail, Look, Reads
from specfleet.judge.verdicts import Bounds, Check, Growth, bounded, difference_bounds, still_needs
from specfleet.metrics import names
from specfleet.stats import wilson_bounds

SAME_DRAFTER_MARGIN = 0.05
"""With stable's drafter (another k), a canary under the acceptance floor passes it when its alpha is shown
within this of stable's: alpha does not depend on k, so the floor both miss is the drafter's."""
NAME = "minAcceptanceAlpha"


def _alpha_bounds(look: Look, alpha: float, trials: float) -> Bounds:
    return lambda factor: wilson_bounds(alpha * trials * factor, trials * factor, look.z(trials * factor))


def _as_stable(look: Look, alpha: float, bounds: Bounds, text: str) -> Check | None:
    """Stable serves the canary's drafter (another k): a floor both tracks miss is the drafter's, not this
    change's. The canary then passes when its alpha is shown within SAME_DRAFTER_MARGIN of stable's, and fails
    only when it is also surely below stable's. None without stable's counters (the floor alone decides)."""
    s, floor = look.stable, look.guardrails.min_acceptance_alpha
    stable_alpha = s.judgeable_alpha(look.guardrails.min_draft_tokens)
    if stable_alpha is None:
        return None
    theirs = _alpha_bounds(look, stable_alpha, s.effective_drafts)

    def difference(factor: float) -> tuple[float, float]:
        return difference_bounds(alpha, bounds(factor), stable_alpha, theirs(factor))

    lowest, highest = difference(1.0)
    said = (
        f"{text}: below the floor {floor:.2f} as stable's with the same drafter ({stable_alpha:.2f}; "
        f"{look.confidence} bounds of the difference {lowest:+.2f} to {highest:+.2f}, "
        f"margin {SAME_DRAFTER_MARGIN:.2f})"
    )
    lower, upper = bounds(1.0)
    found = Check(Verdict.INCONCLUSIVE, said, NAME, alpha, lower, upper, floor)
    if upper < floor and highest < -SAME_DRAFTER_MARGIN:
        return replace(
            found, verdict=Verdict.FAIL, message=f"{text}: upper bound < {floor:.2f}, and surely below stable's"
        )
    if lowest >= -SAME_DRAFTER_MARGIN:
        return replace(found, verdict=Verdict.PASS, message=f"{said}: the drafter, not this change")
    needs = still_needs(difference, -SAME_DRAFTER_MARGIN, ceiling=False, growth=look.growth())
    return replace(found, message=f"{said}, not yet shown within the margin ({needs})", needs=needs)


class Acceptance(Guardrail):
    name = NAME
    field = "min_acceptance_alpha"
    metrics = (names.NUM_DRAFTS, names.DRAFT_TOKENS, names.ACCEPTED_PER_POSITION)
    label = "acceptance alpha"
    reads = Reads.FRACTION
    judged_on = "canary alpha"
    fails_when = "upper bound < floor"
    passes_when = "lower bound >= floor"
    tune_when = "your drafter is known-good at a lower alpha for your traffic (a very cheap drafter)"
    needs_requests = False
    speculative_only = True

    def check(self, look: Look, limit: float) -> Check:
        g, c = look.guardrails, look.canary
        drafted = c.draft_tokens or 0.0
        if drafted < g.min_draft_tokens:
            growth = Growth(drafted, c.seconds, "draft tokens").more(g.min_draft_tokens / drafted) if drafted else None
            needs = f"needs {g.min_draft_tokens}" + (f": {growth}" if growth else "")
            return Check(Verdict.INCONCLUSIVE, f"{drafted:.0f} draft tokens ({needs})", NAME, needs=growth)
        alpha = c.alpha
        if alpha is None:
            return Check(Verdict.INCONCLUSIVE, "no per-position acceptance counters for the canary", NAME)
        if not 0 <= alpha <= 1:  # counters read from different scrapes; never judge on that
            return Check(Verdict.INCONCLUSIVE, f"acceptance counters disagree ({alpha:.2f} of drafts accepted)", NAME)
        bounds = _alpha_bounds(look, alpha, c.effective_drafts)
        lower, upper = bounds(1.0)
        text = f"acceptance alpha {alpha:.2f} ({look.confidence} bounds {lower:.2f}-{upper:.2f})"
        if look.same_drafter and lower < limit and (shared := _as_stable(look, alpha, bounds, text)) is not None:
            return shared
        return bounded(
            NAME,
            text,
            estimate=alpha,
            bounds=bounds,
            limit=limit,
            growth=look.growth(),
            show=wording.alpha,
            ceiling=False,
            word="floor",
        )


GUARDRAIL = Acceptance()

"""What a guardrail is: one definition the judge, the counts, the CLI's table and the docs read.

A guardrail is a module of `judge/guardrails/` with one `Guardrail` in the `GUARDRAILS` registry: the spec
field that sets its limit (its name is the check's name in status), the vLLM metrics its evidence reads, its
statistic and verdict rule (`check`), how its numbers read in `kubectl specfleet status`, and its lines in
the docs. As Argo Rollouts keeps a metric provider behind `metricproviders.Provider`, the judge knows only
this interface. User-defined guardrails (`guardrails.custom`) and output equivalence (`guardrails.
outputEquivalence`) are judged beside the registry: they are lists and prompt pairs, not one limit.
"""

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import ClassVar

from specfleet.api.spec import Guardrails
from specfleet.judge.evidence import TrackEvidence
from specfleet.judge.verdicts import Check, Growth
from specfleet.stats import binomial_sequence_bounds, rate_ratio_bounds, wilson_bounds


@dataclass(frozen=True)
class Look:
    """One look at a canary: the guardrails, both tracks' evidence, and how wide the bounds are."""

    guardrails: Guardrails
    canary: TrackEvidence
    stable: TrackEvidence
    z: Callable[[float], float]
    """How many standard errors a bound lies from its estimate, given the samples it stands on."""
    confidence: str
    """How the bounds are named in reasons, e.g. `99%` (over all looks)."""
    same_drafter: bool = False
    """Stable runs the canary's drafter (another k, say): its acceptance is the baseline, not the canary's doing."""
    budget: float | None = None
    """The per-side error of a bound that holds at every look (a confidence sequence), for the checks built
    on counts (`binomial_sequence_bounds`); None: the bounds are for this look alone, at `z`."""

    def load_ratio(self) -> float | None:
        canary, stable = self.canary.per_pod_load, self.stable.per_pod_load
        return canary / stable if canary is not None and stable else None

    def load_ratio_lower_bound(self) -> float | None:
        """The lower bound of `load_ratio`, the tracks' finished requests read as Poisson counts."""
        load, requests = self.load_ratio(), self.canary.requests
        if load is None or requests <= 0:
            return None
        return rate_ratio_bounds(load, requests, self.stable.requests, self.z(requests))[0]

    def share_bounds(self, successes: float, trials: float, scale: float) -> tuple[float, float]:
        """Bounds of a share of requests (errors) at this look's level: a confidence sequence for Bernoulli
        counts when the look is one of a sequence, else Wilson's bound at `z`. `scale`: the limit judged."""
        if self.budget is not None:
            return binomial_sequence_bounds(successes, trials, self.budget, scale)
        return wilson_bounds(successes, trials, self.z(trials))

    def growth(self) -> Growth:
        """The canary's requests and the time they took: what most checks need more of."""
        return Growth(self.canary.requests, self.canary.seconds)


class Reads(StrEnum):
    """How a check's estimate, bounds and limit read in the CLI's guardrail table."""

    FRACTION = "fraction"
    """A plain number with two decimals (an acceptance alpha)."""
    CHANGE = "change"
    """A relative change against stable (+4.2%)."""
    POINTS = "points"
    """A difference of two shares in percentage points (+0.30 pt)."""
    SHARE = "share"
    """A share of a whole (12.5%)."""
    MILLISECONDS = "milliseconds"
    SECONDS = "seconds"
    """Milliseconds under a second, seconds above."""


class Guardrail(ABC):
    """One built-in guardrail. Subclasses set the class attributes and implement `check`."""

    name: ClassVar[str]
    """The spec field (`spec.rollout.guardrails.<name>`), and the check's name in status and in reasons."""
    field: ClassVar[str]
    """The same field as `Guardrails` spells it in Python: its limit, or None when the guardrail is off."""
    metrics: ClassVar[tuple[str, ...]]
    """The vLLM metrics (`metrics.names`) its evidence is read from."""
    label: ClassVar[str]
    """What the CLI's table calls its estimate."""
    reads: ClassVar[Reads]
    judged_on: ClassVar[str]
    """Its row in docs/judge.md's table of guardrails: what is judged, when it fails, when it passes."""
    fails_when: ClassVar[str] = "lower bound > limit"
    passes_when: ClassVar[str] = "upper bound <= limit"
    tune_when: ClassVar[str]
    """Its row in README.md's "Guardrails and how to tune them"."""
    bounded: ClassVar[bool] = True
    """Whether its verdict stands on a confidence bound, and so takes a share of the false-verdict budget."""
    needs_requests: ClassVar[bool] = True
    """Judged only once the canary has `minRequests` finished requests (else the `minRequests` check says
    what is missing)."""
    speculative_only: ClassVar[bool] = False
    """Judged only when the canary speculates."""

    def limit(self, guardrails: Guardrails) -> float | None:
        """The limit the spec sets, None when this optional guardrail is off."""
        value = getattr(guardrails, self.field)
        return None if value is None else float(value)

    def judged(self, guardrails: Guardrails, speculative: bool) -> bool:
        return self.limit(guardrails) is not None and (speculative or not self.speculative_only)

    @abstractmethod
    def check(self, look: Look, limit: float) -> Check:
        """The verdict on this look's evidence against `limit` (raises ArithmeticError or ValueError when the
        evidence breaks its arithmetic: the judge then says it cannot be computed)."""

    def default(self) -> float | None:
        """The limit when the spec does not set one (None: off)."""
        value = Guardrails.model_fields[self.field].default
        return None if value is None else float(value)

    def judge_row(self) -> str:
        """Its row in docs/judge.md's table of guardrails."""
        default = self.default()
        shown = "optional" if default is None else f"{default:g}"
        return f"| `{self.name}` ({shown}) | {self.judged_on} | {self.fails_when} | {self.passes_when} |"

    def tune_row(self) -> str:
        """Its row in README.md's table of guardrails and how to tune them."""
        default = self.default()
        return f"| `{self.name}` | {'unset' if default is None else f'{default:g}'} | {self.tune_when} |"

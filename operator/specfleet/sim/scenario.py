"""The simulator's scenario document: which (target, drafter) pair behaves how. Pure: text in, models out.

    defaults: {acceptance: 0.7, load: 4}
    pairs:
      - {target: "meta-llama/Llama-3.1-8B*", drafter: "yuhuili/EAGLE3-*", acceptance: 0.8}
      - {target: "*", drafter: ngram, acceptance: 0.5, propose_rate: 0.6}

A pod takes the defaults, overridden by the first pair that matches it. `target` matches the model
argument or the served model name, `drafter` the draft model or the speculative method (so ngram, suffix
and mtp drafters are matched by method), `none` when the pod does not speculate. Globs are fnmatch
patterns, compared case-insensitively.
"""

from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Annotated, Any, Self

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

NO_DRAFTER = "none"

Fraction = Annotated[float, Field(ge=0.0, le=1.0)]
Positive = Annotated[float, Field(gt=0.0)]


class ScenarioError(ValueError):
    """The scenario document is not valid; the message names every bad field (`pairs[1].acceptance: ...`)."""


class Knobs(BaseModel):
    """What a scenario can set per pair; unset knobs come from `defaults`."""

    model_config = ConfigDict(extra="forbid")

    acceptance: Fraction | None = None
    """Per-token acceptance a of draft position 0, given nothing before it was rejected (the papers' alpha)."""
    acceptance_rate: Fraction | None = None
    """Alternative to `acceptance`: the accepted / drafted ratio vLLM's counters should show at the pod's k."""
    decay: Annotated[float, Field(gt=0.0, le=1.0)] | None = None
    """Position i is accepted with acceptance x decay^i."""
    propose_rate: Fraction | None = None
    """Share of decode steps in which a request gets a draft at all (n-gram lookups often find none)."""
    draft_cost: Annotated[float, Field(ge=0.0)] | None = None
    """One drafter pass / one target decode pass; default from the sizes or the method."""
    target_size_gib: Positive | None = None
    """Target weights, when the model name does not say (`70B`) or is quantized in a way we cannot see."""
    drafter_size_gib: Positive | None = None
    load: Annotated[float, Field(ge=0.0)] | None = None
    """Offered load: request arrivals per second per pod (Poisson)."""
    prompt_tokens: Annotated[int, Field(ge=1)] | None = None
    """Mean prompt length (log-normal)."""
    output_tokens: Annotated[int, Field(ge=1)] | None = None
    """Mean output length (log-normal; requests reaching 4x the mean end with finished_reason=length)."""
    error_rate: Fraction | None = None
    """Share of requests that end with finished_reason=error part-way through."""
    abort_rate: Fraction | None = None
    """Share of requests the client aborts part-way through (finished_reason=abort)."""
    noise: Annotated[float, Field(ge=0.0, le=2.0)] | None = None
    """Sigma of the log-normal noise on every step time."""
    knee_tokens: Positive | None = None
    """Tokens per forward pass where decode turns compute-bound."""
    bandwidth_efficiency: Annotated[float, Field(gt=0.0, le=1.0)] | None = None
    """Share of the data-sheet HBM bandwidth a decode pass achieves."""
    step_overhead_ms: Annotated[float, Field(ge=0.0)] | None = None
    """Fixed cost of every engine step (scheduling, sampling, launches)."""

    @model_validator(mode="after")
    def _one_acceptance(self) -> Self:
        if self.acceptance is not None and self.acceptance_rate is not None:
            raise ValueError("set either acceptance or acceptance_rate, not both")
        return self


class Defaults(Knobs):
    """Values for every knob a matching pair leaves unset."""

    acceptance: Fraction | None = 0.7
    decay: Annotated[float, Field(gt=0.0, le=1.0)] | None = 1.0
    propose_rate: Fraction | None = 1.0
    load: Annotated[float, Field(ge=0.0)] | None = 4.0
    prompt_tokens: Annotated[int, Field(ge=1)] | None = 512
    output_tokens: Annotated[int, Field(ge=1)] | None = 256
    error_rate: Fraction | None = 0.0
    abort_rate: Fraction | None = 0.0
    noise: Annotated[float, Field(ge=0.0, le=2.0)] | None = 0.05
    knee_tokens: Positive | None = 192.0
    bandwidth_efficiency: Annotated[float, Field(gt=0.0, le=1.0)] | None = 0.7
    step_overhead_ms: Annotated[float, Field(ge=0.0)] | None = 1.0

    @model_validator(mode="before")
    @classmethod
    def _acceptance_rate_replaces_acceptance(cls, data: Any) -> Any:
        """`defaults: {acceptance_rate: 0.6}` must not clash with the built-in default acceptance."""
        if isinstance(data, dict) and data.get("acceptance_rate") is not None and "acceptance" not in data:
            return {**data, "acceptance": None}
        return data


class Pair(Knobs):
    """One entry of `pairs`: which pods it matches, and the knobs it sets for them."""

    target: str = Field(min_length=1)
    """fnmatch glob on the model argument or the served model name."""
    drafter: str = Field(default="*", min_length=1)
    """fnmatch glob on the draft model or the speculative method; `none` matches pods that do not speculate."""
    track: str | None = Field(default=None, pattern="^(stable|canary)$")
    """Only pods of this track (label specfleet.io/track), e.g. to make the canary of an A/A pair differ."""


class Scenario(BaseModel):
    """The whole document; replaced as a unit at run time."""

    model_config = ConfigDict(extra="forbid")

    defaults: Defaults = Field(default_factory=Defaults)
    pairs: list[Pair] = Field(default_factory=list)


@dataclass(frozen=True)
class PodIdentity:
    """What a scenario matches on, read from a pod."""

    model: str
    served_model_name: str
    drafter_model: str | None
    method: str | None
    """None when the pod has no speculative config."""
    track: str | None


@dataclass(frozen=True)
class Params:
    """Every knob, resolved for one pod. `acceptance` xor `acceptance_rate` is set."""

    matched: int | None
    """Index of the pair that matched, None for the defaults alone."""
    acceptance: float | None
    acceptance_rate: float | None
    decay: float
    propose_rate: float
    draft_cost: float | None
    target_size_gib: float | None
    drafter_size_gib: float | None
    load: float
    prompt_tokens: int
    output_tokens: int
    error_rate: float
    abort_rate: float
    noise: float
    knee_tokens: float
    bandwidth_efficiency: float
    step_overhead_ms: float


def _glob(pattern: str, *names: str | None) -> bool:
    return any(name is not None and fnmatchcase(name.lower(), pattern.lower()) for name in names)


def matches(pair: Pair, pod: PodIdentity) -> bool:
    """Whether `pair` applies to `pod` (see the module docstring for the rules)."""
    drafter_names = (NO_DRAFTER,) if pod.method is None else (pod.drafter_model, pod.method)
    return (
        _glob(pair.target, pod.model, pod.served_model_name)
        and _glob(pair.drafter, *drafter_names)
        and (pair.track is None or pair.track == pod.track)
    )


def resolve(scenario: Scenario, pod: PodIdentity) -> Params:
    """The defaults, overridden by the knobs the first matching pair sets."""
    values = scenario.defaults.model_dump()
    matched = next((index for index, pair in enumerate(scenario.pairs) if matches(pair, pod)), None)
    if matched is not None:
        pair = scenario.pairs[matched]
        overrides = pair.model_dump(include=set(Knobs.model_fields), exclude_none=True)
        if "acceptance" in overrides or "acceptance_rate" in overrides:
            values["acceptance"] = values["acceptance_rate"] = None
        values.update(overrides)
    return Params(matched=matched, **values)


def _location(loc: tuple[int | str, ...]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else f".{part}" if text else str(part)
    return text or "document"


def parse_scenario(data: Any) -> Scenario:
    """Validate a parsed document; raise ScenarioError naming each bad field."""
    if data is None:
        data = {}
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as error:
        lines = []
        for item in error.errors():
            message = item["msg"].removeprefix("Value error, ")
            if item["type"] == "extra_forbidden":
                message = "unknown field"
            lines.append(f"{_location(tuple(item['loc']))}: {message}")
        raise ScenarioError("; ".join(lines)) from None
    defaults = scenario.defaults
    effective = [("defaults", defaults.error_rate, defaults.abort_rate)] + [
        (
            f"pairs[{index}]",
            defaults.error_rate if pair.error_rate is None else pair.error_rate,
            defaults.abort_rate if pair.abort_rate is None else pair.abort_rate,
        )
        for index, pair in enumerate(scenario.pairs)
    ]
    for where, error_rate, abort_rate in effective:
        if (error_rate or 0.0) + (abort_rate or 0.0) > 1:
            raise ScenarioError(f"{where}: error_rate + abort_rate is more than 1 (with the defaults)")
    return scenario


def load_scenario(text: str) -> Scenario:
    """Parse YAML (or JSON, which is YAML) scenario text."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ScenarioError(f"document: not valid YAML: {error}") from None
    return parse_scenario(data)


def dump_scenario(scenario: Scenario) -> str:
    """The document as YAML, with only what was set or defaulted (no nulls)."""
    return yaml.safe_dump(scenario.model_dump(mode="json", exclude_none=True), sort_keys=False)

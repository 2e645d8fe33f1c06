"""The simulator's scenario document: which (target, drafter) pair behaves how. Pure: text in, models out.

    defaults: {acceptance: 0.7, load: 4}
    pairs:
      - {target: "meta-llama/Llama-3.1-8B*", drafter: "yuhuili/EAGLE3-*", acceptance: 0.8}
      - {target: "*", drafter: ngram, acceptance: 0.5, propose_rate: 0.6}
    scrape_faults:
      - {pod: "shop/llama-canary-*", answer: error}

A scenario states what a user's drafter has (its per-token acceptance, the spread of that across
requests, its cost) and the load; never the number Prometheus should show, which the simulation yields.
`scrape_faults` are the one exception, and they leave the simulation alone: a matching pod's engine runs
on, but its /metrics answers an HTTP 500 (`error`) or a 200 whose body is not the exposition format
(`garbage`), as a broken exporter or a proxy's error page would, so Prometheus records a failed scrape.

`gateway` streams offer a fleet-level load to an HTTPRoute instead: the stand-in gateway (`sim.gateway`)
routes each request by the route's weights, header matches and RequestMirror filters, as a Gateway API
implementation would, and the fleets behind the route get no per-pod `load` of their own:

    gateway:
      - {route: shop/llm, load: 20}
      - {route: shop/llm, load: 1, headers: {x-canary: "yes"}}

A pod takes the defaults, overridden by the first pair that matches it. `target` matches the model
argument or the served model name, `drafter` the draft model or the speculative method (so ngram, suffix
and mtp drafters are matched by method), `none` when the pod does not speculate. Globs are fnmatch
patterns, compared case-insensitively.
"""

from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from specfleet_workshop.fleetpods.pods import PodIdentity
from specfleet_workshop.sim import model

NO_DRAFTER = "none"

Fraction = Annotated[float, Field(ge=0.0, le=1.0)]
Positive = Annotated[float, Field(gt=0.0)]
Spread = Annotated[float, Field(ge=0.0, lt=0.5)]
"""A standard deviation of values in [0, 1]: below 1/2, and below sqrt(mean (1 - mean)) for a given mean."""


class ScenarioError(ValueError):
    """The scenario document is not valid; the message names every bad field (`pairs[1].acceptance: ...`)."""


class Knobs(BaseModel):
    """What a scenario can set per pair; unset knobs come from `defaults`."""

    model_config = ConfigDict(extra="forbid")

    acceptance: Fraction | None = None
    """Mean per-token acceptance a of draft position 0 over requests (the papers' alpha)."""
    acceptance_spread: Spread | None = None
    """Standard deviation of the per-request acceptance (Beta distributed): prompts differ; 0 = all alike."""
    decay: Annotated[float, Field(gt=0.0, le=1.0)] | None = None
    """Position i of a request with acceptance a_r is accepted with a_r x decay^i."""
    propose_rate: Fraction | None = None
    """Share of decode steps in which a request gets a draft at all (n-gram lookups often find none)."""
    suffix_draft_tokens: Annotated[float, Field(ge=1.0)] | None = None
    """Suffix decoding only: mean tokens a suffix-tree match proposes (geometric, capped at k)."""
    draft_cost: Annotated[float, Field(ge=0.0)] | None = None
    """One drafter pass / one target decode pass; default from the sizes or the method."""
    draft_pass_overhead_ms: Annotated[float, Field(ge=0.0)] | None = None
    """Fixed cost of each drafter pass besides its weights (launches, the drafter's sampling); 0 for lookups."""
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
    tool_calls_parsed: Fraction | None = None
    """Share of tool calls whose output parses, for an application's own metric (a drafter can change what
    the model writes under a looser sampler or a bug): when set, every finished request makes one tool call
    and the pod also exports `tool_calls_total` and `tool_calls_parsed_total`. Unset: neither is exported."""
    noise: Annotated[float, Field(ge=0.0, le=2.0)] | None = None
    """Sigma of the log-normal noise on every step time."""
    knee_tokens: Positive | None = None
    """Tokens per forward pass where decode turns compute-bound."""
    bandwidth_efficiency: Annotated[float, Field(gt=0.0, le=1.0)] | None = None
    """Share of the data-sheet HBM bandwidth a decode pass achieves."""
    step_overhead_ms: Annotated[float, Field(ge=0.0)] | None = None
    """Fixed cost of every engine step (scheduling, sampling, launches)."""
    divergence: Fraction | None = None
    """Share of prompts whose greedy answer (token ids, asked with `return_token_ids`) differs from the plain
    model's, from a position part-way through: a lossy pair, wrong on purpose. Which prompts, and where, is
    fixed by the prompt and the request's seed, so identical configs agree. 0: speculation is lossless."""

    @model_validator(mode="before")
    @classmethod
    def _no_acceptance_rate(cls, data: Any) -> Any:
        """The removed `acceptance_rate` knob gets a message saying what to state instead."""
        if isinstance(data, dict) and "acceptance_rate" in data:
            raise ValueError(
                "acceptance_rate is not a knob: state the drafter's per-token acceptance (alpha) as `acceptance`;"
                " the accepted/drafted ratio vLLM shows follows from it, k and the load"
            )
        return data


class Defaults(Knobs):
    """Values for every knob a matching pair leaves unset."""

    acceptance: Fraction | None = 0.7
    acceptance_spread: Spread | None = 0.1
    decay: Annotated[float, Field(gt=0.0, le=1.0)] | None = 1.0
    propose_rate: Fraction | None = 1.0
    suffix_draft_tokens: Annotated[float, Field(ge=1.0)] | None = 6.0
    draft_pass_overhead_ms: Annotated[float, Field(ge=0.0)] | None = 0.2
    load: Annotated[float, Field(ge=0.0)] | None = 4.0
    prompt_tokens: Annotated[int, Field(ge=1)] | None = 512
    output_tokens: Annotated[int, Field(ge=1)] | None = 256
    error_rate: Fraction | None = 0.0
    abort_rate: Fraction | None = 0.0
    noise: Annotated[float, Field(ge=0.0, le=2.0)] | None = 0.05
    knee_tokens: Positive | None = 192.0
    bandwidth_efficiency: Annotated[float, Field(gt=0.0, le=1.0)] | None = 0.7
    step_overhead_ms: Annotated[float, Field(ge=0.0)] | None = 1.0
    divergence: Fraction | None = 0.0


class Pair(Knobs):
    """One entry of `pairs`: which pods it matches, and the knobs it sets for them."""

    target: str = Field(min_length=1)
    """fnmatch glob on the model argument or the served model name."""
    drafter: str = Field(default="*", min_length=1)
    """fnmatch glob on the draft model or the speculative method; `none` matches pods that do not speculate."""
    track: str | None = Field(default=None, pattern="^(stable|canary|holdback)$")
    """Only pods of this track (label specfleet.io/track), e.g. to make the canary of an A/A pair differ."""


ScrapeAnswer = Literal["error", "garbage"]


class ScrapeFault(BaseModel):
    """Pods whose /metrics endpoint is broken: their scrapes fail while their engines run on."""

    model_config = ConfigDict(extra="forbid")

    pod: str = Field(min_length=1)
    """fnmatch glob on `namespace/name` of the pod."""
    answer: ScrapeAnswer
    """`error`: HTTP 500; `garbage`: HTTP 200 with a body that is not the Prometheus exposition format."""


class GatewayStream(BaseModel):
    """Requests offered to an HTTPRoute through the stand-in gateway (`sim.gateway`), not to pods one by one."""

    model_config = ConfigDict(extra="forbid")

    route: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?/[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
    """The HTTPRoute, `namespace/name`."""
    load: Positive
    """Request arrivals per second at the gateway, for the whole route (Poisson)."""
    headers: dict[str, str] = Field(default_factory=dict)
    """Headers every request of this stream carries (a rule matching them takes it)."""


class Scenario(BaseModel):
    """The whole document; replaced as a unit at run time."""

    model_config = ConfigDict(extra="forbid")

    defaults: Defaults = Field(default_factory=Defaults)
    pairs: list[Pair] = Field(default_factory=list)
    scrape_faults: list[ScrapeFault] = Field(default_factory=list)
    gateway: list[GatewayStream] = Field(default_factory=list)
    """Fleet-level load through the stand-in gateway; the pods of a fleet its routes send to get no `load`
    of their own (every request they see came through a route)."""


def scrape_fault(scenario: Scenario, namespace: str, pod: str) -> ScrapeAnswer | None:
    """How the first fault matching `namespace/pod` breaks its scrape; None when its /metrics works."""
    return next((f.answer for f in scenario.scrape_faults if _glob(f.pod, f"{namespace}/{pod}")), None)


@dataclass(frozen=True)
class Params:
    """Every knob, resolved for one pod."""

    matched: int | None
    """Index of the pair that matched, None for the defaults alone."""
    acceptance: float
    acceptance_spread: float
    decay: float
    propose_rate: float
    suffix_draft_tokens: float
    draft_cost: float | None
    draft_pass_overhead_ms: float
    target_size_gib: float | None
    drafter_size_gib: float | None
    load: float
    prompt_tokens: int
    output_tokens: int
    error_rate: float
    abort_rate: float
    tool_calls_parsed: float | None
    noise: float
    knee_tokens: float
    bandwidth_efficiency: float
    step_overhead_ms: float
    divergence: float


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
        values.update(pair.model_dump(include=set(Knobs.model_fields), exclude_none=True))
    return Params(matched=matched, **values)


def _location(loc: tuple[int | str, ...]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else f".{part}" if text else str(part)
    return text or "document"


def _check_combined(where: str, defaults: Defaults, knobs: Knobs) -> None:
    """Checks of knobs that only make sense together, on the values a pod matching `knobs` would get."""

    def value(name: str) -> float:
        own = getattr(knobs, name)
        return getattr(defaults, name) if own is None else own

    if value("error_rate") + value("abort_rate") > 1:
        raise ScenarioError(f"{where}: error_rate + abort_rate is more than 1 (with the defaults)")
    acceptance, spread = value("acceptance"), value("acceptance_spread")
    if spread > 0 and spread >= model.spread_limit(acceptance):
        raise ScenarioError(
            f"{where}.acceptance_spread: {spread} is too wide for acceptance {acceptance} (with the defaults): "
            f"requests' acceptance stays within [0, 1] only if acceptance_spread^2 < acceptance x (1 - acceptance),"
            f" i.e. acceptance_spread < {model.spread_limit(acceptance):.4g}; 0 makes every request alike"
        )


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
    for where, knobs in [("defaults", scenario.defaults)] + [
        (f"pairs[{index}]", pair) for index, pair in enumerate(scenario.pairs)
    ]:
        _check_combined(where, scenario.defaults, knobs)
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

"""User-defined guardrails (`rollout.guardrails.custom`): the user's own counters and histograms, judged
with the same statistics as the built-in error rate and per-token latency.

A custom guardrail names metrics, never PromQL: the operator writes the query, adding the track's own
label matchers (namespace, fleet, track, revision, as for vLLM's series) and the guardrail's
`matchLabels` as equality matchers with escaped values. So a guardrail reads only its track's pods and
cannot change what the built-in guardrails read.

Only counters and histograms can be judged: their increase over the evidence range is a count of events
(or of observations per bucket) on which a confidence bound can be put. A gauge's instant value is a
level, not a sample: no bound can be put on it, so names that look like a gauge are refused.
"""

from typing import Annotated

from pydantic import Field

from specfleet.api.base import ApiModel, Rule
from specfleet.api.vocabulary import LABEL_NAME, LABEL_REVISION, LABEL_TRACK

METRIC_NAME_PATTERN = r"^[a-zA-Z_:][a-zA-Z0-9_:]*$"
"""Prometheus' metric name syntax (`vllm:` prefixes included)."""
LABEL_NAME_PATTERN = r"^[a-zA-Z_][a-zA-Z0-9_]*$"
MAX_CUSTOM_GUARDRAILS = 16
NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
MAX_NAME_LENGTH = 48
"""So that `custom:<name>`, the check's name in status, stays within its 64 characters."""
CHECK_PREFIX = "custom:"
"""A custom guardrail's check is named `custom:<name>` in the verdict, status and metrics."""
TRACK_LABELS = (
    "namespace",
    *("".join(c if c.isalnum() else "_" for c in label) for label in (LABEL_NAME, LABEL_TRACK, LABEL_REVISION)),
)
"""Labels the operator sets from the track (as `metrics.names` spells them; the API sits below it):
`matchLabels` must not set them, they would read another track."""
RESERVED_LABELS = (*TRACK_LABELS, "le")
NOT_A_HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count", "_total", "_created", "_info", "_ratio", "_perc", "_percent")
"""A histogram is named by its base name: the series suffixes, a counter's `_total` and gauge-like endings
are refused."""

MetricName = Annotated[str, Field(min_length=1, max_length=200, pattern=METRIC_NAME_PATTERN)]
LabelName = Annotated[str, Field(min_length=1, max_length=100, pattern=LABEL_NAME_PATTERN)]
LabelValue = Annotated[str, Field(max_length=253)]


def _suffix_regex(suffixes: tuple[str, ...]) -> str:
    return "(" + "|".join(s.removeprefix("_") for s in suffixes) + ")$"


_HISTOGRAM_SUFFIX_RE = "_" + _suffix_regex(NOT_A_HISTOGRAM_SUFFIXES)


class RateGuardrail(ApiModel):
    """A share of events: `events` / `total`, both counters, judged canary against stable as the built-in
    error rate is (Wilson bounds on each share, Newcombe's bounds on their difference)."""

    events: MetricName
    """The counter of the events whose share is judged, e.g. `tool_calls_parsed_total`: its increase over
    the evidence range, summed over the track's pods."""
    total: MetricName
    """The counter of all events, e.g. `tool_calls_total`; `events` counts a subset of them."""
    higher_is_better: bool = True
    """True when `events` are good (tool calls that parsed), false when they are bad (tool calls that failed)."""
    max_worsening: Annotated[float, Field(ge=0, le=1)]
    """Largest change of the canary's share against stable's in the bad direction, in points of the share
    (0.01 = one percentage point): a fall when higherIsBetter, a rise otherwise."""

    rules = (
        Rule(
            cel="self.events.endsWith('_total')",
            message="events must be a counter, named with the suffix _total: a gauge's instant value cannot be bounded",
            holds=lambda m: m.events.endswith("_total"),
            field_path=".events",
        ),
        Rule(
            cel="self.total.endsWith('_total')",
            message="total must be a counter, named with the suffix _total: a gauge's instant value cannot be bounded",
            holds=lambda m: m.total.endswith("_total"),
            field_path=".total",
        ),
        Rule(
            cel="self.events != self.total",
            message="events and total must be different counters (their share would always be 1)",
            holds=lambda m: m.events != m.total,
            field_path=".events",
        ),
    )


class LatencyGuardrail(ApiModel):
    """A quantile of a histogram, canary against stable, judged as the built-in per-token p95 is (the
    quantile's bounds from the buckets, on the log of the canary/stable ratio)."""

    histogram: MetricName
    """The histogram's base name, e.g. `tool_call_duration_seconds` (the operator reads its `_bucket`
    series). Observations in seconds are shown as times; in any other unit as plain numbers."""
    quantile: Annotated[float, Field(gt=0, lt=1)] = 0.95
    """The quantile compared (0.95 = the p95): strictly between 0 and 1."""
    max_regression: Annotated[float, Field(ge=0, le=10)]
    """Largest relative increase of the canary's quantile over stable's (0.1 = 10% higher)."""

    rules = (
        Rule(
            cel=f"!self.histogram.matches('{_HISTOGRAM_SUFFIX_RE}')",
            message="histogram must be a histogram's base name, without "
            + ", ".join(NOT_A_HISTOGRAM_SUFFIXES)
            + " (series suffixes, counters and gauge-like names: a gauge's instant value cannot be bounded)",
            holds=lambda m: not m.histogram.endswith(NOT_A_HISTOGRAM_SUFFIXES),
            field_path=".histogram",
        ),
    )


class CustomGuardrail(ApiModel):
    """One user-defined guardrail: a `rate` or a `latency`, judged every analysis beside the built-in ones
    (check `custom:<name>`), with the same Pass/Fail/Inconclusive rules and confidence."""

    name: Annotated[str, Field(min_length=1, max_length=MAX_NAME_LENGTH, pattern=NAME_PATTERN)]
    """Unique among the custom guardrails; the check is named `custom:<name>` in status and metrics."""
    rate: RateGuardrail | None = None
    """A share of events between two counters; exactly one of rate and latency."""
    latency: LatencyGuardrail | None = None
    """A quantile of a histogram; exactly one of rate and latency."""
    match_labels: Annotated[dict[LabelName, LabelValue], Field(max_length=8)] = {}
    """Extra label equalities on the metrics (e.g. `{tool: search}`), added to the track's own matchers.
    The track's labels (namespace, specfleet_io_name, specfleet_io_track, specfleet_io_revision), `le` and
    labels starting with `__` cannot be set."""
    min_events: Annotated[int, Field(ge=1, le=1_000_000_000)] = 100
    """Events (`total`'s increase, or the histogram's observations) each track needs before it is judged."""

    rules = (
        Rule(
            cel="has(self.rate) != has(self.latency)",
            message="exactly one of rate and latency must be set",
            holds=lambda m: (m.rate is None) != (m.latency is None),
            field_path=".rate",
        ),
        Rule(
            cel="!has(self.matchLabels) || self.matchLabels.all(k, !(k in ["
            + ", ".join(f"'{label}'" for label in RESERVED_LABELS)
            + "]) && !k.startsWith('__'))",
            message="matchLabels must not set " + ", ".join(RESERVED_LABELS) + " or __*: the operator sets the "
            "track's labels",
            holds=lambda m: not [k for k in m.match_labels if k in RESERVED_LABELS or k.startswith("__")],
            field_path=".matchLabels",
        ),
    )

    @property
    def check_name(self) -> str:
        return CHECK_PREFIX + self.name


CUSTOM_RULE = Rule(
    cel="!has(self.custom) || self.custom.all(a, self.custom.exists_one(b, b.name == a.name))",
    message="custom guardrail names must be unique",
    holds=lambda m: len({c.name for c in m.custom}) == len(m.custom),
    field_path=".custom",
)
"""The rule `Guardrails` carries for its `custom` list."""

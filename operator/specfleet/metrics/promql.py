"""PromQL for judging one track of a SpeculativeDeployment. Pure string building; label values escaped.

The judge needs counts, not ratios: the increase over the evidence range of each counter and of each
histogram bucket (`sum by (le)`), so it can put confidence bounds on them and compare two tracks on the
bucket bounds they share. Each series is counted on its own, between its samples (`counted`), so a pod
that came or went inside the range adds what it served there and nothing else. Ratios shown on dashboards
follow vLLM's own speculative-decoding dashboard.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from specfleet.api.custom_guardrails import CustomGuardrail
from specfleet.metrics import names


def escape(value: str) -> str:
    """A PromQL string literal body: backslashes, quotes and newlines escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


@dataclass(frozen=True)
class TrackSelector:
    """The pods of one track at one revision."""

    namespace: str
    name: str
    track: str
    revision: str

    def matchers(self) -> str:
        pairs = {
            names.NAMESPACE: self.namespace,
            names.SDEP: self.name,
            names.TRACK: self.track,
            names.REVISION: self.revision,
        }
        return "{" + ",".join(f'{k}="{escape(v)}"' for k, v in pairs.items()) + "}"

    def matchers_with(self, labels: Mapping[str, str]) -> str:
        """The track's matchers, then `labels` as equalities (a custom guardrail's `matchLabels`; the API
        refuses the track's own labels there, and a value is always a quoted, escaped string)."""
        extra = "".join(f',{k}="{escape(v)}"' for k, v in sorted(labels.items()))
        return self.matchers()[:-1] + extra + "}"


def seconds(value: float) -> str:
    """A PromQL range of whole seconds, at least one."""
    return f"{max(1, round(value))}s"


@dataclass(frozen=True)
class Range:
    """Evidence over the `length` before the evaluation time, its counters read `step` apart (both PromQL
    durations: `seconds`)."""

    length: str
    step: str

    @property
    def step_seconds(self) -> int:
        """The step in seconds (`seconds` writes whole seconds)."""
        return int(self.step.removesuffix("s"))


def counted(series: str, r: Range) -> str:
    """Each series' increase over the range, counted between its own samples `r.step` apart: a series that
    starts inside the range counts from its first sample, one that ends (a pod gone) up to its last, and a
    drop (a restarted process) counts from zero. No extrapolation: `increase` stretches each series to the
    range's ends on its own, so a range holding a series' start read a biased mean (a histogram's `_sum`
    and `_count` stretch differently). Every step's difference lies inside the range when the range starts
    two steps after the evidence does (`counting_range`).
    """
    x, step = series, r.step
    per_step = f"({x} - {x} offset {step}) >= 0 or ({x} unless {x} offset {step}) * 0 or {x} * 1"
    return f"sum_over_time(({per_step})[{r.length}:{step}])"


def increase(metric: str, s: TrackSelector, r: Range) -> str:
    return f"sum({counted(metric + s.matchers(), r)})"


def increase_by(label: str, metric: str, s: TrackSelector, r: Range) -> str:
    return f"sum by ({label}) ({counted(metric + s.matchers(), r)})"


def histogram_buckets(histogram: str, s: TrackSelector, r: Range) -> str:
    """Cumulative count per `le` over the range: the binned data the judge's quantile bounds work on."""
    return increase_by("le", f"{histogram}_bucket", s, r)


def finished_by_reason(s: TrackSelector, r: Range) -> str:
    return increase_by("finished_reason", names.REQUEST_SUCCESS, s, r)


def accepted_by_position(s: TrackSelector, r: Range) -> str:
    return increase_by("position", names.ACCEPTED_PER_POSITION, s, r)


def request_rate_by_pod(s: TrackSelector, r: Range) -> str:
    """Finished requests per second of each pod over the part of the range it was scraped in: the per-pod load
    the two tracks are compared at. Its requests are counted between its own samples (`counted`) and divided
    by the steps that had a sample one step before, so a pod that came or went inside the range (a node lost)
    reads its own rate: a `rate` over the whole range read it, and so its track, as a lighter one."""
    x = names.REQUEST_SUCCESS + s.matchers()
    served = f"sum by ({names.POD}) ({counted(x, r)})"
    steps = f"max by ({names.POD}) (count_over_time(({x} and {x} offset {r.step})[{r.length}:{r.step}]))"
    return f"{served} / ({steps} > 0) / {r.step_seconds}"


def waiting_growth(s: TrackSelector, r: str) -> str:
    """How much the track's waiting queue grew over the range (summed over its pods; negative when it drained)."""
    return f"sum(delta({names.REQUESTS_WAITING}{s.matchers()}[{r}]))"


def gauge_mean(metric: str, s: TrackSelector, r: str) -> str:
    """The gauge's average over the range, averaged over the track's pods."""
    return f"avg(avg_over_time({metric}{s.matchers()}[{r}]))"


def gauge_max(metric: str, s: TrackSelector, r: str) -> str:
    """The gauge's highest scraped value over the range on any of the track's pods."""
    return f"max(max_over_time({metric}{s.matchers()}[{r}]))"


def histogram_mean(histogram: str, s: TrackSelector, r: Range) -> str:
    """The mean observation over the range, from the histogram's `_sum` and `_count`. The count is kept only
    when positive, so no observation is no answer rather than a division by zero (NaN, or an infinity that
    the provider refuses as malformed)."""
    return f"{increase(histogram + '_sum', s, r)} / ({increase(histogram + '_count', s, r)} > 0)"


def _pod_series(s: TrackSelector) -> str:
    """One series per pod from its start: the `_count` of the per-token latency histogram."""
    return f"{names.TIME_PER_OUTPUT_TOKEN}_count{s.matchers()}"


def _first_sample(s: TrackSelector, r: str, step: str) -> str:
    return f"min_over_time(timestamp({_pod_series(s)})[{r}:{step}])"


def latest_sample(s: TrackSelector) -> str:
    """When Prometheus last scraped any of the track's pods (Unix time; none once every series is stale): what a
    watch compares with the last it judged, to judge each new scrape once."""
    return f"max(timestamp({_pod_series(s)}))"


def newest_sample(s: TrackSelector, r: str, step: str) -> str:
    """When Prometheus last has a sample of any of the track's pods within the range (Unix time, early by <
    `step`). A subquery, not an instant `timestamp()`: that one is empty once a series is marked stale, and
    the age of the last sample is what says how far behind the data is."""
    return f"max(max_over_time(timestamp({_pod_series(s)})[{r}:{step}]))"


def scrape_interval(s: TrackSelector, r: str, step: str) -> str:
    """Seconds between two scrapes of the track's pods over the range (the most regular pod's; none with < 2)."""
    span = f"timestamp({_pod_series(s)}) - {_first_sample(s, r, step)}"
    return f"min(({span}) / (count_over_time({_pod_series(s)}[{r}]) - 1 > 0))"


def gauges(s: TrackSelector, r: Range) -> dict[str, str]:
    """Evidence field -> query with one value over the range (gauges, and means of histograms)."""
    return {
        "token_latency_mean": histogram_mean(names.TIME_PER_OUTPUT_TOKEN, s, r),
        "step_latency_mean": histogram_mean(names.INTER_TOKEN_LATENCY, s, r),
        "batch_mean": gauge_mean(names.REQUESTS_RUNNING, s, r.length),
        "waiting_growth": waiting_growth(s, r.length),
        "kv_cache_usage_mean": gauge_mean(names.KV_CACHE_USAGE, s, r.length),
        "kv_cache_usage_max": gauge_max(names.KV_CACHE_USAGE, s, r.length),
    }


COUNTERS = {
    "drafts": names.NUM_DRAFTS,
    "draft_tokens": names.DRAFT_TOKENS,
    "accepted_tokens": names.ACCEPTED_TOKENS,
    "generation_tokens": names.GENERATION_TOKENS,
    "prompt_tokens": names.PROMPT_TOKENS,
    "prefix_cache_hits": names.PREFIX_CACHE_HITS,
    "preemptions": names.NUM_PREEMPTIONS,
}
"""Evidence field -> counter whose increase over the range the judge reads."""

HISTOGRAMS = {
    "token_latency": names.TIME_PER_OUTPUT_TOKEN,
    "step_latency": names.INTER_TOKEN_LATENCY,
    "ttft": names.TIME_TO_FIRST_TOKEN,
    "queue_time": names.QUEUE_TIME,
}
"""Evidence field -> histogram whose buckets the judge reads."""


def custom_queries(guardrail: CustomGuardrail, s: TrackSelector, r: Range) -> dict[str, str]:
    """Reading -> query for one custom guardrail on one track: its counters' increases (`events`, `total`) or
    its histogram's buckets (`histogram`, by `le`). Only metric names and label equalities come from the
    user; the rest, and the track's matchers, are the operator's."""
    selector = s.matchers_with(guardrail.match_labels)
    if guardrail.rate is not None:
        rate = guardrail.rate
        return {
            "events": f"sum({counted(rate.events + selector, r)})",
            "total": f"sum({counted(rate.total + selector, r)})",
        }
    assert guardrail.latency is not None
    return {"histogram": f"sum by (le) ({counted(guardrail.latency.histogram + '_bucket' + selector, r)})"}


WATCH_FIELD = "specfleet_field"
"""The label naming which evidence field a series of the watch's one query answers (`watch_evidence`)."""


def _difference(series: str, d: str) -> str:
    """Each series' increase between its newest sample and its sample `d` earlier: exact, no extrapolation. A
    series without a sample `d` ago (a new pod) or that dropped (a restarted process) is left out of this short
    range, which only ever narrows the evidence."""
    return f"({series} - {series} offset {d}) >= 0"


def watch_evidence(s: TrackSelector, d: str, custom: Sequence[CustomGuardrail] = ()) -> str:
    """One query for everything the fail-only check reads about one track over the last `d`, each part labelled
    with its evidence field (`WATCH_FIELD`): the counters, the histograms' buckets, sums and counts, finished
    requests by reason and by pod, acceptance by position, the gauges, and each custom guardrail's readings
    (`custom.<index>.<reading>`). One request per track and range instead of one per field, since the watch
    runs at every scrape."""
    m = s.matchers()
    parts = {field: f"sum({_difference(metric + m, d)})" for field, metric in COUNTERS.items()}
    for field, histogram in HISTOGRAMS.items():
        parts[field] = f"sum by (le) ({_difference(histogram + '_bucket' + m, d)})"
        parts[f"{field}_sum"] = f"sum({_difference(histogram + '_sum' + m, d)})"
        parts[f"{field}_count"] = f"sum({_difference(histogram + '_count' + m, d)})"
    parts["finished"] = f"sum by (finished_reason) ({_difference(names.REQUEST_SUCCESS + m, d)})"
    parts["finished_by_pod"] = f"sum by ({names.POD}) ({_difference(names.REQUEST_SUCCESS + m, d)})"
    parts["accepted_per_position"] = f"sum by (position) ({_difference(names.ACCEPTED_PER_POSITION + m, d)})"
    parts["batch_mean"] = gauge_mean(names.REQUESTS_RUNNING, s, d)
    parts["waiting_growth"] = waiting_growth(s, d)
    parts["kv_cache_usage_mean"] = gauge_mean(names.KV_CACHE_USAGE, s, d)
    parts["kv_cache_usage_max"] = gauge_max(names.KV_CACHE_USAGE, s, d)
    for index, guardrail in enumerate(custom):
        selector = s.matchers_with(guardrail.match_labels)
        if guardrail.rate is not None:
            parts[f"custom.{index}.events"] = f"sum({_difference(guardrail.rate.events + selector, d)})"
            parts[f"custom.{index}.total"] = f"sum({_difference(guardrail.rate.total + selector, d)})"
        elif guardrail.latency is not None:
            bucket = guardrail.latency.histogram + "_bucket" + selector
            parts[f"custom.{index}.histogram"] = f"sum by (le) ({_difference(bucket, d)})"
    return " or ".join(f'label_replace({query}, "{WATCH_FIELD}", "{field}", "", "")' for field, query in parts.items())

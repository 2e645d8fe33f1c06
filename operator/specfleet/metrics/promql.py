"""PromQL for judging one track of a SpeculativeDeployment. Pure string building; label values escaped.

The judge needs counts, not ratios: `increase` over the evidence range of each counter and of each
histogram bucket (`sum by (le)`), so it can put confidence bounds on them and compare two tracks on the
bucket bounds they share. Ratios shown on dashboards follow vLLM's own speculative-decoding dashboard.
"""

from dataclasses import dataclass

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


def seconds(value: float) -> str:
    """A PromQL range of whole seconds, at least one."""
    return f"{max(1, round(value))}s"


def increase(metric: str, s: TrackSelector, r: str) -> str:
    return f"sum(increase({metric}{s.matchers()}[{r}]))"


def increase_by(label: str, metric: str, s: TrackSelector, r: str) -> str:
    return f"sum by ({label}) (increase({metric}{s.matchers()}[{r}]))"


def histogram_buckets(histogram: str, s: TrackSelector, r: str) -> str:
    """Cumulative count per `le` over the range: the binned data the judge's quantile bounds work on."""
    return increase_by("le", f"{histogram}_bucket", s, r)


def finished_by_reason(s: TrackSelector, r: str) -> str:
    return increase_by("finished_reason", names.REQUEST_SUCCESS, s, r)


def accepted_by_position(s: TrackSelector, r: str) -> str:
    return increase_by("position", names.ACCEPTED_PER_POSITION, s, r)


def request_rate_by_pod(s: TrackSelector, r: str) -> str:
    """Finished requests per second of each pod: the per-pod load the two tracks are compared at."""
    return f"sum by ({names.POD}) (rate({names.REQUEST_SUCCESS}{s.matchers()}[{r}]))"


COUNTERS = {
    "drafts": names.NUM_DRAFTS,
    "draft_tokens": names.DRAFT_TOKENS,
    "accepted_tokens": names.ACCEPTED_TOKENS,
    "generation_tokens": names.GENERATION_TOKENS,
}
"""Evidence field -> counter whose increase over the range the judge reads."""

HISTOGRAMS = {
    "token_latency": names.TIME_PER_OUTPUT_TOKEN,
    "step_latency": names.INTER_TOKEN_LATENCY,
    "ttft": names.TIME_TO_FIRST_TOKEN,
}
"""Evidence field -> histogram whose buckets the judge reads."""

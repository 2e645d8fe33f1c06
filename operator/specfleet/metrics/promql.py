"""PromQL for judging one track of a SpeculativeDeployment. Pure string building; label values escaped.

Ratios follow vLLM's own speculative-decoding dashboard; the denominators are guarded with `> 0` so an
idle track yields an empty answer (inconclusive), never a division by zero read as a value.
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

    def matchers(self, extra: str = "") -> str:
        pairs = {
            names.NAMESPACE: self.namespace,
            names.SDEP: self.name,
            names.TRACK: self.track,
            names.REVISION: self.revision,
        }
        body = ",".join(f'{k}="{escape(v)}"' for k, v in pairs.items())
        return "{" + body + (f",{extra}" if extra else "") + "}"


def _rate(metric: str, selector: TrackSelector, window: str, extra: str = "") -> str:
    return f"sum(rate({metric}{selector.matchers(extra)}[{window}]))"


def _increase(metric: str, selector: TrackSelector, window: str, extra: str = "") -> str:
    return f"sum(increase({metric}{selector.matchers(extra)}[{window}]))"


def _quantile(q: float, histogram: str, selector: TrackSelector, window: str) -> str:
    return f"histogram_quantile({q}, sum by (le) (rate({histogram}_bucket{selector.matchers()}[{window}])))"


def acceptance_rate(s: TrackSelector, w: str) -> str:
    return f"{_rate(names.ACCEPTED_TOKENS, s, w)} / ({_rate(names.DRAFT_TOKENS, s, w)} > 0)"


def mean_accepted_length(s: TrackSelector, w: str) -> str:
    """Tokens per target pass, bonus token included: 1 + accepted / drafts."""
    return f"1 + {_rate(names.ACCEPTED_TOKENS, s, w)} / ({_rate(names.NUM_DRAFTS, s, w)} > 0)"


def acceptance_per_position(s: TrackSelector, w: str) -> str:
    per_position = f"sum by (position) (rate({names.ACCEPTED_PER_POSITION}{s.matchers()}[{w}]))"
    return f"{per_position} / on() group_left() ({_rate(names.NUM_DRAFTS, s, w)} > 0)"


def itl_quantile(q: float, s: TrackSelector, w: str) -> str:
    return _quantile(q, names.INTER_TOKEN_LATENCY, s, w)


def ttft_quantile(q: float, s: TrackSelector, w: str) -> str:
    return _quantile(q, names.TIME_TO_FIRST_TOKEN, s, w)


def error_rate(s: TrackSelector, w: str) -> str:
    failed = 'finished_reason=~"' + "|".join(names.FAILED_FINISH_REASONS) + '"'
    return f"{_rate(names.REQUEST_SUCCESS, s, w, failed)} / ({_rate(names.REQUEST_SUCCESS, s, w)} > 0)"


def generation_tokens_per_second(s: TrackSelector, w: str) -> str:
    return _rate(names.GENERATION_TOKENS, s, w)


def draft_tokens(s: TrackSelector, w: str) -> str:
    return _increase(names.DRAFT_TOKENS, s, w)


def finished_requests(s: TrackSelector, w: str) -> str:
    return _increase(names.REQUEST_SUCCESS, s, w)


SCALAR_QUERIES = {
    "acceptance_rate": acceptance_rate,
    "mean_accepted_length": mean_accepted_length,
    "itl_p50_seconds": lambda s, w: itl_quantile(0.5, s, w),
    "itl_p95_seconds": lambda s, w: itl_quantile(0.95, s, w),
    "ttft_p95_seconds": lambda s, w: ttft_quantile(0.95, s, w),
    "error_rate": error_rate,
    "generation_tokens_per_second": generation_tokens_per_second,
    "draft_tokens": draft_tokens,
    "requests": finished_requests,
}
"""Measurements field -> query builder, for every single-number measurement."""

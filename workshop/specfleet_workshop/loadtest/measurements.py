"""What a load test measures, and the statistics over it. Pure: timestamps in, typed results out.

One request gives a `RequestSample`: when it was sent, when its first and last tokens arrived, when the
answer ended, how many tokens it generated, or why it failed. A concurrency level gives a `LevelResult`:

- e2e latency: send to end of answer;
- TTFT: send to the first chunk that carries text;
- per-output-token latency, as a user feels it: (last token - first token) / (tokens - 1), the time
  each further token took on average (vLLM's `request_time_per_output_token`, measured at the client);
- output tokens/s and requests/s: what completed, over the level's wall time (drain included);
- errors: requests that got no complete answer (connection failures, HTTP errors, error events).

Percentiles are over requests, interpolated linearly between order statistics (numpy's default).
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class RequestSample:
    """One request as the client saw it; times in seconds on one monotonic clock."""

    sent: float
    ended: float
    first_token: float | None = None
    last_token: float | None = None
    output_tokens: int = 0
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def e2e(self) -> float:
        return self.ended - self.sent

    @property
    def ttft(self) -> float | None:
        return None if self.first_token is None else self.first_token - self.sent

    @property
    def per_token(self) -> float | None:
        """(last token - first token) / (tokens - 1); None for answers of fewer than two tokens."""
        return per_token_latency(self.first_token, self.last_token, self.output_tokens)


def per_token_latency(first_token: float | None, last_token: float | None, tokens: int) -> float | None:
    """Mean time of each token after the first: (last - first) / (tokens - 1), None below two tokens.

    Chunks may carry several tokens (a speculative step emits up to k + 1), so `tokens` is the answer's
    token count, not its number of chunks.
    """
    if first_token is None or last_token is None or tokens < 2:
        return None
    return (last_token - first_token) / (tokens - 1)


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0-100) with linear interpolation between order statistics; None for no values."""
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} is not within 0..100")
    ordered = sorted(values)
    if not ordered:
        return None
    position = (len(ordered) - 1) * q / 100
    below = math.floor(position)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (ordered[above] - ordered[below]) * (position - below)


@dataclass(frozen=True)
class Quantiles:
    """p50 and p95 over requests, in seconds (None without samples)."""

    p50: float | None
    p95: float | None

    @classmethod
    def of(cls, values: Sequence[float]) -> "Quantiles":
        return cls(p50=percentile(values, 50), p95=percentile(values, 95))


@dataclass(frozen=True)
class LevelResult:
    """One target at one concurrency level."""

    target: str
    concurrency: int
    requests: int
    """Requests answered completely."""
    errors: int
    elapsed_seconds: float
    """Wall time of the level, from the first request sent to the last answer (in-flight ones drained)."""
    output_tokens: int
    e2e: Quantiles
    ttft: Quantiles
    per_token: Quantiles
    error_examples: tuple[str, ...] = field(default=())
    """Up to three distinct error messages, for the report."""

    @property
    def tokens_per_second(self) -> float:
        """Output tokens of the answered requests per second of the level."""
        return self.output_tokens / self.elapsed_seconds if self.elapsed_seconds > 0 else 0.0

    @property
    def requests_per_second(self) -> float:
        return self.requests / self.elapsed_seconds if self.elapsed_seconds > 0 else 0.0

    @property
    def error_rate(self) -> float:
        total = self.requests + self.errors
        return self.errors / total if total else 0.0


def summarize(target: str, concurrency: int, samples: Sequence[RequestSample], elapsed: float) -> LevelResult:
    """A level's figures from its requests (failed ones count only as errors)."""
    ok = [sample for sample in samples if sample.ok]
    failed = [sample.error for sample in samples if sample.error is not None]
    return LevelResult(
        target=target,
        concurrency=concurrency,
        requests=len(ok),
        errors=len(failed),
        elapsed_seconds=elapsed,
        output_tokens=sum(sample.output_tokens for sample in ok),
        e2e=Quantiles.of([sample.e2e for sample in ok]),
        ttft=Quantiles.of([t for sample in ok if (t := sample.ttft) is not None]),
        per_token=Quantiles.of([t for sample in ok if (t := sample.per_token) is not None]),
        error_examples=tuple(dict.fromkeys(failed))[:3],
    )


def as_dict(result: LevelResult) -> dict[str, object]:
    """A level as JSON-ready data: the stored fields and the derived rates."""
    return {
        "target": result.target,
        "concurrency": result.concurrency,
        "requests": result.requests,
        "errors": result.errors,
        "elapsed_seconds": result.elapsed_seconds,
        "output_tokens": result.output_tokens,
        "e2e_seconds": {"p50": result.e2e.p50, "p95": result.e2e.p95},
        "ttft_seconds": {"p50": result.ttft.p50, "p95": result.ttft.p95},
        "per_token_seconds": {"p50": result.per_token.p50, "p95": result.per_token.p95},
        "tokens_per_second": result.tokens_per_second,
        "requests_per_second": result.requests_per_second,
        "error_examples": list(result.error_examples),
    }

"""The holdback speed-up: what the promoted config buys over plain decoding, measured on live traffic."""

import math
from datetime import datetime

from specfleet.api.spec import Guardrails
from specfleet.api.status import Speedup
from specfleet.judge import wording
from specfleet.judge.evidence import TrackEvidence, ratio, rounded
from specfleet.judge.verdicts import LOAD_TOLERANCE
from specfleet.stats import binned_sd, rate_ratio_bounds, t_score, z_score

MIN_SLICES = 4
"""Fewest slices of a window whose spread bounds the speed-up (batch means); with fewer, requests alone do."""


def comparable(load_lower: float, load_upper: float) -> bool:
    """Whether a load ratio's bounds both lie within the comparable band (1/1.25x to 1.25x)."""
    return load_lower >= 1 / (1 + LOAD_TOLERANCE) and load_upper <= 1 + LOAD_TOLERANCE


def speedup(
    stable: TrackEvidence, holdback: TrackEvidence, guardrails: Guardrails, confidence: float, time: datetime
) -> Speedup:
    """Stable's speed-up over the holdback (`rollout.holdback`) over one window: holdback mean per-token
    latency / stable's, with bounds on the log of the ratio at `confidence` for this window alone. Its standard
    error is the larger of the delta method's (each mean's histogram spread / sqrt(requests)) and, with at least
    MIN_SLICES slices of the window, the batch means' (the spread of the slices' log ratios, with Student's t):
    requests that share batches are not independent, so the first alone is too narrow.

    The mean, not the p95: it is what tokens/s per user follows, and unbiased by k (docs/autotune.md); both
    tracks see the same traffic split by pod, so their loads match without being asked to.
    """
    need = guardrails.requests_needed
    if stable.requests < need or holdback.requests < need:
        message = f"{stable.requests:.0f} stable and {holdback.requests:.0f} holdback requests finished (need {need})"
        return Speedup(time=time, message=message)
    s_mean, h_mean = stable.token_latency_mean, holdback.token_latency_mean
    if not s_mean or not h_mean or stable.token_latency is None or holdback.token_latency is None:
        return Speedup(time=time, message="no per-token latency histogram for both tracks")
    standard_error = math.hypot(
        binned_sd(stable.token_latency) / (s_mean * math.sqrt(stable.requests)),
        binned_sd(holdback.token_latency) / (h_mean * math.sqrt(holdback.requests)),
    )
    z = z_score((1 - confidence) / 2)
    slices = [
        math.log(h / s)
        for s, h in zip(stable.token_latency_slices, holdback.token_latency_slices, strict=False)
        if s > 0 and h > 0
    ]
    if len(slices) >= MIN_SLICES:  # batch means: the slices' spread, with the t quantile of so few
        mean = sum(slices) / len(slices)
        spread = math.sqrt(sum((r - mean) ** 2 for r in slices) / (len(slices) - 1))
        t = t_score((1 - confidence) / 2, len(slices) - 1)
        standard_error = max(standard_error, spread / math.sqrt(len(slices)) * t / z)  # so z x it is t x its own
    log_ratio = math.log(h_mean / s_mean)
    estimate = math.exp(log_ratio)
    lower, upper = math.exp(log_ratio - z * standard_error), math.exp(log_ratio + z * standard_error)
    s_tokens = stable.per_pod_second(stable.generation_tokens)
    h_tokens = holdback.per_pod_second(holdback.generation_tokens)
    load = ratio(stable.per_pod_load, holdback.per_pod_load)
    load_lower, load_upper = (
        (None, None) if load is None else rate_ratio_bounds(load, stable.requests, holdback.requests, z)
    )
    message = (
        f"per-token latency {wording.ms(s_mean)} vs holdback {wording.ms(h_mean)} (means): speed-up "
        f"{estimate:.3f}x, {confidence * 100:g}% bounds {lower:.3f}-{upper:.3f}"
    )
    if (
        load is not None
        and load_lower is not None
        and load_upper is not None
        and not comparable(load_lower, load_upper)
    ):
        message += (
            f"; stable pods carried {load:.2f}x the holdback's per-pod load ({load_lower:.2f}-{load_upper:.2f}x): "
            "not shown comparable"
        )
    return Speedup(
        time=time,
        estimate=rounded(estimate, 4),
        lower=rounded(lower, 4),
        upper=rounded(upper, 4),
        stable_token_latency_mean_seconds=rounded(s_mean),
        holdback_token_latency_mean_seconds=rounded(h_mean),
        throughput_ratio=rounded(ratio(s_tokens, h_tokens), 4),
        load_ratio=rounded(load, 4),
        load_lower=rounded(load_lower, 4),
        load_upper=rounded(load_upper, 4),
        message=message,
    )

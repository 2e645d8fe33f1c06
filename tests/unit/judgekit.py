"""Builders of the judge's evidence: a track's per-request samples, binned as Prometheus holds them."""

import math
import random

from specfleet.judge import TrackEvidence
from specfleet.render.argv import FINE_ITL_BUCKETS
from specfleet.stats import Binned


def binned(samples: list[float], bounds: tuple[float, ...]) -> Binned:
    """Samples counted into cumulative buckets at `bounds` (and +Inf), as a Prometheus histogram holds them."""
    ordered = sorted(samples)
    counts: dict[float, float] = {}
    i = 0
    for bound in bounds:
        while i < len(ordered) and ordered[i] <= bound:
            i += 1
        counts[bound] = float(i)
    histogram = Binned.from_buckets({**counts, math.inf: float(len(ordered))})
    assert histogram is not None
    return histogram


def track(
    *,
    seed: int,
    alpha: float | None = None,
    k: int = 4,
    requests: int = 2500,
    token_ms: float = 5.0,
    spread: float = 0.2,
    error_share: float = 0.0,
    aborts: int = 0,
    rate_per_pod: float = 4.0,
    drafts_per_request: int = 30,
    bounds: tuple[float, ...] = tuple(FINE_ITL_BUCKETS),
) -> TrackEvidence:
    """A track's evidence: `requests` finished requests, their per-token latency log-normal around `token_ms`."""
    rng = random.Random(seed)
    per_token = [rng.lognormvariate(math.log(token_ms / 1000), spread) for _ in range(requests)]
    positions = [0.0] * k
    drafts = accepted = 0
    if alpha is not None:
        for _ in range(requests):
            own = min(0.99, max(0.01, rng.gauss(alpha, 0.1)))  # each request's prompt has its own acceptance
            for _ in range(drafts_per_request):
                drafts += 1
                for position in range(k):
                    if rng.random() >= own:
                        break
                    positions[position] += 1
                    accepted += 1
    errors = sum(rng.random() < error_share for _ in range(requests))
    tokens_per_step = 1 + (accepted / drafts if drafts else 0)
    return TrackEvidence(
        token_latency=binned(per_token, bounds),
        step_latency=binned([t * tokens_per_step for t in per_token], bounds),
        token_latency_mean=sum(per_token) / requests if requests else None,
        finished={"stop": float(requests - errors), "error": float(errors), "abort": float(aborts)},
        drafts=float(drafts) if alpha is not None else None,
        draft_tokens=float(drafts * k) if alpha is not None else None,
        accepted_tokens=float(accepted) if alpha is not None else None,
        accepted_per_position=tuple(positions) if alpha is not None else (),
        request_rate_per_pod=(rate_per_pod,),
        seconds=300.0,
    )

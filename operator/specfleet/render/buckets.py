"""`--custom-histogram-buckets` checked as vLLM checks it at start-up. Pure.

vLLM (`ObservabilityConfig._validate_custom_histogram_buckets`, vllm/config/observability.py, 0.32.0)
refuses unknown families and lists that are empty, hold booleans, non-finite or non-positive bounds, or
are not strictly increasing; the messages here are vLLM's. Shared by `specfleet validate` (for a flag
given in `engine.extraArgs`) and the simulator (which reads the pods' flags).
"""

import json
import math
from itertools import pairwise

from specfleet.render.argv import ITL_BUCKETS_FLAG

VLLM_BUCKET_FAMILIES = frozenset(
    {
        "request_latency",
        "time_to_first_token",
        "inter_token_latency",
        "iteration_tokens",
        "request_params_n",
        "request_num_preemptions",
        "request_tokens",
        "kv_cache_residency",
    }
)
"""Every family vLLM 0.32.0 accepts (`BucketFamilyKey` in vllm/v1/metrics/buckets.py); any other key
makes `vllm serve` refuse to start."""


class BucketsError(ValueError):
    """vLLM would refuse this `--custom-histogram-buckets` value."""


def check_histogram_buckets(text: str) -> dict[str, tuple[float, ...]]:
    """`--custom-histogram-buckets` JSON -> bounds per family; raises BucketsError with vLLM's message."""
    try:
        overrides = json.loads(text)
    except json.JSONDecodeError as error:
        raise BucketsError(f"{ITL_BUCKETS_FLAG} is not JSON: {error}") from None
    if not isinstance(overrides, dict):
        raise BucketsError(f"{ITL_BUCKETS_FLAG} is not a JSON object")
    buckets = {}
    for family, bounds in overrides.items():
        where = f"{ITL_BUCKETS_FLAG}: custom_histogram_buckets[{family!r}]"
        if family not in VLLM_BUCKET_FAMILIES:
            raise BucketsError(
                f"{ITL_BUCKETS_FLAG}: custom_histogram_buckets: unknown bucket family {family!r};"
                f" known families: {sorted(VLLM_BUCKET_FAMILIES)}"
            )
        if not isinstance(bounds, list):
            raise BucketsError(f"{where}: must be a list of numbers")
        if not bounds:
            raise BucketsError(f"{where}: bucket list must not be empty")
        for bound in bounds:
            if isinstance(bound, bool) or not isinstance(bound, int | float):
                raise BucketsError(f"{where}: bound {bound!r} must be a number, not a {type(bound).__name__}")
            if not math.isfinite(bound) or bound <= 0:
                raise BucketsError(f"{where}: bound {bound!r} must be finite and greater than 0")
        if any(a >= b for a, b in pairwise(bounds)):
            raise BucketsError(f"{where}: bounds {bounds} must be strictly increasing")
        buckets[family] = tuple(float(bound) for bound in bounds)
    return buckets

"""Which speculative methods, config keys and CLI flags each vLLM release knows.

Read from `vllm/config/speculative.py` and `vllm/engine/arg_utils.py` in vLLM's PyPI source
distributions 0.10.0 to 0.33.0 (docs/vllm-versions.md has the details and sources). `since` is the first
release with the item, `until` the first release without it. Versions newer than `NEWEST_KNOWN` are
trusted with keys specfleet has not heard of (that is what `speculative.extra` is for); versions older
than `OLDEST_SUPPORTED` are refused. vLLM before 0.16 ignored unknown keys silently, so specfleet
refuses them itself.
"""

from dataclasses import dataclass
from functools import total_ordering

from specfleet.api.problems import Problem


@total_ordering
@dataclass(frozen=True)
class VllmVersion:
    """A vLLM release number, compared numerically (0.9 < 0.10)."""

    major: int
    minor: int
    patch: int = 0

    @classmethod
    def parse(cls, text: str) -> "VllmVersion":
        parts = text.strip().lstrip("v").split(".")
        if not 2 <= len(parts) <= 3 or not all(p.isdigit() for p in parts):
            raise ValueError(f"invalid vLLM version {text!r}: expected MAJOR.MINOR[.PATCH]")
        numbers = [int(p) for p in parts]
        return cls(*numbers)

    def __lt__(self, other: "VllmVersion") -> bool:
        return (self.major, self.minor, self.patch) < (other.major, other.minor, other.patch)

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}"


V = VllmVersion.parse


@dataclass(frozen=True)
class Span:
    """Releases that have an item: from `since` up to, not including, `until`."""

    since: VllmVersion
    until: VllmVersion | None = None

    def covers(self, version: VllmVersion) -> bool:
        return self.since <= version and (self.until is None or version < self.until)


OLDEST_SUPPORTED = V("0.10.0")
NEWEST_KNOWN = V("0.33.0")

METHODS: dict[str, Span] = {
    "ngram": Span(V("0.10.0")),
    "eagle": Span(V("0.10.0")),
    "eagle3": Span(V("0.10.0")),
    "medusa": Span(V("0.10.0"), until=V("0.33.0")),
    # listed by 0.10-0.32, but the V1 engine raises "Unknown speculative decoding method" for it
    "mlp_speculator": Span(V("0.10.0"), until=V("0.10.0")),
    "mtp": Span(V("0.11.0")),  # 0.10.x knew only model-specific names such as deepseek_mtp
    "suffix": Span(V("0.11.1")),  # needs the arctic-inference package in the image
    "draft_model": Span(V("0.15.0")),  # listed earlier, but raised NotImplementedError before 0.15.0
    "ngram_gpu": Span(V("0.18.0")),
    "dflash": Span(V("0.20.0")),
    "dspark": Span(V("0.25.0")),
}

SPECULATIVE_KEYS: dict[str, Span] = {
    "method": Span(V("0.10.0")),
    "model": Span(V("0.10.0")),
    "revision": Span(V("0.10.0")),
    "code_revision": Span(V("0.10.0")),
    "num_speculative_tokens": Span(V("0.10.0")),
    "draft_tensor_parallel_size": Span(V("0.10.0")),
    "quantization": Span(V("0.10.0")),
    "max_model_len": Span(V("0.10.0")),
    "prompt_lookup_min": Span(V("0.10.0")),
    "prompt_lookup_max": Span(V("0.10.0")),
    "disable_logprobs": Span(V("0.10.0"), until=V("0.11.1")),
    "disable_by_batch_size": Span(V("0.10.0"), until=V("0.17.0")),
    "speculative_token_tree": Span(V("0.10.0"), until=V("0.21.0")),
    "enforce_eager": Span(V("0.11.0")),
    "disable_padded_drafter_batch": Span(V("0.11.0")),
    "suffix_decoding_max_tree_depth": Span(V("0.11.1")),
    "suffix_decoding_max_cached_requests": Span(V("0.11.1")),
    "suffix_decoding_max_spec_factor": Span(V("0.11.1")),
    "suffix_decoding_min_token_prob": Span(V("0.11.1")),
    "parallel_drafting": Span(V("0.16.0")),
    "use_local_argmax_reduction": Span(V("0.17.0")),
    "rejection_sample_method": Span(V("0.18.0")),
    "moe_backend": Span(V("0.19.0")),
    "synthetic_acceptance_rate": Span(V("0.19.0"), until=V("0.20.0")),
    "synthetic_acceptance_length": Span(V("0.20.0")),
    "synthetic_acceptance_rates": Span(V("0.20.0")),
    "attention_backend": Span(V("0.21.0")),
    "draft_sample_method": Span(V("0.21.0")),
    "num_speculative_tokens_per_batch_size": Span(V("0.24.0")),
    "use_heterogeneous_vocab": Span(V("0.25.0")),
    "kv_cache_dtype": Span(V("0.26.0")),
    "dspark_draft_topk": Span(V("0.28.0")),
    "enable_adaptive_verification": Span(V("0.28.0")),
    "index_share_for_mtp_iteration": Span(V("0.29.0")),
    "disable_eagle_block_drop": Span(V("0.30.0")),
    "disable_lookahead_block_hashes": Span(V("0.33.0")),
    "draft_lm_head_quantization": Span(V("0.33.0")),
    "fly_entropy_threshold": Span(V("0.33.0")),
    "fly_entropy_top_k": Span(V("0.33.0")),
    "fly_window_size": Span(V("0.33.0")),
    "xpress_topc": Span(V("0.33.0")),
}
"""User-settable keys; `tensor_parallel_size` is never one (vLLM rejects it from 0.15.0, ignored it before)."""

INERT_SPECULATIVE_KEYS: dict[str, str] = {
    "disable_by_batch_size": "accepted and range-checked but never read: it belonged to the V0 engine, and the V1 "
    "engine of 0.10.0-0.16.0 does not switch speculation off by batch size (vllm-project/vllm#35060 removed it); "
    "from 0.24.0 num_speculative_tokens_per_batch_size does, with depth 0",
}
"""Keys a release accepts that do nothing (read from the 0.10.0, 0.13.0 and 0.16.0 source distributions)."""

VALUES: dict[tuple[str, str], Span] = {
    ("draft_sample_method", "probabilistic"): Span(V("0.22.0")),  # 0.21.0 had greedy|gumbel
}

CLI_FLAGS: dict[str, Span] = {
    "--custom-histogram-buckets": Span(V("0.32.0")),
}


def _availability_problem(kind: str, name: str, span: Span, version: VllmVersion, field: str) -> Problem | None:
    if span.covers(version):
        return None
    if span.until == span.since:
        return Problem(field, f"{kind} {name!r} does not work on any vLLM release specfleet supports")
    if version < span.since:
        return Problem(field, f"{kind} {name!r} needs vLLM >= {span.since}; engine.vllmVersion is {version}")
    return Problem(field, f"{kind} {name!r} was removed in vLLM {span.until}; engine.vllmVersion is {version}")


def version_problem(version: VllmVersion, field: str = "spec.engine.vllmVersion") -> Problem | None:
    if version < OLDEST_SUPPORTED:
        return Problem(field, f"vLLM {version} is older than the oldest supported release {OLDEST_SUPPORTED}")
    return None


def method_problem(method: str, version: VllmVersion, field: str) -> Problem | None:
    """None when `version` has `method`."""
    span = METHODS.get(method)
    if span is None:
        return Problem(field, f"unknown speculative method {method!r}")
    return _availability_problem("method", method, span, version, field)


def value_problem(key: str, value: object, version: VllmVersion, field: str) -> Problem | None:
    """None when `version` accepts this value of an enum-like key."""
    span = VALUES.get((key, str(value)))
    return _availability_problem(f"{key} value", str(value), span, version, field) if span else None


def key_problem(key: str, version: VllmVersion, field: str, *, trust_unknown: bool) -> Problem | None:
    """None when `version` accepts `key` in --speculative-config.

    An unknown key is accepted only from `extra` (`trust_unknown`) and only on versions newer than
    the table, where specfleet cannot know better than the user.
    """
    span = SPECULATIVE_KEYS.get(key)
    if span is not None:
        return _availability_problem("speculative config key", key, span, version, field)
    if trust_unknown and version > NEWEST_KNOWN:
        return None
    return Problem(field, f"vLLM {version} has no speculative config key {key!r}")


def has_flag(flag: str, version: VllmVersion) -> bool:
    span = CLI_FLAGS.get(flag)
    return span is not None and span.covers(version)

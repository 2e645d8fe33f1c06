"""Which speculative methods, config keys and CLI flags each vLLM release knows.

Read from vLLM's `vllm/config/speculative.py` and `vllm/engine/arg_utils.py` at the release tags
(see docs/vllm-versions.md for the sources). `since` is the first release with the item, `until` the
first release without it. Versions newer than `NEWEST_KNOWN` are trusted with keys specfleet has not
heard of (that is what `speculative.extra` is for); versions older than `OLDEST_SUPPORTED` are refused.
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
    "draft_model": Span(V("0.10.0")),
    "eagle": Span(V("0.10.0")),
    "eagle3": Span(V("0.10.0")),
    "medusa": Span(V("0.10.0"), until=V("0.33.0")),
    "mlp_speculator": Span(V("0.10.0"), until=V("0.33.0")),
    "mtp": Span(V("0.10.0")),
    "ngram": Span(V("0.10.0")),
    "ngram_gpu": Span(V("0.10.0")),
    "suffix": Span(V("0.10.0")),
    "dflash": Span(V("0.10.0")),
    "dspark": Span(V("0.10.0")),
}

SPECULATIVE_KEYS: dict[str, Span] = {
    "method": Span(V("0.10.0")),
    "model": Span(V("0.10.0")),
    "revision": Span(V("0.10.0")),
    "num_speculative_tokens": Span(V("0.10.0")),
    "draft_tensor_parallel_size": Span(V("0.10.0")),
    "quantization": Span(V("0.10.0")),
    "max_model_len": Span(V("0.10.0")),
    "code_revision": Span(V("0.10.0")),
    "enforce_eager": Span(V("0.10.0")),
    "draft_sample_method": Span(V("0.10.0")),
    "parallel_drafting": Span(V("0.10.0")),
    "prompt_lookup_min": Span(V("0.10.0")),
    "prompt_lookup_max": Span(V("0.10.0")),
    "suffix_decoding_max_tree_depth": Span(V("0.10.0")),
    "suffix_decoding_max_cached_requests": Span(V("0.10.0")),
    "suffix_decoding_max_spec_factor": Span(V("0.10.0")),
    "suffix_decoding_min_token_prob": Span(V("0.10.0")),
    "num_speculative_tokens_per_batch_size": Span(V("0.10.0")),
    "disable_by_batch_size": Span(V("0.10.0"), until=V("0.33.0")),
    "speculative_token_tree": Span(V("0.10.0"), until=V("0.33.0")),
}

CLI_FLAGS: dict[str, Span] = {
    "--custom-histogram-buckets": Span(V("0.10.0")),
}


def _availability_problem(kind: str, name: str, span: Span, version: VllmVersion, field: str) -> Problem | None:
    if span.covers(version):
        return None
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

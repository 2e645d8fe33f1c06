"""The `--speculative-config` JSON, in vLLM's own snake_case keys, for the vLLM version in the image.

vLLM adds and removes methods and keys between releases, and a key the engine does not know fails the
pod at start-up, after minutes of loading weights on GPUs. So the renderer knows which version has
what (`vllm_versions`) and refuses a config that the target version would reject.
"""

import json
from typing import Any

from specfleet.api.problems import InvalidSpecError, Problem
from specfleet.api.spec import (
    DEFAULT_NUM_SPECULATIVE_TOKENS,
    SpeculativeMethod,
    SpeculativeSpec,
)
from specfleet.render.vllm_versions import VllmVersion, key_problem, method_problem, value_problem

FIELD_PREFIX = "spec.speculative"

# typed field (camelCase, as the user wrote it) -> vLLM key
_SCALAR_KEYS = {
    "method": "method",
    "model": "model",
    "revision": "revision",
    "numSpeculativeTokens": "num_speculative_tokens",
    "draftTensorParallelSize": "draft_tensor_parallel_size",
    "quantization": "quantization",
    "maxModelLen": "max_model_len",
    "draftSampleMethod": "draft_sample_method",
    "parallelDrafting": "parallel_drafting",
    "promptLookupMin": "prompt_lookup_min",
    "promptLookupMax": "prompt_lookup_max",
}
_SUFFIX_KEYS = {
    "maxTreeDepth": "suffix_decoding_max_tree_depth",
    "maxCachedRequests": "suffix_decoding_max_cached_requests",
    "maxSpecFactor": "suffix_decoding_max_spec_factor",
    "minTokenProb": "suffix_decoding_min_token_prob",
}
_SCHEDULE_KEY = "num_speculative_tokens_per_batch_size"


def _keyed_by_field(spec: SpeculativeSpec) -> dict[str, tuple[str, Any]]:
    """vLLM key -> (field path, value) for every typed field the user set (or that has a default)."""
    given = spec.model_dump(mode="json", by_alias=True, exclude_none=True)
    pairs: dict[str, tuple[str, Any]] = {}
    for field, key in _SCALAR_KEYS.items():
        if field in given:
            pairs[key] = (f"{FIELD_PREFIX}.{field}", given[field])
    for field, key in _SUFFIX_KEYS.items():
        if field in given.get("suffixDecoding", {}):
            pairs[key] = (f"{FIELD_PREFIX}.suffixDecoding.{field}", given["suffixDecoding"][field])
    if "numSpeculativeTokensPerBatchSize" in given:
        schedule = [[row["start"], row["end"], row["numTokens"]] for row in given["numSpeculativeTokensPerBatchSize"]]
        pairs[_SCHEDULE_KEY] = (f"{FIELD_PREFIX}.numSpeculativeTokensPerBatchSize", schedule)
    # suffix decoding sizes its own depth from the tree (vLLM's default); every other method gets k = 5
    if "num_speculative_tokens" not in pairs and spec.method is not SpeculativeMethod.SUFFIX:
        pairs["num_speculative_tokens"] = (
            f"{FIELD_PREFIX}.numSpeculativeTokens",
            DEFAULT_NUM_SPECULATIVE_TOKENS,
        )
    for key, value in (spec.extra or {}).items():
        pairs[key] = (f"{FIELD_PREFIX}.extra.{key}", value)
    return pairs


def speculative_problems(spec: SpeculativeSpec, version: VllmVersion) -> list[Problem]:
    """What the given vLLM version would refuse in this speculative config."""
    if spec.method is SpeculativeMethod.NONE:
        return []
    problems = [p for p in [method_problem(spec.method.value, version, f"{FIELD_PREFIX}.method")] if p]
    for key, (field, value) in _keyed_by_field(spec).items():
        from_extra = field.startswith(f"{FIELD_PREFIX}.extra.")
        problem = key_problem(key, version, field, trust_unknown=from_extra) or value_problem(
            key, value, version, field
        )
        if problem:
            problems.append(problem)
    return problems


def speculative_config(spec: SpeculativeSpec, version: VllmVersion) -> dict[str, Any] | None:
    """The config as a dict, or None for `method: none`; raises InvalidSpecError if the version would refuse it."""
    if spec.method is SpeculativeMethod.NONE:
        return None
    problems = speculative_problems(spec, version)
    if problems:
        raise InvalidSpecError(problems)
    return {key: value for key, (_, value) in _keyed_by_field(spec).items()}


def to_json(config: dict[str, Any]) -> str:
    """Compact, key-sorted JSON: the same config always renders the same argv."""
    return json.dumps(config, sort_keys=True, separators=(",", ":"))

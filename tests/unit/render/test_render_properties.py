"""Property: any valid spec renders a speculative config whose JSON parses back to the same settings."""

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from specfleet.api.spec import (
    DEFAULT_NUM_SPECULATIVE_TOKENS,
    METHODS_WITH_DRAFT_MODEL,
    MODEL_FREE_METHODS,
    SpeculativeDeploymentSpec,
    SpeculativeMethod,
)
from specfleet.render.argv import vllm_argv
from specfleet.render.vllm_versions import METHODS, VllmVersion

VERSION = "0.33.0"
AVAILABLE = sorted(m for m in SpeculativeMethod if m != "none" and METHODS[m.value].covers(VllmVersion.parse(VERSION)))

# the inverse of the renderer's key mapping, written independently: vLLM key -> (section, camelCase field)
FROM_VLLM = {
    "method": (None, "method"),
    "model": (None, "model"),
    "revision": (None, "revision"),
    "num_speculative_tokens": (None, "numSpeculativeTokens"),
    "draft_tensor_parallel_size": (None, "draftTensorParallelSize"),
    "quantization": (None, "quantization"),
    "max_model_len": (None, "maxModelLen"),
    "prompt_lookup_min": (None, "promptLookupMin"),
    "prompt_lookup_max": (None, "promptLookupMax"),
    "suffix_decoding_max_tree_depth": ("suffixDecoding", "maxTreeDepth"),
    "suffix_decoding_min_token_prob": ("suffixDecoding", "minTokenProb"),
}

names = st.from_regex(r"[a-z][a-z0-9]{0,8}/[A-Za-z0-9][A-Za-z0-9._-]{0,20}", fullmatch=True)


@st.composite
def speculative_specs(draw: st.DrawFn) -> dict[str, Any]:
    method = draw(st.sampled_from(AVAILABLE))
    tp = draw(st.sampled_from([1, 2, 4, 8]))
    spec: dict[str, Any] = {"method": method.value}
    if method in METHODS_WITH_DRAFT_MODEL:
        spec["model"] = draw(names)
        spec["revision"] = draw(st.none() | st.sampled_from(["main", "v1.0", "a1b2c3d"]))
    if method not in MODEL_FREE_METHODS:
        spec["draftTensorParallelSize"] = draw(st.none() | st.sampled_from([1, tp]))
        spec["quantization"] = draw(st.none() | st.sampled_from(["fp8", "awq"]))
        spec["maxModelLen"] = draw(st.none() | st.integers(1, 131072))
    spec["numSpeculativeTokens"] = draw(st.none() | st.integers(1, 16))
    if method.value in ("ngram", "ngram_gpu"):
        low = draw(st.integers(1, 8))
        spec["promptLookupMin"] = low
        spec["promptLookupMax"] = draw(st.integers(low, 16))
    if method.value == "suffix":
        spec["suffixDecoding"] = {
            "maxTreeDepth": draw(st.integers(1, 64)),
            "minTokenProb": draw(st.floats(0, 1, allow_nan=False)),
        }
    return {"tp": tp, "speculative": {k: v for k, v in spec.items() if v is not None}}


def _parsed_back(config: dict[str, Any]) -> dict[str, Any]:
    settings_: dict[str, Any] = {}
    for key, value in config.items():
        section, field = FROM_VLLM[key]
        target = settings_.setdefault(section, {}) if section else settings_
        target[field] = value
    return settings_


@settings(max_examples=300, deadline=None)
@given(speculative_specs(), names)
def test_speculative_config_round_trips(drawn: dict[str, Any], target: str) -> None:
    speculative = drawn["speculative"]
    spec = SpeculativeDeploymentSpec.model_validate(
        {
            "model": {"name": target + "-target"},
            "speculative": speculative,
            "engine": {"tensorParallelSize": drawn["tp"], "vllmVersion": VERSION},
        }
    )
    argv = vllm_argv(spec)
    config = json.loads(argv[argv.index("--speculative-config") + 1])
    expected = dict(speculative)
    if speculative["method"] != "suffix":
        expected.setdefault("numSpeculativeTokens", DEFAULT_NUM_SPECULATIVE_TOKENS)
    assert _parsed_back(config) == expected

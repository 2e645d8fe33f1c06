"""Translating a pod's rendered `vllm serve` argv for real vLLM on CPU: only hardware-specific parts change."""

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from specfleet.api.resource import SpeculativeDeployment
from specfleet.render.argv import ITL_BUCKETS_FLAG, vllm_argv
from specfleet_workshop.realvllm.models import TinyModel
from specfleet_workshop.realvllm.translate import UntranslatableError, drafter_for, translate

from repokit import EXAMPLES

MODELS = Path("/models")


def rendered(example: str, version: str = "0.32.0", **speculative: Any) -> list[str]:
    document = yaml.safe_load((EXAMPLES / example).read_text())
    document["spec"]["engine"]["vllmVersion"] = version
    document["spec"]["speculative"].update(speculative)
    return vllm_argv(SpeculativeDeployment.from_mapping(document).spec)[2:]


def flag(argv: tuple[str, ...] | list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def test_a_draft_model_pod_keeps_its_config_and_buckets_and_loses_only_the_hardware() -> None:
    argv = rendered("llama-70b-draft-mi300x.yaml")
    out = translate(argv, MODELS, 28000)
    assert out.argv[0] == "/models/target"
    assert flag(out.argv, "--served-model-name") == "llama-3.1-70b"  # the model_name label the judge selects on
    assert flag(out.argv, "--tensor-parallel-size") == "1"
    assert "--gpu-memory-utilization" not in out.argv and "--revision" not in out.argv
    assert (flag(out.argv, "--host"), flag(out.argv, "--port")) == ("127.0.0.1", "28000")
    assert (flag(out.argv, "--dtype"), flag(out.argv, "--max-model-len"), flag(out.argv, "--max-num-seqs")) == (
        "float32",
        "1024",
        "8",
    )
    assert "--enforce-eager" in out.argv
    assert flag(out.argv, ITL_BUCKETS_FLAG) == flag(argv, ITL_BUCKETS_FLAG)
    before, after = json.loads(flag(argv, "--speculative-config")), json.loads(flag(out.argv, "--speculative-config"))
    assert after == {key: value for key, value in before.items() if key != "revision"} | {
        "model": "/models/good-drafter"
    }
    assert "--tensor-parallel-size 8 -> 1" in out.changes
    assert "speculative model meta-llama/Llama-3.2-1B-Instruct -> good-drafter" in out.changes
    assert "--gpu-memory-utilization 0.9 dropped" in out.changes


def test_an_ngram_pod_keeps_every_speculative_key() -> None:
    argv = rendered("codellama-ngram.yaml")
    out = translate(argv, MODELS, 1)
    assert flag(out.argv, "--speculative-config") == flag(argv, "--speculative-config")
    assert not any("speculative" in change for change in out.changes)


def test_every_change_is_reported_and_nothing_else_differs() -> None:
    argv = rendered("codellama-ngram.yaml")
    out = translate(argv, MODELS, 1)
    untouched = {"--served-model-name", "--speculative-config", ITL_BUCKETS_FLAG}
    for name in untouched:
        assert flag(out.argv, name) == flag(argv, name)
    changed = {change.split()[0] for change in out.changes}
    assert changed == {
        "model",
        "--host",
        "--port",
        "--tensor-parallel-size",
        "--gpu-memory-utilization",
        "--dtype",
        "--max-model-len",
        "--max-num-seqs",
        "--max-num-batched-tokens",
        "--enforce-eager",
    }


@pytest.mark.parametrize(
    ("drafter", "tiny"),
    [
        ("meta-llama/Llama-3.2-1B-Instruct", TinyModel.GOOD_DRAFTER),
        ("specfleet-tiny/bad-drafter", TinyModel.BAD_DRAFTER),
        ("team/some-bad-drafter-v2", TinyModel.BAD_DRAFTER),
        ("specfleet-tiny/good-drafter", TinyModel.GOOD_DRAFTER),
    ],
)
def test_drafters_map_by_the_documented_table(drafter: str, tiny: TinyModel) -> None:
    assert drafter_for(drafter) is tiny


@pytest.mark.parametrize(
    ("example", "method"),
    [
        ("llama-8b-eagle3-mi325x.yaml", "eagle3"),
        ("qwen-mtp-mi355x.yaml", "mtp"),
        ("llama-70b-dflash-mi355x.yaml", "dflash"),
    ],
)
def test_methods_that_need_a_trained_drafter_are_refused_with_the_reason(example: str, method: str) -> None:
    with pytest.raises(UntranslatableError, match=f"method '{method}' cannot run on the tiny CPU models"):
        translate(rendered(example), MODELS, 1)


def test_flags_given_with_equals_are_translated_too() -> None:
    out = translate(
        ["m", "--tensor-parallel-size=4", "--gpu-memory-utilization=0.5", "--enable-prefix-caching"], MODELS, 9
    )
    assert out.argv[:3] == ("/models/target", "--tensor-parallel-size", "1")
    assert "--enable-prefix-caching" in out.argv and "--gpu-memory-utilization" not in " ".join(out.argv)


def test_an_argv_without_a_model_is_refused() -> None:
    with pytest.raises(UntranslatableError, match="no model"):
        translate(["--port", "8000"], MODELS, 1)


def test_a_lenient_translation_keeps_an_unservable_config_for_the_parser_and_says_so() -> None:
    argv = rendered("llama-8b-eagle3-mi325x.yaml")
    out = translate(argv, MODELS, 1, strict=False)
    assert flag(out.argv, "--speculative-config") == flag(argv, "--speculative-config")
    assert "speculative method eagle3 kept as rendered: no tiny drafter for it" in out.changes

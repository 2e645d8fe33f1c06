"""Reading pods: the argv `specfleet render` writes, speculative configs, custom ITL buckets, readiness."""

import json
import re
from typing import Any

import pytest
import yaml

from specfleet.api.resource import SpeculativeDeployment
from specfleet.render.argv import FINE_ITL_BUCKETS
from specfleet.render.buckets import VLLM_BUCKET_FAMILIES
from specfleet.render.manifests import Track, deployment, revision
from specfleet_workshop.fleetpods.pods import (
    PodArgsError,
    parse_histogram_buckets,
    parse_pod,
    parse_speculative_config,
    parse_vllm_args,
)

from repokit import EXAMPLES

READY = {"type": "Ready", "status": "True"}


def rendered_pod(example: str, **status: Any) -> dict[str, Any]:
    """A pod as the API server would return it for the canary Deployment of an example."""
    sdep = SpeculativeDeployment.from_mapping(yaml.safe_load((EXAMPLES / example).read_text()))
    template = deployment(sdep, Track.CANARY, revision(sdep.spec), 1)["spec"]["template"]
    return {
        "metadata": {**template["metadata"], "namespace": "ns", "name": "pod-1", "uid": "uid-1"},
        "spec": {**template["spec"], "nodeName": "mi325x-0"},
        "status": status or {"phase": "Running", "podIP": "10.64.0.9", "conditions": [READY]},
    }


def test_eagle3_example() -> None:
    pod = parse_pod(rendered_pod("llama-8b-eagle3-mi325x.yaml"))
    args = pod.args
    assert (pod.namespace, pod.name, pod.uid) == ("ns", "pod-1", "uid-1")
    assert (pod.node_name, pod.pod_ip) == ("mi325x-0", "10.64.0.9")
    assert pod.running and pod.ready and pod.track == "canary"
    assert (args.model, args.served_model_name, args.tensor_parallel_size) == (
        "meta-llama/Llama-3.1-8B-Instruct",
        "llama-3.1-8b",
        1,
    )
    assert args.max_num_seqs == 128
    assert args.gpu_memory_utilization == 0.9
    assert args.speculative is not None
    assert (args.speculative.method, args.speculative.model, args.speculative.k) == (
        "eagle3",
        "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
        4,
    )
    assert args.histogram_buckets == {"inter_token_latency": tuple(FINE_ITL_BUCKETS)}


def test_ngram_example_has_no_drafter_model_and_a_batch_schedule() -> None:
    spec = parse_pod(rendered_pod("codellama-ngram.yaml")).args.speculative
    assert spec is not None
    assert (spec.method, spec.model, spec.k) == ("ngram", None, 6)
    assert spec.schedule == ((1, 16, 6), (17, 64, 3), (65, 1024, 0))


def test_mtp_and_dflash_examples() -> None:
    mtp = parse_pod(rendered_pod("qwen-mtp-mi355x.yaml")).args
    assert mtp.speculative is not None and (mtp.speculative.method, mtp.speculative.model) == ("mtp", None)
    assert mtp.tensor_parallel_size == 4
    dflash = parse_pod(rendered_pod("llama-70b-dflash-mi355x.yaml")).args.speculative
    assert dflash is not None and (dflash.method, dflash.k) == ("dflash", 8)


def test_draft_model_example() -> None:
    args = parse_pod(rendered_pod("llama-70b-draft-mi300x.yaml")).args
    assert args.max_model_len == 32768
    assert args.speculative is not None
    assert (args.speculative.method, args.speculative.model) == ("draft_model", "meta-llama/Llama-3.2-1B-Instruct")


def test_without_speculation() -> None:
    args = parse_vllm_args(["Qwen/Qwen2.5-7B", "--port", "8000", "--tensor-parallel-size=2"])
    assert args.speculative is None and args.histogram_buckets == {}
    assert (args.model, args.served_model_name, args.tensor_parallel_size) == ("Qwen/Qwen2.5-7B", "Qwen/Qwen2.5-7B", 2)


def test_flag_forms() -> None:
    args = parse_vllm_args(
        ["--model", "m", "--served-model-name", "a", "b", "--max-num-seqs=64", "-q", "fp8", "--enforce-eager"]
    )
    assert (args.model, args.served_model_name, args.max_num_seqs, args.quantization) == ("m", "a", 64, "fp8")


def test_custom_buckets_from_extra_args_and_other_families() -> None:
    """Families vLLM knows but the simulator does not expose are checked, then ignored."""
    buckets = json.dumps({"inter_token_latency": [0.01, 0.02], "request_latency": [1, 2], "iteration_tokens": [1]})
    assert parse_vllm_args(["m", f"--custom-histogram-buckets={buckets}"]).histogram_buckets == {
        "inter_token_latency": (0.01, 0.02),
        "request_latency": (1.0, 2.0),
    }
    every_family = {family: [1, 2] for family in VLLM_BUCKET_FAMILIES}
    assert set(parse_histogram_buckets(json.dumps(every_family))) == {
        "inter_token_latency",
        "time_to_first_token",
        "request_latency",
    }


def test_unknown_bucket_families_are_refused_as_vllm_refuses_them() -> None:
    """vLLM 0.32.0 will not start with a family outside BucketFamilyKey; the message names it and the known ones."""
    assert len(VLLM_BUCKET_FAMILIES) == 8 and "request_num_preemptions" in VLLM_BUCKET_FAMILIES
    for family in ("itl", "time_per_output_token", "request_time_per_output_token", "e2e_request_latency"):
        text = json.dumps({"inter_token_latency": [0.01], family: [0.01]})
        with pytest.raises(PodArgsError) as error:
            parse_histogram_buckets(text)
        assert f"unknown bucket family {family!r}; known families: ['inter_token_latency'," in str(error.value)


@pytest.mark.parametrize(
    ("buckets", "message"),
    [
        ({"request_latency": []}, "custom_histogram_buckets['request_latency']: bucket list must not be empty"),
        ({"request_latency": [0.0, 1.0]}, "bound 0.0 must be finite and greater than 0"),
        ({"request_latency": [-1, 1.0]}, "bound -1 must be finite and greater than 0"),
        ({"request_latency": [1.0, float("inf")]}, "bound inf must be finite and greater than 0"),
        ({"request_latency": [1.0, 1.0]}, "bounds [1.0, 1.0] must be strictly increasing"),
        ({"inter_token_latency": [0.2, 0.1]}, "bounds [0.2, 0.1] must be strictly increasing"),
        ({"request_latency": [True, 2.0]}, "bound True must be a number, not a bool"),
        ({"request_latency": ["1"]}, "bound '1' must be a number, not a str"),
        ({"request_latency": 1.0}, "custom_histogram_buckets['request_latency']: must be a list of numbers"),
    ],
)
def test_bucket_bounds_are_checked_as_vllm_checks_them(buckets: dict[str, Any], message: str) -> None:
    with pytest.raises(PodArgsError) as error:
        parse_histogram_buckets(json.dumps(buckets))
    assert message in str(error.value)


@pytest.mark.parametrize(
    ("config", "method", "model", "k"),
    [
        ({"model": "ngram", "num_speculative_tokens": 3}, "ngram", None, 3),
        ({"model": "x/EAGLE3-llama", "num_speculative_tokens": 3}, "eagle3", "x/EAGLE3-llama", 3),
        ({"model": "x/eagle-llama", "num_speculative_tokens": 3}, "eagle", "x/eagle-llama", 3),
        ({"model": "x/small", "num_speculative_tokens": 2}, "draft_model", "x/small", 2),
        ({"method": "suffix"}, "suffix", None, 24),
        ({"method": "suffix", "suffix_decoding_max_tree_depth": 12}, "suffix", None, 12),
        ({"method": "deepseek_mtp"}, "deepseek_mtp", None, 1),
    ],
)
def test_speculative_config_inference(config: dict[str, Any], method: str, model: str | None, k: int) -> None:
    spec = parse_speculative_config(json.dumps(config))
    assert (spec.method, spec.model, spec.k) == (method, model, k)


def test_schedule_depths_are_capped_at_k_and_parallel_drafting_is_read() -> None:
    spec = parse_speculative_config(
        json.dumps(
            {
                "method": "eagle",
                "model": "e",
                "num_speculative_tokens": 4,
                "num_speculative_tokens_per_batch_size": [[1, 8, 9]],
                "parallel_drafting": True,
                "draft_tensor_parallel_size": 1,
            }
        )
    )
    assert (spec.schedule, spec.parallel_drafting, spec.draft_tp) == (((1, 8, 4),), True, 1)


def test_schedule_rows_are_sorted_and_gaps_are_allowed() -> None:
    config = {"method": "ngram", "num_speculative_tokens": 5}
    rows = [[32, 128, 2], [1, 16, 3]]
    spec = parse_speculative_config(json.dumps({**config, "num_speculative_tokens_per_batch_size": rows}))
    assert spec.schedule == ((1, 16, 3), (32, 128, 2))


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([[2, 16, 3]], "the first batch-size range must start at 1"),
        ([[1, 16, 3], [16, 32, 2]], "batch-size ranges overlap"),
        ([[1, 16, -1]], "num_speculative_tokens >= 0"),
        ([[8, 1, 3]], "start <= end"),
        ([[1, 16]], "each entry must be [start, end, num_speculative_tokens]"),
        ([], "must be a non-empty list"),
    ],
)
def test_schedules_vllm_refuses_at_start_up(rows: list[list[int]], message: str) -> None:
    """vLLM's scheduler validates the schedule when it starts (validate_and_normalize_dynamic_sd_schedule)."""
    config = {"method": "ngram", "num_speculative_tokens": 5, "num_speculative_tokens_per_batch_size": rows}
    with pytest.raises(PodArgsError, match=re.escape(message)):
        parse_speculative_config(json.dumps(config))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--port", "8000"], "no model argument"),
        (["m", "--speculative-config", "{bad"], "--speculative-config is not JSON"),
        (["m", "--speculative-config", "[1]"], "not a JSON object"),
        (["m", "--tensor-parallel-size", "two"], "bad number"),
        (["m", "--custom-histogram-buckets", '{"inter_token_latency": [0.2, 0.1]}'], "strictly increasing"),
        (["m", "--custom-histogram-buckets", '{"time_to_first_token": []}'], "'time_to_first_token'.: bucket list"),
        (["m", "--custom-histogram-buckets", '{"ttft": [1]}'], "unknown bucket family 'ttft'"),
        (["m", "--custom-histogram-buckets", "[0.1]"], "not a JSON object"),
    ],
)
def test_unreadable_arguments(argv: list[str], message: str) -> None:
    with pytest.raises(PodArgsError, match=message):
        parse_vllm_args(argv)


def test_pod_states() -> None:
    pending = parse_pod(rendered_pod("llama-8b-eagle3-mi325x.yaml", phase="Pending"))
    assert not pending.running and not pending.ready
    loading = parse_pod(
        rendered_pod("llama-8b-eagle3-mi325x.yaml", phase="Running", conditions=[{"type": "Ready", "status": "False"}])
    )
    assert loading.running and not loading.ready
    terminating = rendered_pod("llama-8b-eagle3-mi325x.yaml")
    terminating["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert not parse_pod(terminating).running


def test_pod_without_a_vllm_container() -> None:
    pod = rendered_pod("llama-8b-eagle3-mi325x.yaml")
    pod["spec"]["containers"] = [{"name": "sidecar", "command": ["sleep"]}]
    with pytest.raises(PodArgsError, match="no container"):
        parse_pod(pod)

"""Rendering: vLLM argv, the speculative config JSON, AMD placement, labels and the revision hash."""

import json
from typing import Any

import pytest
import yaml

from specfleet.api.problems import InvalidSpecError
from specfleet.api.resource import SpeculativeDeployment
from specfleet.api.vocabulary import LABEL_NAME, LABEL_REVISION, LABEL_TRACK, Track
from specfleet.render.argv import vllm_argv
from specfleet.render.manifests import (
    canary_replicas,
    deployment,
    fleet_selector,
    render,
    revision,
    route_rules,
    service,
)

from bad_specs import DELETE
from speckit import sdep


def speculative(**patch: Any) -> SpeculativeDeployment:
    return sdep({"spec": {"speculative": patch}})


def flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def spec_config(obj: SpeculativeDeployment) -> dict[str, Any] | None:
    value = flag(vllm_argv(obj.spec), "--speculative-config")
    return None if value is None else json.loads(value)


def pod_spec(obj: SpeculativeDeployment, track: Track = Track.STABLE) -> dict[str, Any]:
    return deployment(obj, track, revision(obj.spec), 1)["spec"]["template"]["spec"]


def test_argv_is_vllm_serve_with_the_model_and_engine_options() -> None:
    argv = vllm_argv(sdep({"spec": {"engine": {"tensorParallelSize": 8, "maxModelLen": 8192}}}).spec)
    assert argv[:3] == ["vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct"]
    assert flag(argv, "--tensor-parallel-size") == "8"
    assert flag(argv, "--max-model-len") == "8192"
    assert flag(argv, "--port") == "8000"
    assert flag(argv, "--served-model-name") == "meta-llama/Llama-3.1-8B-Instruct"
    assert "--max-num-seqs" not in argv  # unset options are left to vLLM


def test_speculative_config_uses_vllm_snake_case_keys() -> None:
    assert spec_config(sdep()) == {
        "method": "eagle3",
        "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
        "revision": "main",
        "num_speculative_tokens": 4,
    }


def test_speculative_config_is_compact_sorted_json() -> None:
    raw = flag(vllm_argv(sdep().spec), "--speculative-config")
    assert raw is not None and " " not in raw
    assert list(json.loads(raw)) == sorted(json.loads(raw))


def test_depth_defaults_to_five() -> None:
    assert spec_config(speculative(numSpeculativeTokens=DELETE))["num_speculative_tokens"] == 5


def test_method_none_renders_no_speculative_config() -> None:
    obj = speculative(method="none", model=DELETE, revision=DELETE, numSpeculativeTokens=DELETE)
    assert spec_config(obj) is None


def test_ngram_renders_prompt_lookup_bounds() -> None:
    obj = speculative(method="ngram", model=DELETE, revision=DELETE, promptLookupMin=2, promptLookupMax=4)
    assert spec_config(obj) == {
        "method": "ngram",
        "num_speculative_tokens": 4,
        "prompt_lookup_min": 2,
        "prompt_lookup_max": 4,
    }


def test_suffix_keeps_vllm_depth_unless_set() -> None:
    obj = speculative(
        method="suffix",
        model=DELETE,
        revision=DELETE,
        numSpeculativeTokens=DELETE,
        suffixDecoding={"maxTreeDepth": 32, "minTokenProb": 0.2},
    )
    assert spec_config(obj) == {
        "method": "suffix",
        "suffix_decoding_max_tree_depth": 32,
        "suffix_decoding_min_token_prob": 0.2,
    }


def test_batch_size_schedule_renders_as_triples() -> None:
    obj = speculative(
        numSpeculativeTokensPerBatchSize=[
            {"start": 1, "end": 8, "numTokens": 5},
            {"start": 9, "end": 64, "numTokens": 0},
        ]
    )
    assert spec_config(obj)["num_speculative_tokens_per_batch_size"] == [[1, 8, 5], [9, 64, 0]]


def test_extra_keys_pass_through() -> None:
    assert spec_config(speculative(extra={"enforce_eager": True}))["enforce_eager"] is True


def test_a_key_the_version_does_not_know_is_an_error() -> None:
    with pytest.raises(InvalidSpecError) as raised:
        vllm_argv(speculative(extra={"disable_by_batch_size": 4}).spec)
    assert raised.value.problems[0].field == "spec.speculative.extra.disable_by_batch_size"


def test_unknown_extra_keys_are_trusted_only_on_versions_newer_than_the_table() -> None:
    newer = sdep({"spec": {"engine": {"vllmVersion": "9.0.0"}, "speculative": {"extra": {"brand_new": 1}}}})
    assert spec_config(newer)["brand_new"] == 1
    with pytest.raises(InvalidSpecError, match="has no speculative config key 'brand_new'"):
        vllm_argv(speculative(extra={"brand_new": 1}).spec)


def test_extra_args_come_last_as_separate_elements() -> None:
    argv = vllm_argv(sdep({"spec": {"engine": {"extraArgs": ["--enable-chunked-prefill", "--block-size", "16"]}}}).spec)
    assert argv[-3:] == ["--enable-chunked-prefill", "--block-size", "16"]


def test_gpus_default_to_tensor_parallel_size_and_can_be_overridden() -> None:
    tp8 = pod_spec(sdep({"spec": {"engine": {"tensorParallelSize": 8}}}))
    assert tp8["containers"][0]["resources"]["limits"] == {"amd.com/gpu": "8"}
    counted = pod_spec(sdep({"spec": {"accelerator": {"count": 2, "resourceName": "amd.com/cpx_nps4"}}}))
    assert counted["containers"][0]["resources"]["limits"] == {"amd.com/cpx_nps4": "2"}


def test_required_affinity_on_product_name_and_node_feature_label() -> None:
    spec = pod_spec(sdep({"spec": {"accelerator": {"requireNodeFeatureLabel": True}}}))
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [
        {
            "matchExpressions": [
                {"key": "amd.com/gpu.product-name", "operator": "In", "values": ["AMD_Instinct_MI300X_OAM"]},
                {"key": "feature.node.kubernetes.io/amd-gpu", "operator": "In", "values": ["true"]},
            ]
        }
    ]


def test_no_affinity_when_any_gpu_will_do() -> None:
    assert "affinity" not in pod_spec(sdep({"spec": {"accelerator": {"productNames": []}}}))


def test_rocm_needs_shm_seccomp_video_group_and_gpu_toleration() -> None:
    spec = pod_spec(sdep({"spec": {"engine": {"tensorParallelSize": 4}}}))
    shm = next(v for v in spec["volumes"] if v["name"] == "dshm")
    assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": "14Gi"}
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert spec["automountServiceAccountToken"] is False
    assert 44 in spec["securityContext"]["supplementalGroups"]
    assert {"key": "amd.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    mounts = {m["mountPath"] for m in spec["containers"][0]["volumeMounts"]}
    assert {"/dev/shm", "/cache/huggingface"} <= mounts


def test_model_cache_claim_and_hf_token_secret() -> None:
    spec = pod_spec(sdep({"spec": {"storage": {"modelCacheClaim": "hf-cache", "hfTokenSecret": {"name": "hf"}}}}))
    cache = next(v for v in spec["volumes"] if v["name"] == "model-cache")
    assert cache["persistentVolumeClaim"] == {"claimName": "hf-cache"}
    env = {e["name"]: e for e in spec["containers"][0]["env"]}
    assert env["HF_TOKEN"]["valueFrom"] == {"secretKeyRef": {"name": "hf", "key": "token"}}
    assert "value" not in env["HF_TOKEN"]  # the token itself never lands in the manifest


def test_probes_on_health_with_a_startup_budget_sized_from_the_weights() -> None:
    container = pod_spec(sdep({"spec": {"model": {"sizeGiB": 140}}}))["containers"][0]
    startup = container["startupProbe"]
    assert startup["httpGet"] == {"path": "/health", "port": "http"}
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 600 + 10 * 140
    assert container["readinessProbe"]["httpGet"]["path"] == "/health"
    assert container["ports"][0]["containerPort"] == 8000


def test_labels_selectors_and_scrape_annotations() -> None:
    obj = sdep()
    dep = deployment(obj, Track.CANARY, "abc123", 3)
    assert dep["metadata"]["name"] == "llama-eagle3-canary"
    assert dep["spec"]["replicas"] == 3
    assert dep["spec"]["selector"]["matchLabels"] == {LABEL_NAME: "llama-eagle3", LABEL_TRACK: "canary"}
    template = dep["spec"]["template"]["metadata"]
    assert template["labels"][LABEL_REVISION] == "abc123"
    assert template["annotations"]["prometheus.io/port"] == "8000"
    assert fleet_selector(obj) == "specfleet.io/name=llama-eagle3"
    assert service(obj)["spec"]["selector"] == {LABEL_NAME: "llama-eagle3"}


def test_owner_reference_only_when_the_object_exists() -> None:
    assert "ownerReferences" not in service(sdep())["metadata"]
    owned = service(sdep({"metadata": {"uid": "1234"}}))["metadata"]["ownerReferences"][0]
    assert owned["uid"] == "1234" and owned["controller"] is True and owned["kind"] == "SpeculativeDeployment"


def test_revision_ignores_replicas_and_rollout_settings() -> None:
    base = revision(sdep().spec)
    assert revision(sdep({"spec": {"replicas": 7}}).spec) == base
    assert revision(sdep({"spec": {"rollout": {"guardrails": {"minAcceptanceAlpha": 0.8}}}}).spec) == base


@pytest.mark.parametrize(
    "patch",
    [
        {"speculative": {"numSpeculativeTokens": 3}},
        {"speculative": {"model": "other/eagle3"}},
        {"model": {"revision": "v2"}},
        {"engine": {"image": "registry.local/vllm:custom"}},
        {"engine": {"env": [{"name": "VLLM_ROCM_USE_AITER", "value": "1"}]}},
        {"accelerator": {"productNames": ["AMD_Instinct_MI355_OAM"]}},
        {"engine": {"quantization": "fp8"}},
        {"engine": {"dtype": "float16"}},
        {"engine": {"vllmVersion": "0.24.0"}},
        {"engine": {"extraArgs": ["--tokenizer", "meta-llama/Llama-3.1-8B-Instruct", "--tokenizer-revision", "v2"]}},
    ],
    ids=["depth", "drafter", "model-revision", "image", "env", "gpu", "quantization", "dtype", "engine", "tokenizer"],
)
def test_revision_changes_with_serving_behaviour(patch: dict[str, Any]) -> None:
    """A change of model revision, tokenizer, quantization, GPU product or engine version is a new
    revision, so it is canaried (measured again) like a change of the speculative config."""
    changed = sdep({"spec": patch})
    assert revision(changed.spec) != revision(sdep().spec)


def test_revision_is_deterministic_and_short() -> None:
    first, second = revision(sdep().spec), revision(sdep().spec)
    assert first == second and len(first) == 10 and int(first, 16) >= 0


def test_canary_gets_at_least_one_replica() -> None:
    assert canary_replicas(2, 10) == 1
    assert canary_replicas(10, 50) == 5
    assert canary_replicas(0, 10) == 1


def test_render_yields_services_and_deployment_without_yaml_aliases() -> None:
    objects = render(sdep(), Track.CANARY)
    assert [o["kind"] for o in objects] == ["Service", "Service", "Deployment"]
    assert objects[2]["spec"]["replicas"] == 1
    assert "&id" not in yaml.safe_dump_all(objects)


def test_each_candidate_slice_has_its_own_deployment_selector_and_config() -> None:
    candidates = {"candidates": [{"numSpeculativeTokens": 2}, {"numSpeculativeTokens": 6}]}
    fleet = sdep({"spec": {"replicas": 8, "autoTune": candidates}})
    objects = render(fleet, Track.CANDIDATE)
    slices = [o for o in objects if o["kind"] == "Deployment"]
    assert [d["metadata"]["name"] for d in slices] == ["llama-eagle3-candidate-0", "llama-eagle3-candidate-1"]
    selectors = [d["spec"]["selector"]["matchLabels"] for d in slices]
    assert selectors[0] != selectors[1]  # two Deployments never fight over each other's pods
    for index, deployed in enumerate(slices):
        labels = deployed["spec"]["template"]["metadata"]["labels"]
        assert labels[LABEL_TRACK] == "candidate" and labels["specfleet.io/candidate"] == str(index)
        assert selectors[index].items() <= labels.items()
        assert deployed["spec"]["replicas"] == canary_replicas(8, fleet.spec.rollout.steps[0].weight)
    depths = [
        json.loads(flag(d["spec"]["template"]["spec"]["containers"][0]["args"], "--speculative-config")) for d in slices
    ]
    assert [d["num_speculative_tokens"] for d in depths] == [2, 6]


def test_rendering_the_candidate_track_without_candidates_names_the_field() -> None:
    with pytest.raises(InvalidSpecError, match=r"spec\.autoTune\.candidates"):
        render(sdep(), Track.CANDIDATE)


@pytest.mark.parametrize(("version", "has_buckets"), [("0.31.0", False), ("0.32.0", True), ("0.33.0", True)])
def test_fine_itl_buckets_only_where_vllm_takes_them(version: str, has_buckets: bool) -> None:
    argv = vllm_argv(sdep({"spec": {"engine": {"vllmVersion": version}}}).spec)
    assert ("--custom-histogram-buckets" in argv) is has_buckets
    if has_buckets:
        buckets = json.loads(flag(argv, "--custom-histogram-buckets"))["inter_token_latency"]
        assert buckets == sorted(set(buckets)) and buckets[0] > 0
        assert sum(1 for b in buckets if 0.02 <= b <= 0.05) >= 6  # fine enough to see 10% at 30 ms


def test_route_weights_touch_only_this_fleets_backends() -> None:
    rules = [
        {"matches": [{"path": {"value": "/v1"}}], "backendRefs": [{"name": "llama-eagle3-stable", "port": 8000}]},
        {"backendRefs": [{"name": "someone-else", "port": 80}]},
    ]
    during = route_rules(sdep(), rules, 25)
    assert during[0]["backendRefs"] == [
        {"name": "llama-eagle3-stable", "port": 8000, "weight": 75},
        {"name": "llama-eagle3-canary", "port": 8000, "weight": 25},
    ]
    assert during[0]["matches"] == rules[0]["matches"] and during[1] == rules[1]
    after = route_rules(sdep(), during, 0)
    assert after[0]["backendRefs"] == [{"name": "llama-eagle3-stable", "port": 8000, "weight": 100}]


def test_a_route_in_another_namespace_has_its_weights_set_only_on_refs_to_the_fleets_namespace() -> None:
    """In a route of namespace `routes`, a backendRef without a namespace is a Service of `routes` that happens
    to share the name (another fleet's): never the fleet's to weigh."""
    fleet = sdep()
    theirs = {"name": "llama-eagle3-stable", "port": 8000}
    ours = {**theirs, "namespace": fleet.metadata.namespace}
    rules = [{"backendRefs": [theirs]}, {"backendRefs": [ours]}]
    during = route_rules(fleet, rules, 25, route_namespace="routes")
    assert during[0] == rules[0]
    assert during[1]["backendRefs"] == [
        {**ours, "weight": 75},
        {**ours, "name": "llama-eagle3-canary", "weight": 25},
    ]


@pytest.mark.parametrize(
    ("rollout", "expected"),
    [
        ({}, {"maxSurge": 1, "maxUnavailable": 0}),  # one new pod on top at a time, as before
        ({"maxSurge": 0, "maxUnavailable": 2}, {"maxSurge": 0, "maxUnavailable": 2}),
        ({"maxSurge": "25%", "maxUnavailable": "15%"}, {"maxSurge": 3, "maxUnavailable": 1}),  # of 10: up, down
        ({"maxSurge": "0%", "maxUnavailable": "5%"}, {"maxSurge": 0, "maxUnavailable": 1}),  # both 0: one may go
    ],
)
def test_a_promotion_replaces_stables_pods_within_the_fleets_budget(
    rollout: dict[str, Any], expected: dict[str, int]
) -> None:
    fleet = sdep({"spec": {"replicas": 10, "rollout": rollout}})
    manifest = deployment(fleet, Track.STABLE, revision(fleet.spec), 10)
    assert manifest["spec"]["strategy"] == {"type": "RollingUpdate", "rollingUpdate": expected}

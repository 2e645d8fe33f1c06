"""Bad SpeculativeDeployments and the message each must give, offline and from the API server.

Shared by the unit tests (`specfleet validate`) and the integration tests (a real kube-apiserver with
the generated CRD), so the CEL rules and their Python halves are held to the same table.
"""

import copy
from dataclasses import dataclass, field
from typing import Any

DELETE = object()

BASE: dict[str, Any] = {
    "apiVersion": "specfleet.io/v1alpha1",
    "kind": "SpeculativeDeployment",
    "metadata": {"name": "llama-eagle3", "namespace": "default"},
    "spec": {
        "replicas": 2,
        "model": {"name": "meta-llama/Llama-3.1-8B-Instruct", "sizeGiB": 16},
        "speculative": {
            "method": "eagle3",
            "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
            "revision": "main",
            "numSpeculativeTokens": 4,
        },
        "engine": {"tensorParallelSize": 1},
        "accelerator": {"productNames": ["AMD_Instinct_MI300X_OAM"]},
    },
}


def merged(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """Deep-merge `patch` into a copy of `base`; DELETE removes a key."""
    out = copy.deepcopy(base)
    for key, value in patch.items():
        if value is DELETE:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


@dataclass(frozen=True)
class BadSpec:
    """`field` must be named, with `offline` in `specfleet validate`'s line and `server` in the API error.

    `server` is None for checks only specfleet can make (vLLM version support, memory budgets).
    """

    id: str
    patch: dict[str, Any]
    field: str
    offline: str
    server: str | None = None
    server_field: str | None = field(default=None)
    """How the API server names `field` when it differs (a map key as `requests[cpu]`)."""

    def document(self) -> dict[str, Any]:
        return merged(BASE, self.patch)


def spec(**patch: Any) -> dict[str, Any]:
    return {"spec": patch}


def speculative(**patch: Any) -> dict[str, Any]:
    return spec(speculative=patch)


def custom(*guardrails: dict[str, Any]) -> dict[str, Any]:
    """`rollout.guardrails.custom` set to these user-defined guardrails."""
    return spec(rollout={"guardrails": {"custom": list(guardrails)}})


def picker(**template: Any) -> dict[str, Any]:
    """A route through InferencePools whose endpoint pickers the fleet renders from this template (with an image)."""
    rendered = {"image": "registry.k8s.io/gateway-api-inference-extension/epp:v1.0.0", **template}
    return spec(rollout={"trafficRouting": {**ROUTED, "inferencePool": {"endpointPickerTemplate": rendered}}})


WORSE = {"maxWorsening": 0.01}
ROUTED = {"httpRoute": {"name": "llm"}}
"""Traffic split by an HTTPRoute, which a shadow step needs."""


BAD_SPECS: list[BadSpec] = [
    BadSpec(
        "depth-zero",
        speculative(numSpeculativeTokens=0),
        "spec.speculative.numSpeculativeTokens",
        "greater than or equal to 1",
        "greater than or equal to 1",
    ),
    BadSpec("unknown-method", speculative(method="lookahead"), "spec.speculative.method", "draft_model", "draft_model"),
    BadSpec("method-missing", speculative(method=DELETE), "spec.speculative.method", "required", "Required value"),
    BadSpec(
        "eagle3-without-drafter",
        speculative(model=DELETE),
        "spec.speculative.model",
        "model is required",
        "model is required",
    ),
    BadSpec(
        "ngram-with-model", speculative(method="ngram"), "spec.speculative.model", "must not be set", "must not be set"
    ),
    BadSpec(
        "prompt-lookup-inverted",
        speculative(method="ngram", model=DELETE, revision=DELETE, promptLookupMin=6, promptLookupMax=3),
        "spec.speculative.promptLookupMin",
        "must be <= promptLookupMax",
        "must be <= promptLookupMax",
    ),
    BadSpec(
        "prompt-lookup-on-eagle3",
        speculative(promptLookupMin=2),
        "spec.speculative.method",
        "apply only to methods ngram",
        "apply only to methods ngram",
    ),
    BadSpec(
        "suffix-knobs-on-eagle3",
        speculative(suffixDecoding={"maxTreeDepth": 8}),
        "spec.speculative.suffixDecoding",
        "applies only to method suffix",
        "applies only to method suffix",
    ),
    BadSpec(
        "extra-collides-with-typed-field",
        speculative(extra={"num_speculative_tokens": 3}),
        "spec.speculative.extra",
        "extra must not set keys",
    ),
    BadSpec(
        "extra-tensor-parallel",
        speculative(extra={"tensor_parallel_size": 2}),
        "spec.speculative.extra",
        "tensor_parallel_size",
    ),
    BadSpec(
        "drafter-is-target",
        speculative(model="meta-llama/Llama-3.1-8B-Instruct"),
        "spec.speculative.model",
        "must not be the target model",
        "must not be the target model",
    ),
    BadSpec(
        "draft-tp-neither-1-nor-target",
        spec(engine={"tensorParallelSize": 8}, speculative={"draftTensorParallelSize": 2}),
        "spec.speculative.draftTensorParallelSize",
        "must be 1 or engine.tensorParallelSize",
        "must be 1 or engine.tensorParallelSize",
    ),
    BadSpec(
        "fewer-gpus-than-tp",
        spec(engine={"tensorParallelSize": 8}, accelerator={"count": 4}),
        "spec.accelerator.count",
        "must be >= engine.tensorParallelSize",
        "must be >= engine.tensorParallelSize",
    ),
    BadSpec(
        "steps-decreasing",
        spec(rollout={"steps": [{"weight": 50}, {"weight": 10}]}),
        "spec.rollout.steps",
        "strictly increasing",
        "strictly increasing",
    ),
    BadSpec(
        "steps-repeated",
        spec(rollout={"steps": [{"weight": 20}, {"weight": 20}]}),
        "spec.rollout.steps",
        "strictly increasing",
        "strictly increasing",
    ),
    BadSpec(
        "no-surge-and-none-unavailable",
        spec(rollout={"maxSurge": 0, "maxUnavailable": "0%"}),
        "spec.rollout.maxUnavailable",
        "cannot both be 0",
        "cannot both be 0",
    ),
    BadSpec(
        "surge-not-a-percentage",
        spec(rollout={"maxSurge": "25"}),
        "spec.rollout.maxSurge",
        "percentage of replicas",
        "percentage of replicas",
    ),
    BadSpec(
        "unavailable-negative",
        spec(rollout={"maxUnavailable": -1}),
        "spec.rollout.maxUnavailable",
        "count of pods",
        "count of pods",
    ),
    BadSpec(
        "template-owned-label",
        spec(template={"metadata": {"labels": {"specfleet.io/track": "canary"}}}),
        "spec.template.metadata.labels",
        "specfleet sets them",
        "specfleet sets them",
    ),
    BadSpec(
        "template-owned-annotation",
        spec(template={"metadata": {"annotations": {"prometheus.io/port": "9000"}}}),
        "spec.template.metadata.annotations",
        "Prometheus scrapes vLLM",
        "Prometheus scrapes vLLM",
    ),
    BadSpec(
        "template-gpu-resource",
        spec(template={"vllm": {"resources": {"limits": {"amd.com/gpu": 2, "memory": "64Gi"}}}}),
        "spec.template.vllm.resources",
        "accelerator.count",
        "accelerator.count",
    ),
    BadSpec(
        "template-bad-quantity",
        spec(template={"vllm": {"resources": {"requests": {"cpu": "4 cores"}}}}),
        "spec.template.vllm.resources.requests.cpu",
        "Kubernetes quantity",
        "Kubernetes quantity",
        server_field="spec.template.vllm.resources.requests[cpu]",
    ),
    BadSpec(
        "template-resource-name-not-a-resource",
        spec(template={"vllm": {"resources": {"requests": {"numSpeculativeTokens": 1}}}}),
        "spec.template.vllm.resources.requests[numSpeculativeTokens]",
        "should match pattern",
        "keys must have pattern",
        server_field="spec.template.vllm.resources.requests",
    ),
    BadSpec(
        "template-container-named-vllm",
        spec(template={"spec": {"containers": [{"name": "vllm", "image": "busybox"}]}}),
        "spec.template.spec.containers",
        "template.vllm",
        "template.vllm",
    ),
    BadSpec(
        "template-owned-volume",
        spec(template={"spec": {"volumes": [{"name": "dshm", "emptyDir": {}}]}}),
        "spec.template.spec.volumes",
        "specfleet mounts those",
        "specfleet mounts those",
    ),
    BadSpec(
        "template-owned-mount-path",
        spec(
            template={
                "spec": {"volumes": [{"name": "scratch", "emptyDir": {}}]},
                "vllm": {"volumeMounts": [{"name": "scratch", "mountPath": "/dev/shm"}]},
            }
        ),
        "spec.template.vllm.volumeMounts",
        "specfleet mounts them",
        "specfleet mounts them",
    ),
    BadSpec(
        "template-mount-of-no-volume",
        spec(template={"vllm": {"volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]}}),
        "spec.template.vllm.volumeMounts",
        "must name a volume",
        "must name a volume",
    ),
    BadSpec(
        "template-supplemental-groups",
        spec(template={"spec": {"securityContext": {"supplementalGroups": [0]}}}),
        "spec.template.spec.securityContext",
        "accelerator.supplementalGroups",
        "accelerator.supplementalGroups",
    ),
    BadSpec(
        "template-product-in-node-selector",
        spec(template={"spec": {"nodeSelector": {"amd.com/gpu.product-name": "AMD_Instinct_MI300X_OAM"}}}),
        "spec.template.spec.nodeSelector",
        "accelerator.productNames",
        "accelerator.productNames",
    ),
    BadSpec(
        "template-unnamed-sidecar",
        spec(template={"spec": {"containers": [{"image": "busybox"}]}}),
        "spec.template.spec.containers[0]",
        "name",
        "name",
    ),
    BadSpec(
        "step-weight-zero",
        spec(rollout={"steps": [{"weight": 0}]}),
        "spec.rollout.steps[0].weight",
        "greater than or equal to 1",
        "greater than or equal to 1",
    ),
    BadSpec(
        "step-weight-above-100",
        spec(rollout={"steps": [{"weight": 101}]}),
        "spec.rollout.steps[0].weight",
        "less than or equal to 100",
        "less than or equal to 100",
    ),
    BadSpec("no-steps", spec(rollout={"steps": []}), "spec.rollout.steps", "at least 1", "at least 1"),
    BadSpec(
        "step-mirror-zero",
        spec(rollout={"steps": [{"mirror": 0}], "trafficRouting": ROUTED}),
        "spec.rollout.steps[0].mirror",
        "greater than or equal to 1",
        "greater than or equal to 1",
    ),
    BadSpec(
        "step-mirror-negative",
        spec(rollout={"steps": [{"mirror": -20}], "trafficRouting": ROUTED}),
        "spec.rollout.steps[0].mirror",
        "greater than or equal to 1",
        "greater than or equal to 1",
    ),
    BadSpec(
        "step-mirror-100",
        spec(rollout={"steps": [{"mirror": 100}], "trafficRouting": ROUTED}),
        "spec.rollout.steps[0].mirror",
        "less than or equal to 99",
        "less than or equal to 99",
    ),
    BadSpec(
        "step-weight-and-mirror",
        spec(rollout={"steps": [{"weight": 10, "mirror": 10}], "trafficRouting": ROUTED}),
        "spec.rollout.steps[0]",
        "exactly one of weight",
        "exactly one of weight",
    ),
    BadSpec(
        "step-neither-weight-nor-mirror",
        spec(rollout={"steps": [{"pause": {}}]}),
        "spec.rollout.steps[0]",
        "exactly one of weight",
        "exactly one of weight",
    ),
    BadSpec(
        "mirror-in-replica-ratio-mode",
        spec(rollout={"steps": [{"mirror": 20}, {"weight": 50}]}),
        "spec.rollout.steps",
        "steps[].mirror needs trafficRouting.httpRoute",
        "steps[].mirror needs trafficRouting.httpRoute",
    ),
    BadSpec(
        "canary-header-name-with-a-colon",
        spec(
            rollout={"trafficRouting": {"httpRoute": {"name": "llm", "canaryHeader": {"name": "x-a:b", "value": "1"}}}}
        ),
        "spec.rollout.trafficRouting.httpRoute.canaryHeader.name",
        "should match pattern",
        "should match",
    ),
    BadSpec(
        "canary-header-name-empty",
        spec(rollout={"trafficRouting": {"httpRoute": {"name": "llm", "canaryHeader": {"name": "", "value": "1"}}}}),
        "spec.rollout.trafficRouting.httpRoute.canaryHeader.name",
        "at least 1 character",
        "at least 1",
    ),
    BadSpec(
        "canary-header-value-with-a-newline",
        spec(
            rollout={
                "trafficRouting": {
                    "httpRoute": {"name": "llm", "canaryHeader": {"name": "x-canary", "value": "yes\r\nx-admin: 1"}}
                }
            }
        ),
        "spec.rollout.trafficRouting.httpRoute.canaryHeader.value",
        "should match pattern",
        "should match",
    ),
    BadSpec(
        "inference-pool-without-http-route",
        spec(rollout={"trafficRouting": {"inferencePool": {"endpointPickerRef": {"name": "llm-epp", "port": 9002}}}}),
        "spec.rollout.trafficRouting.inferencePool",
        "inferencePool needs trafficRouting.httpRoute",
        "inferencePool needs trafficRouting.httpRoute",
    ),
    BadSpec(
        "endpoint-picker-port-zero",
        spec(rollout={"trafficRouting": {**ROUTED, "inferencePool": {"endpointPickerRef": {"name": "e", "port": 0}}}}),
        "spec.rollout.trafficRouting.inferencePool.endpointPickerRef.port",
        "greater than or equal to 1",
        "greater than or equal to 1",
    ),
    BadSpec(
        "endpoint-picker-port-above-65535",
        spec(
            rollout={"trafficRouting": {**ROUTED, "inferencePool": {"endpointPickerRef": {"name": "e", "port": 65536}}}}
        ),
        "spec.rollout.trafficRouting.inferencePool.endpointPickerRef.port",
        "less than or equal to 65535",
        "less than or equal to 65535",
    ),
    BadSpec(
        "endpoint-picker-name-not-a-dns-name",
        spec(
            rollout={
                "trafficRouting": {**ROUTED, "inferencePool": {"endpointPickerRef": {"name": "../epp", "port": 9002}}}
            }
        ),
        "spec.rollout.trafficRouting.inferencePool.endpointPickerRef.name",
        "should match pattern",
        "should match",
    ),
    BadSpec(
        "endpoint-picker-unknown-failure-mode",
        spec(
            rollout={
                "trafficRouting": {
                    **ROUTED,
                    "inferencePool": {"endpointPickerRef": {"name": "e", "port": 9002, "failureMode": "Retry"}},
                }
            }
        ),
        "spec.rollout.trafficRouting.inferencePool.endpointPickerRef.failureMode",
        "FailOpen",
        "FailOpen",
    ),
    BadSpec(
        "inference-pool-without-endpoint-picker",
        spec(rollout={"trafficRouting": {**ROUTED, "inferencePool": {}}}),
        "spec.rollout.trafficRouting.inferencePool",
        "exactly one of endpointPickerRef",
        "exactly one of endpointPickerRef",
    ),
    BadSpec(
        "inference-pool-with-both-a-picker-ref-and-a-template",
        spec(
            rollout={
                "trafficRouting": {
                    **ROUTED,
                    "inferencePool": {
                        "endpointPickerRef": {"name": "llm-epp", "port": 9002},
                        "endpointPickerTemplate": {"image": "epp:v1"},
                    },
                }
            }
        ),
        "spec.rollout.trafficRouting.inferencePool",
        "exactly one of endpointPickerRef",
        "exactly one of endpointPickerRef",
    ),
    BadSpec(
        "endpoint-picker-template-sets-the-pool-it-serves",
        picker(args=["--pool-name=someone-elses-pool"]),
        "spec.rollout.trafficRouting.inferencePool.endpointPickerTemplate.args",
        "args must not set --pool-name",
        "args must not set --pool-name",
    ),
    BadSpec(
        "endpoint-picker-template-sets-the-pools-namespace-with-one-dash",
        picker(args=["-v", "2", "-pool-namespace", "other-tenant"]),
        "spec.rollout.trafficRouting.inferencePool.endpointPickerTemplate.args",
        "args must not set --pool-name",
        "args must not set --pool-name",
    ),
    BadSpec(
        "endpoint-picker-template-sets-the-namespace-its-pool-is-read-in",
        picker(env=[{"name": "NAMESPACE", "value": "other-tenant"}]),
        "spec.rollout.trafficRouting.inferencePool.endpointPickerTemplate.env",
        "env must not set NAMESPACE",
        "env must not set NAMESPACE",
    ),
    BadSpec(
        "endpoint-picker-template-env-from-a-secret",
        picker(env=[{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "someone-elses", "key": "token"}}}]),
        "spec.rollout.trafficRouting.inferencePool.endpointPickerTemplate.env[0].valueFrom",
        "unknown field",
        "unknown field",
    ),
    BadSpec(
        "endpoint-picker-template-privileged-security-context",
        picker(securityContext={"privileged": True}),
        "spec.rollout.trafficRouting.inferencePool.endpointPickerTemplate.securityContext",
        "unknown field",
        "unknown field",
    ),
    BadSpec(
        "endpoint-picker-template-service-account-not-a-name",
        picker(serviceAccountName="../kube-system/admin"),
        "spec.rollout.trafficRouting.inferencePool.endpointPickerTemplate.serviceAccountName",
        "should match pattern",
        "should match",
    ),
    BadSpec(
        "endpoint-picker-template-without-an-image",
        spec(rollout={"trafficRouting": {**ROUTED, "inferencePool": {"endpointPickerTemplate": {"port": 9002}}}}),
        "spec.rollout.trafficRouting.inferencePool.endpointPickerTemplate.image",
        "required field is missing",
        "Required value",
    ),
    BadSpec(
        "canary-header-value-too-long",
        spec(
            rollout={
                "trafficRouting": {"httpRoute": {"name": "llm", "canaryHeader": {"name": "x-c", "value": "v" * 4097}}}
            }
        ),
        "spec.rollout.trafficRouting.httpRoute.canaryHeader.value",
        "at most 4096 characters",
        "4096",
    ),
    BadSpec(
        "mirror-with-max-surge",
        spec(rollout={"steps": [{"mirror": 20}], "trafficRouting": ROUTED, "maxSurge": 1}),
        "spec.rollout.steps",
        "steps[].mirror cannot be used with maxSurge",
        "steps[].mirror cannot be used with maxSurge",
    ),
    BadSpec(
        "shadow-step-after-users",
        spec(rollout={"steps": [{"weight": 10}, {"mirror": 20}], "trafficRouting": ROUTED}),
        "spec.rollout.steps",
        "shadow steps come before",
        "shadow steps come before",
    ),
    BadSpec(
        "gpu-memory-above-one",
        spec(engine={"gpuMemoryUtilization": 1.5}),
        "spec.engine.gpuMemoryUtilization",
        "less than or equal to 1",
        "less than or equal to 1",
    ),
    BadSpec(
        "misspelled-field",
        speculative(numSpecTokens=4),
        "spec.speculative.numSpecTokens",
        "unknown field",
        "unknown field",
    ),
    BadSpec(
        "newline-in-model-name",
        spec(model={"name": "meta-llama/x\n--trust-remote-code"}),
        "spec.model.name",
        "single line",
        "should match",
    ),
    BadSpec(
        "model-name-looks-like-a-flag",
        spec(model={"name": "--trust-remote-code"}),
        "spec.model.name",
        "must not start with '-'",
        "should match",
    ),
    BadSpec(
        "duration-in-words",
        spec(rollout={"analysis": {"interval": "5 minutes"}}),
        "spec.rollout.analysis.interval",
        "should match pattern",
        "should match",
    ),
    BadSpec(
        "analysis-every-pass",
        spec(rollout={"analysis": {"interval": "500ms"}}),
        "spec.rollout.analysis.interval",
        "interval must be at least 1s",
        "interval must be at least 1s",
    ),
    BadSpec(
        "unguarded-experiment",
        spec(rollout={"unguarded": True}, autoTune={"candidates": [{"numSpeculativeTokens": 2}]}),
        "spec.rollout.unguarded",
        "cannot go with autoTune.candidates",
        "cannot go with autoTune.candidates",
    ),
    BadSpec(
        "window-past-a-year",
        spec(rollout={"analysis": {"window": "30000000000h"}}),
        "spec.rollout.analysis.window",
        "longer than 8760h",
        "spec.rollout.analysis.window",
    ),
    BadSpec(
        "extra-args-repeat-spec-config",
        spec(engine={"extraArgs": ["--speculative-config={}"]}),
        "spec.engine.extraArgs",
        "must not repeat flags",
        "must not repeat flags",
    ),
    BadSpec(
        "extra-args-repeat-tp",
        spec(engine={"extraArgs": ["--tensor-parallel-size", "2"]}),
        "spec.engine.extraArgs",
        "must not repeat flags",
        "must not repeat flags",
    ),
    BadSpec(
        "name-too-long",
        {"metadata": {"name": "a" * 60}},
        "metadata.name",
        "at most 50 characters",
        "at most 50 characters",
    ),
    BadSpec(
        "name-starts-with-digit",
        {"metadata": {"name": "9fleet"}},
        "metadata.name",
        "should match pattern",
        "DNS-1035 label",
    ),
    BadSpec(
        "negative-replicas",
        spec(replicas=-1),
        "spec.replicas",
        "greater than or equal to 0",
        "greater than or equal to 0",
    ),
    BadSpec(
        "custom-rate-gauge",
        custom({"name": "parsed", "rate": {"events": "tool_calls_parsed", "total": "tool_calls_total", **WORSE}}),
        "spec.rollout.guardrails.custom[0].rate.events",
        "events must be a counter, named with the suffix _total",
        "events must be a counter, named with the suffix _total",
    ),
    BadSpec(
        "custom-rate-same-counter",
        custom({"name": "parsed", "rate": {"events": "tool_calls_total", "total": "tool_calls_total", **WORSE}}),
        "spec.rollout.guardrails.custom[0].rate.events",
        "must be different counters",
        "must be different counters",
    ),
    BadSpec(
        "custom-histogram-series",
        custom({"name": "lat", "latency": {"histogram": "tool_call_duration_seconds_bucket", "maxRegression": 0.1}}),
        "spec.rollout.guardrails.custom[0].latency.histogram",
        "histogram must be a histogram's base name",
        "histogram must be a histogram's base name",
    ),
    BadSpec(
        "custom-histogram-gauge",
        custom({"name": "kv", "latency": {"histogram": "vllm:kv_cache_usage_perc", "maxRegression": 0.1}}),
        "spec.rollout.guardrails.custom[0].latency.histogram",
        "a gauge's instant value cannot be bounded",
        "a gauge's instant value cannot be bounded",
    ),
    BadSpec(
        "custom-metric-name-promql",
        custom({"name": "lat", "latency": {"histogram": 'x{a="b"} or vector(1)', "maxRegression": 0.1}}),
        "spec.rollout.guardrails.custom[0].latency.histogram",
        "should match pattern",
        "should match",
    ),
    BadSpec(
        "custom-quantile-one",
        custom(
            {"name": "lat", "latency": {"histogram": "tool_call_duration_seconds", "quantile": 1, "maxRegression": 0.1}}
        ),
        "spec.rollout.guardrails.custom[0].latency.quantile",
        "less than 1",
        "less than 1",
    ),
    BadSpec(
        "custom-both-kinds",
        custom(
            {
                "name": "both",
                "rate": {"events": "tool_calls_parsed_total", "total": "tool_calls_total", **WORSE},
                "latency": {"histogram": "tool_call_duration_seconds", "maxRegression": 0.1},
            }
        ),
        "spec.rollout.guardrails.custom[0].rate",
        "exactly one of rate and latency",
        "exactly one of rate and latency",
    ),
    BadSpec(
        "custom-escapes-the-track",
        custom(
            {
                "name": "lat",
                "latency": {"histogram": "tool_call_duration_seconds", "maxRegression": 0.1},
                "matchLabels": {"specfleet_io_track": "stable"},
            }
        ),
        "spec.rollout.guardrails.custom[0].matchLabels",
        "matchLabels must not set",
        "matchLabels must not set",
    ),
    BadSpec(
        "custom-duplicate-names",
        custom(
            {"name": "lat", "latency": {"histogram": "a_seconds", "maxRegression": 0.1}},
            {"name": "lat", "latency": {"histogram": "b_seconds", "maxRegression": 0.1}},
        ),
        "spec.rollout.guardrails.custom",
        "custom guardrail names must be unique",
        "custom guardrail names must be unique",
    ),
    BadSpec(
        "acceptance-above-one",
        spec(rollout={"guardrails": {"minAcceptanceAlpha": 1.2}}),
        "spec.rollout.guardrails.minAcceptanceAlpha",
        "less than or equal to 1",
        "less than or equal to 1",
    ),
    BadSpec(
        "output-equivalence-floor-above-one",
        spec(rollout={"guardrails": {"outputEquivalence": {"enabled": True, "minIdentical": 1.5}}}),
        "spec.rollout.guardrails.outputEquivalence.minIdentical",
        "less than or equal to 1",
        "less than or equal to 1",
    ),
    BadSpec(
        "output-equivalence-no-tokens",
        spec(rollout={"guardrails": {"outputEquivalence": {"enabled": True, "maxTokens": 0}}}),
        "spec.rollout.guardrails.outputEquivalence.maxTokens",
        "greater than or equal to 1",
        "greater than or equal to 1",
    ),
    BadSpec(
        "output-equivalence-prompts-while-off",
        spec(rollout={"guardrails": {"outputEquivalence": {"promptsConfigMap": "my-prompts"}}}),
        "spec.rollout.guardrails.outputEquivalence.promptsConfigMap",
        "read only when outputEquivalence.enabled is true",
        "read only when outputEquivalence.enabled is true",
    ),
    BadSpec(
        "batch-schedule-inverted",
        speculative(numSpeculativeTokensPerBatchSize=[{"start": 64, "end": 8, "numTokens": 2}]),
        "spec.speculative.numSpeculativeTokensPerBatchSize[0]",
        "start must be <= end",
        "start must be <= end",
    ),
    BadSpec("unknown-dtype", spec(engine={"dtype": "fp64"}), "spec.engine.dtype", "bfloat16", "bfloat16"),
    BadSpec(
        "prometheus-not-http",
        spec(prometheus={"url": "ftp://prometheus:9090"}),
        "spec.prometheus.url",
        "should match pattern",
        "should match",
    ),
    BadSpec(
        "prometheus-userinfo",
        spec(prometheus={"url": "http://prometheus.monitoring.svc@evil.example:9090"}),
        "spec.prometheus.url",
        "no userinfo",
        "no userinfo",
    ),
    BadSpec(
        "prometheus-credentials",
        spec(prometheus={"url": "http://user:password@prometheus.monitoring.svc:9090"}),
        "spec.prometheus.url",
        "no userinfo",
        "no userinfo",
    ),
    BadSpec(
        "prometheus-fragment",
        spec(prometheus={"url": "http://prometheus.monitoring.svc:9090/#@evil.example"}),
        "spec.prometheus.url",
        "no userinfo",
        "no userinfo",
    ),
    BadSpec(
        "prometheus-query",
        spec(prometheus={"url": "http://prometheus.monitoring.svc:9090/?token=abc"}),
        "spec.prometheus.url",
        "no userinfo",
        "no userinfo",
    ),
    BadSpec(
        "batch-schedule-overlaps",
        speculative(
            numSpeculativeTokensPerBatchSize=[
                {"start": 1, "end": 16, "numTokens": 4},
                {"start": 8, "end": 64, "numTokens": 2},
            ]
        ),
        "spec.speculative.numSpeculativeTokensPerBatchSize",
        "must not overlap",
        "must not overlap",
    ),
    BadSpec(
        "batch-schedule-not-from-one",
        speculative(numSpeculativeTokensPerBatchSize=[{"start": 2, "end": 16, "numTokens": 4}]),
        "spec.speculative.numSpeculativeTokensPerBatchSize",
        "start at batch size 1",
        "start at batch size 1",
    ),
    # only specfleet knows these: the API server cannot
    BadSpec(
        "medusa-gone-in-0.33", speculative(method="medusa"), "spec.speculative.method", "was removed in vLLM 0.33.0"
    ),
    BadSpec(
        "disable-by-batch-size-gone",
        speculative(extra={"disable_by_batch_size": 4}),
        "spec.speculative.extra.disable_by_batch_size",
        "was removed in vLLM",
    ),
    BadSpec(
        "buckets-unknown-family",
        spec(engine={"vllmVersion": "0.32.0", "extraArgs": ["--custom-histogram-buckets", '{"itl": [0.01]}']}),
        "spec.engine.extraArgs[0]",
        "unknown bucket family 'itl'",
    ),
    BadSpec(
        "buckets-not-increasing",
        spec(engine={"vllmVersion": "0.32.0", "extraArgs": ['--custom-histogram-buckets={"request_latency": [2, 1]}']}),
        "spec.engine.extraArgs[0]",
        "must be strictly increasing",
    ),
    BadSpec(
        "buckets-flag-too-new",
        spec(engine={"vllmVersion": "0.31.0", "extraArgs": ["--custom-histogram-buckets", '{"request_latency": [1]}']}),
        "spec.engine.extraArgs[0]",
        "needs vLLM >= 0.32.0",
    ),
    BadSpec(
        "vllm-too-old",
        spec(engine={"vllmVersion": "0.6.0"}),
        "spec.engine.vllmVersion",
        "older than the oldest supported",
    ),
    BadSpec(
        "drafter-too-big",
        spec(engine={"tensorParallelSize": 8}, speculative={"sizeGiB": 30}),
        "spec.speculative.sizeGiB",
        "more than 10%",
    ),
    BadSpec("weights-do-not-fit", spec(model={"sizeGiB": 400}), "spec.model.sizeGiB", "more than the"),
    BadSpec(
        "hf-token-twice",
        spec(storage={"hfTokenSecret": {"name": "hf"}}, engine={"env": [{"name": "HF_TOKEN", "value": "x"}]}),
        "spec.engine.env[0].name",
        "set by specfleet",
    ),
    BadSpec(
        "newline-in-extra-value",
        speculative(extra={"code_revision": "a\nb"}),
        "spec.speculative.extra.code_revision",
        "single line",
    ),
    BadSpec(
        "mtp-before-0.11",
        spec(engine={"vllmVersion": "0.10.2"}, speculative={"method": "mtp", "model": DELETE, "revision": DELETE}),
        "spec.speculative.method",
        "needs vLLM >= 0.11.0",
    ),
    BadSpec(
        "dflash-before-0.20",
        spec(engine={"vllmVersion": "0.19.1"}, speculative={"method": "dflash"}),
        "spec.speculative.method",
        "needs vLLM >= 0.20.0",
    ),
    BadSpec(
        "mlp-speculator-never-ran",
        speculative(method="mlp_speculator"),
        "spec.speculative.method",
        "does not work on any vLLM release",
    ),
    BadSpec(
        "batch-schedule-before-0.24",
        spec(
            engine={"vllmVersion": "0.23.0"},
            speculative={"numSpeculativeTokensPerBatchSize": [{"start": 1, "end": 8, "numTokens": 2}]},
        ),
        "spec.speculative.numSpeculativeTokensPerBatchSize",
        "needs vLLM >= 0.24.0",
    ),
    BadSpec(
        "probabilistic-drafting-in-0.21",
        spec(engine={"vllmVersion": "0.21.0"}, speculative={"draftSampleMethod": "probabilistic"}),
        "spec.speculative.draftSampleMethod",
        "needs vLLM >= 0.22.0",
    ),
    BadSpec(
        "draft-model-tp-mismatch",
        spec(engine={"tensorParallelSize": 8}, speculative={"method": "draft_model", "draftTensorParallelSize": 1}),
        "spec.speculative.draftTensorParallelSize",
        "target's tensorParallelSize",
    ),
]

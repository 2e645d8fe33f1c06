"""Builders of SpeculativeDeployment objects from the suite's valid document, bad_specs.BASE."""

from typing import Any

from specfleet.api.resource import SpeculativeDeployment

from bad_specs import BASE, merged


def sdep(patch: dict[str, Any] | None = None) -> SpeculativeDeployment:
    """A SpeculativeDeployment: bad_specs.BASE with `patch` merged over it."""
    return SpeculativeDeployment.from_mapping(merged(BASE, patch or {}))


ARCH_AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]},
                {"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]}]},
            ]
        },
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 10, "preference": {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["x"]}]}}
        ],
    },
    "podAntiAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {
                "weight": 50,
                "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {}}},
            }
        ]
    },
}

FULL_TEMPLATE: dict[str, Any] = {  # a real pod needs the ServiceAccount vllm-reader and PriorityClass serving-high
    "metadata": {"labels": {"team": "search", "cost-center": "ml-42"}, "annotations": {"mesh.io/inject": "false"}},
    "spec": {
        "serviceAccountName": "vllm-reader",
        "imagePullSecrets": [{"name": "registry-creds"}],
        "priorityClassName": "serving-high",
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "affinity": ARCH_AFFINITY,
        "securityContext": {"runAsUser": 2000, "fsGroupChangePolicy": "OnRootMismatch"},
        "volumes": [{"name": "scratch", "emptyDir": {"sizeLimit": "10Gi"}}],
        "containers": [{"name": "log-shipper", "image": "fluent/fluent-bit:3.0"}],
        "initContainers": [{"name": "warm-cache", "image": "busybox:1.36", "command": ["true"]}],
    },
    "vllm": {
        "resources": {"requests": {"cpu": 16, "memory": "128Gi"}, "limits": {"memory": "160Gi"}},
        "volumeMounts": [{"name": "scratch", "mountPath": "/scratch", "readOnly": False}],
    },
}

"""How many of a canary's pods the nodes can take, said before the pods are created.

Without this, a canary step that asks for more GPUs than the cluster has free creates pods that stay
Pending, and the only word of it is the scheduler's `Insufficient amd.com/gpu` once they exist. Here the
operator compares what it is about to ask for with what the nodes the fleet's pods may use have free, so
the state machine can say at once that a step does not fit, and by how much.

Pure: it reads Node and Pod objects as the API server returns them (camelCase dicts); the shell lists
them. It counts as the scheduler does, for one extended resource: a node's allocatable, minus the
requests of the pods bound to it that have not finished, pods being deleted included (their GPUs are not
free until they are gone). Odd data never raises: a field that is missing or cannot be read makes a node
not match, or a count 0.
"""

import re
from collections.abc import Iterable, Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from specfleet.api.spec import SpeculativeDeploymentSpec, TaintEffect, Toleration, TolerationOperator
from specfleet.hardware import NODE_FEATURE_LABEL, PRODUCT_NAME_LABEL
from specfleet.rollout.types import GpuRequest, GpuRoom

Raw = Mapping[str, Any]

FINISHED_PHASES = frozenset({"Succeeded", "Failed"})
"""A pod in these phases holds nothing: the scheduler stops counting it (its containers have exited)."""
REPELLING_EFFECTS = frozenset({TaintEffect.NO_SCHEDULE.value, TaintEffect.NO_EXECUTE.value})
"""Taints that keep a pod off a node unless tolerated; PreferNoSchedule only steers the scheduler."""

_QUANTITY = re.compile(r"^([+-]?[0-9]+(?:\.[0-9]*)?|[+-]?\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|[kMGTPE]|[eE][+-]?[0-9]+)?$")
_SUFFIX = {
    "": Decimal(1),
    **{s: Decimal(1000) ** (i + 1) for i, s in enumerate("kMGTPE")},
    **{s: Decimal(1024) ** (i + 1) for i, s in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"))},
}


def room(spec: SpeculativeDeploymentSpec, request: GpuRequest, nodes: Iterable[Raw], pods: Iterable[Raw]) -> GpuRoom:
    """What the nodes the fleet's pods may use have free of `request.resource`, and how many pods of
    `request.per_pod` GPUs fit, node by node (a pod's GPUs are all on one node, so 3 free on one node and
    4 on another fit one 4-GPU pod, not one and three quarters).

    A node may be used when `node_matches` says so; its free GPUs are its allocatable minus what the
    unfinished pods bound to it request (`pod_request`), never below 0.
    """
    resource = request.resource
    allocatable: dict[str, int] = {}
    for node in nodes:
        name = _text(_get(node, "metadata", "name"))
        gpus = node_allocatable(node, resource)
        if name and gpus > 0 and node_matches(spec, node):
            allocatable[name] = gpus
    used = dict.fromkeys(allocatable, 0)
    for pod in pods:
        node_name = _text(_get(pod, "spec", "nodeName"))
        if node_name in used and holds_resources(pod):
            used[node_name] += pod_request(pod, resource)
    free = {name: max(0, gpus - used[name]) for name, gpus in allocatable.items()}
    per_pod = request.per_pod
    fitting = sum(gpus // per_pod for gpus in free.values()) if per_pod > 0 else 0
    return GpuRoom(request=request, free=sum(free.values()), fitting=fitting, nodes=len(allocatable))


def node_matches(spec: SpeculativeDeploymentSpec, node: Raw) -> bool:
    """Whether the scheduler could place one of the fleet's pods on `node`, leaving free room aside: the
    product label accepted (`accelerator.productNames`, empty accepts any), the NFD feature label when
    `accelerator.requireNodeFeatureLabel`, not cordoned, Ready, and every NoSchedule and NoExecute taint
    tolerated by `accelerator.tolerations`. These are what the rendered pods' node affinity and
    tolerations ask for (render.manifests)."""
    accelerator = spec.accelerator
    labels = _get(node, "metadata", "labels")
    labels = labels if isinstance(labels, Mapping) else {}
    if accelerator.product_names and labels.get(PRODUCT_NAME_LABEL) not in accelerator.product_names:
        return False
    if accelerator.require_node_feature_label and labels.get(NODE_FEATURE_LABEL) != "true":
        return False
    node_spec = _get(node, "spec")
    if node_spec is not None and not isinstance(node_spec, Mapping):
        return False
    if _get(node, "spec", "unschedulable") is True:
        return False
    return node_ready(node) and taints_tolerated(_get(node, "spec", "taints"), accelerator.tolerations)


def node_ready(node: Raw) -> bool:
    """The node's Ready condition is True (the kubelet reports in; a NotReady node takes no new pods)."""
    conditions = _get(node, "status", "conditions")
    if not isinstance(conditions, list):
        return False
    return any(isinstance(c, Mapping) and c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def taints_tolerated(taints: Any, tolerations: Iterable[Toleration]) -> bool:
    """Every taint that repels new pods (NoSchedule, NoExecute) is tolerated by one of `tolerations`.
    A list that cannot be read is no node to place pods on; a taint that cannot be read is one no
    toleration matches."""
    if taints is None:
        return True
    if not isinstance(taints, list):
        return False
    tolerations = list(tolerations)
    for taint in taints:
        if not isinstance(taint, Mapping):
            return False
        if taint.get("effect") in REPELLING_EFFECTS and not any(tolerates(t, taint) for t in tolerations):
            return False
    return True


def tolerates(toleration: Toleration, taint: Raw) -> bool:
    """Kubernetes' `Toleration.ToleratesTaint`: an effect, when given, must be the taint's; a key, when
    given, must be the taint's (so an empty key with Exists tolerates every taint); Exists matches any
    value, Equal the taint's value exactly (a missing value is the empty string)."""
    if toleration.effect is not None and toleration.effect.value != taint.get("effect"):
        return False
    if toleration.key and toleration.key != taint.get("key"):
        return False
    if toleration.operator == TolerationOperator.EXISTS:
        return True
    return (toleration.value or "") == (_text(taint.get("value")) or "")


def holds_resources(pod: Raw) -> bool:
    """Whether the scheduler counts the pod against its node: not Succeeded or Failed. A pod being deleted
    (a deletionTimestamp) still counts: its containers run until they stop, and their devices with them."""
    return _get(pod, "status", "phase") not in FINISHED_PHASES


def pod_request(pod: Raw, resource: str) -> int:
    """What the pod asks of `resource`, as the scheduler computes it: the sum over its containers and its
    sidecars (init containers with restartPolicy Always, which run alongside), or, when larger, what an
    init container needs while it runs (its own request plus the sidecars started before it); plus the
    pod overhead of its RuntimeClass. A container's request is its `requests`, else its `limits` (the API
    server defaults an extended resource's request to its limit)."""
    spec = _get(pod, "spec")
    if not isinstance(spec, Mapping):
        return 0
    total = sum(container_request(c, resource) for c in _list(spec.get("containers")))
    sidecars, init_peak = 0, 0
    for init in _list(spec.get("initContainers")):
        asks = container_request(init, resource)
        if isinstance(init, Mapping) and init.get("restartPolicy") == "Always":
            sidecars += asks
            init_peak = max(init_peak, sidecars)
        else:
            init_peak = max(init_peak, sidecars + asks)
    overhead = spec.get("overhead")
    extra = quantity(overhead.get(resource)) if isinstance(overhead, Mapping) else 0
    return max(total + sidecars, init_peak) + extra


def container_request(container: Any, resource: str) -> int:
    """One container's request of `resource`: `resources.requests`, else `resources.limits`, else 0."""
    resources = container.get("resources") if isinstance(container, Mapping) else None
    if not isinstance(resources, Mapping):
        return 0
    for field in ("requests", "limits"):
        amounts = resources.get(field)
        if isinstance(amounts, Mapping) and resource in amounts:
            return quantity(amounts[resource])
    return 0


def node_allocatable(node: Raw, resource: str) -> int:
    """The node's `status.allocatable` of `resource` (what the device plugin advertises, less what is
    reserved), 0 when it has none or it cannot be read."""
    allocatable = _get(node, "status", "allocatable")
    return quantity(allocatable.get(resource)) if isinstance(allocatable, Mapping) else 0


def quantity(value: Any) -> int:
    """A Kubernetes quantity of a countable resource as a whole number: `8`, also `1k` or `8e0`. Extended
    resources are whole numbers (the API server refuses fractions), so anything else (a fraction, a
    negative, text) reads as 0, as does a bool."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return max(0, value)
    if not isinstance(value, str):
        return 0
    match = _QUANTITY.match(value.strip())
    if match is None:
        return 0
    number, suffix = match.group(1), match.group(2) or ""
    try:
        amount = Decimal(number) * _SUFFIX[suffix] if suffix in _SUFFIX else Decimal(number + suffix)
    except (InvalidOperation, ValueError):
        return 0
    if amount < 0 or amount != amount.to_integral_value() or amount > 10**18:
        return 0
    return int(amount)


def _get(obj: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None

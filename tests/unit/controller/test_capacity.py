"""The capacity check: what the nodes a fleet's pods may use have free, from raw Node
and Pod objects as the API server returns them. Nodes match as the scheduler would place the fleet's pods
(product label, NFD label, cordon, Ready, taints against the spec's tolerations); free GPUs are counted
node by node, as the scheduler counts requests (pods being deleted still hold theirs); odd data is
0 or no match, never an exception."""

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specfleet.api.spec import SpeculativeDeploymentSpec, Toleration
from specfleet.capacity import pod_request, quantity, room, tolerates
from specfleet.hardware import MI300X, MI325X, NODE_FEATURE_LABEL, PRODUCT_NAME_LABEL
from specfleet.rollout.types import GpuRequest

from speckit import sdep

GPU = "amd.com/gpu"
Raw = dict[str, Any]


def spec(accelerator: dict[str, Any] | None = None) -> SpeculativeDeploymentSpec:
    """bad_specs.BASE: MI300X nodes only, the default toleration (amd.com/gpu:NoSchedule)."""
    return sdep({"spec": {"accelerator": accelerator}} if accelerator is not None else None).spec


def ask(pods: int = 1, per_pod: int = 1, resource: str = GPU) -> GpuRequest:
    return GpuRequest(pods=pods, per_pod=per_pod, resource=resource)


def node(
    name: str,
    gpus: Any = "8",
    product: str | None = MI300X.product_name,
    ready: str = "True",
    unschedulable: bool | None = None,
    taints: list[Raw] | None = None,
    labels: dict[str, str] | None = None,
    resource: str = GPU,
) -> Raw:
    all_labels = {"kubernetes.io/hostname": name, **({PRODUCT_NAME_LABEL: product} if product else {})}
    spec: Raw = {}
    if unschedulable is not None:
        spec["unschedulable"] = unschedulable
    if taints is not None:
        spec["taints"] = taints
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {**all_labels, **(labels or {})}},
        "spec": spec,
        "status": {
            "allocatable": {"cpu": "96", "memory": "2Ti", resource: gpus},
            "capacity": {"cpu": "96", "memory": "2Ti", resource: gpus},
            "conditions": [
                {"type": "MemoryPressure", "status": "False"},
                {"type": "Ready", "status": ready},
            ],
        },
    }


def container(requests: Any = None, limits: Any = None, resource: str = GPU, **extra: Any) -> Raw:
    resources: Raw = {}
    if requests is not None:
        resources["requests"] = {"cpu": "4", resource: requests}
    if limits is not None:
        resources["limits"] = {resource: limits}
    return {"name": "c", "image": "vllm", "resources": resources, **extra}


def pod(
    on: str | None,
    gpus: Any = "1",
    phase: str = "Running",
    deleting: bool = False,
    containers: list[Raw] | None = None,
    init: list[Raw] | None = None,
    namespace: str = "other-team",
) -> Raw:
    metadata: Raw = {"name": f"p-{on}", "namespace": namespace}
    if deleting:
        metadata["deletionTimestamp"] = "2026-11-29T12:00:00Z"
    spec: Raw = {"containers": containers if containers is not None else [container(gpus, gpus)]}
    if on is not None:
        spec["nodeName"] = on
    if init is not None:
        spec["initContainers"] = init
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec, "status": {"phase": phase}}


def gpu_taint(effect: str = "NoSchedule", key: str = GPU, value: str | None = None) -> Raw:
    taint = {"key": key, "effect": effect}
    return {**taint, "value": value} if value is not None else taint


# which nodes match


def test_only_nodes_of_an_accepted_product_count() -> None:
    nodes = [node("a"), node("b", product=MI325X.product_name), node("c", product=None)]
    got = room(spec(), ask(), nodes, [])
    assert (got.nodes, got.free, got.fitting) == (1, 8, 8)
    either = spec({"productNames": [MI300X.product_name, MI325X.product_name]})
    assert room(either, ask(), nodes, []).nodes == 2


def test_no_product_names_accepts_any_node_with_the_resource_allocatable() -> None:
    nodes = [node("a"), node("b", product=MI325X.product_name), node("c", product=None), node("cpu", gpus=None)]
    cpu_only = node("cpu2")
    del cpu_only["status"]["allocatable"][GPU]
    got = room(spec({"productNames": []}), ask(), [*nodes, cpu_only], [])
    assert (got.nodes, got.free) == (3, 24)


def test_the_node_feature_label_is_required_only_when_the_spec_says_so() -> None:
    labelled = node("a", labels={NODE_FEATURE_LABEL: "true"})
    nodes = [labelled, node("b"), node("c", labels={NODE_FEATURE_LABEL: "false"})]
    assert room(spec(), ask(), nodes, []).nodes == 3
    strict = spec({"productNames": [MI300X.product_name], "requireNodeFeatureLabel": True})
    assert room(strict, ask(), nodes, []).nodes == 1


def test_cordoned_and_not_ready_nodes_take_no_pods() -> None:
    nodes = [
        node("cordoned", unschedulable=True),
        node("uncordoned", unschedulable=False),
        node("not-ready", ready="False"),
        node("unknown", ready="Unknown"),
        node("ok"),
    ]
    no_conditions = node("silent")
    no_conditions["status"]["conditions"] = []
    got = room(spec(), ask(), [*nodes, no_conditions], [])
    assert (got.nodes, got.free) == (2, 16)


# taints and tolerations


def test_the_default_toleration_covers_the_gpu_taint_and_nothing_else() -> None:
    nodes = [
        node("gpu-taint", taints=[gpu_taint()]),
        node("gpu-execute", taints=[gpu_taint("NoExecute")]),  # the default tolerates NoSchedule only
        node("other", taints=[gpu_taint(key="dedicated", value="training")]),
        node("prefer", taints=[gpu_taint("PreferNoSchedule", key="dedicated")]),  # steers, does not repel
        node("none", taints=[]),
    ]
    got = room(spec(), ask(), nodes, [])
    assert got.nodes == 3  # gpu-taint, prefer, none


@pytest.mark.parametrize(
    ("toleration", "taint", "tolerated"),
    [
        ({"operator": "Exists"}, gpu_taint("NoExecute", key="anything", value="x"), True),  # empty key: all
        ({"key": "dedicated", "operator": "Exists"}, gpu_taint(key="dedicated", value="x"), True),
        ({"key": "dedicated", "operator": "Exists"}, gpu_taint(key="other"), False),
        ({"key": "dedicated", "value": "llm"}, gpu_taint(key="dedicated", value="llm"), True),  # Equal by default
        ({"key": "dedicated", "operator": "Equal", "value": "llm"}, gpu_taint(key="dedicated", value="x"), False),
        ({"key": "dedicated", "operator": "Equal"}, gpu_taint(key="dedicated"), True),  # both values empty
        ({"key": "dedicated", "operator": "Equal", "value": "llm"}, gpu_taint(key="dedicated"), False),
        ({"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}, gpu_taint(key="dedicated"), True),
        (
            {"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"},
            gpu_taint("NoExecute", "dedicated"),
            False,
        ),
        ({"key": "dedicated", "operator": "Exists"}, gpu_taint("NoExecute", "dedicated"), True),  # any effect
        (
            {"key": "dedicated", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60},
            gpu_taint("NoExecute", "dedicated"),
            True,
        ),
    ],
)
def test_toleration_matching_is_kubernetes(toleration: Raw, taint: Raw, tolerated: bool) -> None:
    assert tolerates(Toleration.model_validate(toleration), taint) is tolerated
    tainted = node("a", taints=[taint])
    assert room(spec({"productNames": [], "tolerations": [toleration]}), ask(), [tainted], []).nodes == int(tolerated)


def test_every_repelling_taint_must_be_tolerated() -> None:
    both = node("a", taints=[gpu_taint(), gpu_taint(key="dedicated", value="llm")])
    assert room(spec(), ask(), [both], []).nodes == 0
    tolerations = [{"key": GPU, "operator": "Exists"}, {"key": "dedicated", "value": "llm", "effect": "NoSchedule"}]
    assert room(spec({"tolerations": tolerations}), ask(), [both], []).nodes == 1
    assert room(spec({"tolerations": []}), ask(), [node("plain")], []).nodes == 1


# what the pods on a node hold


def test_pods_of_any_namespace_hold_their_gpus_until_they_finish() -> None:
    pods = [
        pod("a", "2", namespace="team-a"),
        pod("a", "1", phase="Pending"),  # bound, not started: holds its GPU already
        pod("a", "1", deleting=True),  # terminating: holds it until it is gone
        pod("a", "4", phase="Succeeded"),
        pod("a", "4", phase="Failed"),
        pod(None, "8", phase="Pending"),  # not bound anywhere: holds nothing yet
        pod("elsewhere", "8"),  # on a node that does not match
    ]
    got = room(spec(), ask(), [node("a")], pods)
    assert (got.free, got.fitting) == (4, 4)


def test_a_request_is_the_request_else_the_limit() -> None:
    pods = [
        pod("a", containers=[container(requests="2", limits="2")]),
        pod("a", containers=[container(limits="1")]),  # the API server defaults the request to the limit
        pod("a", containers=[container(requests="1")]),
        pod("a", containers=[container(), container(requests="0")]),  # no GPU asked
        pod("a", containers=[container(requests="1", resource="amd.com/cpx_nps4")]),  # another resource
    ]
    assert room(spec(), ask(), [node("a")], pods).free == 4
    assert pod_request(pods[1], GPU) == 1


def test_containers_add_up_and_init_containers_count_at_their_peak() -> None:
    two = pod("a", containers=[container("1", "1"), container("2", "2")])
    assert pod_request(two, GPU) == 3
    init = pod("a", containers=[container("1", "1")], init=[container("4", "4"), container("2", "2")])
    assert pod_request(init, GPU) == 4  # the largest init container runs alone
    sidecar = container("1", "1", restartPolicy="Always")  # runs alongside what starts after it
    assert pod_request(pod("a", containers=[container("3", "3")], init=[sidecar]), GPU) == 4
    after_sidecar = pod("a", containers=[container("2", "2")], init=[sidecar, container("4", "4")])
    assert pod_request(after_sidecar, GPU) == 5
    assert room(spec(), ask(), [node("a")], [init]).free == 4


def test_overcommitted_nodes_have_none_free_not_less() -> None:
    got = room(spec(), ask(), [node("a", gpus="2"), node("b", gpus="2")], [pod("a", "3")])
    assert (got.free, got.fitting, got.nodes) == (2, 2, 2)


# fitting, node by node


def test_a_pods_gpus_must_be_on_one_node() -> None:
    nodes = [node("a"), node("b")]
    pods = [pod("a", "5"), pod("b", "4")]  # 3 free on a, 4 on b
    got = room(spec(), ask(pods=2, per_pod=4), nodes, pods)
    assert (got.free, got.fitting, got.fits) == (7, 1, False)
    assert room(spec(), ask(pods=1, per_pod=4), nodes, pods).fits
    assert room(spec(), ask(pods=7, per_pod=1), nodes, pods).fitting == 7
    assert got.describe() == f"needs 8 {GPU} on the nodes the fleet may use, 7 free"


def test_partitioned_gpus_are_another_resource() -> None:
    cpx = "amd.com/cpx_nps4"
    nodes = [node("a", gpus="64", resource=cpx), node("b")]
    pods = [pod("a", containers=[container("8", "8", resource=cpx)])]
    got = room(spec({"resourceName": cpx, "productNames": []}), ask(per_pod=8, resource=cpx), nodes, pods)
    assert (got.nodes, got.free, got.fitting) == (1, 56, 7)


def test_no_nodes_no_room() -> None:
    got = room(spec(), ask(pods=1, per_pod=8), [], [])
    assert (got.nodes, got.free, got.fitting, got.fits) == (0, 0, 0, False)


# odd data


@pytest.mark.parametrize(
    ("value", "count"),
    [
        ("8", 8),
        (8, 8),
        ("1k", 1000),
        ("2Ki", 2048),
        ("8e0", 8),
        ("8.0", 8),
        (" 4 ", 4),
        ("0", 0),
        ("1.5", 0),
        ("500m", 0),
        ("-2", 0),
        (-2, 0),
        ("eight", 0),
        ("", 0),
        (None, 0),
        (True, 0),
        (8.0, 0),
        ({"value": 8}, 0),
        ("1e999", 0),
    ],
)
def test_quantities_are_whole_numbers_or_zero(value: Any, count: int) -> None:
    assert quantity(value) == count


def test_odd_nodes_and_pods_never_raise() -> None:
    odd_nodes: list[Any] = [
        {},
        None,
        "node",
        {"metadata": None, "status": None},
        {"metadata": {"name": "x"}},
        {"metadata": {"name": 7}, "status": {"allocatable": {GPU: "8"}}},
        node("not-a-number", gpus="lots"),
        node("bad-taints", taints="NoSchedule"),  # type: ignore[arg-type]
        node("bad-taint", taints=["NoSchedule"]),  # type: ignore[list-item]
        {**node("bad-labels"), "metadata": {"name": "bad-labels", "labels": ["x"]}},
        {**node("bad-conditions"), "status": {"allocatable": {GPU: "8"}, "conditions": "Ready"}},
        {**node("bad-spec"), "spec": ["unschedulable"]},
    ]
    odd_pods: list[Any] = [
        {},
        None,
        {"spec": None},
        {"spec": {"nodeName": "a", "containers": None}},
        {"spec": {"nodeName": "a", "containers": [None, "c", {"resources": None}]}},
        {"spec": {"nodeName": "a", "containers": [{"resources": {"requests": ["8"]}}]}},
        {"spec": {"nodeName": "a", "containers": [container("many")], "initContainers": "x"}},
        {"spec": {"nodeName": ["a"], "containers": [container("8")]}},
        {"spec": {"nodeName": "a", "containers": [container("1")], "overhead": {GPU: "1"}}, "status": None},
    ]
    got = room(spec(), ask(), [*odd_nodes, node("a")], odd_pods)
    assert (got.nodes, got.free) == (1, 6)  # the last pod: 1 GPU and 1 of overhead


def test_a_nodes_name_is_needed_to_count_its_pods() -> None:
    nameless = node("a")
    del nameless["metadata"]["name"]
    assert room(spec(), ask(), [nameless], []).nodes == 0


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner, max_size=3),
    max_leaves=12,
)


def mangled(obj: Raw, replacements: dict[str, Any]) -> Raw:
    """`obj` with some top-level sections replaced by arbitrary JSON."""
    return {**obj, **replacements}


sections = st.dictionaries(st.sampled_from(["metadata", "spec", "status"]), json_values, max_size=3)


@settings(max_examples=200, deadline=None)
@given(st.lists(sections, max_size=4), st.lists(sections, max_size=4), st.integers(1, 8), st.integers(1, 4))
def test_any_json_reads_as_room_never_an_exception(
    node_parts: list[dict[str, Any]], pod_parts: list[dict[str, Any]], per_pod: int, pods: int
) -> None:
    nodes = [mangled(node(f"n{i}"), parts) for i, parts in enumerate(node_parts)]
    bound = [mangled(pod(f"n{i}", "2"), parts) for i, parts in enumerate(pod_parts)]
    got = room(spec({"productNames": []}), ask(pods, per_pod), nodes, bound)
    assert got.free >= 0 and 0 <= got.fitting <= got.free // per_pod
    assert got.nodes <= len(nodes)

"""The fake node pool: AMD node-labeller labels, capacities and pool files."""

import pytest

from specfleet_workshop.devcluster.nodes import (
    DEFAULT_POOL,
    GPU_PRODUCTS,
    GPU_RESOURCE,
    KWOK_NODE_ANNOTATION,
    NodeGroup,
    NodePool,
    node_manifests,
    parse_pool,
    pool_from_counts,
)


def _by_name(pool: NodePool) -> dict[str, dict]:
    return {manifest["metadata"]["name"]: manifest for manifest in node_manifests(pool)}


def test_default_pool_is_two_nodes_of_each_instinct_and_one_cpu_node() -> None:
    nodes = _by_name(DEFAULT_POOL)
    assert sorted(nodes) == ["cpu-0", "mi300x-0", "mi300x-1", "mi325x-0", "mi325x-1", "mi355x-0", "mi355x-1"]
    for name, node in nodes.items():
        gpus = node["status"]["allocatable"].get(GPU_RESOURCE)
        assert gpus == (None if name == "cpu-0" else "8")
        assert node["metadata"]["annotations"][KWOK_NODE_ANNOTATION] == "fake"


@pytest.mark.parametrize(
    ("product", "product_name", "vram", "device_id", "cu_count"),
    [
        ("MI300X", "AMD_Instinct_MI300X_OAM", "192G", "74a1", "304"),
        ("MI325X", "AMD_Instinct_MI325_OAM", "256G", "74a5", "304"),
        ("MI355X", "AMD_Instinct_MI355_OAM", "288G", "75a3", "256"),
    ],
)
def test_gpu_nodes_carry_the_node_labeller_and_nfd_labels(
    product: str, product_name: str, vram: str, device_id: str, cu_count: str
) -> None:
    labels = _by_name(DEFAULT_POOL)[f"{product.lower()}-0"]["metadata"]["labels"]
    assert labels["amd.com/gpu.product-name"] == product_name
    assert labels["amd.com/gpu.vram"] == vram
    assert labels["amd.com/gpu.device-id"] == device_id
    assert labels["amd.com/gpu.cu-count"] == cu_count
    assert labels["amd.com/gpu.family"] == "AI"
    assert labels["feature.node.kubernetes.io/amd-gpu"] == "true"
    assert labels["kubernetes.io/hostname"] == f"{product.lower()}-0"


def test_cpu_node_has_no_gpu_labels() -> None:
    labels = _by_name(DEFAULT_POOL)["cpu-0"]["metadata"]["labels"]
    assert not [key for key in labels if key.startswith("amd.com/") or "amd-gpu" in key]


def test_allocatable_keeps_a_reserve_below_capacity() -> None:
    status = _by_name(DEFAULT_POOL)["mi300x-0"]["status"]
    assert status["capacity"]["cpu"] == "192"
    assert status["allocatable"]["cpu"] == "190"
    assert status["capacity"]["memory"] == "2048Gi"
    assert status["allocatable"]["memory"] == "2032Gi"
    assert status["allocatable"]["pods"] == "110"


def test_every_node_gets_its_own_pod_cidr_and_ip_even_at_scale() -> None:
    manifests = node_manifests(pool_from_counts(mi300x=300, mi325x=0, mi355x=0, cpu=10))
    cidrs = [manifest["spec"]["podCIDR"] for manifest in manifests]
    ips = [manifest["status"]["addresses"][0]["address"] for manifest in manifests]
    assert len(manifests) == 310
    assert len(set(cidrs)) == len(set(ips)) == 310


def test_two_groups_of_one_product_do_not_clash_on_names() -> None:
    pool = NodePool((NodeGroup("MI300X", 2, 8), NodeGroup("MI300X", 1, 4)))
    nodes = _by_name(pool)
    assert sorted(nodes) == ["mi300x-0", "mi300x-1", "mi300x-2"]
    assert nodes["mi300x-2"]["status"]["capacity"][GPU_RESOURCE] == "4"


def test_parse_pool_reads_products_case_insensitively() -> None:
    pool = parse_pool({"nodes": [{"product": "mi355x", "count": 3, "gpus": 4}, {"product": "cpu", "count": 2}]})
    assert pool == NodePool((NodeGroup("MI355X", 3, 4), NodeGroup(None, 2, 0)))
    assert pool.node_count == 5


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({}, "top-level `nodes:`"),
        ({"nodes": [{"product": "H100", "count": 1}]}, "not one of"),
        ({"nodes": [{"product": "MI300X", "count": -1}]}, "count"),
        ({"nodes": [{"product": "MI300X", "count": 1, "gpu": 8}]}, "unknown keys"),
        ({"nodes": ["MI300X"]}, "mapping"),
    ],
)
def test_parse_pool_rejects_bad_files_with_a_pointed_message(document: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_pool(document)


def test_products_know_their_memory_facts() -> None:
    assert [GPU_PRODUCTS[key].vram_gib for key in ("MI300X", "MI325X", "MI355X")] == [192, 256, 288]

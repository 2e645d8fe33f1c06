"""The fake node pool: the Node objects kwok keeps alive, shaped like real AMD Instinct servers.

The GPU facts come from `specfleet.hardware`, so the dev cluster, the renderer and the simulator agree
on what an MI300X is. Labels
follow AMD's k8s-node-labeller (`amd.com/gpu.*`) and the AMD GPU Operator's NFD label, so selectors
written against the dev cluster work unchanged on a real one. Everything here is pure.
"""

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from specfleet.hardware import BY_SHORT_NAME, GPU_RESOURCE, PRODUCT_NAME_LABEL, GpuProduct

KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
"""kwok manages only nodes carrying this annotation with the value `fake`."""

FAKE_POD_NETWORK = ipaddress.ip_network("10.64.0.0/10")
"""Pod IPs handed out by kwok: a /24 per node, enough for 16384 nodes. Nothing listens there: never send traffic."""

FAKE_NODE_NETWORK = ipaddress.ip_network("10.32.0.0/16")
"""Node InternalIPs, one per node; fake and unroutable like the pod IPs."""

GPU_PRODUCTS: Mapping[str, GpuProduct] = BY_SHORT_NAME
"""Products by short name (MI300X, MI325X, MI355X), from `specfleet.hardware`."""


@dataclass(frozen=True)
class HostShape:
    """CPU, memory and pod capacity of a server; allocatable keeps a kubelet-like reserve back."""

    cpu: int
    memory_gib: int
    pods: int = 110
    ephemeral_storage_gib: int = 3500
    reserved_cpu: int = 2
    reserved_memory_gib: int = 16

    def capacity(self) -> dict[str, str]:
        return {
            "cpu": str(self.cpu),
            "memory": f"{self.memory_gib}Gi",
            "pods": str(self.pods),
            "ephemeral-storage": f"{self.ephemeral_storage_gib}Gi",
        }

    def allocatable(self) -> dict[str, str]:
        return {
            **self.capacity(),
            "cpu": str(self.cpu - self.reserved_cpu),
            "memory": f"{self.memory_gib - self.reserved_memory_gib}Gi",
        }


HOST_SHAPES: Mapping[str, HostShape] = {
    "MI300X": HostShape(cpu=192, memory_gib=2048),  # 2 x 48-core Xeon with SMT, 2 TiB, as in 8-GPU OAM servers
    "MI325X": HostShape(cpu=256, memory_gib=3072),  # 2 x 64-core EPYC with SMT, 3 TiB
    "MI355X": HostShape(cpu=256, memory_gib=3072),
    "cpu": HostShape(cpu=64, memory_gib=256, ephemeral_storage_gib=1000),
}
"""Default server shape per product key; `cpu` is the shape of a CPU-only node."""


@dataclass(frozen=True)
class NodeGroup:
    """`count` identical nodes; `product` is a GPU_PRODUCTS key, or None for CPU-only nodes."""

    product: str | None
    count: int
    gpus_per_node: int = 8

    @property
    def name_prefix(self) -> str:
        return self.product.lower() if self.product else "cpu"


@dataclass(frozen=True)
class NodePool:
    """All fake nodes of a dev cluster."""

    groups: tuple[NodeGroup, ...]

    @property
    def node_count(self) -> int:
        return sum(group.count for group in self.groups)


def pool_from_counts(
    mi300x: int = 2, mi325x: int = 2, mi355x: int = 2, cpu: int = 1, gpus_per_node: int = 8
) -> NodePool:
    """The pool described by per-product node counts (default: the dev cluster's 2 per GPU product, 1 CPU node)."""
    groups = [
        NodeGroup(product, count, gpus_per_node)
        for product, count in (("MI300X", mi300x), ("MI325X", mi325x), ("MI355X", mi355x))
        if count > 0
    ]
    if cpu > 0:
        groups.append(NodeGroup(None, cpu, 0))
    return NodePool(tuple(groups))


DEFAULT_POOL = pool_from_counts()


def parse_pool(document: Any) -> NodePool:
    """Read a pool from YAML data: `{nodes: [{product: MI300X, count: 100, gpus: 8}, {product: cpu, count: 4}]}`."""
    if not isinstance(document, dict) or not isinstance(document.get("nodes"), list):
        raise ValueError("a node pool file needs a top-level `nodes:` list")
    groups = []
    for index, entry in enumerate(document["nodes"]):
        if not isinstance(entry, dict):
            raise ValueError(f"nodes[{index}] must be a mapping with product and count")
        unknown = set(entry) - {"product", "count", "gpus"}
        if unknown:
            raise ValueError(f"nodes[{index}]: unknown keys {sorted(unknown)} (allowed: product, count, gpus)")
        product = str(entry.get("product", ""))
        count = entry.get("count")
        gpus = entry.get("gpus", 8)
        if product.lower() == "cpu":
            product_key = None
        elif product.upper() in GPU_PRODUCTS:
            product_key = product.upper()
        else:
            raise ValueError(f"nodes[{index}]: product {product!r} is not one of {[*GPU_PRODUCTS, 'cpu']}")
        if not isinstance(count, int) or count < 0:
            raise ValueError(f"nodes[{index}]: count must be a non-negative integer")
        if not isinstance(gpus, int) or gpus < 0:
            raise ValueError(f"nodes[{index}]: gpus must be a non-negative integer")
        groups.append(NodeGroup(product_key, count, 0 if product_key is None else gpus))
    return NodePool(tuple(groups))


def load_pool(path: Path) -> NodePool:
    """Read a pool file (see `parse_pool` for its shape)."""
    return parse_pool(yaml.safe_load(path.read_text()))


def node_manifests(pool: NodePool) -> list[dict[str, Any]]:
    """Node objects for the pool, with capacity in `status` (the API server keeps it on create, as for a kubelet).

    Each node gets its own pod CIDR so kwok hands out distinct pod IPs, and its own InternalIP.
    """
    pod_cidrs = FAKE_POD_NETWORK.subnets(new_prefix=24)
    node_ips = FAKE_NODE_NETWORK.hosts()
    next_index: dict[str, int] = {}
    manifests = []
    for group in pool.groups:
        product = GPU_PRODUCTS[group.product] if group.product else None
        shape = HOST_SHAPES[group.product or "cpu"]
        for _ in range(group.count):
            index = next_index.get(group.name_prefix, 0)
            next_index[group.name_prefix] = index + 1
            name = f"{group.name_prefix}-{index}"
            labels = {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                **(product.node_labels() if product else {}),
            }
            capacity = shape.capacity()
            allocatable = shape.allocatable()
            if product:
                capacity[GPU_RESOURCE] = allocatable[GPU_RESOURCE] = str(group.gpus_per_node)
            pod_cidr = str(next(pod_cidrs))
            manifests.append(
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {
                        "name": name,
                        "labels": labels,
                        "annotations": {KWOK_NODE_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
                    },
                    "spec": {"podCIDR": pod_cidr, "podCIDRs": [pod_cidr]},
                    "status": {
                        "capacity": capacity,
                        "allocatable": allocatable,
                        "addresses": [
                            {"type": "InternalIP", "address": str(next(node_ips))},
                            {"type": "Hostname", "address": name},
                        ],
                    },
                }
            )
    return manifests


def pool_of_its_own(
    name: str, product_name: str, count: int = 2, gpus_per_node: int = 8, network: int = 0
) -> list[dict[str, Any]]:
    """`count` MI300X-shaped nodes named `<name>-<i>` whose product-name label is `product_name`: a GPU pool
    only a fleet that accepts that product uses (a full pool in a shared cluster). `network` picks their
    pod networks (10.127.x.0/24), apart from the dev cluster's own nodes' (from 10.64.0.0/24 up)."""
    manifests = node_manifests(NodePool((NodeGroup("MI300X", count, gpus_per_node),)))
    for index, node in enumerate(manifests):
        node_name = f"{name}-{index}"
        cidr = f"10.127.{(network * count + index) % 256}.0/24"
        node["metadata"]["name"] = node_name
        node["metadata"]["labels"].update({"kubernetes.io/hostname": node_name, PRODUCT_NAME_LABEL: product_name})
        node["spec"] = {"podCIDR": cidr, "podCIDRs": [cidr]}
    return manifests

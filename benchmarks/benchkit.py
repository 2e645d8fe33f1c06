"""What the benchmark scripts share: a cluster with the CRD installed, ports, percentiles."""

import socket
import subprocess
from pathlib import Path
from typing import Any

import kubernetes

from specfleet.devcluster.cluster import ClusterInfo, up
from specfleet.devcluster.config import free_ports
from specfleet.devcluster.nodes import pool_from_counts

ROOT = Path(__file__).resolve().parents[1]
GROUP, VERSION, PLURAL = "specfleet.io", "v1alpha1", "speculativedeployments"


def cluster_with_crd(state_dir: Path, mi300x_nodes: int) -> tuple[ClusterInfo, str]:
    """A dev cluster of its own (free ports) with the CRD Established, and a fresh namespace in it."""
    cluster = up(state_dir, pool=pool_from_counts(mi300x=mi300x_nodes, mi325x=0, mi355x=0, cpu=1), ports=free_ports())
    kubectl = [str(cluster.kubectl), "--kubeconfig", str(cluster.kubeconfig)]
    crd = ROOT / "crds" / "specfleet.io_speculativedeployments.yaml"
    subprocess.run([*kubectl, "apply", "--server-side", "--force-conflicts", "-f", str(crd)], check=True,
                   capture_output=True)  # fmt: skip
    subprocess.run([*kubectl, "wait", "--for=condition=Established", "crd/speculativedeployments.specfleet.io"],
                   check=True, capture_output=True)  # fmt: skip
    namespace = f"bench-{free_port()}"
    kubernetes.client.CoreV1Api(cluster.api_client()).create_namespace({"metadata": {"name": namespace}})
    return cluster, namespace


def one_replica_fleet(name: str, speculative: dict[str, Any], **spec: Any) -> dict[str, Any]:
    """A one-replica Llama 3.1 8B SpeculativeDeployment on MI300X (one GPU), with extra spec fields."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "SpeculativeDeployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
            "speculative": speculative,
            "accelerator": {"productNames": ["AMD_Instinct_MI300X_OAM"]},
            **spec,
        },
    }


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..1) of a non-empty list."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]

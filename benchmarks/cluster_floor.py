"""Benchmark: how fast the dev cluster alone turns N one-replica Deployments into available ones.

The floor under any controller's fleet-scale figure on this machine: the same Deployments specfleet renders
for N one-replica fleets (one GPU each, the accelerator's node selection), created from 8 client threads
with no operator at all; printed: when all were created, when all were available, p50 / p95 per object.

    python benchmarks/cluster_floor.py --count 1000
"""

import argparse
import json
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import kubernetes

from specfleet.api.resource import SpeculativeDeployment
from specfleet.api.vocabulary import Track
from specfleet.render.manifests import deployment, revision

from benchkit import cluster_session, one_replica_fleet, percentile


def rendered(name: str, namespace: str) -> dict[str, Any]:
    """The stable Deployment specfleet renders for a one-replica fleet, without its owner (there is none)."""
    body = one_replica_fleet(name, {"method": "ngram", "numSpeculativeTokens": 4})
    body["metadata"]["namespace"] = namespace
    sdep = SpeculativeDeployment.from_mapping(body)
    manifest = deployment(sdep, Track.STABLE, revision(sdep.spec), 1)
    manifest["metadata"].pop("ownerReferences", None)
    return manifest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--state-dir", type=Path, default=Path(tempfile.gettempdir()) / "specfleet-bench-floor")
    parser.add_argument("--timeout", type=float, default=900.0)
    args = parser.parse_args()
    nodes = max(2, -(-args.count // 8) + 2)
    with cluster_session(args.state_dir, nodes) as (cluster, namespace):
        apps = kubernetes.client.AppsV1Api(cluster.api_client())
        created: dict[str, float] = {}
        available: dict[str, float] = {}

        def watch() -> None:
            stream = kubernetes.watch.Watch()
            for event in stream.stream(apps.list_namespaced_deployment, namespace, timeout_seconds=int(args.timeout)):
                obj = event["object"]
                if (obj.status.available_replicas or 0) >= 1 and obj.metadata.name not in available:
                    available[obj.metadata.name] = time.monotonic()
                if len(available) == args.count:
                    stream.stop()

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        time.sleep(1)
        start = time.monotonic()
        manifests = [rendered(f"fleet-{i:04d}", namespace) for i in range(args.count)]

        def create(chunk: list[dict[str, Any]]) -> None:
            client = kubernetes.client.AppsV1Api(cluster.api_client())
            for manifest in chunk:
                created[manifest["metadata"]["name"]] = time.monotonic()
                client.create_namespaced_deployment(namespace, manifest)

        creators = [threading.Thread(target=create, args=(manifests[i::8],)) for i in range(8)]
        for thread in creators:
            thread.start()
        for thread in creators:
            thread.join()
        all_created = time.monotonic() - start
        watcher.join(timeout=args.timeout)
        latencies = [available[n] - created[n] for n in available]
        print(json.dumps({
            "deployments": args.count,
            "available": len(available),
            "all_created_seconds": round(all_created, 1),
            "all_available_seconds": round(max(available.values()) - start, 1) if available else None,
            "per_object_seconds": {
                "p50": round(statistics.median(latencies), 2) if latencies else None,
                "p95": round(percentile(latencies, 0.95), 2) if latencies else None,
            },
            "nodes": nodes,
        }, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()

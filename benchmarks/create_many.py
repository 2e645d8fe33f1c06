"""Benchmark: create N SpeculativeDeployments at once and watch the operator bring them to Healthy.

Prints, for the dev cluster started by `specfleet dev up` (its own state directory, enough fake nodes):
- time until every object is Healthy: p50 / p95 / max per object and the total;
- Kubernetes API requests the operator made, per object (its `specfleet_api_requests_total`);
- the operator's RSS and CPU seconds;
- API writes per minute at steady state, when nothing changes (the goal is zero).

    python benchmarks/create_many.py --count 200
    python benchmarks/create_many.py --count 1000 --shards 3    # three operator processes, one shard each

With `--shards N` the figures are the N processes' together (requests, CPU seconds, and RSS summed; the
largest one's RSS too).

It is a script that prints figures, not a test: nothing here passes or fails. The cluster and the operator
stop when it ends, however it ends (`--keep` leaves them running and prints how to stop them).
"""

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import kubernetes

from specfleet.api.vocabulary import GROUP, PLURAL, VERSION
from specfleet_workshop.devcluster.cluster import ClusterInfo

from benchkit import background, cluster_session, free_port, one_replica_fleet, percentile, process_usage

WRITE_VERBS = ("apply", "create", "delete", "patch", "patch-status")


def operator_requests(port: int) -> dict[str, float]:
    """verb -> count from the operator's own metrics endpoint."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    counts: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("specfleet_api_requests_total{"):
            labels, value = line.rsplit(" ", 1)
            verb = labels.split('verb="', 1)[1].split('"', 1)[0]
            counts[verb] = counts.get(verb, 0.0) + float(value)
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=200, help="SpeculativeDeployments to create")
    parser.add_argument("--state-dir", type=Path, default=Path(tempfile.gettempdir()) / "specfleet-bench")
    parser.add_argument("--steady-seconds", type=float, default=60.0, help="how long to count idle writes")
    parser.add_argument("--workers", type=int, default=4, help="operator workers")
    parser.add_argument("--shards", type=int, default=1, help="operator processes, each owning one shard")
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--keep", action="store_true", help="leave the cluster and the operator running")
    args = parser.parse_args()

    nodes = max(2, -(-args.count // 8) + 2)  # one GPU per object, 8 per node, and some spare
    args.metrics_ports = [free_port() for _ in range(args.shards)]
    logs = Path(tempfile.mkdtemp(prefix="specfleet-create-many-"))
    print(f"logs in {logs}", file=sys.stderr)
    with cluster_session(args.state_dir, nodes, keep=args.keep) as (cluster, namespace):
        run(args, cluster, namespace, nodes, logs)


def operator_commands(args: argparse.Namespace, cluster: ClusterInfo, namespace: str) -> dict[str, list[str]]:
    """One operator process, or one per shard (each electing itself with its shard's Lease)."""
    commands = {}
    for shard, port in enumerate(args.metrics_ports):
        command = [
            sys.executable, "-m", "specfleet.cli", "run", "--namespace", namespace, "--liveness", "", "--kubeconfig",
            str(cluster.kubeconfig), "--metrics-port", str(port), "--workers", str(args.workers),
        ]  # fmt: skip
        if args.shards > 1:
            command += [
                "--leader-election",
                f"{namespace}/specfleet",
                "--shards",
                str(args.shards),
                "--shard",
                str(shard),
            ]
        commands[f"operator-{shard}" if args.shards > 1 else "operator"] = command
    return commands


def all_requests(ports: list[int]) -> dict[str, float]:
    """verb -> count, summed over the operator processes."""
    total: dict[str, float] = {}
    for port in ports:
        for verb, count in operator_requests(port).items():
            total[verb] = total.get(verb, 0) + count
    return total


def run(args: argparse.Namespace, cluster: ClusterInfo, namespace: str, nodes: int, logs: Path) -> None:
    """Start the operator(s), create the objects, measure; they stop when this returns or raises."""
    custom = kubernetes.client.CustomObjectsApi(cluster.api_client())
    with background(operator_commands(args, cluster, namespace), logs, keep=args.keep) as operators:
        deadline = time.monotonic() + 30
        while True:
            try:
                before = all_requests(args.metrics_ports)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        created: dict[str, float] = {}
        healthy: dict[str, float] = {}
        stop = threading.Event()

        def watch() -> None:
            stream = kubernetes.watch.Watch()
            for event in stream.stream(
                custom.list_namespaced_custom_object,
                GROUP,
                VERSION,
                namespace,
                PLURAL,
                timeout_seconds=int(args.timeout),
            ):
                obj = event["object"]
                name = obj["metadata"]["name"]
                if (obj.get("status") or {}).get("phase") == "Healthy" and name not in healthy:
                    healthy[name] = time.monotonic()
                if stop.is_set() or len(healthy) == args.count:
                    stream.stop()

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        time.sleep(1)
        start = time.monotonic()
        documents = [
            one_replica_fleet(f"fleet-{i:04d}", {"method": "ngram", "numSpeculativeTokens": 4})
            for i in range(args.count)
        ]

        def create(chunk: list[dict]) -> None:
            client = kubernetes.client.CustomObjectsApi(cluster.api_client())
            for doc in chunk:
                created[doc["metadata"]["name"]] = time.monotonic()
                client.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, doc)

        chunks = [documents[i::8] for i in range(8)]
        creators = [threading.Thread(target=create, args=(c,)) for c in chunks]
        for thread in creators:
            thread.start()
        for thread in creators:
            thread.join()
        watcher.join(timeout=args.timeout)
        stop.set()
        total = max(healthy.values()) - start if healthy else float("nan")
        latencies = [healthy[n] - created[n] for n in healthy]
        after_create = all_requests(args.metrics_ports)
        usages = [process_usage(operator.pid) for operator in operators]

        idle_start = all_requests(args.metrics_ports)
        time.sleep(args.steady_seconds)
        idle_end = all_requests(args.metrics_ports)
        idle_writes = sum(idle_end.get(v, 0) - idle_start.get(v, 0) for v in WRITE_VERBS)
        requests_total = sum(after_create.values()) - sum(before.values())

        figures = {
            "objects": args.count,
            "healthy": len(healthy),
            "total_seconds": round(total, 1),
            "per_object_seconds": {
                "p50": round(statistics.median(latencies), 2) if latencies else None,
                "p95": round(percentile(latencies, 0.95), 2) if latencies else None,
                "max": round(max(latencies), 2) if latencies else None,
            },
            "operator_api_requests_per_object": round(requests_total / args.count, 2),
            "operator_api_requests_by_verb": {k: after_create.get(k, 0) - before.get(k, 0) for k in after_create},
            "operator_rss_mib": round(sum(u.rss_mib for u in usages), 1),
            "largest_operator_rss_mib": round(max(u.rss_mib for u in usages), 1),
            "operator_cpu_seconds": round(sum(u.cpu_seconds for u in usages), 1),
            "steady_state_writes_per_minute": round(idle_writes * 60 / args.steady_seconds, 2),
            "nodes": nodes,
            "workers": args.workers,
            "shards": args.shards,
        }
        print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()

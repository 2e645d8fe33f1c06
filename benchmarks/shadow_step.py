"""Benchmark: a bad drafter judged in a shadow step against one judged in a 10% weighted step, at the same load.

Runs on a dev cluster of its own with the real Prometheus (5 s scrape), the simulator standing in for the
gateway (`specfleet_workshop.sim.gateway`) and the operator. Each trial is a fleet of `--replicas` replicas
behind its own HTTPRoute with `--load` requests/s at the gateway; its stable serves a good EAGLE-3 drafter
(alpha 0.8), and at t0 its spec changes to a drafter with alpha 0.3. Half the trials' first step is a shadow
step (`mirror: --mirror`), the others' a weighted step (`weight: --weight`); both hold for 2 h, so only a
rollback ends them. Measured per trial: the time from t0 until the canary is rolled back, and the requests
the gateway sent to the canary, user-facing (served) and mirrored.

    python benchmarks/shadow_step.py --trials 3

All trials run at once. Prints the settings and the figures as JSON. The cluster, the simulator and the
operator stop when it ends, however it ends (`--keep` leaves them running and says how to stop them).
"""

import argparse
import json
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import kubernetes
import yaml

from specfleet.api.vocabulary import GROUP, PLURAL, VERSION
from specfleet_workshop.devcluster.cluster import ClusterInfo
from specfleet_workshop.devcluster.gateway import install_httproute_crd

from benchkit import background, cluster_session, free_port, one_replica_fleet, percentile, wait_until

GOOD = {
    "method": "eagle3",
    "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
    "revision": "main",
    "numSpeculativeTokens": 4,
}
BAD = {**GOOD, "model": "bad/EAGLE3-drafter"}
SCENARIO: dict[str, Any] = {
    "defaults": {"acceptance": 0.8, "load": 4.0, "output_tokens": 128, "noise": 0.05},
    "pairs": [{"target": "*", "drafter": "bad/*", "acceptance": 0.3}],
}
ROUTES = ("gateway.networking.k8s.io", "v1", "httproutes")


def route(name: str) -> dict[str, Any]:
    """The fleet's own HTTPRoute, everything to its stable Service."""
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": name},
        "spec": {"rules": [{"backendRefs": [{"name": f"{name}-stable", "port": 8000}]}]},
    }


def fleet(name: str, first_step: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    rollout = {
        "trafficRouting": {"httpRoute": {"name": name}},
        "steps": [{**first_step, "pause": {"duration": "2h"}}, {"weight": 60, "pause": {"duration": "2h"}}],
        "analysis": {"interval": args.interval, "window": args.window},
        "guardrails": {"minDraftTokens": 200, "minRequests": 20},
    }
    document = one_replica_fleet(name, GOOD, rollout=rollout)
    document["spec"]["replicas"] = args.replicas
    return document


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=3, help="fleets per mode (shadow, weighted)")
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--load", type=float, default=8.0, help="requests/s at each fleet's route")
    parser.add_argument("--mirror", type=int, default=10, help="the shadow step's mirror percent")
    parser.add_argument("--weight", type=int, default=10, help="the weighted step's weight percent")
    parser.add_argument("--interval", default="3s", help="rollout.analysis.interval")
    parser.add_argument("--window", default="30s", help="rollout.analysis.window")
    parser.add_argument("--state-dir", type=Path, default=Path(tempfile.gettempdir()) / "specfleet-shadow-bench")
    parser.add_argument("--keep", action="store_true", help="leave the cluster, simulator and operator running")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="specfleet-shadow-bench-"))
    print(f"logs in {work}", file=sys.stderr)
    nodes = -(-2 * args.trials * (args.replicas + 1) // 8) + 1
    with cluster_session(args.state_dir, nodes, keep=args.keep) as (cluster, namespace):
        install_httproute_crd(cluster)
        run(args, cluster, namespace, work)


def run(args: argparse.Namespace, cluster: ClusterInfo, namespace: str, work: Path) -> None:
    api = cluster.api_client()
    custom = kubernetes.client.CustomObjectsApi(api)
    modes = {"shadow": {"mirror": args.mirror}, "weighted": {"weight": args.weight}}
    names = {f"{mode}-{i}": mode for mode in modes for i in range(args.trials)}
    scenario = {**SCENARIO, "gateway": [{"route": f"{namespace}/{name}", "load": args.load} for name in names]}
    scenario_file = work / "scenario.yaml"
    scenario_file.write_text(yaml.safe_dump(scenario))
    sim_url = f"http://127.0.0.1:{free_port()}"
    commands = {
        "sim": [sys.executable, "-m", "specfleet.cli", "sim", "--scenario", str(scenario_file), "--kubeconfig",
                str(cluster.kubeconfig), "--file-sd-dir", str(cluster.file_sd_dir), "--namespace", namespace,
                "--listen", sim_url.removeprefix("http://"), "--seed", "13"],
        "operator": [sys.executable, "-m", "specfleet.cli", "run", "--namespace", namespace, "--liveness", "",
                     "--kubeconfig", str(cluster.kubeconfig), "--prometheus-url", cluster.prometheus_url],
    }  # fmt: skip
    with background(commands, work, keep=args.keep):
        for name, mode in names.items():
            custom.create_namespaced_custom_object(*ROUTES[:2], namespace, ROUTES[2], route(name))
            custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, fleet(name, modes[mode], args))

        def statuses() -> dict[str, dict[str, Any]]:
            items = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["items"]
            return {o["metadata"]["name"]: o.get("status") or {} for o in items}

        def gateway() -> dict[str, dict[str, Any]]:
            with urllib.request.urlopen(f"{sim_url}/gateway", timeout=60) as answer:
                return {s["route"].split("/", 1)[1]: s for s in json.loads(answer.read())}

        wait_until("all Healthy", lambda: all(s.get("phase") == "Healthy" for s in statuses().values()), 600)
        wait_until("the gateway to serve every fleet", lambda: all(s["requests"] > 0 for s in gateway().values()), 120)
        before = gateway()
        for name in names:
            custom.patch_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name, {"spec": {"speculative": BAD}}
            )
        t0 = time.monotonic()
        rolled: dict[str, float] = {}
        while len(rolled) < len(names) and time.monotonic() < t0 + 900:
            for name, status in statuses().items():
                if name not in rolled and status.get("phase") == "RolledBack":
                    rolled[name] = time.monotonic() - t0
                    print(f"{name} rolled back after {rolled[name]:.1f} s", file=sys.stderr)
            time.sleep(0.5)
        time.sleep(3)  # the gateway reads routes once a second: what it still sent the canary is counted too
        after = gateway()

        def canary(name: str, field: str) -> int:
            counts = [g[name]["backends"].get(f"{namespace}/{name}-canary", {}).get(field, 0) for g in (after, before)]
            return counts[0] - counts[1]

        def figures(mode: str) -> dict[str, Any]:
            trials = [n for n, m in names.items() if m == mode]
            times = [rolled[n] for n in trials if n in rolled]
            return {
                "rolled_back": f"{len(times)}/{len(trials)}",
                "time_to_rollback_seconds": {
                    "p50": round(statistics.median(times), 1) if times else None,
                    "max": round(max(times), 1) if times else None,
                    "p95": round(percentile(times, 0.95), 1) if times else None,
                },
                "user_facing_canary_requests": [canary(n, "served") for n in trials],
                "mirrored_canary_requests": [canary(n, "mirrored") for n in trials],
                "reasons": sorted({(statuses()[n].get("history") or [{}])[-1].get("reason", "")[:120] for n in trials}),
            }

        print(
            json.dumps(
                {
                    "settings": {
                        "trials_per_mode": args.trials,
                        "replicas": args.replicas,
                        "load_per_route": args.load,
                        "shadow_step": modes["shadow"],
                        "weighted_step": modes["weighted"],
                        "analysis": {"interval": args.interval, "window": args.window},
                        "drafter": "stable alpha 0.8; canary alpha 0.3 from t0 (the spec change)",
                    },
                    "shadow": figures("shadow"),
                    "weighted": figures("weighted"),
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()

"""Benchmark: how fast a breached canary loses its traffic, and how often an A/A canary is rolled back.

Runs on a dev cluster of its own with the real Prometheus (5 s scrape), the simulator and the operator:
- `--trials` fleets whose canary uses a drafter that turns bad at t0 (the simulator's scenario is
  replaced: per-token acceptance alpha 0.8 -> 0.3): time from t0 until the fleet's Service no longer
  selects the canary. Their analysis window is short (`--window`), as for a fleet that wants fast
  rollbacks: its acceptance is judged on every analysis, its latency rarely (too few requests);
- `--trials` A/A fleets (the canary differs only by an environment variable, same drafter, noise on),
  judged on every guardrail over `--aa-window`: how many are rolled back during the observation time;
- what a watch costs (the fail-only check the operator runs at every new scrape of a canary): before the
  breach, `--watch-looks` full watches of one live breach fleet against the same Prometheus, timed, their
  queries counted; queries per second per fleet = queries per watch / the scrape interval, plus the one
  newest-sample query of every other pass.

    python benchmarks/time_to_rollback.py --trials 20

All trials run at once, each its own fleet. Prints the settings and the figures as JSON. The cluster, the
simulator and the operator stop when it ends, however it ends (`--keep` leaves them running and says how
to stop them).
"""

import argparse
import json
import statistics
import sys
import tempfile
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import kubernetes
import yaml

from specfleet.api.resource import SpeculativeDeployment
from specfleet.api.vocabulary import GROUP, LABEL_TRACK, PLURAL, VERSION, Track
from specfleet.controller.watch import watch_canary
from specfleet.metrics.prometheus import Prometheus
from specfleet_workshop.devcluster.cluster import ClusterInfo

from benchkit import background, cluster_session, free_port, one_replica_fleet, percentile, wait_until

GOOD = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
SCENARIO: dict[str, Any] = {"defaults": {"acceptance": 0.8, "load": 6.0, "output_tokens": 128, "noise": 0.05}}
BREACH = {**SCENARIO, "pairs": [{"target": "*", "drafter": "victim/*", "acceptance": 0.3}]}


def fleet(name: str, drafter: str, window: str, args: argparse.Namespace) -> dict[str, Any]:
    speculative = {"method": "eagle3", "model": drafter, "revision": "main", "numSpeculativeTokens": 4}
    rollout = {
        "steps": [{"weight": 50, "pause": {"duration": "2h"}}],
        "analysis": {"interval": args.interval, "window": window, "failureLimit": args.failure_limit},
        "guardrails": {"minDraftTokens": 200, "minRequests": 20},
    }
    return one_replica_fleet(name, speculative, rollout=rollout)


SCRAPE_SECONDS = 5.0
"""The dev cluster's Prometheus scrape interval."""


class CountingPrometheus(Prometheus):
    """The operator's Prometheus client, counting its queries."""

    queries = 0

    def _query(self, query: str, at: float | None) -> list[object]:
        self.queries += 1
        return super()._query(query, at)


def watch_cost(prometheus_url: str, fleet: dict[str, Any], looks: int) -> dict[str, float]:
    """`looks` watches of one live fleet's newest scrape, each from scratch (as after a restart): the time and
    the queries of one, and the queries per second a fleet costs at the scrape interval."""
    sdep = SpeculativeDeployment.from_mapping(fleet)
    prometheus = CountingPrometheus(prometheus_url)
    seconds = []
    for _ in range(looks):
        started = time.perf_counter()
        watch_canary(prometheus, sdep, sdep.status, datetime.now(UTC), None)
        seconds.append(time.perf_counter() - started)
    per_watch = prometheus.queries / looks
    return {
        "watches": looks,
        "ms_per_watch_p50": round(1000 * statistics.median(seconds), 1),
        "ms_per_watch_p95": round(1000 * percentile(seconds, 0.95), 1),
        "queries_per_watch": per_watch,
        # a running operator asks the scrape interval once per canary, not per watch
        "queries_per_second_per_fleet": round((per_watch - 1) / SCRAPE_SECONDS, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--aa-trials", type=int, default=20, help="A/A fleets (0: breach only, a lighter run)")
    parser.add_argument("--state-dir", type=Path, default=Path(tempfile.gettempdir()) / "specfleet-rollback-bench")
    parser.add_argument("--interval", default="3s", help="rollout.analysis.interval")
    parser.add_argument("--window", default="15s", help="rollout.analysis.window of the breach fleets")
    parser.add_argument("--aa-window", default="60s", help="rollout.analysis.window of the A/A fleets")
    parser.add_argument("--failure-limit", type=int, default=0)
    parser.add_argument("--observe-seconds", type=float, default=300.0, help="A/A observation after the breach")
    parser.add_argument("--watch-looks", type=int, default=20, help="watches timed for the cost figure")
    parser.add_argument("--keep", action="store_true", help="leave the cluster, simulator and operator running")
    args = parser.parse_args()

    nodes = -(-2 * (args.trials + args.aa_trials) // 8) + 2
    work = Path(tempfile.mkdtemp(prefix="specfleet-rollback-bench-"))
    print(f"logs in {work}", file=sys.stderr)
    with cluster_session(args.state_dir, nodes, keep=args.keep) as (cluster, namespace):
        run(args, cluster, namespace, work)


def run(args: argparse.Namespace, cluster: ClusterInfo, namespace: str, work: Path) -> None:
    """Start the simulator and the operator, play the trials, print the figures; they stop when this ends."""
    api = cluster.api_client()
    custom = kubernetes.client.CustomObjectsApi(api)
    core = kubernetes.client.CoreV1Api(api)
    scenario = work / "scenario.yaml"
    scenario.write_text(yaml.safe_dump(SCENARIO))
    sim_url = f"http://127.0.0.1:{free_port()}"
    commands = {
        "sim": [sys.executable, "-m", "specfleet.cli", "sim", "--scenario", str(scenario), "--kubeconfig",
                str(cluster.kubeconfig), "--file-sd-dir", str(cluster.file_sd_dir), "--namespace", namespace,
                "--listen", sim_url.removeprefix("http://"), "--seed", "11"],
        "operator": [sys.executable, "-m", "specfleet.cli", "run", "--namespace", namespace, "--liveness", "",
                     "--kubeconfig", str(cluster.kubeconfig), "--prometheus-url", cluster.prometheus_url,
                     "--workers", "8"],
    }  # fmt: skip
    breach_names = [f"breach-{i:02d}" for i in range(args.trials)]
    aa_names = [f"aa-{i:02d}" for i in range(args.aa_trials)]
    with background(commands, work, keep=args.keep):
        for name in breach_names:
            custom.create_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, fleet(name, GOOD, args.window, args)
            )
        for name in aa_names:
            custom.create_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, fleet(name, GOOD, args.aa_window, args)
            )

        def statuses() -> dict[str, dict[str, Any]]:
            items = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["items"]
            return {o["metadata"]["name"]: o.get("status") or {} for o in items}

        def all_healthy() -> bool:
            fleets = statuses()
            return len(fleets) == args.trials + args.aa_trials and all(
                v.get("phase") == "Healthy" for v in fleets.values()
            )

        wait_until("all Healthy", all_healthy, 600, interval=1.0)
        for name in breach_names:  # the canary's drafter is the one that will turn bad
            custom.patch_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name, {"spec": {"speculative": {"model": "victim/EAGLE3-drafter"}}}
            )
        for name in aa_names:  # same behaviour, new revision
            custom.patch_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name, {"spec": {"engine": {"env": [{"name": "AA", "value": "1"}]}}}
            )

        def judged_good(status: dict[str, Any], name: str) -> bool:
            """A/A: a Pass. Breach fleets (short window): acceptance measured good and nothing failed."""
            analysis = status.get("lastAnalysis") or {}
            if name in aa_names:
                return analysis.get("verdict") == "Pass"
            alpha = (analysis.get("canary") or {}).get("acceptanceAlpha")
            return analysis.get("verdict") in ("Pass", "Inconclusive") and alpha is not None and alpha > 0.7

        wait_until(
            "every canary to be judged good",
            lambda: all(judged_good(v, n) for n, v in statuses().items()),
            900,
            interval=1.0,
        )

        live = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, breach_names[0])
        cost = watch_cost(cluster.prometheus_url, live, args.watch_looks)
        request = urllib.request.Request(f"{sim_url}/scenario", data=yaml.safe_dump(BREACH).encode(), method="PUT")
        urllib.request.urlopen(request, timeout=5)
        t0 = time.monotonic()
        rolled: dict[str, float] = {}
        aa_analyses: dict[str, set[str]] = {name: set() for name in aa_names}
        end = t0 + args.observe_seconds
        while time.monotonic() < end:
            selectors = {s.metadata.name: s.spec.selector or {} for s in core.list_namespaced_service(namespace).items}
            now = time.monotonic()
            for name in breach_names:
                if name not in rolled and selectors.get(name, {}).get(LABEL_TRACK) == Track.STABLE:
                    rolled[name] = now - t0
            for name, status in statuses().items():
                if name in aa_analyses and status.get("lastAnalysis"):
                    aa_analyses[name].add(status["lastAnalysis"]["time"])
            time.sleep(0.5)
        final = statuses()
        false_rollbacks = [n for n in aa_names if final[n].get("phase") == "RolledBack"]
        times = list(rolled.values())
        figures = {
            "settings": {
                "trials": args.trials,
                "scrape_interval": f"{SCRAPE_SECONDS:g}s",
                "analysis_interval": args.interval,
                "analysis_window": args.window,
                "a_a_analysis_window": args.aa_window,
                "failure_limit": args.failure_limit,
                "breach": "canary drafter per-token acceptance alpha 0.8 -> 0.3 at t0",
                "observe_seconds": args.observe_seconds,
            },
            "time_to_no_canary_traffic_seconds": {
                "rolled_back": len(times),
                "p50": round(statistics.median(times), 1) if times else None,
                "p95": round(percentile(times, 0.95), 1) if times else None,
                "max": round(max(times), 1) if times else None,
            },
            "a_a": {
                "trials": args.aa_trials,
                "false_rollbacks": len(false_rollbacks),
                "analyses_observed": sum(len(v) for v in aa_analyses.values()),
            },
            "watch_cost": cost,
        }
        print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()

"""Benchmark: the time to a step's Pass when a node is lost mid-step, and the time to roll back a bad canary after.

Runs on a dev cluster of its own with the real Prometheus (5 s scrape); every case is a fleet in a namespace of
its own with its own simulator and operator, set up as tests/integration/test_node_loss.py sets them up (the
`nodeloss` helpers: stable's four pods on two fake nodes, the canary's two on two others, an A/A canary, one
step at 50% whose pause is `--pause`):
- `none`, `stable`, `canary`: no node lost, or the node holding most of that track's pods deleted with them
  `--lost-after` seconds into the step (its Deployment brings them back on the track's other node). Measured:
  the time from the step's canary pods first all Ready to the Pass that promoted it, where that Pass's
  evidence started, how long the track took to have all its replicas Ready again, and the first reason of
  each analysis that was not a Pass;
- `bad-stable`, `bad-canary`: the node lost `--lost-after` seconds into the step, then the canary's drafter turns
  bad (acceptance alpha 0.8 -> 0.3). Measured: the time from the turn until the canary is rolled back.

    python benchmarks/node_loss.py --trials 3

The cases of one trial run at once (`--parallel 1`: one after another), so they share the machine's load.
Prints the settings and the figures as JSON. The cluster and every process stop when it ends, however it ends.
"""

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parents[1] / "tests" / "integration"))  # the node-loss test's fleets

import kubernetes

from specfleet_workshop.devcluster.cluster import ClusterInfo

from benchkit import cluster_session
from fleetkit import SCENARIO, Fleet, Operator, Simulator, wait_for
from nodeloss import NAME, canary_in_step, lose_a_node, make_pools, promoted, remove_pools

PASS_CASES = ("none", "stable", "canary")
ROLLBACK_CASES = ("bad-stable", "bad-canary")
BAD = {**SCENARIO, "pairs": [{"target": "*", "drafter": "*", "track": "canary", "acceptance": 0.3}]}


class Sampler(threading.Thread):
    """Reads the fleet once a second while a case runs: when the lost track, once seen short, had all its replicas
    Ready again, and the reasons the analyses gave (the first reason of each verdict that was not a Pass, counted)."""

    def __init__(self, fleet: Fleet, track: str) -> None:
        super().__init__(daemon=True)
        self.fleet, self.deployment = fleet, f"{NAME}-{track}"
        self.lost_at: float | None = None
        self.back_at: float | None = None
        self.short = False
        """Whether the track was seen short of Ready replicas since the loss."""
        self.reasons: Counter[str] = Counter()
        self.seen: set[str] = set()
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(1.0):
            try:
                self.sample()
            except Exception:  # a busy API server: the next second reads again
                continue

    def sample(self) -> None:
        status = self.fleet.status(NAME)
        analysis = status.get("lastAnalysis") or {}
        if analysis.get("time") not in self.seen and analysis.get("verdict") not in (None, "Pass"):
            self.seen.add(analysis["time"])
            self.reasons[f"{analysis['verdict']}: {(analysis.get('reasons') or [''])[0][:90]}"] += 1
        if self.lost_at is not None and self.back_at is None:
            deployment = self.fleet.deployments().get(self.deployment)
            if deployment is None:
                return
            ready, wanted = deployment.status.ready_replicas or 0, deployment.spec.replicas
            self.short = self.short or ready < wanted
            if self.short and ready >= wanted:
                self.back_at = time.time()


def play(case: str, index: int, cluster: ClusterInfo, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """One case in a namespace of its own: its figures, or what went wrong."""
    api = cluster.api_client()
    core = kubernetes.client.CoreV1Api(api)
    namespace = f"node-loss-{index}-{case}"
    core.create_namespace({"metadata": {"name": namespace}})
    workdir = work / namespace
    workdir.mkdir()
    pools = make_pools(core, namespace, network=index % 64)
    operator = Operator(cluster, namespace, workdir / "operator.log", prometheus_url=cluster.prometheus_url)
    operator.start()
    simulator = Simulator(cluster, namespace, workdir)
    fleet, track = Fleet(api, cluster, namespace), case.removeprefix("bad-")
    sampler = Sampler(fleet, track)
    sampler.start()
    try:
        ready = canary_in_step(fleet, pools, args.pause).timestamp()
        lost, lost_at = 0, None
        if track != "none":
            time.sleep(max(0.0, ready + args.lost_after - time.time()))
            lost_at = time.time()
            lost = lose_a_node(fleet, core, pools, track)
            sampler.lost_at = lost_at
        if case in ROLLBACK_CASES:
            simulator.put(BAD)
            turned = time.time()
            wait_for("rolled back", fleet.phase_is(NAME, "RolledBack"), timeout=args.timeout)
            return {"case": case, "lost_pods": lost, "rolled_back_seconds": round(time.time() - turned, 1)}
        passed = promoted(fleet, timeout=args.timeout)
        evidence_from = passed.evidence_from.timestamp()
        return {
            "case": case,
            "lost_pods": lost,
            "pass_seconds": round(passed.judged_at.timestamp() - ready, 1),
            "evidence_seconds": passed.evidence_seconds,
            "evidence_from_before_loss": None if lost_at is None else evidence_from < lost_at,
            "replaced_in_seconds": None
            if lost_at is None or sampler.back_at is None
            else round(sampler.back_at - lost_at),
            "not_passed_reasons": dict(sampler.reasons),
        }
    except BaseException as error:  # pytest's Failed (a wait timed out) is a BaseException
        if isinstance(error, KeyboardInterrupt):
            raise
        return {"case": case, "error": str(error)[:300]}
    finally:
        sampler.done.set()
        simulator.stop()
        operator.stop()
        core.delete_namespace(namespace)
        remove_pools(core, pools)
        api.close()


def summary(results: list[dict[str, Any]], field: str) -> dict[str, Any]:
    values = [r[field] for r in results if field in r]
    return {
        "trials": len(results),
        "failed": len(results) - len(values),
        "median": statistics.median(values) if values else None,
        "min": min(values, default=None),
        "max": max(values, default=None),
        "each": values,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--cases", nargs="+", default=[*PASS_CASES, *ROLLBACK_CASES])
    parser.add_argument("--pause", type=int, default=10, help="the step's pause, seconds (short: the Pass decides)")
    parser.add_argument("--lost-after", type=float, default=20.0, help="seconds into the step a node is lost")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for a promotion or rollback")
    parser.add_argument("--parallel", type=int, default=5, help="cases played at once")
    parser.add_argument("--state-dir", type=Path, default=Path(tempfile.gettempdir()) / "specfleet-node-loss-bench")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="specfleet-node-loss-bench-"))
    print(f"logs in {work}", file=sys.stderr)
    results: dict[str, list[dict[str, Any]]] = {case: [] for case in args.cases}
    started = time.monotonic()
    with cluster_session(args.state_dir, 1) as (cluster, _), ThreadPoolExecutor(args.parallel) as pool:
        for trial in range(args.trials):
            plays = {
                case: pool.submit(play, case, trial * len(args.cases) + i, cluster, args, work)
                for i, case in enumerate(args.cases)
            }
            for case, future in plays.items():
                result = future.result()
                print(json.dumps({"trial": trial, **result}), file=sys.stderr)
                results[case].append(result)
    figures = {
        "settings": {k: v for k, v in vars(args).items() if k != "state_dir"},
        "wall_seconds": round(time.monotonic() - started),
        "step_ready_to_pass_seconds": {c: summary(results[c], "pass_seconds") for c in args.cases if c in PASS_CASES},
        "pass_evidence_from_before_loss": {
            c: [r.get("evidence_from_before_loss") for r in results[c]] for c in args.cases if c in PASS_CASES
        },
        "turned_bad_to_rolled_back_seconds": {
            c: summary(results[c], "rolled_back_seconds") for c in args.cases if c in ROLLBACK_CASES
        },
        "lost_pods": {c: [r.get("lost_pods") for r in results[c]] for c in args.cases},
        "replaced_in_seconds": {
            c: [r.get("replaced_in_seconds") for r in results[c]] for c in args.cases if c in PASS_CASES
        },
        "not_passed_reasons": {
            c: sum((Counter(r.get("not_passed_reasons", {})) for r in results[c]), Counter()) for c in args.cases
        },
        "errors": [r["error"] for c in args.cases for r in results[c] if "error" in r],
    }
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()

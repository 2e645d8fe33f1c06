"""Benchmark: specfleet side by side with Argo Rollouts and Flagger, in one run, on one dev cluster.

One dev cluster of its own, the real Prometheus (5 s scrape), the simulator, and three controllers, each
in its own namespace: specfleet (`specfleet run`), Argo Rollouts (`rollouts-controller --namespaced`, out
of cluster) and Flagger (`flagger -mesh-provider kubernetes`, out of cluster), the peers built by
`specfleet dev build --peers` (this script builds them when missing). Every fleet is a Llama-3.1-8B
vLLM fleet on fake MI300X nodes whose pods the simulator serves, judged by the same two guardrails:
p95 per-token latency (`vllm:request_time_per_output_token_seconds`) at most 10% above stable's, and
per-token acceptance alpha (position-0 accepted / drafts) at least 0.6. Each controller runs in two
settings: `documented` (the peer's documented example: Argo `interval: 5m`, `failureLimit: 3`, a [5m]
query; Flagger blue/green `interval: 1m`, `threshold: 2`, `iterations: 10`; specfleet's defaults) and
`tuned` (every controller at a 10 s interval and a 30 s window: Flagger's minimum interval).

Phases, one after the other (each fleet is deleted once measured, so the simulator serves a few hundred
pods at most), per setting: `breach` fleets (the canary's drafter turns bad at t0: alpha 0.8 -> 0.3; time
until the canary gets no traffic) together with `good` fleets (a non-speculative stable, an EAGLE-3 canary
1.9x faster per token: who promotes it); then `aa` fleets (an A/A canary with noise whose pods get no
load for their first minute: false rollbacks). Last, `outage` fleets with a live, healthy canary:
Prometheus is stopped for 2 minutes mid-analysis (what each does). One simulator per namespace.

Then fleet scale (`fleetscale.py`): `--scale` one-replica fleets of each controller (a SpeculativeDeployment;
a Rollout and its Service; a Deployment and its Canary; all at the tuned 10 s interval), one controller at
a time, started fresh in a namespace of its own on at least 2 x N / 8 fake MI300X nodes (a Flagger fleet
briefly has two pods): time until all converged (Healthy, Healthy, Initialized), the controller's CPU
seconds and peak RSS, its API requests per object (from the API server's audit log), and its writes per
minute over `--idle` seconds in which nothing changes.

    python benchmarks/peers.py --trials 20 --phases rollback   # both settings, 54 minutes on 2 cores
    python benchmarks/peers.py --phases scale --scale 1000      # about 40 minutes (1,000 per controller)
    python benchmarks/peers.py --phases scale --scale 1000 --scale-arrival 90   # each at the same arrival rate
    python benchmarks/peers.py --quick                # tuned settings, 3 trials, about 15 minutes

Prints the tables and the JSON, writes docs/peers-rollback.png. The cluster and every process stop on exit.
The simulators run at a raised scheduling priority (they stand in for GPU nodes; needs root). A run in which
Prometheus gave up on more than 5% of the simulated pods' scrapes (a machine too busy for the simulator to answer
within the scrape timeout; a loading pod's quick 503 is an answer) says INVALID RUN, exits 1 and writes no plot:
its tables measure the overload.

This script parses the command line and runs the phases; the fleets and settings are in peers_fleets.py,
the peers' binaries and CRDs in peers_install.py, the phases in peers_phases.py, the tables in peers_report.py.
"""

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import fleetscale
from benchkit import ROOT, cluster_session
from peers_fleets import CONTROLLERS, PHASES, SETTINGS, SETUPS
from peers_install import install_peer_crds, peer_binaries
from peers_phases import MIN_ANSWERED, rollback_phases, scale_phase
from peers_report import plot, ratios, scale_ratios, scale_table, scrape_warning, table


def run_benchmark(args: argparse.Namespace) -> dict[str, Any]:
    """One dev cluster with the peers' CRDs; the rollback phases, then fleet scale (as `--phases` asks)."""
    binaries, argo_crds, flagger_crds = peer_binaries()
    settings = tuple(args.settings)
    measured = tuple(dict.fromkeys([*settings, *(args.outage_settings or ())]))
    largest = 3 * max(args.trials + args.side_trials, args.side_trials * len(measured))
    nodes = max(-(-3 * largest // 8) + 2 if "rollback" in args.phases else 0,
                -(-2 * args.scale // 8) + 2 if "scale" in args.phases else 0)  # fmt: skip
    work = Path(tempfile.mkdtemp(prefix="specfleet-peers-"))
    print(f"logs in {work}", file=sys.stderr)
    with cluster_session(args.state_dir, nodes, keep=args.keep) as (cluster, specfleet_namespace):
        install_peer_crds(cluster, argo_crds, flagger_crds)
        api = cluster.api_client()
        api.user_agent = fleetscale.BENCH_USER_AGENT
        figures: dict[str, Any] = {"nodes": nodes}
        if "rollback" in args.phases:
            figures |= rollback_phases(args, cluster, api, binaries, specfleet_namespace, work)
        if "scale" in args.phases:
            figures["scale"] = scale_phase(args, cluster, api, binaries, work)
        return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=20, help="breach and A/A fleets per controller and setting")
    parser.add_argument("--side-trials", type=int, default=5, help="good and outage fleets per controller and setting")
    parser.add_argument("--settings", nargs="+", choices=SETTINGS, default=list(SETTINGS))
    parser.add_argument("--outage-settings", nargs="+", choices=SETTINGS, help="default: --settings")
    parser.add_argument("--load", type=float, default=1.0, help="requests per second per pod")
    parser.add_argument("--observe", type=float, default=1800.0, help="seconds after the breach, at most")
    parser.add_argument("--after-outage", type=float, default=120.0, help="seconds observed after Prometheus is back")
    parser.add_argument("--quick", action="store_true", help="3 trials, 1 side trial, tuned settings only")
    parser.add_argument("--state-dir", type=Path, default=Path(tempfile.gettempdir()) / "specfleet-peers-bench")
    parser.add_argument("--keep", action="store_true", help="leave the cluster and the processes running")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here after each phase")
    parser.add_argument("--plot", type=Path, default=ROOT / "docs" / "peers-rollback.png")
    phases = "rollback: breach, good, A/A, outage fleets; scale: --scale fleets per controller"
    parser.add_argument("--phases", nargs="+", choices=PHASES, default=list(PHASES), help=phases)
    parser.add_argument("--scale", type=int, default=1000, help="fleets per controller in the scale phase")
    parser.add_argument("--idle", type=float, default=300.0, help="seconds the scale phase counts idle writes")
    parser.add_argument("--scale-arrival", type=float, default=0.0,
                        help="spread each controller's creates evenly over this many seconds, so the controllers meet "
                             "the same arrival rate (0: as fast as 8 client threads go)")  # fmt: skip
    parser.add_argument("--scale-controllers", nargs="+", choices=CONTROLLERS, default=list(CONTROLLERS),
                        help="the controllers of the scale phase, in this order")  # fmt: skip
    args = parser.parse_args()
    if args.quick:
        args.trials, args.side_trials, args.settings, args.observe = 3, 1, ["tuned"], 600.0
    started = time.monotonic()
    figures = run_benchmark(args)
    settings = {
        "trials": args.trials,
        "side_trials": args.side_trials,
        "load_per_pod": args.load,
        "scrape_interval": "5s",
        "setups": {f"{c}/{s}": vars(SETUPS[c, s]) for c in CONTROLLERS for s in SETTINGS},
        "minutes": round((time.monotonic() - started) / 60, 1),
    }
    warning = None
    if "results" in figures:
        print(table(figures["results"]))
        warning = scrape_warning(figures["scraped"]["answered"], MIN_ANSWERED)
        if warning is None:
            plot(figures["results"], figures["times"], args.plot)
        figures["ratios"] = ratios(figures["results"])
    if "scale" in figures:
        print(scale_table(figures["scale"], figures["nodes"]))
        figures["scale_ratios"] = scale_ratios(figures["scale"])
    print(json.dumps({"settings": settings, **figures}, indent=2))
    if warning is not None:
        sys.exit(warning)


if __name__ == "__main__":
    main()

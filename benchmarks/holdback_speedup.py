"""The speed-up a holdback measures over time, from simulated pods, against the simulator's oracle.

What the user has: 3 stable pods serving EAGLE-3 at k=6 with a drafter of alpha 0.5, 1 holdback pod without
speculation (`rollout.holdback: {replicas: 1}`), and traffic that grows: 8 requests/s per pod, then 25, then
35. Every 5 minutes (`analysis.window`) the operator's fleet look is replayed (that window, in 6 slices,
`judge.speedup` at 99%); the oracle says what the window's load converges to. The first look after which
the upper bound stayed below 1 for `--looks` looks in a row is when `SpeculationPaying` turns False. Also
printed: what the holdback costs (the fleet's mean per-token latency with it against stable's alone), and the
bounds of the per-pod load ratio the speed-up stands on (it counts as paying only where they are within 1.25x).

    python benchmarks/holdback_speedup.py [--plot docs/holdback-speedup.png] [--json out.json]
"""

import argparse
import json
import sys
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from specfleet.api.spec import Guardrails
from specfleet.judge import TrackEvidence, speedup
from specfleet.judge.speedup import comparable
from specfleet_workshop.sim.engine import Engine
from specfleet_workshop.sim.oracle import Setup, token_latency

import judge_roc

ALPHA, K = 0.5, 6
PHASES = ((20, 8.0), (20, 25.0), (20, 35.0))
"""(minutes, requests/s per pod): the traffic the fleet is offered, in order."""
WINDOW, SLICES, STABLE_PODS = 300.0, 6, 3
EPOCH = datetime(2026, 12, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Look:
    minute: int
    load: float
    estimate: float | None
    lower: float | None
    upper: float | None
    oracle: float
    fleet_cost: float | None
    """The fleet's mean per-token latency with the holdback / with every pod on stable's config, minus 1."""
    load_lower: float | None = None
    load_upper: float | None = None
    """Bounds of stable's per-pod load / the holdback's: a speed-up counts only where both are within 1.25x."""


def oracle(load: float) -> float:
    setup = Setup(knobs={**judge_roc.BASE, "acceptance": ALPHA, "load": load})
    return token_latency(setup.config(0)) / token_latency(setup.config(K))


def _reconfigure(pods: list[Engine], k: int | None, load: float, now: float) -> None:
    for pod in pods:
        fresh = judge_roc.engine("stable", {"acceptance": ALPHA, "load": load}, 0, k)
        pod.reconfigure(fresh.config, now)


def _evidence(shots: list[Any], end: int, speculative: bool) -> TrackEvidence:
    first = end - SLICES
    whole = judge_roc.evidence(shots[end], shots[first], WINDOW, speculative)
    parts = [judge_roc.evidence(shots[i + 1], shots[i], WINDOW / SLICES, speculative) for i in range(first, end)]
    return replace(whole, token_latency_slices=tuple(p.token_latency_mean for p in parts if p.token_latency_mean))


def run(phases: tuple[tuple[int, float], ...] = PHASES, seed: int = 1) -> list[Look]:
    """Replay a look every window (5 minutes); snapshots every slice (50 s)."""
    stable = [
        judge_roc.engine("stable", {"acceptance": ALPHA, "load": phases[0][1]}, seed + i, K) for i in range(STABLE_PODS)
    ]
    holdback = [judge_roc.engine("holdback", {"acceptance": ALPHA, "load": phases[0][1]}, seed + 10, None)]
    loads = [load for minutes, load in phases for _ in range(minutes)]
    step = WINDOW / SLICES
    times = [30.0 + i * step for i in range(int(len(loads) * 60 / step) + 1)]
    shots: dict[float, tuple[Any, Any]] = {}
    current = phases[0][1]
    looks = []
    for t in times:
        for pod in (*stable, *holdback):
            pod.advance_to(t)
        shots[t] = (judge_roc.snapshot([p.metrics for p in stable]), judge_roc.snapshot([p.metrics for p in holdback]))
        elapsed = t - 30.0
        upcoming = loads[min(len(loads) - 1, int(elapsed // 60))]  # the traffic from t on
        if upcoming != current:
            _reconfigure(stable, K, upcoming, t)
            _reconfigure(holdback, None, upcoming, t)
            current = upcoming
        load = loads[min(len(loads) - 1, max(0, int(elapsed // 60) - 1))]  # the traffic of the minute before t
        if elapsed >= WINDOW and elapsed % WINDOW == 0:
            window = [shots[t - WINDOW + i * step] for i in range(SLICES + 1)]
            s = _evidence([w[0] for w in window], SLICES, True)
            h = _evidence([w[1] for w in window], SLICES, False)
            measured = speedup(s, h, Guardrails(), 0.99, EPOCH + timedelta(seconds=t))
            cost = None
            if s.token_latency_mean and h.token_latency_mean and s.requests and h.requests:
                with_holdback = (s.token_latency_mean * s.requests + h.token_latency_mean * h.requests) / (
                    s.requests + h.requests
                )
                cost = with_holdback / s.token_latency_mean - 1
            looks.append(
                Look(
                    int(elapsed // 60),
                    load,
                    measured.estimate,
                    measured.lower,
                    measured.upper,
                    oracle(load),
                    cost,
                    measured.load_lower,
                    measured.load_upper,
                )
            )
    return looks


def flagged_at(looks: list[Look], in_a_row: int) -> int | None:
    """The minute `SpeculationPaying` turns False: the upper bound below 1 for `in_a_row` looks in a row."""
    run_length = 0
    for look in looks:
        run_length = run_length + 1 if look.upper is not None and look.upper < 1 else 0
        if run_length >= in_a_row:
            return look.minute
    return None


def plot(looks: list[Look], flagged: int | None, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    minutes = [look.minute for look in looks]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    ax.fill_between(
        minutes,
        [look.lower or 0 for look in looks],
        [look.upper or 0 for look in looks],
        alpha=0.25,
        label="99% bounds",
    )
    ax.plot(minutes, [look.estimate for look in looks], marker=".", label="measured speed-up (stable vs holdback)")
    ax.step(minutes, [look.oracle for look in looks], where="pre", linestyle="--", label="oracle at the window's load")
    ax.axhline(1.0, color="black", linewidth=0.8)
    if flagged is not None:
        ax.axvline(flagged, color="red", linewidth=1, label=f"SpeculationPaying=False (minute {flagged})")
    for start, (_, load) in zip(_starts(), PHASES, strict=True):
        ax.text(start + 1, 0.12, f"{load:g} req/s per pod", fontsize=8)
    ax.set_xlabel("minute")
    ax.set_ylabel("per-token speed-up over no speculation")
    ax.set_title(f"Holdback: EAGLE-3 k={K}, alpha {ALPHA}, 3 stable pods + 1 holdback, load growing")
    ax.set_ylim(0, max(2.0, max((look.upper or 0) for look in looks) + 0.1))
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def _starts() -> list[int]:
    starts, total = [], 0
    for minutes, _ in PHASES:
        starts.append(total)
        total += minutes
    return starts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--looks", type=int, default=3, help="looks in a row that flip SpeculationPaying")
    parser.add_argument("--plot", type=Path, help="write the PNG here")
    parser.add_argument("--json", type=Path, help="write every look here")
    args = parser.parse_args()
    looks = run(seed=args.seed)
    flagged = flagged_at(looks, args.looks)
    print("| minute | load/pod | speed-up | 99% bounds | oracle | fleet cost of the holdback |")
    print("|---:|---:|---:|---|---:|---:|")
    for look in looks:
        bounds = f"{look.lower:.3f}-{look.upper:.3f}" if look.lower is not None else "-"
        estimate = f"{look.estimate:.3f}" if look.estimate is not None else "-"
        cost = f"{look.fleet_cost:+.1%}" if look.fleet_cost is not None else "-"
        print(f"| {look.minute} | {look.load:g} | {estimate} | {bounds} | {look.oracle:.3f} | {cost} |")
    bounded = [(look.load_lower, look.load_upper) for look in looks if look.load_lower and look.load_upper]
    shown = sum(comparable(lower, upper) for lower, upper in bounded)
    if bounded:
        lowest, highest = min(b[0] for b in bounded), max(b[1] for b in bounded)
        print(f"\nper-pod load stable / holdback, 99% bounds: {lowest:.2f}x at the lowest, {highest:.2f}x at the "
              f"highest; shown comparable (both within 1.25x) at {shown} of {len(looks)} looks")  # fmt: skip
    change = sum(minutes for minutes, _ in PHASES[:-1])
    print(f"\nSpeculationPaying=False at minute {flagged} ({args.looks} looks in a row); last load change at {change}")
    if args.plot:
        plot(looks, flagged, args.plot)
        print(f"plot: {args.plot}")
    if args.json:
        args.json.write_text(json.dumps([look.__dict__ for look in looks], indent=1))


if __name__ == "__main__":
    main()

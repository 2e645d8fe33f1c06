"""Benchmark: how fast the canary judge catches a regression, and how often it fails a canary that changed nothing.

The simulator is the ground truth. Each trial simulates, in process, the vLLM engines of one canary step
of a 4-replica fleet (1 canary pod, 3 stable pods, the same offered load per pod): Llama-3.1-8B on
MI325X with EAGLE-3 at k=4, each request with its own acceptance. At every analysis interval the
evidence over the window is cut from the engines' counters and histogram buckets as Prometheus'
`increase()` holds them, and each judge decides on the same evidence:

- `old`: specfleet's first judge, kept here for comparison: p95 *per-step* inter-token latency within
  10% of stable's and accepted/drafted tokens >= 0.6 (point estimates), errors <= 1%, failureLimit 1;
- `old, step ITL only`: the same without its accepted/drafted floor, to compare the latency measures;
- `new`: the judge with its defaults (per-token p95 vs stable, limit 10%; acceptance alpha >= 0.6;
  errors vs stable; sequential confidence bounds at 99%; failureLimit 0);
- `new, limit 0`: the same with `maxTokenLatencyP95Regression: 0`, for users to whom any slowdown is a
  regression: the A/A canary then sits exactly on the limit, the hardest case for false rollbacks.

Effects are what a user's config has. Harmful: the canary's engine steps take X% longer; the drafter's
per-token acceptance alpha is X under the 0.6 floor (both tracks run it, so only the acceptance
guardrail can tell); a weaker drafter on the canary (same step time, fewer tokens per step). Good:
an A/A canary, and EAGLE-3 replacing a plain stable (faster per token, slower per step). Prints the
settings, what each measure says, and the tables; writes docs/judge-roc.png.

    python benchmarks/judge_roc.py --load 12        # 30 canaries per effect, the figures in docs/judge.md
    python benchmarks/judge_roc.py --trials 4 --good-trials 4 --no-plot   # a quick look

It starts no cluster and no server, only `--workers` worker processes: they ignore Ctrl-C (the parent
handles it and terminates them), die with the parent even if it is killed, and are stopped when the run
ends however it ends.
"""

import argparse
import ctypes
import json
import math
import multiprocessing
import random
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specfleet.api.spec import Guardrails
from specfleet.api.status import Verdict
from specfleet.devcluster.process import signals_as_interrupts
from specfleet.hardware import MI325X
from specfleet.judge import TrackEvidence, judge
from specfleet.render.argv import FINE_ITL_BUCKETS
from specfleet.sim.engine import Engine, Histogram, Metrics, configure
from specfleet.sim.pods import parse_vllm_args
from specfleet.sim.scenario import parse_scenario, resolve
from specfleet.stats import Binned

TARGET = "meta-llama/Llama-3.1-8B-Instruct"
DRAFTER = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
K = 4
GOOD_ALPHA = 0.8
LOAD = 4.0
STABLE_PODS = 3
WARMUP = 30.0
INTERVAL = 60.0
WINDOW = 300.0
BASE = {"acceptance": GOOD_ALPHA, "output_tokens": 256}
STEP_TIME_KNOBS = {"bandwidth_efficiency": 0.7, "step_overhead_ms": 1.0, "draft_pass_overhead_ms": 0.2}
"""The simulator's defaults for every term of an engine step; a latency effect scales all of them."""


def argv(k: int | None) -> list[str]:
    speculative = (
        ["--speculative-config", json.dumps({"method": "eagle3", "model": DRAFTER, "num_speculative_tokens": k})]
        if k
        else []
    )
    buckets = json.dumps({"inter_token_latency": FINE_ITL_BUCKETS})
    return [TARGET, "--tensor-parallel-size", "1", *speculative, "--custom-histogram-buckets", buckets]


def engine(track: str, knobs: dict[str, Any], seed: int, k: int | None = K) -> Engine:
    args = parse_vllm_args(argv(k))
    params = resolve(parse_scenario({"defaults": {**BASE, **knobs}}), args.identity(track))
    return Engine(configure(args, params, MI325X), args.histogram_buckets, random.Random(seed), 0.0)


@dataclass(frozen=True)
class Snapshot:
    """One track's counters at one moment, summed over its pods."""

    token: tuple[float, ...]
    step: tuple[float, ...]
    finished: dict[str, float]
    drafts: float
    draft_tokens: float
    accepted: float
    per_position: tuple[float, ...]
    generation: float
    per_pod_finished: tuple[float, ...]
    prompt: float = 0.0
    token_sum: float = 0.0
    """Sum of the per-token latency observations (the histogram's `_sum`)."""


def _cumulative(histograms: Sequence[Histogram]) -> tuple[float, ...]:
    return tuple(float(sum(c)) for c in zip(*(h.cumulative() for h in histograms), strict=True))


def snapshot(metrics: Sequence[Metrics]) -> Snapshot:
    return Snapshot(
        token=_cumulative([m.time_per_output_token for m in metrics]),
        step=_cumulative([m.inter_token_latency for m in metrics]),
        finished={r: float(sum(m.finished[r] for m in metrics)) for r in metrics[0].finished},
        drafts=float(sum(m.num_drafts for m in metrics)),
        draft_tokens=float(sum(m.num_draft_tokens for m in metrics)),
        accepted=float(sum(m.num_accepted_tokens for m in metrics)),
        per_position=tuple(float(sum(v)) for v in zip(*(m.accepted_per_position for m in metrics), strict=True)),
        generation=float(sum(m.generation_tokens for m in metrics)),
        per_pod_finished=tuple(float(sum(m.finished.values())) for m in metrics),
        prompt=float(sum(m.prompt_tokens for m in metrics)),
        token_sum=sum(m.time_per_output_token.total for m in metrics),
    )


def _binned(bounds: tuple[float, ...], now: tuple[float, ...], then: tuple[float, ...]) -> Binned | None:
    increases = (a - b for a, b in zip(now, then, strict=True))
    return Binned.from_buckets(dict(zip((*bounds, math.inf), increases, strict=True)))


def evidence(now: Snapshot, then: Snapshot, seconds: float, speculative: bool) -> TrackEvidence:
    """What `increase(...[seconds])` would answer, for one track."""
    bounds = tuple(FINE_ITL_BUCKETS)
    return TrackEvidence(
        token_latency=_binned(bounds, now.token, then.token),
        step_latency=_binned(bounds, now.step, then.step),
        finished={r: now.finished[r] - then.finished[r] for r in now.finished},
        drafts=now.drafts - then.drafts if speculative else None,
        draft_tokens=now.draft_tokens - then.draft_tokens if speculative else None,
        accepted_tokens=now.accepted - then.accepted if speculative else None,
        accepted_per_position=tuple(a - b for a, b in zip(now.per_position, then.per_position, strict=True))
        if speculative
        else (),
        generation_tokens=now.generation - then.generation,
        prompt_tokens=now.prompt - then.prompt,
        token_latency_mean=(now.token_sum - then.token_sum) / count
        if (count := now.token[-1] - then.token[-1]) > 0
        else None,
        request_rate_per_pod=tuple(
            (a - b) / seconds for a, b in zip(now.per_pod_finished, then.per_pod_finished, strict=True)
        ),
        seconds=seconds,
    )


Looks = list[tuple[TrackEvidence, TrackEvidence]]


@dataclass(frozen=True)
class Effect:
    """What a canary has that its stable does not, as a user would state it."""

    name: str
    harmful: bool
    """A change that should be rolled back (counted as detection), or one that should not (false rollbacks)."""
    knobs: dict[str, Any] = field(default_factory=dict)
    """Scenario knobs of both tracks."""
    canary: dict[str, Any] = field(default_factory=dict)
    """Scenario knobs of the canary only."""
    canary_k: int | None = K
    stable_k: int | None = K


def simulate(effect: Effect, load: float, looks: int, seed: int) -> Looks:
    """Run 1 canary and 3 stable pods; the evidence (canary, stable) each judge sees at looks 1..n."""
    knobs = {**effect.knobs, "load": load}
    canary = [engine("canary", {**knobs, **effect.canary}, seed, k=effect.canary_k)]
    stable = [engine("stable", knobs, seed * 100 + i + 1, k=effect.stable_k) for i in range(STABLE_PODS)]
    snapshots: list[tuple[Snapshot, Snapshot]] = []
    for n in range(looks + 1):
        t = WARMUP + n * INTERVAL
        for pod in (*canary, *stable):
            pod.advance_to(t)
        snapshots.append((snapshot([p.metrics for p in canary]), snapshot([p.metrics for p in stable])))
    result = []
    for n in range(1, looks + 1):
        back = max(0, n - round(WINDOW / INTERVAL))
        seconds = (n - back) * INTERVAL
        (c_now, s_now), (c_then, s_then) = snapshots[n], snapshots[back]
        result.append(
            (
                evidence(c_now, c_then, seconds, effect.canary_k is not None),
                evidence(s_now, s_then, seconds, effect.stable_k is not None),
            )
        )
    return result


def old_judge(canary: TrackEvidence, stable: TrackEvidence, acceptance: bool = True) -> Verdict:
    """specfleet's first judge: point estimates against bare thresholds (git show 5d8f42f:operator/specfleet/judge.py).

    `acceptance=False` leaves out its accepted/drafted floor, to compare the latency guardrails alone."""
    finished = sum(canary.finished.values())
    drafted, accepted = canary.draft_tokens or 0.0, canary.accepted_tokens or 0.0
    if acceptance and drafted >= 500 and accepted / drafted < 0.6:
        return Verdict.FAIL
    if finished < 20 or canary.step_latency is None or stable.step_latency is None:
        return Verdict.INCONCLUSIVE
    failed = (canary.finished.get("error", 0) + canary.finished.get("abort", 0)) / finished
    itl, baseline = canary.step_latency.value_at(0.95), stable.step_latency.value_at(0.95)
    if failed > 0.01 or itl > baseline * 1.1:
        return Verdict.FAIL
    return Verdict.PASS


def new_judge(guardrails: Guardrails, confidence: float) -> Callable[[TrackEvidence, TrackEvidence, int], Verdict]:
    def decide(canary: TrackEvidence, stable: TrackEvidence, look: int) -> Verdict:
        return judge(guardrails, canary, stable, speculative=True, confidence=confidence, look=look).verdict

    return decide


JUDGES: dict[str, tuple[Callable[[TrackEvidence, TrackEvidence, int], Verdict], int]] = {
    "old (step ITL, accepted/drafted)": (lambda c, s, _look: old_judge(c, s), 1),
    "old, step ITL only": (lambda c, s, _look: old_judge(c, s, acceptance=False), 1),
    "new": (new_judge(Guardrails(), 0.99), 0),
    "new, limit 0": (new_judge(Guardrails(max_token_latency_p95_regression=0.0), 0.99), 0),
}
"""Judge -> (decide(canary, stable, look), failureLimit)."""


def rollback_look(
    decide: Callable[[TrackEvidence, TrackEvidence, int], Verdict], limit: int, looks: Looks
) -> int | None:
    """The look at which the judge rolls back (the failure after `limit` tolerated ones), or None."""
    failures = 0
    for n, (canary, stable) in enumerate(looks, start=1):
        if decide(canary, stable, n) is Verdict.FAIL:
            failures += 1
            if failures > limit:
                return n
    return None


def effects() -> list[Effect]:
    slower = [
        Effect(
            f"engine steps +{round(x * 100)}% (per-token latency +{round(x * 100)}%)",
            True,
            canary={
                "bandwidth_efficiency": STEP_TIME_KNOBS["bandwidth_efficiency"] / (1 + x),
                "step_overhead_ms": STEP_TIME_KNOBS["step_overhead_ms"] * (1 + x),
                "draft_pass_overhead_ms": STEP_TIME_KNOBS["draft_pass_overhead_ms"] * (1 + x),
            },
        )
        for x in (0.05, 0.10, 0.20)
    ]
    weaker = [
        Effect(f"alpha {x:+.2f} under the floor (alpha {0.6 + x:.2f} on both tracks)", True, {"acceptance": 0.6 + x})
        for x in (-0.05, -0.10, -0.20)
    ]
    fewer_tokens = [
        Effect(
            "alpha 0.8 -> 0.65 (same step time, fewer tokens per step)",
            True,
            canary={"acceptance": 0.65},
        )
    ]
    good = [
        Effect("A/A (same config, noise on)", False),
        Effect("plain stable -> EAGLE-3 alpha 0.8 (faster per token)", False, stable_k=None),
    ]
    return slower + weaker + fewer_tokens + good


def _trial(job: tuple[Effect, float, int, int]) -> dict[str, Any]:
    effect, load, looks, seed = job
    evidence_by_look = simulate(effect, load, looks, seed)
    result: dict[str, Any] = {
        name: rollback_look(decide, limit, evidence_by_look) for name, (decide, limit) in JUDGES.items()
    }
    result["fails"] = {
        name: sum(decide(c, s, n) is Verdict.FAIL for n, (c, s) in enumerate(evidence_by_look, start=1))
        for name, (decide, _) in JUDGES.items()
    }
    return result


def measures_table(seed: int) -> list[dict[str, Any]]:
    """What each latency and acceptance measure says for a plain stable, a good and a bad drafter (5 minutes)."""
    rows = []
    for label, k, alpha in (
        ("stable, no speculation", None, None),
        ("EAGLE-3 k=4, alpha 0.8", K, 0.8),
        ("EAGLE-3 k=4, alpha 0.3", K, 0.3),
    ):
        pod = engine("stable", {"acceptance": alpha or GOOD_ALPHA, "load": LOAD}, seed, k=k)
        pod.advance_to(WARMUP)
        before = snapshot([pod.metrics])
        pod.advance_to(WARMUP + WINDOW)
        e = evidence(snapshot([pod.metrics]), before, WINDOW, k is not None)
        assert e.token_latency is not None and e.step_latency is not None
        rows.append(
            {
                "pod": label,
                "p95 per-step ITL ms": round(e.step_latency.value_at(0.95) * 1000, 2),
                "p95 per-token ms": round(e.token_latency.value_at(0.95) * 1000, 2),
                "accepted/drafted": round(e.accepted_tokens / e.draft_tokens, 2) if e.draft_tokens else None,
                "alpha": round(e.accepted_per_position[0] / e.drafts, 2) if e.drafts else None,
            }
        )
    return rows


def _table(headers: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "| " + " | ".join("---" for _ in headers) + " |"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def plot(detection: dict[str, dict[str, list[float]]], false_rate: dict[str, dict[str, float]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    judges = list(detection)
    harmful = list(next(iter(detection.values())))
    good = list(next(iter(false_rate.values())))
    fig, axes = plt.subplots(1, 2, figsize=(14, 5.2), gridspec_kw={"width_ratios": [3, 1.3]})
    width = 0.8 / len(judges)
    for i, judge_name in enumerate(judges):
        within3 = [detection[judge_name][e][min(2, len(detection[judge_name][e]) - 1)] * 100 for e in harmful]
        axes[0].bar([x + i * width for x in range(len(harmful))], within3, width, label=judge_name)
        axes[1].bar([x + i * width for x in range(len(good))], [false_rate[judge_name][g] * 100 for g in good], width)
    for ax, names in ((axes[0], harmful), (axes[1], good)):
        ax.set_xticks([x + width * (len(judges) - 1) / 2 for x in range(len(names))])
        ax.set_xticklabels([n.replace(" (", "\n(") for n in names], fontsize=6.5, rotation=20, ha="right")
        ax.set_ylim(0, 105)
    axes[0].axhline(95, color="grey", linestyle=":", linewidth=1)
    axes[0].set_ylabel("rolled back within 3 analysis intervals (%)")
    axes[0].set_title("Harmful canaries caught")
    axes[0].legend(fontsize=7)
    axes[1].axhline(1, color="grey", linestyle=":", linewidth=1)
    axes[1].set_ylabel("canaries rolled back (%)")
    axes[1].set_title("Good canaries rolled back")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


PR_SET_PDEATHSIG = 1


def _worker_started() -> None:
    """In each worker: Ctrl-C is the parent's to handle, SIGTERM (from `Pool.terminate`) just ends the worker,
    and the kernel sends SIGTERM when the parent dies (so a killed run leaves no worker behind)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=30, help="canaries per harmful effect")
    parser.add_argument("--looks", type=int, default=5, help="analyses per harmful canary")
    parser.add_argument("--good-trials", type=int, default=30, help="canaries per good change (A/A, ...)")
    parser.add_argument("--good-looks", type=int, default=8, help="analyses per good canary")
    parser.add_argument("--load", type=float, default=LOAD, help="offered requests/s per pod")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--plot", type=Path, default=Path(__file__).parent.parent / "docs" / "judge-roc.png")
    parser.add_argument("--no-plot", action="store_true")
    args = parser.parse_args()
    started = time.monotonic()
    print(f"settings: {STABLE_PODS} stable + 1 canary pod, {args.load} req/s per pod, {TARGET} on MI325X, EAGLE-3 "
          f"k={K}, analysis every {INTERVAL:.0f}s over {WINDOW:.0f}s, exact increases (no scrape jitter)")  # fmt: skip
    print("\nwhat each measure says (one pod, 4 req/s, 5 minutes):")
    measures = measures_table(args.seed)
    print(_table(list(measures[0]), [list(r.values()) for r in measures]))

    changes = effects()
    jobs: list[tuple[Effect, float, int, int]] = []
    for index, effect in enumerate(changes):
        trials, looks = (args.trials, args.looks) if effect.harmful else (args.good_trials, args.good_looks)
        jobs += [(effect, args.load, looks, args.seed + 1000 * index + t) for t in range(trials)]
    # Pool, not ProcessPoolExecutor: leaving its `with` terminates and joins the workers, even on Ctrl-C
    # (an executor waits for every queued job, and its workers outlive a killed parent).
    with signals_as_interrupts(), multiprocessing.Pool(args.workers, initializer=_worker_started) as pool:
        results = pool.map(_trial, jobs)

    detection: dict[str, dict[str, list[float]]] = {name: {} for name in JUDGES}
    false_rate: dict[str, dict[str, float]] = {name: {} for name in JUDGES}
    harmful_rows, good_rows = [], []
    for effect in changes:
        mine = [r for (e, *_), r in zip(jobs, results, strict=True) if e is effect]
        row: list[Any] = [effect.name]
        for name in JUDGES:
            if effect.harmful:
                within = [
                    sum(r[name] is not None and r[name] <= n for r in mine) / len(mine)
                    for n in range(1, args.looks + 1)
                ]
                detection[name][effect.name] = within
                row.append(" / ".join(f"{w:.0%}" for w in within))
            else:
                false_rate[name][effect.name] = sum(r[name] is not None for r in mine) / len(mine)
                row.append(f"{false_rate[name][effect.name]:.0%} ({sum(r['fails'][name] for r in mine)} failed)")
        (harmful_rows if effect.harmful else good_rows).append(row)
    print(f"\nharmful canaries rolled back within 1 / 2 / ... / {args.looks} analysis intervals "
          f"({args.trials} canaries each):")  # fmt: skip
    print(_table(["effect", *JUDGES], harmful_rows))
    print(f"\ngood canaries rolled back ({args.good_trials} canaries x {args.good_looks} analyses each, "
          "with the failed analyses):")  # fmt: skip
    print(_table(["change", *JUDGES], good_rows))
    if not args.no_plot:
        plot(detection, false_rate, args.plot)
        print(f"\nplot: {args.plot}")
    print(f"\n{len(jobs)} simulated canaries in {time.monotonic() - started:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()

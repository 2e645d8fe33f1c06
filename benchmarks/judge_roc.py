"""Benchmark: the canary judge's decision matrix, run against the simulator as the operator judges.

Which canaries are promoted, which rolled back, how fast, for effects x loads x analysis settings.

The simulator is the ground truth. Each canary simulates, in process, the vLLM engines of a one-step
rollout of a 4-replica fleet (1 canary pod, 3 stable pods, the same offered load per pod; `--canary-pods` adds
canary pods): Llama-3.1-8B on
MI325X, EAGLE-3 at k=4 with alpha 0.8 unless the effect says otherwise, each request its own acceptance,
step noise on. The stable pods have served for 30 s when the canary pod is Ready (its evidence starts
then, from an empty engine). Every `TICK` the engines' counters and histogram buckets are cut as
Prometheus' `increase()` would hold them (exact: no scrape jitter), and the operator is modelled on them:

- each analysis judges everything since the step's Ready (cumulative evidence: confidence-sequence
  bounds), with the trailing `window` as a fail-only `Recent` check once the evidence is longer than it;
  `steps` = 1, the default guardrails, `confidence` 0.99, `failureLimit` 0;
- between analyses, the watch at every `TICK` (the scrape): the error guardrails over the step's whole
  evidence on the analyses' sequence (`judge.watch`'s `whole_step`; its trailing ranges of a few scrapes are
  not modelled);
- a Fail rolls back at once; a Pass once the step's pause is over promotes (at the pause's end when the
  last analysis before it passed, as the operator's pass at the pause's end does); Inconclusive analyses in
  a row roll back after `onNoData.after` (its default, 30 minutes, counted from the first of them, as the
  operator counts).
  Still undecided `HORIZON` after Ready: "waiting".

Effects (what the canary has that stable does not):
- A/A: the same config on both tracks;
- good: the canary's EAGLE-3 drafter (alpha 0.8) replaces stable's weaker one (alpha 0.6): mean per-token
  latency ~31% lower (a new drafter model, so not `same_drafter`);
- errors +2% / +5% (absolute): the scenario's `error_rate` knob on the canary (the simulator ends that
  share of requests with finished_reason=error part-way through, as vLLM counts them);
- mean per-token latency +20% / +50% with the p95 *lower*: the canary runs stable's drafter at k=2 / k=1
  against stable's k=5, on a workload whose prompts differ (requests' alphas spread 0.2 on both tracks):
  a smaller k slows the well-guessed majority, while the p95 is set by the worst-guessed prompts, which
  gain nothing from a deeper draft (measured: mean +19% / +47%, p95 -13% / -10%);
- p95 +15% / +30%: every term of the canary's engine step 15% / 30% slower (HBM efficiency, step and
  drafter overheads); mean and p95 move alike (+14-17% / +30-37%, more at higher load: larger batches);
- alpha 0.50, 0.1 under the 0.6 floor: a new drafter on the canary against a stable that does not
  speculate; still faster than stable, so only the acceptance guardrail can tell.

Loads: 2, 4 and 12 requests/s per pod. Settings: a 30 s window and 1 minute pause with an analysis every
10 s, and a 5 minute window and 10 minute pause with an analysis every minute. Both settings judge the same
simulated canaries (common random numbers); each canary is simulated until both have decided and, for
good and A/A canaries, until the judge's first Pass in each (its statistical time, without the pause).

For good and A/A canaries the time to the first Pass is set against a fixed-sample test of the same
power: one one-sided test per guardrail at the same per-side error ((1 - confidence) / 2 / (steps x
guardrails)), on the judge's own standard errors (median over the cell's canaries), needs
n = ((z_error + z_power) sigma / (limit - effect))^2 canary requests for the mean and p95 (effect 0 for
A/A), the error-rate bound at 0 errors a fixed count; n is the largest, at power 0.5 against the cell's
median time to the first Pass (at that time the judge had passed half the canaries), / the load = time.

    python benchmarks/judge_roc.py --workers 1                      # 30 canaries per cell, docs/benchmarks.md
    python benchmarks/judge_roc.py --quick --no-plot                # a quick look: 2 canaries, 12 req/s only

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
import statistics
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from specfleet.api.durations import parse_duration
from specfleet.api.spec import AnalysisSpec, Guardrails
from specfleet.api.status import Verdict
from specfleet.hardware import MI325X
from specfleet.judge import Judgement, Recent, TrackEvidence, judge, judged_guardrails, watch
from specfleet.render.argv import FINE_ITL_BUCKETS
from specfleet.stats import Binned, binned_sd, common_bounds, log_quantile_se, requests_to_bound, wilson_bounds, z_score
from specfleet_workshop.devcluster.process import signals_as_interrupts
from specfleet_workshop.fleetpods.pods import parse_vllm_args
from specfleet_workshop.sim.engine import Engine, Histogram, Metrics, configure
from specfleet_workshop.sim.scenario import parse_scenario, resolve

from benchkit import markdown_table

TARGET = "meta-llama/Llama-3.1-8B-Instruct"
DRAFTER = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
K = 4
GOOD_ALPHA = 0.8
LOAD = 4.0
STABLE_PODS = 3
WARMUP = 30.0
"""Seconds the stable pods serve before the canary pod is Ready (its evidence starts then)."""
WINDOW = 300.0
BASE = {"acceptance": GOOD_ALPHA, "output_tokens": 256}
STEP_TIME_KNOBS = {"bandwidth_efficiency": 0.7, "step_overhead_ms": 1.0, "draft_pass_overhead_ms": 0.2}
"""The simulator's defaults for every term of an engine step; a latency effect scales all of them."""

LOADS = (2.0, 4.0, 12.0)
TICK = 10.0
"""Seconds between cuts of the counters: every analysis interval is a multiple of it."""
ON_NO_DATA = parse_duration(AnalysisSpec().on_no_data.after).total_seconds()
"""`analysis.onNoData.after` (its default), action Rollback."""
HORIZON = ON_NO_DATA + 600.0
"""Seconds after Ready a canary is followed; one still undecided then is `waiting`."""
CONFIDENCE = 0.99
STEPS = 1
GUARDRAILS = Guardrails()
POWER = 0.5
"""Power at which the fixed-sample test is compared: the judge's median time to a Pass is where it has 0.5."""
TIME_GOAL = 3.0
"""The judge's median time to a Pass should be within this many times the fixed-sample test's."""


def argv(k: int | None) -> list[str]:
    speculative = (
        ["--speculative-config", json.dumps({"method": "eagle3", "model": DRAFTER, "num_speculative_tokens": k})]
        if k
        else []
    )
    buckets = json.dumps({"inter_token_latency": FINE_ITL_BUCKETS})
    return [TARGET, "--tensor-parallel-size", "1", *speculative, "--custom-histogram-buckets", buckets]


def engine(track: str, knobs: dict[str, Any], seed: int, k: int | None = K, start: float = 0.0) -> Engine:
    args = parse_vllm_args(argv(k))
    params = resolve(parse_scenario({"defaults": {**BASE, **knobs}}), args.identity(track))
    return Engine(configure(args, params, MI325X), args.histogram_buckets, random.Random(seed), start)


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


def _span(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min".replace(".0 min", " min")


@dataclass(frozen=True)
class Setting:
    """`analysis.window`, the step's pause and `analysis.interval`, in seconds."""

    window: float
    pause: float
    interval: float

    @property
    def name(self) -> str:
        return f"{_span(self.window)} / {_span(self.pause)}"


SETTINGS = (Setting(30.0, 60.0, 10.0), Setting(300.0, 600.0, 60.0))


@dataclass(frozen=True)
class Effect:
    """What a canary has that its stable does not, as a user would state it."""

    key: str
    name: str
    harmful: bool
    """A change that must be rolled back, or one that must be promoted."""
    knobs: dict[str, Any] = field(default_factory=dict)
    """Scenario knobs of both tracks."""
    canary: dict[str, Any] = field(default_factory=dict)
    """Scenario knobs of the canary only."""
    stable: dict[str, Any] = field(default_factory=dict)
    """Scenario knobs of stable only."""
    canary_k: int | None = K
    stable_k: int | None = K
    new_drafter: bool = False
    """The canary serves another drafter model than stable's (the operator's `same_drafter` is then false)."""
    past: str = ""
    """How far past which limit, for the targets (`2x maxErrorRateIncrease`)."""

    @property
    def same_drafter(self) -> bool:
        return self.canary_k is not None and self.stable_k is not None and not self.new_drafter


def _slower(x: float) -> dict[str, float]:
    return {
        "bandwidth_efficiency": STEP_TIME_KNOBS["bandwidth_efficiency"] / (1 + x),
        "step_overhead_ms": STEP_TIME_KNOBS["step_overhead_ms"] * (1 + x),
        "draft_pass_overhead_ms": STEP_TIME_KNOBS["draft_pass_overhead_ms"] * (1 + x),
    }


SPREAD = {"acceptance_spread": 0.2}
EFFECTS = (
    Effect("aa", "A/A", False),
    Effect("good", "good: alpha 0.6 -> 0.8 drafter (mean -31%)", False, stable={"acceptance": 0.6}, new_drafter=True),
    Effect("err2", "errors +2%", True, canary={"error_rate": 0.02}, past="2x maxErrorRateIncrease"),
    Effect("err5", "errors +5%", True, canary={"error_rate": 0.05}, past="5x maxErrorRateIncrease"),
    Effect("mean20", "mean +20% (k=2 vs k=5; p95 -13%)", True, SPREAD, canary_k=2, stable_k=5, past="4x mean limit"),
    Effect("mean50", "mean +50% (k=1 vs k=5; p95 -10%)", True, SPREAD, canary_k=1, stable_k=5, past="10x mean limit"),
    Effect("p95x15", "p95 +15% (steps +15%)", True, canary=_slower(0.15), past="3x mean limit"),
    Effect("p95x30", "p95 +30% (steps +30%)", True, canary=_slower(0.30), past="3x p95 limit"),
    Effect(
        "alpha",
        "alpha 0.50 (floor 0.6; vs no drafter)",
        True,
        canary={"acceptance": 0.5},
        stable_k=None,
        new_drafter=True,
        past="0.1 under minAcceptanceAlpha",
    ),
)


def effect(key: str) -> Effect:
    return next(e for e in EFFECTS if e.key == key)


PROMOTED, FAILED, NO_DATA, WAITING = "promoted", "rolled back (Fail)", "rolled back (onNoData)", "waiting"


@dataclass
class Rollout:
    """The operator's moves on one canary under one setting, fed the judge's verdicts look by look
    (specfleet.rollout.canary: `_judge`, `_no_verdict`, `_hold_step`; failureLimit 0, onNoData Rollback)."""

    setting: Setting
    on_no_data: float = ON_NO_DATA
    """Seconds of Inconclusive analyses in a row before the rollback; 0: never (the canary waits)."""
    outcome: str | None = None
    decided_at: float | None = None
    first_pass: float | None = None
    """When the judge first passed the canary (whatever the operator had done by then)."""
    looks: int = 0
    failed_looks: int = 0
    last: Verdict | None = None
    last_time: float = 0.0
    no_data: float = 0.0
    failed: tuple[str, ...] = ()
    """The guardrails that failed the canary when it was rolled back (a trailing-window failure is `recent:...`)."""
    reason: str = ""
    """The verdict's reasons at the decision."""
    fixed: dict[str, float] = field(default_factory=dict)
    """What the fixed-sample comparison needs, read at the first Pass (or the last look): see `spreads`."""

    def due(self, t: float) -> bool:
        return abs(t / self.setting.interval - round(t / self.setting.interval)) < 1e-9

    def _decide(self, outcome: str, t: float, reason: str = "") -> None:
        if self.outcome is None:
            self.outcome, self.decided_at, self.reason = outcome, t, reason

    def pause_over(self, t: float) -> None:
        """The operator's pass at the pause's end (and every later one): the last analysis passed, promote."""
        if self.last is Verdict.PASS and t >= self.setting.pause:
            self._decide(PROMOTED, max(self.setting.pause, self.last_time), "all steps passed")

    def take(self, t: float, judgement: Judgement) -> None:
        """One analysis at `t` seconds after Ready (call `pause_over(t)` first: the pass at `t` acts on the
        previous analysis before this one is in)."""
        verdict = judgement.verdict
        self.looks += 1
        reason = "; ".join(judgement.reasons)
        if verdict is Verdict.PASS:
            self.first_pass = t if self.first_pass is None else self.first_pass
            self.no_data = 0.0
            self.last, self.last_time = verdict, t
            self.pause_over(t)
            return
        if verdict is Verdict.FAIL:
            self.failed_looks += 1
            if self.outcome is None:
                failed = [c.guardrail for c in judgement.checks if c.verdict is Verdict.FAIL]
                self.failed = tuple(  # a Fail's reasons are its failed checks', in order
                    ("recent:" if message.startswith("over the last") else "") + guardrail
                    for guardrail, message in zip(failed, judgement.reasons, strict=False)
                )
            self._decide(FAILED, t, reason)
            self.no_data = 0.0
        elif self.last is Verdict.INCONCLUSIVE:
            self.no_data += t - self.last_time
        self.last, self.last_time = verdict, t
        if verdict is Verdict.INCONCLUSIVE and self.on_no_data and self.no_data >= self.on_no_data:
            self._decide(NO_DATA, t, reason)


def spreads(canary: TrackEvidence, stable: TrackEvidence) -> dict[str, float]:
    """The judge's own standard errors of the log ratios of the mean and the p95 per-token latency, scaled
    to one canary request (x sqrt(canary requests)), with the estimates: what a fixed-sample test needs."""
    c, s = canary.token_latency, stable.token_latency
    if c is None or s is None or not canary.token_latency_mean or not stable.token_latency_mean or c.total <= 1:
        return {}
    shared = common_bounds(c, s)
    cc, ss = c.on(shared), s.on(shared)
    n = cc.total
    mean_se = math.hypot(
        binned_sd(c) / (canary.token_latency_mean * math.sqrt(c.total)),
        binned_sd(s) / (stable.token_latency_mean * math.sqrt(s.total)),
    )
    p95_se = math.hypot(log_quantile_se(cc, 0.95), log_quantile_se(ss, 0.95))
    return {
        "requests": n,
        "mean": math.log(canary.token_latency_mean / stable.token_latency_mean),
        "mean_sigma": mean_se * math.sqrt(n),
        "p95": math.log(cc.value_at(0.95) / ss.value_at(0.95)),
        "p95_sigma": p95_se * math.sqrt(n) if math.isfinite(p95_se) else math.inf,
    }


def per_side_error(guardrails: Guardrails = GUARDRAILS, speculative: bool = True) -> float:
    """The judge's error per side and guardrail: (1 - confidence) / 2 / (steps x guardrails)."""
    return (1 - CONFIDENCE) / 2 / (STEPS * judged_guardrails(guardrails, speculative))


def fixed_requests(
    fixed: dict[str, float], guardrails: Guardrails = GUARDRAILS, power: float = POWER
) -> tuple[float, str]:
    """Canary requests a fixed-sample test at the judge's per-side error needs to pass a canary with `power`,
    and the guardrail that needs most. `fixed`: `spreads` (estimates replaced by the true effects)."""
    g = guardrails
    z, z_power = z_score(per_side_error(g)), z_score(1 - power)
    error_limit = g.max_error_rate_increase
    needs = {
        "minRequests": float(g.min_requests),
        "p95 bound": float(requests_to_bound(0.95, z)),
        # no errors on either track: the upper bound of the canary's rate is z^2 / (n + z^2)
        "maxErrorRateIncrease": float(math.ceil(z * z * (1 - error_limit) / error_limit)),
    }
    for name, limit in (
        ("maxTokenLatencyMeanRegression", g.max_token_latency_mean_regression),
        ("maxTokenLatencyP95Regression", g.max_token_latency_p95_regression),
    ):
        key = "mean" if "Mean" in name else "p95"
        room = math.log1p(limit) - fixed.get(key, 0.0)
        sigma = fixed.get(f"{key}_sigma", math.inf)
        needs[name] = ((z + z_power) * sigma / room) ** 2 if room > 0 and math.isfinite(sigma) else math.inf
    assert wilson_bounds(0, needs["maxErrorRateIncrease"], z)[1] <= error_limit + 1e-12
    binding = max(needs, key=lambda k: needs[k])
    return needs[binding], binding


def canary(
    change: Effect,
    load: float,
    seed: int,
    settings: Sequence[Setting] = SETTINGS,
    horizon: float = HORIZON,
    on_no_data: float = ON_NO_DATA,
    until_pass: bool = True,
    guardrails: Guardrails = GUARDRAILS,
    canary_pods: int = 1,
) -> list[Rollout]:
    """Simulate one canary step and let the operator decide it under each setting.

    Runs until every setting has decided and, with `until_pass`, the judge has passed a good or A/A canary
    under each (its statistical time to a Pass), or `horizon` seconds after the canary's Ready."""
    knobs = {**change.knobs, "load": load}
    pods = [
        engine("canary", {**knobs, **change.canary}, seed + 500_000 * j, k=change.canary_k, start=WARMUP)
        for j in range(canary_pods)
    ]
    stable = [
        engine("stable", {**knobs, **change.stable}, seed * 100 + i + 1, k=change.stable_k) for i in range(STABLE_PODS)
    ]

    def cut() -> tuple[Snapshot, Snapshot]:
        return snapshot([p.metrics for p in pods]), snapshot([p.metrics for p in stable])

    for pod in stable:
        pod.advance_to(WARMUP)
    shots = [cut()]
    rollouts = [Rollout(s, on_no_data) for s in settings]
    wants_pass = until_pass and not change.harmful

    def done(r: Rollout) -> bool:
        return r.outcome is not None and (not wants_pass or r.first_pass is not None)

    speculative = (change.canary_k is not None, change.stable_k is not None)
    ticks = round(horizon / TICK)
    for i in range(1, ticks + 1):
        t = i * TICK
        for pod in (*pods, *stable):
            pod.advance_to(WARMUP + t)
        shots.append(cut())
        whole: tuple[TrackEvidence, TrackEvidence] | None = None
        for r in rollouts:
            if done(r) or (not r.due(t) and r.outcome is not None):
                continue
            if whole is None:
                (c_now, s_now), (c_then, s_then) = shots[i], shots[0]
                whole = evidence(c_now, c_then, t, speculative[0]), evidence(s_now, s_then, t, speculative[1])
            if not r.due(t):
                watched = watch(  # the watch at this scrape of a live canary: its errors over the whole step
                    guardrails,
                    (),
                    speculative=speculative[0],
                    confidence=CONFIDENCE,
                    steps=STEPS,
                    same_drafter=change.same_drafter,
                    whole_step=whole,
                )
                if watched is not None:
                    r.take(t, watched)
                continue
            r.pause_over(t)
            if done(r):
                continue
            recent = None
            if t > r.setting.window:
                (c_now, s_now), (c_then, s_then) = shots[i], shots[i - round(r.setting.window / TICK)]
                recent = Recent(
                    evidence(c_now, c_then, r.setting.window, speculative[0]),
                    evidence(s_now, s_then, r.setting.window, speculative[1]),
                    r.setting.window,
                    r.looks + 1,
                )
            judgement = judge(
                guardrails,
                *whole,
                speculative=speculative[0],
                confidence=CONFIDENCE,
                steps=STEPS,
                same_drafter=change.same_drafter,
                recent=recent,
            )
            r.take(t, judgement)
            if wants_pass and (r.first_pass is None or r.first_pass == t):  # at the first Pass, else the last look
                r.fixed = spreads(*whole)
        if all(done(r) for r in rollouts):
            break
    for r in rollouts:
        if r.outcome is None:
            r.outcome = WAITING
    return rollouts


@dataclass(frozen=True)
class Job:
    change: Effect
    load: float
    seed: int
    horizon: float
    on_no_data: float
    guardrails: Guardrails = GUARDRAILS
    canary_pods: int = 1


def _trial(job: Job) -> list[dict[str, Any]]:
    rollouts = canary(
        job.change,
        job.load,
        job.seed,
        horizon=job.horizon,
        on_no_data=job.on_no_data,
        guardrails=job.guardrails,
        canary_pods=job.canary_pods,
    )
    return [{k: v for k, v in asdict(r).items() if k not in ("setting", "last")} for r in rollouts]


@dataclass
class Cell:
    """Every canary of one effect at one load under one setting."""

    change: Effect
    load: float
    setting: Setting
    runs: list[dict[str, Any]] = field(default_factory=list)
    guardrails: Guardrails = GUARDRAILS

    def share(self, outcome: str) -> float:
        return sum(r["outcome"] == outcome for r in self.runs) / len(self.runs)

    def count(self, outcome: str) -> int:
        return sum(r["outcome"] == outcome for r in self.runs)

    @property
    def right(self) -> float:
        """Share of canaries the operator treated rightly: rolled back if harmful (any cause), else promoted."""
        if self.change.harmful:
            return self.share(FAILED) + self.share(NO_DATA)
        return self.share(PROMOTED)

    def median_decision(self) -> float | None:
        times = [r["decided_at"] for r in self.runs if r["decided_at"] is not None and r["outcome"] != WAITING]
        return statistics.median(times) if times else None

    def first_pass(self) -> float | None:
        """Median time to the judge's first Pass (None when fewer than half the canaries passed)."""
        times = sorted(r["first_pass"] if r["first_pass"] is not None else math.inf for r in self.runs)
        median = statistics.median(times)
        return median if math.isfinite(median) else None

    def fixed(self) -> tuple[float, str] | None:
        """Seconds a fixed-sample test of the same power needs at this load, and the guardrail that binds."""
        found = [r["fixed"] for r in self.runs if r["fixed"]]
        if not found:
            return None
        median = {k: statistics.median(f[k] for f in found) for k in found[0]}
        if self.change.key == "aa":  # the truth is known: no effect at all
            median["mean"] = median["p95"] = 0.0
        requests, binding = fixed_requests(median, self.guardrails)
        return (requests / self.load, binding) if math.isfinite(requests) else None

    def failed_guardrails(self) -> Counter[str]:
        return Counter(g for r in self.runs if r["outcome"] == FAILED for g in r["failed"])


def _time(seconds: float | None) -> str:
    return "-" if seconds is None else _span(seconds)


def _pct(share: float) -> str:
    return f"{share:.0%}" if share in (0, 1) or share >= 0.1 else f"{share:.1%}"


SHORT_NAMES = {
    "minAcceptanceAlpha": "alpha",
    "maxTokenLatencyP95Regression": "p95",
    "maxTokenLatencyMeanRegression": "mean",
    "maxErrorRateIncrease": "errors",
    "minRequests": "minRequests",
}


def _guardrails(counts: Counter[str]) -> str:
    def short(name: str) -> str:
        recent = name.startswith("recent:")
        base = SHORT_NAMES.get(name.removeprefix("recent:"), name.removeprefix("recent:"))
        return f"{base} (window)" if recent else base

    return ", ".join(f"{short(g)} {n}" for g, n in counts.most_common()) or "-"


def cell_rows(cells: Sequence[Cell]) -> list[list[Any]]:
    rows = []
    for c in cells:
        fixed = c.fixed() if not c.change.harmful else None
        first = c.first_pass() if not c.change.harmful else None
        rows.append(
            [
                c.change.name,
                f"{c.load:g}",
                c.setting.name,
                len(c.runs),
                _pct(c.share(PROMOTED)),
                _pct(c.share(FAILED)),
                _pct(c.share(NO_DATA)),
                _pct(c.share(WAITING)),
                _time(c.median_decision()),
                _guardrails(c.failed_guardrails()),
                "-" if c.change.harmful else _time(first),
                "-" if fixed is None else f"{_span(fixed[0])} ({SHORT_NAMES.get(fixed[1], fixed[1])})",
                "-" if fixed is None or first is None else f"{first / fixed[0]:.1f}x",
            ]
        )
    return rows


CELL_HEADERS = [
    "effect",
    "req/s per pod",
    "window / pause",
    "canaries",
    "promoted",
    "rolled back: Fail",
    "rolled back: onNoData",
    "waiting",
    "median time to decision",
    "failed guardrails",
    "median first Pass (judge)",
    "fixed-sample test (binds)",
    "ratio",
]


def _present(cells: Sequence[Cell]) -> list[Effect]:
    return [e for e in EFFECTS if any(c.change is e for c in cells)]


NOTES = {PROMOTED: ("P", "promoted"), FAILED: ("F", "Fail"), NO_DATA: ("N", "onNoData")}
"""How a table cell and a heat-map cell name what a cell did besides its right outcome."""


def _notes(change: Effect, cell: Cell) -> list[tuple[str, float]]:
    """The wrong outcome (a harmful canary promoted, a good one failed), then onNoData, with their shares."""
    wrong = PROMOTED if change.harmful else FAILED
    return [(kind, cell.share(kind)) for kind in (wrong, NO_DATA) if cell.share(kind)]


def matrix_rows(cells: Sequence[Cell], columns: Sequence[tuple[float, Setting]]) -> list[list[str]]:
    """One row per effect, one column per load x setting: the right outcome's share and its median time."""
    rows = []
    for change in _present(cells):
        row = [change.name]
        for load, setting in columns:
            c = next((c for c in cells if c.change is change and c.load == load and c.setting == setting), None)
            if c is None:
                row.append("")
                continue
            text = f"{'R' if change.harmful else 'P'} {_pct(c.right)}, {_time(c.median_decision())}"
            for kind, share in _notes(change, c):
                mark = "**" if kind != NO_DATA else ""
                text += f" ({mark}{NOTES[kind][0]} {_pct(share)}{mark})"
            row.append(text)
        rows.append(row)
    return rows


def targets(cells: Sequence[Cell]) -> list[tuple[str, bool, str]]:
    """(target, met, the numbers): what the matrix should show."""
    harmful = [c for c in cells if c.change.harmful]
    good = [c for c in cells if not c.change.harmful]
    aa = [c for c in good if c.change.key == "aa"]
    found: list[tuple[str, bool, str]] = []

    def worst(cs: Sequence[Cell], value: Any, fmt: Any) -> str:
        if not cs:
            return "no cells"
        c = max(cs, key=value)
        return f"worst {fmt(value(c))} ({c.change.name}, {c.load:g} req/s, {c.setting.name})"

    promoted = sum(c.count(PROMOTED) for c in harmful)
    found.append(
        (
            "no harmful canary (each >= 2x a limit, or 0.1 under the alpha floor) ever promoted",
            promoted == 0,
            f"{promoted} of {sum(len(c.runs) for c in harmful)} promoted; "
            + worst(harmful, lambda c: c.share(PROMOTED), _pct),
        )
    )
    short = [c for c in harmful if c.right < 0.99]
    found.append(
        (
            "each harmful cell rolled back in >= 99% of canaries (a Fail or onNoData)",
            not short,
            f"{len(short)} of {len(harmful)} cells short; " + worst(harmful, lambda c: -c.right, lambda v: _pct(-v)),
        )
    )
    short = [c for c in harmful if c.share(FAILED) < 0.99]
    found.append(
        (
            "  stricter: by a guardrail Fail in >= 99% (not left to onNoData)",
            not short,
            f"{len(short)} of {len(harmful)} cells short; "
            + worst(harmful, lambda c: -c.share(FAILED), lambda v: _pct(-v)),
        )
    )
    failed, total = sum(c.count(FAILED) for c in aa), sum(len(c.runs) for c in aa)
    found.append(
        (
            "A/A false rollbacks (Fail) <= 1%",
            total > 0 and failed / total <= 0.01,
            f"{failed} of {total} A/A canaries ({failed / max(total, 1):.1%}); "
            + worst(aa, lambda c: c.share(FAILED), _pct),
        )
    )
    short = [c for c in good if c.share(PROMOTED) < 0.99]
    found.append(
        (
            "good and A/A canaries promoted (>= 99% in each cell)",
            not short,
            f"{len(short)} of {len(good)} cells short; " + worst(good, lambda c: -c.right, lambda v: _pct(-v)),
        )
    )
    ratios = [(c, f / fx[0]) for c in good if (f := c.first_pass()) is not None and (fx := c.fixed()) is not None]
    slow = [c for c, ratio in ratios if ratio > TIME_GOAL]
    unpassed = [c for c in good if c.first_pass() is None]
    found.append(
        (
            f"median time to the first Pass within {TIME_GOAL:g}x a fixed-sample test of the same power",
            not slow and not unpassed,
            f"{len(slow)} cells over, {len(unpassed)} without a median Pass; "
            + (f"largest {max(r for _, r in ratios):.1f}x" if ratios else "no ratio"),
        )
    )
    return found


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


def plot(cells: Sequence[Cell], columns: Sequence[tuple[float, Setting]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import LinearSegmentedColormap

    light = LinearSegmentedColormap.from_list("light", ["#e8838a", "#f6e7a1", "#9fd89a"])  # readable under text
    shares, labels, present = [], [], _present(cells)
    for change in present:
        row, texts = [], []
        for load, setting in columns:
            c = next((c for c in cells if c.change is change and c.load == load and c.setting == setting), None)
            if c is None:
                row.append(math.nan)
                texts.append("")
                continue
            row.append(c.right)
            text = f"{'R' if change.harmful else 'P'} {_pct(c.right)}\n{_time(c.median_decision())}"
            for kind, share in _notes(change, c)[:1]:
                text += f"\n{NOTES[kind][1]} {_pct(share)}"
            texts.append(text)
        shares.append(row)
        labels.append(texts)
    fig, ax = plt.subplots(figsize=(2.0 + 1.55 * len(columns), 1.3 + 0.62 * len(present)))
    image = ax.imshow(shares, cmap=light, vmin=0, vmax=1, aspect="auto")
    for y, texts in enumerate(labels):
        for x, text in enumerate(texts):
            ax.text(x, y, text, ha="center", va="center", fontsize=7)
    ax.set_xticks(range(len(columns)))
    ax.set_xticklabels([f"{load:g} req/s\n{setting.name}" for load, setting in columns], fontsize=7.5)
    ax.set_yticks(range(len(present)))
    ax.set_yticklabels([e.name for e in present], fontsize=7.5)
    ax.set_title(title, fontsize=8.5)
    bar = fig.colorbar(image, ax=ax, fraction=0.03, pad=0.02)
    bar.set_label("share rolled back (harmful, R) or promoted (A/A, good: P)", fontsize=7.5)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


PR_SET_PDEATHSIG = 1


def _worker_started() -> None:
    """In each worker: Ctrl-C is the parent's to handle, SIGTERM (from `Pool.terminate`) just ends the worker,
    and the kernel sends SIGTERM when the parent dies (so a killed run leaves no worker behind)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def run(jobs: Sequence[Job], workers: int) -> list[list[dict[str, Any]]]:
    """Every job's rollouts, in the jobs' order; progress on stderr."""
    results: list[list[dict[str, Any]] | None] = [None] * len(jobs)
    started, shown = time.monotonic(), 0.0
    # Pool, not ProcessPoolExecutor: leaving its `with` terminates and joins the workers, even on Ctrl-C
    # (an executor waits for every queued job, and its workers outlive a killed parent).
    with signals_as_interrupts(), multiprocessing.Pool(workers, initializer=_worker_started) as pool:
        indexed = pool.imap_unordered(_indexed_trial, list(enumerate(jobs)), chunksize=1)
        for done, (index, result) in enumerate(indexed, start=1):
            results[index] = result
            if time.monotonic() - shown > 60 or done == len(jobs):
                shown = time.monotonic()
                elapsed = shown - started
                print(f"{done}/{len(jobs)} canaries, {elapsed:.0f} s", file=sys.stderr, flush=True)
    return [r for r in results if r is not None]


def _indexed_trial(item: tuple[int, Job]) -> tuple[int, list[dict[str, Any]]]:
    index, job = item
    return index, _trial(job)


def main(arguments: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=30, help="canaries per effect and load (each judged per setting)")
    parser.add_argument("--loads", type=float, nargs="+", default=list(LOADS), help="offered requests/s per pod")
    parser.add_argument("--effects", nargs="+", choices=[e.key for e in EFFECTS], help="a subset of the effects")
    parser.add_argument("--quick", action="store_true", help="2 canaries per cell at 12 req/s only: a quick look")
    parser.add_argument("--horizon", type=float, default=HORIZON, help="seconds a canary is followed after Ready")
    parser.add_argument("--on-no-data", type=float, default=ON_NO_DATA, help="onNoData.after in s (0: never)")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument(
        "--canary-pods", type=int, default=1, help="canary pods next to the 3 stable ones (a larger first step)"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--plot", type=Path, default=Path(__file__).parent.parent / "docs" / "judge-matrix.png")
    parser.add_argument("--no-plot", action="store_true")
    parser.add_argument("--json", type=Path, help="write every canary's outcome here")
    parser.add_argument(
        "--guardrail",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a guardrail other than its default, e.g. maxTokenLatencyMeanRegression=0 (the A/A canary on the limit)",
    )
    args = parser.parse_args(arguments)
    guardrails = Guardrails.model_validate({k: float(v) for k, v in (g.split("=", 1) for g in args.guardrail)})
    if args.quick:
        args.trials, args.loads = 2, [12.0]
    started = time.monotonic()
    print(f"settings: {STABLE_PODS} stable + {args.canary_pods} canary pod(s) at the same load per pod, {TARGET} "
          f"on MI325X, EAGLE-3 "
          f"k={K} alpha {GOOD_ALPHA} unless the effect says otherwise; one-step rollout, guardrails "
          f"{' '.join(args.guardrail) or 'default'}, confidence {CONFIDENCE}, failureLimit 0, onNoData Rollback "
          f"after {_span(args.on_no_data)}; "
          f"window / pause / interval: " + ", ".join(f"{s.name} / {_span(s.interval)}" for s in SETTINGS)
          + f"; evidence cut every {TICK:.0f} s, exact increases (no scrape jitter)")  # fmt: skip
    print(f"\nwhat each measure says (one pod, {LOAD:g} req/s, 5 minutes):")
    measures = measures_table(args.seed)
    print(markdown_table(list(measures[0]), [list(r.values()) for r in measures]))

    changes = [e for e in EFFECTS if args.effects is None or e.key in args.effects]
    jobs = [
        Job(
            change,
            load,
            args.seed + 100_000 * li + 1000 * EFFECTS.index(change) + t,
            args.horizon,
            args.on_no_data,
            guardrails,
            args.canary_pods,
        )
        for change in changes
        for li, load in enumerate(args.loads)
        for t in range(args.trials)
    ]
    results = run(jobs, args.workers)
    cells = {
        (change.key, load, s): Cell(change, load, s, guardrails=guardrails)
        for change in changes
        for load in args.loads
        for s in SETTINGS
    }
    for job, rollouts in zip(jobs, results, strict=True):
        for setting, rollout in zip(SETTINGS, rollouts, strict=True):
            cells[(job.change.key, job.load, setting)].runs.append(rollout)
    ordered = list(cells.values())
    columns = [(load, s) for s in SETTINGS for load in args.loads]
    minutes = (time.monotonic() - started) / 60
    day = time.strftime("%Y-%m-%d", time.gmtime())

    print(f"\nthe matrix ({args.trials} canaries per cell; R: rolled back, P: promoted, then the median time to "
          "the decision; N: rolled back by onNoData; F: rolled back by a Fail):")  # fmt: skip
    print(
        markdown_table(["effect", *(f"{load:g} req/s, {s.name}" for load, s in columns)], matrix_rows(ordered, columns))
    )
    print("\nevery cell:")
    print(markdown_table(CELL_HEADERS, cell_rows(ordered)))
    print("\ntargets:")
    for target, met, numbers in targets(ordered):
        print(f"{'PASS' if met else 'MISS'}  {target}: {numbers}")
    odd = [
        (c, r)
        for c in ordered
        for r in c.runs
        if (not c.change.harmful and r["outcome"] == FAILED) or (c.change.harmful and r["outcome"] == PROMOTED)
    ]
    if odd:
        print("\nwrong decisions (the verdict's reasons):")
        for c, r in odd:
            print(f"- {c.change.name}, {c.load:g} req/s, {c.setting.name}: {r['outcome']} at "
                  f"{_span(r['decided_at'])}: {r['reason'][:600]}")  # fmt: skip
    if args.json:
        args.json.write_text(
            json.dumps(
                [
                    {"effect": c.change.key, "load": c.load, "setting": asdict(c.setting), "runs": c.runs}
                    for c in ordered
                ]
            )
        )
        print(f"\nevery canary: {args.json}")
    if not args.no_plot:
        plot(ordered, columns, args.plot, f"specfleet judge vs the simulator, {args.trials} canaries per cell ({day})")
        print(f"\nplot: {args.plot}")
    print(f"\n{len(jobs)} simulated canaries in {minutes:.1f} min", file=sys.stderr)


if __name__ == "__main__":
    main()

"""One analysis of a live canary: read both tracks' evidence from Prometheus, then let the pure judge decide."""

import math
import re
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime

from specfleet.api.custom_guardrails import CustomGuardrail
from specfleet.api.durations import parse_duration
from specfleet.api.resource import SpeculativeDeployment
from specfleet.api.spec import SpeculativeMethod
from specfleet.api.status import (
    MAX_REASONS,
    Analysis,
    CandidateState,
    OutputPairs,
    SpeculativeDeploymentStatus,
    Verdict,
)
from specfleet.api.vocabulary import Track
from specfleet.controller.metrics import ANALYSES, ANALYSIS_SECONDS
from specfleet.judge import CustomReading, Recent, TrackEvidence, judge, measurements
from specfleet.judge.equivalence import tally
from specfleet.metrics import names, promql
from specfleet.metrics.prometheus import MetricsProvider, ProviderError
from specfleet.rollout.state import served_spec
from specfleet.rollout.types import FleetLook
from specfleet.stats import Binned

MAX_REASON = 1000
POSITION = re.compile(r"[0-9]{1,3}")
"""A draft position label as vLLM writes it. Not `str.isdigit`, which takes a superscript `int` refuses, an
Arabic-Indic digit it reads as another number, and thousands of digits it will not convert."""
STALE_SCRAPES = 3
STALE_SECONDS = 30.0
"""A track's newest sample may be this many scrape intervals, and at least this many seconds, older than the
analysis time (a scrape in progress, a remote write on its way, clocks a little apart); older, Prometheus is
behind: its evidence stops short of now and cannot show the canary good now."""
FRESHNESS_LOOKBACK = 300.0
"""How far back the newest sample of a track is looked for (Prometheus' own default lookback)."""
SLICES = 6
"""Slices of a fleet look's window whose means bound the speed-up over a holdback (batch means)."""


def finite_number(text: str) -> float | None:
    """A Prometheus label or sample as a number; None for NaN or text that is not one."""
    try:
        value = float(text)
    except ValueError:
        return None
    return None if math.isnan(value) else value


MAX_STEPS = 250
"""Steps at most of a range's per-series count (`promql.counted`): a long range is counted further apart than
the scrape interval, which costs a series that starts or restarts inside it at most one step of its own."""
DEFAULT_SCRAPE = 15.0
"""The scrape interval assumed before Prometheus has two samples of a track (Prometheus' own example setting)."""


def counting_range(seconds: float, scrape: float | None) -> promql.Range:
    """The evidence of the `seconds` before the evaluation, counted per series `step` apart. The counted range
    starts two steps later, so each step's difference starts at a sample taken inside the evidence's range (at
    most one step of it is left out at each end)."""
    step = max(1.0, scrape or DEFAULT_SCRAPE, seconds / MAX_STEPS)
    return promql.Range(promql.seconds(max(step, seconds - 2 * step)), promql.seconds(step))


def _binned(
    provider: MetricsProvider, histogram: str, selector: promql.TrackSelector, r: promql.Range, at: float | None
) -> Binned | None:
    by_le = provider.by_label(promql.histogram_buckets(histogram, selector, r), "le", at)
    buckets = {bound: count for le, count in by_le.items() if (bound := finite_number(le)) is not None}
    return Binned.from_buckets(buckets)


def _custom(
    provider: MetricsProvider,
    guardrail: CustomGuardrail,
    selector: promql.TrackSelector,
    r: promql.Range,
    at: float | None,
) -> CustomReading:
    """One custom guardrail's counters or histogram on one track (None where Prometheus has no series)."""
    queries = promql.custom_queries(guardrail, selector, r)
    if "histogram" in queries:
        by_le = provider.by_label(queries["histogram"], "le", at)
        buckets = {bound: count for le, count in by_le.items() if (bound := finite_number(le)) is not None}
        return CustomReading(histogram=Binned.from_buckets(buckets))
    return CustomReading(events=provider.scalar(queries["events"], at), total=provider.scalar(queries["total"], at))


def evidence(
    provider: MetricsProvider,
    selector: promql.TrackSelector,
    seconds: float,
    at: float | None = None,
    custom: Sequence[CustomGuardrail] = (),
    scrape: float | None = None,
) -> TrackEvidence:
    """Every count the judge needs for one track, as increases over the `seconds` before Unix time `at`
    (Prometheus' now when None), each series counted on its own between its samples (`scrape` seconds apart:
    `counting_range`), with the readings of the `custom` guardrails."""
    counting = counting_range(seconds, scrape)
    counters = {
        field: provider.scalar(promql.increase(metric, selector, counting), at)
        for field, metric in promql.COUNTERS.items()
    }
    histograms = {
        field: _binned(provider, metric, selector, counting, at) for field, metric in promql.HISTOGRAMS.items()
    }
    gauges = {field: provider.scalar(query, at) for field, query in promql.gauges(selector, counting).items()}
    per_position = provider.by_label(promql.accepted_by_position(selector, counting), "position", at)
    positions = sorted(int(p) for p in per_position if POSITION.fullmatch(p))
    return TrackEvidence(
        token_latency=histograms["token_latency"],
        step_latency=histograms["step_latency"],
        ttft=histograms["ttft"],
        queue_time=histograms["queue_time"],
        drafts=counters["drafts"],
        draft_tokens=counters["draft_tokens"],
        accepted_tokens=counters["accepted_tokens"],
        generation_tokens=counters["generation_tokens"],
        prompt_tokens=counters["prompt_tokens"],
        prefix_cache_hits=counters["prefix_cache_hits"],
        preemptions=counters["preemptions"],
        token_latency_mean=gauges["token_latency_mean"],
        step_latency_mean=gauges["step_latency_mean"],
        batch_mean=gauges["batch_mean"],
        waiting_growth=gauges["waiting_growth"],
        kv_cache_usage_mean=gauges["kv_cache_usage_mean"],
        kv_cache_usage_max=gauges["kv_cache_usage_max"],
        finished=provider.by_label(promql.finished_by_reason(selector, counting), "finished_reason", at),
        accepted_per_position=tuple(per_position[str(p)] for p in positions)
        if positions == list(range(len(positions)))
        else (),
        request_rate_per_pod=tuple(
            provider.by_label(promql.request_rate_by_pod(selector, counting), "pod", at).values()
        ),
        seconds=seconds,
        custom={g.name: _custom(provider, g, selector, counting, at) for g in custom},
    )


def freshness(
    provider: MetricsProvider, tracks: dict[str, promql.TrackSelector], at: float
) -> tuple[list[str], float | None]:
    """A reason for each track whose newest sample in Prometheus is too old for its evidence to reach the
    analysis time `at` (Prometheus lags: a remote-write pipeline, an agent or a scrape loop behind; or no
    longer scrapes the track's pods: targets gone, scrapes failing), and the longest scrape interval of the
    tracks (None before any has two samples). Fresh tracks give no reason."""
    lookback = promql.seconds(FRESHNESS_LOOKBACK)
    reasons, scrapes = [], []
    for name, selector in tracks.items():
        newest = provider.scalar(promql.newest_sample(selector, lookback, "1s"), at)
        if newest is None:
            reasons.append(f"no sample of the {name} track in the last {lookback}: Prometheus does not scrape its pods")
            continue
        interval = provider.scalar(promql.scrape_interval(selector, lookback, "1s"), at)
        if interval is not None:
            scrapes.append(interval)
        allowed = max(STALE_SCRAPES * (interval or 0.0), STALE_SECONDS)
        if at - newest > allowed:
            reasons.append(
                f"the {name} track's newest sample is {at - newest:.0f}s old (more than {allowed:.0f}s): Prometheus"
                " is behind or no longer scrapes its pods, so the evidence stops short of now"
            )
    return reasons, max(scrapes, default=None)


def evidence_seconds(sdep: SpeculativeDeployment, since: datetime | None, now: datetime) -> float:
    """Everything since the start of the current evidence (step Ready, or the last counted failure); the
    analysis window when that start is unknown."""
    if since is None:
        return parse_duration(sdep.spec.rollout.analysis.window).total_seconds()
    return max(0.0, (now - since).total_seconds())


def analyze(
    provider: MetricsProvider,
    sdep: SpeculativeDeployment,
    status: SpeculativeDeploymentStatus,
    now: datetime,
    pairs: OutputPairs | None = None,
) -> Analysis:
    """Blocking: the live canary against stable. Prometheus failures become an Error verdict, never an exception.
    `pairs`: the output-equivalence pairs compared so far, judged with the rest and kept in the analysis."""
    assert status.canary_revision is not None
    since = status.evidence_since or status.step_ready_at
    look, step = status.analyses + 1, status.current_step or 0
    return _analyze(provider, sdep, status, now, Track.CANARY, status.canary_revision, since, look, step, pairs=pairs)


def analyze_candidate(
    provider: MetricsProvider,
    sdep: SpeculativeDeployment,
    status: SpeculativeDeploymentStatus,
    now: datetime,
    index: int,
) -> Analysis:
    """Blocking: one side-by-side candidate's slice against stable. Every live slice reads the same range: since
    the last of them was Ready, cut where the youngest pod of any of them (or stable) was first scraped."""
    assert status.experiment is not None
    candidate = next(c for c in status.experiment.candidates if c.index == index)
    live = [c for c in status.experiment.candidates if c.state is CandidateState.MEASURING and c.ready_at]
    since = max((c.ready_at for c in live if c.ready_at), default=candidate.ready_at)
    beside = tuple(c.revision for c in live if c.index != index)
    look = candidate.looks + 1
    return _analyze(provider, sdep, status, now, Track.CANDIDATE, candidate.revision, since, look, 0, beside)


def drafters(sdep: SpeculativeDeployment, status: SpeculativeDeploymentStatus, revision: str) -> tuple[bool, bool]:
    """Whether `revision` speculates, and whether it serves stable's drafter (the judge's `same_drafter`)."""
    drafter = served_spec(sdep.spec, status, revision).speculative
    serving = (status.stable_serving or {}).get("speculative") or {}
    assert isinstance(serving, dict)
    same = (drafter.method.value, drafter.model, drafter.revision) == (
        serving.get("method"),
        serving.get("model"),
        serving.get("revision"),
    )
    return drafter.method is not SpeculativeMethod.NONE, same


def _analyze(
    provider: MetricsProvider,
    sdep: SpeculativeDeployment,
    status: SpeculativeDeploymentStatus,
    now: datetime,
    track: Track,
    revision: str,
    since: datetime | None,
    look: int,
    step: int,
    beside: tuple[str, ...] = (),
    pairs: OutputPairs | None = None,
) -> Analysis:
    """`beside`: revisions of other slices of `track` measured with this one, whose pods cut the range too."""
    assert status.stable_revision is not None
    meta, spec = sdep.metadata, sdep.spec
    measured = promql.TrackSelector(meta.namespace, meta.name, track.value, revision)
    stable = promql.TrackSelector(meta.namespace, meta.name, Track.STABLE.value, status.stable_revision)
    others = tuple(promql.TrackSelector(meta.namespace, meta.name, track.value, r) for r in beside)
    seconds = evidence_seconds(sdep, since, now)
    window = parse_duration(spec.rollout.analysis.window).total_seconds()
    with ANALYSIS_SECONDS.time():
        try:
            at = now.timestamp()
            named = {track.value: measured, Track.STABLE.value: stable}
            named.update({f"{track.value} {r}": s for r, s in zip(beside, others, strict=True)})
            stale, scrape = freshness(provider, named, at)
            custom = spec.rollout.guardrails.custom
            measured_evidence = evidence(provider, measured, seconds, at, custom, scrape)
            stable_evidence = evidence(provider, stable, seconds, at, custom, scrape)
            recent = None
            if seconds > window:  # the trailing window too, for a canary that turns bad late in a long step
                recent = Recent(
                    evidence(provider, measured, window, at, custom, scrape),
                    evidence(provider, stable, window, at, custom, scrape),
                    window,
                    look,
                )
        except ProviderError as error:
            ANALYSES.labels(Verdict.ERROR.value).inc()
            return Analysis(
                time=now,
                revision=revision,
                step=step,
                look=look,
                evidence_seconds=round(seconds),
                verdict=Verdict.ERROR,
                reasons=[str(error)[:MAX_REASON]],
                output_pairs=pairs,
            )
    speculative, same_drafter = drafters(sdep, status, revision)
    result = judge(
        spec.rollout.guardrails,
        measured_evidence,
        stable_evidence,
        speculative=speculative,
        same_drafter=same_drafter,
        confidence=spec.rollout.analysis.confidence,
        steps=len(spec.rollout.steps),
        recent=recent,
        pairs=tally(pairs, now),
    )
    verdict, reasons = result.verdict, list(result.reasons)
    if stale and verdict is not Verdict.FAIL:  # old evidence of harm is still harm; of health, not health now
        verdict, reasons = Verdict.INCONCLUSIVE, stale + reasons
    ANALYSES.labels(verdict.value).inc()
    return Analysis(
        time=now,
        revision=revision,
        step=step,
        look=look,
        evidence_seconds=round(seconds),
        verdict=verdict,
        reasons=[r[:MAX_REASON] for r in reasons[:MAX_REASONS]],
        checks=list(result.checks),
        canary=result.canary,
        stable=result.stable,
        output_pairs=pairs,
    )


def _slices(
    provider: MetricsProvider, selector: promql.TrackSelector, seconds: float, at: float, scrape: float | None
) -> tuple[float, ...]:
    """The mean per-token latency over each of SLICES consecutive slices of the window (oldest first)."""
    width = seconds / SLICES
    query = promql.histogram_mean(names.TIME_PER_OUTPUT_TOKEN, selector, counting_range(width, scrape))
    means = [provider.scalar(query, at - i * width) for i in reversed(range(SLICES))]
    return tuple(m for m in means if m is not None and math.isfinite(m))


def measure_fleet(
    provider: MetricsProvider, sdep: SpeculativeDeployment, status: SpeculativeDeploymentStatus, now: datetime
) -> FleetLook:
    """Blocking: the stable track (and the holdback) over the last analysis window, while the fleet is Healthy
    (speed-up, load points, drift)."""
    assert status.stable_revision is not None
    meta = sdep.metadata
    window = parse_duration(sdep.spec.rollout.analysis.window).total_seconds()
    stable = promql.TrackSelector(meta.namespace, meta.name, Track.STABLE.value, status.stable_revision)
    holdback = status.holdback.revision if status.holdback else None
    selector = promql.TrackSelector(meta.namespace, meta.name, Track.HOLDBACK.value, holdback) if holdback else None
    at = now.timestamp()
    try:
        tracks = {Track.STABLE.value: stable} | ({} if selector is None else {Track.HOLDBACK.value: selector})
        _, scrape = freshness(provider, tracks, at)
        found = evidence(provider, stable, window, at, scrape=scrape)
        control = None
        if selector is not None:
            control = replace(
                evidence(provider, selector, window, at, scrape=scrape),
                token_latency_slices=_slices(provider, selector, window, at, scrape),
            )
            found = replace(found, token_latency_slices=_slices(provider, stable, window, at, scrape))
    except ProviderError as error:
        return FleetLook(time=now, revision=status.stable_revision, error=str(error)[:MAX_REASON])
    return FleetLook(
        time=now, revision=status.stable_revision, stable=measurements(found), evidence=found, holdback=control
    )

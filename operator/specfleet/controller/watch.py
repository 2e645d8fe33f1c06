"""The watch: the fail-only check of a live canary at each new scrape of it, between its analyses.

An analysis is due every `analysis.interval`; a canary that turns bad should not keep its traffic until then.
At each pass the shell asks Prometheus for the canary's newest sample (one small query); when it is a scrape
the watch has not judged yet, it reads both tracks over a few trailing ranges of whole scrapes (one query per
track and range, `promql.watch_evidence`) and lets the pure `judge.watch` look for a guardrail that surely
failed. The error guardrails are also read over the step's whole evidence (one more query per track, finished
requests by reason since `evidenceSince`, each pod's series counted from its first sample as the analyses count
them) and judged on the analyses' own confidence sequence, which holds however often it is looked at: a small
excess of errors shows only over many requests, and is failed at the scrape it shows, not the next analysis.
Nothing of it is kept in the status: a look is numbered by the scrape interval since the canary started
that its newest sample falls in, and each number is judged once (in memory: after a restart the interval in
progress may be judged once more, on the same or a newer sample).
"""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from specfleet.api.custom_guardrails import CustomGuardrail
from specfleet.api.durations import parse_duration
from specfleet.api.resource import SpeculativeDeployment
from specfleet.api.status import MAX_REASONS, Analysis, SpeculativeDeploymentStatus, Verdict
from specfleet.api.vocabulary import Track
from specfleet.controller.analysis import MAX_REASON, POSITION, counting_range, drafters, finite_number
from specfleet.controller.metrics import WATCH_SECONDS, WATCHES
from specfleet.judge import CustomReading, Recent, TrackEvidence, watch
from specfleet.judge.canary import WHOLE_STEP_GUARDRAILS
from specfleet.judge.guardrails import GUARDRAILS
from specfleet.metrics import promql
from specfleet.metrics.prometheus import ProviderError, SeriesProvider
from specfleet.rollout.types import Watch
from specfleet.stats import Binned

FIRST_SCRAPES = 2
"""The shortest range a watch reads, in scrapes: one scrape's difference holds too few requests to bound."""
MAX_RANGES = 3
"""Trailing ranges of a watch, each twice the last (2, 4, 8 scrapes), all shorter than `analysis.window`: short
ones catch a large harm within a few scrapes, longer ones a smaller one; each splits the budget further."""
STORE_SECONDS = 1.0
"""How long after a scrape is due its samples are asked for (the scrape itself and its storage take that), and
how long after a look that found the due scrape not yet stored the next one asks again (one small query)."""
RETRY_SECONDS = 5.0
"""When to look again for a canary whose scrape interval Prometheus cannot say yet (fewer than two samples)."""


@dataclass(frozen=True)
class Watched:
    """What the shell remembers of a fleet's last watch (in memory: lost on a restart, which costs one look)."""

    revision: str
    sample: float
    """The newest canary sample judged (Unix time)."""
    scrape: float
    """The canary's scrape interval in seconds."""


def watch_ranges(scrape: float, window: float, evidence: float) -> tuple[float, ...]:
    """The trailing ranges of a watch in seconds: FIRST_SCRAPES scrapes, doubling, shorter than the window, at most
    MAX_RANGES, and each with the sample before it inside the step's `evidence` (seconds since it started), so no
    range reads the previous step's weight or the evidence of a counted failure."""
    ranges: list[float] = []
    length = FIRST_SCRAPES * scrape
    while length < window and length + scrape <= evidence and len(ranges) < MAX_RANGES:
        ranges.append(length)
        length *= 2
    return tuple(ranges)


def _binned(rows: Sequence[tuple[dict[str, str], float]]) -> Binned | None:
    buckets = {bound: value for labels, value in rows if (bound := finite_number(labels.get("le", ""))) is not None}
    return Binned.from_buckets(buckets)


def read(
    provider: SeriesProvider,
    selector: promql.TrackSelector,
    seconds: float,
    at: float,
    custom: Sequence[CustomGuardrail] = (),
) -> TrackEvidence:
    """One track's evidence over the `seconds` before `at`, from one query (`promql.watch_evidence`)."""
    fields: dict[str, list[tuple[dict[str, str], float]]] = {}
    for labels, value in provider.series(promql.watch_evidence(selector, promql.seconds(seconds), custom), at):
        fields.setdefault(labels.get(promql.WATCH_FIELD, ""), []).append((labels, value))

    def one(field: str) -> float | None:
        rows = fields.get(field, [])
        return rows[0][1] if len(rows) == 1 else None

    def by(field: str, label: str) -> dict[str, float]:
        return {labels.get(label, ""): value for labels, value in fields.get(field, [])}

    def mean(histogram: str) -> float | None:
        total, count = one(f"{histogram}_sum"), one(f"{histogram}_count")
        return total / count if total is not None and count else None

    per_position = by("accepted_per_position", "position")
    positions = sorted(int(p) for p in per_position if POSITION.fullmatch(p))
    readings = {}
    for index, guardrail in enumerate(custom):
        if guardrail.latency is not None:
            readings[guardrail.name] = CustomReading(histogram=_binned(fields.get(f"custom.{index}.histogram", [])))
        else:
            readings[guardrail.name] = CustomReading(
                events=one(f"custom.{index}.events"), total=one(f"custom.{index}.total")
            )
    return TrackEvidence(
        token_latency=_binned(fields.get("token_latency", [])),
        step_latency=_binned(fields.get("step_latency", [])),
        ttft=_binned(fields.get("ttft", [])),
        queue_time=_binned(fields.get("queue_time", [])),
        drafts=one("drafts"),
        draft_tokens=one("draft_tokens"),
        accepted_tokens=one("accepted_tokens"),
        generation_tokens=one("generation_tokens"),
        prompt_tokens=one("prompt_tokens"),
        prefix_cache_hits=one("prefix_cache_hits"),
        preemptions=one("preemptions"),
        token_latency_mean=mean("token_latency"),
        step_latency_mean=mean("step_latency"),
        batch_mean=one("batch_mean"),
        waiting_growth=one("waiting_growth"),
        kv_cache_usage_mean=one("kv_cache_usage_mean"),
        kv_cache_usage_max=one("kv_cache_usage_max"),
        finished=by("finished", "finished_reason"),
        accepted_per_position=tuple(per_position[str(p)] for p in positions)
        if positions == list(range(len(positions)))
        else (),
        request_rate_per_pod=tuple(v / seconds for v in by("finished_by_pod", "pod").values()),
        seconds=seconds,
        custom=readings,
    )


def read_finished(
    provider: SeriesProvider, selector: promql.TrackSelector, seconds: float, at: float, scrape: float
) -> TrackEvidence:
    """One track's finished requests by reason over the `seconds` before `at`, counted per series as the analyses
    count them (`counting_range`), from one query."""
    query = promql.finished_by_reason(selector, counting_range(seconds, scrape))
    finished = {labels.get("finished_reason", ""): value for labels, value in provider.series(query, at)}
    return TrackEvidence(finished=finished, seconds=seconds)


def _watches_whole_step(sdep: SpeculativeDeployment, speculative: bool) -> bool:
    g = sdep.spec.rollout.guardrails
    return any(r.name in WHOLE_STEP_GUARDRAILS and r.judged(g, speculative) for r in GUARDRAILS)


def _look(sample: float, started: datetime, scrape: float) -> int:
    """The number of the scrape interval since the canary started that a sample falls in: a look's number.
    Pods are scraped at their own moments, so one interval can hold several newest samples; only the first
    is judged, and each number is spent once."""
    return int((sample - started.timestamp()) // scrape) + 1


def _at(unix: float) -> datetime:
    return datetime.fromtimestamp(unix, UTC)


def watch_canary(
    provider: SeriesProvider,
    sdep: SpeculativeDeployment,
    status: SpeculativeDeploymentStatus,
    now: datetime,
    last: Watched | None,
) -> tuple[Watch, Watched | None]:
    """Blocking: the live canary's newest scrape, checked for failures when it is one `last` did not judge; the
    watch and what to remember of it. A Prometheus that cannot answer is the analyses' business (their Error
    verdicts count against onProviderError): the watch then finds nothing and looks again a scrape later."""
    revision, stable_revision = status.canary_revision, status.stable_revision
    assert revision is not None and stable_revision is not None
    meta, settings = sdep.metadata, sdep.spec.rollout.analysis
    canary = promql.TrackSelector(meta.namespace, meta.name, Track.CANARY.value, revision)
    stable = promql.TrackSelector(meta.namespace, meta.name, Track.STABLE.value, stable_revision)
    known = last if last is not None and last.revision == revision else None
    retry = Watch(revision, next_at=now + timedelta(seconds=known.scrape if known else RETRY_SECONDS))
    try:
        sample = provider.scalar(promql.latest_sample(canary), now.timestamp())
        asked = None if known else provider.scalar(promql.scrape_interval(canary, "60s", "1s"), now.timestamp())
        scrape = known.scrape if known else asked
        if sample is None or scrape is None or scrape <= 0:
            return retry, known
        due = max(_at(sample + scrape + STORE_SECONDS), now + timedelta(seconds=min(scrape / 2, STORE_SECONDS)))
        since, started = status.evidence_since, status.canary_started_at
        if since is None or started is None:
            return Watch(revision, next_at=due), Watched(revision, sample, scrape)
        look = _look(sample, started, scrape)
        if known is not None and look <= _look(known.sample, started, scrape):
            return Watch(revision, next_at=due), known  # one look a scrape interval, however many pods
        remembered = Watched(revision, sample, scrape)
        window = parse_duration(settings.window).total_seconds()
        evidence = sample - since.timestamp()
        ranges = watch_ranges(scrape, window, evidence)
        speculative, same_drafter = drafters(sdep, status, revision)
        whole = evidence > 0 and _watches_whole_step(sdep, speculative)
        if not ranges and not whole:
            return Watch(revision, next_at=due), remembered
        custom = sdep.spec.rollout.guardrails.custom
        with WATCH_SECONDS.time():
            recents = [
                Recent(read(provider, canary, d, sample, custom), read(provider, stable, d, sample, custom), d, look)
                for d in ranges
            ]
            whole_step = (
                (
                    read_finished(provider, canary, evidence, sample, scrape),
                    read_finished(provider, stable, evidence, sample, scrape),
                )
                if whole
                else None
            )
    except ProviderError:
        return retry, known
    judged = watch(
        sdep.spec.rollout.guardrails,
        recents,
        speculative=speculative,
        confidence=settings.confidence,
        same_drafter=same_drafter,
        steps=len(sdep.spec.rollout.steps),
        whole_step=whole_step,
    )
    WATCHES.labels("Fail" if judged else "None").inc()
    if judged is None:
        return Watch(revision, next_at=due), remembered
    failure = Analysis(
        time=now.replace(microsecond=0),  # the status records whole seconds
        revision=revision,
        step=status.current_step or 0,
        look=status.analyses + 1,
        evidence_seconds=round(judged.seconds or 0),
        verdict=Verdict.FAIL,
        reasons=[r[:MAX_REASON] for r in judged.reasons[:MAX_REASONS]],
        checks=list(judged.checks),
        canary=judged.canary,
        stable=judged.stable,
    )
    return Watch(revision, next_at=due, failure=failure), remembered

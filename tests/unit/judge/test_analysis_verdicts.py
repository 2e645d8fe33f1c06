"""One analysis with a stand-in provider: evidence lands in the right fields, the range is cut at the
evidence start, and Prometheus failures become an Error verdict."""

import math
from datetime import UTC, datetime, timedelta

import pytest

from specfleet.api.resource import SpeculativeDeployment
from specfleet.api.status import (
    CandidateResult,
    CandidateState,
    ExperimentStatus,
    SpeculativeDeploymentStatus,
    Verdict,
)
from specfleet.controller.analysis import analyze, analyze_candidate
from specfleet.metrics.prometheus import ProviderError

from bad_specs import BASE, merged

NOW = datetime(2026, 11, 29, 12, tzinfo=UTC)
STATUS = SpeculativeDeploymentStatus(
    stable_revision="s1", canary_revision="c1", current_step=0, analyses=2, evidence_since=NOW - timedelta(minutes=1)
)
QUEUE_TIME = {"0.3": 990.0, "0.5": 1000.0, "+Inf": 1000.0}
LATENCY = {"0.004": 300.0, "0.005": 2700.0, "0.0053": 2880.0, "0.0056": 2970.0, "0.006": 3000.0, "+Inf": 3000.0}


class Answers:
    """Prometheus as a table: what each kind of query answers, the same for both tracks unless told."""

    def __init__(
        self,
        canary_first_position: float = 1600.0,
        fail: bool = False,
        missing: tuple[str, ...] = (),
        seen_for: dict[str, float] | None = None,
        newest: dict[str, float | None] | None = None,
    ) -> None:
        self.first, self.fail, self.queries, self.times = canary_first_position, fail, [], set()
        self.missing = missing
        """Metrics Prometheus has no series of (an empty answer, or NaN: both reach the judge as None)."""
        self.seen_for = seen_for or {}
        """Seconds since the youngest pod of each track (or revision) was first scraped (every 5 s; else an hour)."""
        self.newest = newest or {}
        """Age in seconds of each track's newest sample (None: none in the lookback); 2 s unless told."""

    def scalar(self, query: str, at: float | None = None) -> float | None:
        self.queries.append(query)
        self.times.add(at)
        if self.fail:
            raise ProviderError("Prometheus at http://x: connection refused")
        if query.startswith("max(max_over_time(timestamp("):  # the newest sample
            track = next(t for t in ("canary", "stable", "candidate") if f'track="{t}"' in query)
            age = self.newest.get(track, 2.0)
            return None if age is None else NOW.timestamp() - age
        if "timestamp(" in query:
            named = [key for key in self.seen_for if f'="{key}"' in query]
            if "count_over_time" in query:
                return 5.0  # the scrape interval
            lookback = float(query.split("[")[1].split("s")[0])
            return NOW.timestamp() - min(self.seen_for[named[0]] if named else 3600.0, lookback)
        if any(metric in query for metric in self.missing):
            return None
        if "_sum" in query:  # a histogram's mean: 5 ms per output token (and per step)
            return 0.005
        if "num_requests_waiting" in query:
            return 3.0
        if "kv_cache_usage_perc" in query:
            return 0.9 if "max_over_time" in query else 0.45
        if "num_preemptions_total" in query:
            return 6.0
        if "num_drafts_total" in query:
            return 2000.0
        if "num_draft_tokens_total" in query:
            return 8000.0
        if "num_accepted_tokens_total" in query:
            return 4000.0
        return 50_000.0

    def by_label(self, query: str, label: str, at: float | None = None) -> dict[str, float]:
        self.queries.append(query)
        self.times.add(at)
        if any(metric in query for metric in self.missing):
            return {}
        canary = 'specfleet_io_track="canary"' in query
        answers = {
            "le": QUEUE_TIME if "queue_time" in query else LATENCY,
            "position": {"0": self.first if canary else 1600.0, "1": 1200.0, "2": 800.0, "3": 400.0},
            "finished_reason": {"stop": 2970.0, "length": 30.0, "error": 0.0, "abort": 5.0},
            "pod": {"pod-a": 3.3},
        }
        return answers[label]


def run(answers: Answers, guardrails: dict | None = None) -> tuple:
    spec = merged(BASE, {"spec": {"rollout": {"guardrails": guardrails or {}}}})
    return answers, analyze(answers, SpeculativeDeployment.from_mapping(spec), STATUS, NOW)


def test_a_pass_carries_both_tracks_measurements_and_its_look() -> None:
    _, analysis = run(Answers())
    assert analysis.verdict is Verdict.PASS, analysis.reasons
    assert analysis.revision == "c1" and analysis.look == 3 and analysis.evidence_seconds == 60
    assert analysis.canary.acceptance_alpha == 0.8 and analysis.canary.acceptance_rate == 0.5
    assert analysis.canary.acceptance_per_position == [0.8, 0.6, 0.4, 0.2]
    assert analysis.canary.requests == 3000.0 and analysis.canary.error_rate == 0.0
    assert math.isclose(
        analysis.stable.token_latency_p95_seconds or 0, 0.00525
    )  # 2850th of 3000: 150/180 into (5, 5.3] ms


def test_queries_select_each_track_at_its_revision_over_the_evidence_range() -> None:
    answers, _ = run(Answers())
    assert any('specfleet_io_revision="c1"' in q and 'specfleet_io_track="canary"' in q for q in answers.queries)
    assert any('specfleet_io_revision="s1"' in q and 'specfleet_io_track="stable"' in q for q in answers.queries)
    # 60 s of evidence read per series 5 s apart (the scrape interval), starting two scrapes in
    assert all("[50s:5s]" in q or "[50s]" in q for q in answers.queries if "timestamp(" not in q)
    assert answers.times == {NOW.timestamp()}  # one evaluation time: every query sees the same scrapes


@pytest.mark.parametrize("track", ["stable", "canary"])
def test_a_pod_first_scraped_inside_the_range_costs_only_its_own_samples(track: str) -> None:
    """A pod replaced 30 s ago (a node lost, a hand-scaled stable) leaves the range whole: each series counts
    from its own first sample (`promql.counted`), so only the new pod's missing first half is missing."""
    answers, analysis = run(Answers(seen_for={track: 30.0}))
    assert analysis.evidence_seconds == 60
    evidence = [q for q in answers.queries if "timestamp(" not in q]
    assert evidence and all("[50s:5s]" in q or "[50s]" in q for q in evidence)


def test_pods_seen_since_before_the_range_leave_it_whole() -> None:
    _, analysis = run(Answers(seen_for={"stable": 70.0, "canary": 66.0}))
    assert analysis.evidence_seconds == 60


def test_low_acceptance_fails_with_its_bound() -> None:
    _, analysis = run(Answers(canary_first_position=600.0))
    assert analysis.verdict is Verdict.FAIL
    assert analysis.reasons[0].startswith("acceptance alpha 0.30") and "upper bound < 0.60" in analysis.reasons[0]


def test_an_unreachable_prometheus_is_an_error_verdict_not_an_exception() -> None:
    _, analysis = run(Answers(fail=True))
    assert analysis.verdict is Verdict.ERROR and "connection refused" in analysis.reasons[0]


def test_queue_time_kv_cache_and_throughput_are_measured_for_both_tracks() -> None:
    _, analysis = run(Answers())
    for track in (analysis.canary, analysis.stable):
        assert track.queue_time_p95_seconds is not None and track.queue_time_p95_seconds < 0.3
        assert track.kv_cache_usage_mean == 0.45 and track.kv_cache_usage_max == 0.9
        assert track.preemptions_per_second == 0.1  # 6 in 60 s
        assert track.served_fraction == round(3000 / 3003, 4)  # 3 more requests waiting at the end
        assert track.generation_tokens_per_pod_per_second is not None


@pytest.mark.parametrize("missing", ["num_requests_waiting", "kv_cache_usage_perc"])
def test_missing_queue_or_kv_series_leave_their_guardrails_inconclusive(missing: str) -> None:
    limits = {"maxThroughputDrop": 0.1, "maxKvCacheUsage": 0.9}
    _, analysis = run(Answers(missing=(missing,)), limits)
    assert analysis.verdict is Verdict.INCONCLUSIVE, analysis.reasons
    assert len(analysis.reasons) == 1 and analysis.reasons[0].startswith("no ")


def test_missing_queue_kv_and_preemption_series_change_nothing_when_no_limit_is_set() -> None:
    missing = ("num_requests_waiting", "kv_cache_usage_perc", "num_preemptions_total", "queue_time")
    _, analysis = run(Answers(missing=missing))
    assert analysis.verdict is Verdict.PASS, analysis.reasons
    assert analysis.canary.kv_cache_usage_mean is None and analysis.canary.preemptions_per_second is None


def test_side_by_side_slices_read_one_range_since_the_last_of_them_was_ready() -> None:
    """Slice k3's pods were first scraped 20 s ago: slice k2's analysis still reads the 5 minutes since both were
    Ready, the new pods counted from their first samples."""
    ready = NOW - timedelta(minutes=5)
    slices = [
        CandidateResult(index=i, revision=r, state=CandidateState.MEASURING, ready_at=ready, looks=2)
        for i, r in enumerate(("k2", "k3"))
    ]
    status = STATUS.model_copy(update={"experiment": ExperimentStatus(revision="e1", candidates=slices)})
    sdep = SpeculativeDeployment.from_mapping(BASE)
    answers = Answers(seen_for={"k3": 20.0})
    analysis = analyze_candidate(answers, sdep, status, NOW, 0)
    assert (analysis.revision, analysis.look, analysis.evidence_seconds) == ("k2", 3, 300)
    assert any('specfleet_io_track="candidate"' in q and '"k2"' in q for q in answers.queries)


def test_evidence_grows_from_the_step_start_past_the_window() -> None:
    """A step 20 minutes old is judged on its 20 minutes: bounds narrow as evidence grows, instead of every
    look reading the same window's worth."""
    spec = merged(BASE, {"spec": {"rollout": {"analysis": {"window": "5m"}}}})
    status = STATUS.model_copy(update={"evidence_since": NOW - timedelta(minutes=20)})
    answers = Answers()
    analysis = analyze(answers, SpeculativeDeployment.from_mapping(spec), status, NOW)
    assert analysis.evidence_seconds == 1200
    assert any("[1190s:5s]" in q for q in answers.queries)


@pytest.mark.parametrize("track", ["canary", "stable"])
def test_evidence_whose_newest_sample_is_old_is_inconclusive_never_a_pass(track: str) -> None:
    """Prometheus behind by 2 minutes (a remote-write pipeline or a scrape loop stalled) still holds evidence
    enough to pass: not a Pass now, and the reason says how old the data is."""
    _, analysis = run(Answers(newest={track: 120.0}))
    assert analysis.verdict is Verdict.INCONCLUSIVE
    assert analysis.reasons[0].startswith(f"the {track} track's newest sample is 120s old (more than 30s)")


def test_a_track_without_any_recent_sample_is_named() -> None:
    _, analysis = run(Answers(newest={"canary": None}))
    assert analysis.verdict is Verdict.INCONCLUSIVE
    assert analysis.reasons[0].startswith("no sample of the canary track in the last 300s")


def test_samples_within_three_scrapes_or_30_s_are_fresh() -> None:
    _, analysis = run(Answers(newest={"canary": 29.0, "stable": 5.0}))
    assert analysis.verdict is Verdict.PASS, analysis.reasons


def test_old_evidence_of_harm_still_fails() -> None:
    """A stale Prometheus cannot make a canary shown bad good: the Fail stands."""
    _, analysis = run(Answers(canary_first_position=600.0, newest={"canary": 120.0}))
    assert analysis.verdict is Verdict.FAIL

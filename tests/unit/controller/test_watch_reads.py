"""The shell's watch: the canary's newest scrape judged once, over trailing ranges that stay inside the step's
evidence, from one query per track and range; what a restart would judge again decides the same."""

from datetime import timedelta

from specfleet.api.resource import SpeculativeDeployment
from specfleet.api.status import SpeculativeDeploymentStatus, Verdict
from specfleet.controller.watch import Watched, read, watch_canary, watch_ranges
from specfleet.metrics import promql

from bad_specs import BASE, merged
from rolloutkit import T0

SCRAPE = 5.0
SAMPLE = T0.timestamp() + 300.0
"""The canary's newest sample: five minutes after the canary started."""


class Prometheus:
    """The tracks over any trailing range of `seconds`: 1 finished request a second per pod, 38 drafts a request
    on stable, `drafts` on the canary, accepted at position 0 with `alpha` (canary) and 0.8 (stable)."""

    def __init__(
        self, alpha: float, drafts: float = 90.0, sample: float | None = SAMPLE, step_errors: float = 0.0
    ) -> None:
        self.alpha, self.drafts, self.sample = alpha, drafts, sample
        self.step_errors = step_errors
        """The canary's share of errors since the step's evidence began (a whole-step query); stable has none."""
        self.queries: list[str] = []

    def scalar(self, query: str, at: float | None = None) -> float | None:
        self.queries.append(query)
        return self.sample if query.startswith("max(timestamp(") else SCRAPE

    def by_label(self, query: str, label: str, at: float | None = None) -> dict[str, float]:
        raise AssertionError("the watch reads whole vectors")

    def series(self, query: str, at: float | None = None) -> list[tuple[dict[str, str], float]]:
        self.queries.append(query)
        assert at == self.sample
        canary = 'specfleet_io_track="canary"' in query
        if query.startswith("sum by (finished_reason) (sum_over_time("):  # the step's whole evidence
            seconds = float(query.split("[")[1].split("s")[0])
            requests = (8.0 if canary else 12.0) * seconds
            errors = requests * self.step_errors if canary else 0.0
            return [({"finished_reason": "stop"}, requests - errors), ({"finished_reason": "error"}, errors)]
        seconds = float(query.split("offset ")[1].split("s")[0])
        alpha, per_request = (self.alpha, self.drafts) if canary else (0.8, 38.0)
        drafts = seconds * per_request
        field = promql.WATCH_FIELD
        return [
            ({field: "drafts"}, drafts),
            ({field: "draft_tokens"}, 4 * drafts),
            ({field: "accepted_per_position", "position": "0"}, alpha * drafts),
            ({field: "finished", "finished_reason": "stop"}, seconds),
            ({field: "finished_by_pod", "pod": "p"}, seconds),
        ]


def fleet(window: str = "30s") -> SpeculativeDeployment:
    rollout = {"analysis": {"interval": "10s", "window": window}, "guardrails": {"minRequests": 5}}
    return SpeculativeDeployment.from_mapping(merged(BASE, {"spec": {"rollout": rollout}}))


def live(evidence_seconds: float = 120.0) -> SpeculativeDeploymentStatus:
    return SpeculativeDeploymentStatus.model_validate(
        {
            "stableRevision": "s1",
            "canaryRevision": "c1",
            "currentStep": 0,
            "canaryStartedAt": T0.isoformat(),
            "evidenceSince": (T0 + timedelta(seconds=300 - evidence_seconds)).isoformat(),
            "stableServing": {},
        }
    )


NOW = T0 + timedelta(seconds=301)


def test_ranges_double_from_two_scrapes_below_the_window_and_inside_the_evidence() -> None:
    assert watch_ranges(5, 30, 120) == (10, 20)
    assert watch_ranges(15, 300, 3600) == (30, 60, 120)
    assert watch_ranges(5, 30, 14) == ()  # the sample 10 s before may be the previous step's
    assert watch_ranges(5, 30, 16) == (10,)
    assert watch_ranges(5, 10, 120) == ()  # the analyses' window check covers a window this short


def test_a_drafter_turned_bad_is_failed_at_its_scrape_and_the_next_scrape_is_when_to_look_again() -> None:
    prometheus = Prometheus(alpha=0.3)
    watch, watched = watch_canary(prometheus, fleet(), live(), NOW, None)
    assert watch.failure is not None and watch.failure.verdict is Verdict.FAIL
    assert watch.failure.reasons[0].startswith("over the last 10 s: acceptance alpha 0.30")
    assert watch.failure.evidence_seconds == 10 and watch.failure.revision == "c1"
    assert watched == Watched("c1", SAMPLE, SCRAPE)
    assert watch.next_at is not None and watch.next_at.timestamp() == SAMPLE + SCRAPE + 1
    reads = [q for q in prometheus.queries if "label_replace" in q]
    assert len(reads) == 4  # one query per track and range (10 s and 20 s)


def test_each_scrape_is_judged_once_and_again_after_a_restart_the_same() -> None:
    prometheus = Prometheus(alpha=0.3)
    first, watched = watch_canary(prometheus, fleet(), live(), NOW, None)
    asked = len(prometheus.queries)
    again, _ = watch_canary(prometheus, fleet(), live(), NOW + timedelta(seconds=2), watched)
    assert again.failure is None and len(prometheus.queries) == asked + 1  # only the newest sample was asked
    restarted, _ = watch_canary(prometheus, fleet(), live(), NOW + timedelta(seconds=2), None)
    assert restarted.failure is not None and first.failure is not None
    assert restarted.failure.reasons == first.failure.reasons


def test_a_good_canary_and_a_canary_without_samples_are_not_failed() -> None:
    assert watch_canary(Prometheus(alpha=0.8, drafts=38), fleet(), live(), NOW, None)[0].failure is None
    quiet, watched = watch_canary(Prometheus(alpha=0.3, sample=None), fleet(), live(), NOW, None)
    assert quiet.failure is None and watched is None and quiet.next_at == NOW + timedelta(seconds=5)


def test_no_range_reaches_before_the_step_s_evidence() -> None:
    prometheus = Prometheus(alpha=0.3)
    watch, _ = watch_canary(prometheus, fleet(), live(evidence_seconds=12), NOW, None)
    assert watch.failure is None and not any("label_replace" in q for q in prometheus.queries)


def test_one_query_reads_every_field_of_a_track() -> None:
    evidence = read(Prometheus(alpha=0.3), promql.TrackSelector("ns", "f", "canary", "c1"), 10, SAMPLE)
    assert evidence.drafts == 900 and evidence.alpha == 0.3 and evidence.requests == 10
    assert evidence.request_rate_per_pod == (1.0,) and evidence.seconds == 10


def test_one_look_a_scrape_interval_however_many_pods_are_scraped_in_it() -> None:
    """Pods are scraped at their own moments: a newer sample 2 s later is in the same interval, whose look
    was spent; the next interval's is judged."""
    prometheus = Prometheus(alpha=0.8, drafts=38)
    _, watched = watch_canary(prometheus, fleet(), live(), NOW, None)
    prometheus.sample = SAMPLE + 2
    asked = len(prometheus.queries)
    _, same = watch_canary(prometheus, fleet(), live(), NOW + timedelta(seconds=2), watched)
    assert same == watched and len(prometheus.queries) == asked + 1
    prometheus.sample = SAMPLE + SCRAPE
    _, next_one = watch_canary(prometheus, fleet(), live(), NOW + timedelta(seconds=5), watched)
    assert next_one is not None and next_one.sample == SAMPLE + SCRAPE


def test_errors_twice_the_limit_over_the_whole_step_fail_at_a_scrape_from_one_more_query_per_track() -> None:
    """A canary failing 2% of requests against stable's 0% at 8 requests/s, 5 minutes into its step: its last
    scrapes alone do not show it, the step's requests since `evidenceSince` do; after a restart the same scrape
    is failed the same (the range comes from the status)."""
    clean = Prometheus(alpha=0.8, drafts=38)
    assert watch_canary(clean, fleet(), live(evidence_seconds=300), NOW, None)[0].failure is None
    failing = Prometheus(alpha=0.8, drafts=38, step_errors=0.02)
    watch, _ = watch_canary(failing, fleet(), live(evidence_seconds=300), NOW, None)
    assert watch.failure is not None and watch.failure.verdict is Verdict.FAIL
    assert watch.failure.reasons[0].startswith("over the step's 5 min: error rate 2.00%"), watch.failure.reasons
    assert watch.failure.evidence_seconds == 300
    whole = [q for q in failing.queries if q.startswith("sum by (finished_reason)")]
    assert len(whole) == 2 and all("[290s:5s]" in q for q in whole), whole  # one a track, counted per series
    assert len(failing.queries) == len(clean.queries)
    restarted, _ = watch_canary(failing, fleet(), live(evidence_seconds=300), NOW + timedelta(seconds=2), None)
    assert restarted.failure is not None and restarted.failure.reasons == watch.failure.reasons


def test_a_scrape_not_yet_stored_when_due_is_asked_for_again_a_second_later_not_half_a_scrape() -> None:
    """The look due a second after the next scrape finds only the sample it judged (Prometheus is slow to store
    it): it asks again after STORE_SECONDS, so a late sample costs about that, not half a scrape interval."""
    prometheus = Prometheus(alpha=0.8, drafts=38)
    _, watched = watch_canary(prometheus, fleet(), live(), NOW, None)
    due = NOW + timedelta(seconds=SCRAPE)  # the next scrape's look, its sample still missing
    again, same = watch_canary(prometheus, fleet(), live(), due, watched)
    assert same == watched and again.next_at == due + timedelta(seconds=1)

"""One analysis with a stand-in provider: evidence lands in the right fields, the range is cut at the
evidence start, and Prometheus failures become an Error verdict."""

import math
from datetime import UTC, datetime, timedelta

from specfleet.api.resource import SpeculativeDeployment
from specfleet.api.status import SpeculativeDeploymentStatus, Verdict
from specfleet.controller.analysis import analyze
from specfleet.metrics.prometheus import ProviderError

from bad_specs import BASE

NOW = datetime(2026, 11, 29, 12, tzinfo=UTC)
STATUS = SpeculativeDeploymentStatus(
    stable_revision="s1", canary_revision="c1", current_step=0, analyses=2, evidence_since=NOW - timedelta(minutes=1)
)
LATENCY = {"0.004": 100.0, "0.005": 900.0, "0.0053": 960.0, "0.0056": 990.0, "0.006": 1000.0, "+Inf": 1000.0}


class Answers:
    """Prometheus as a table: what each kind of query answers, the same for both tracks unless told."""

    def __init__(self, canary_first_position: float = 1600.0, fail: bool = False) -> None:
        self.first, self.fail, self.queries, self.times = canary_first_position, fail, [], set()

    def scalar(self, query: str, at: float | None = None) -> float | None:
        self.queries.append(query)
        self.times.add(at)
        if self.fail:
            raise ProviderError("Prometheus at http://x: connection refused")
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
        canary = 'specfleet_io_track="canary"' in query
        answers = {
            "le": LATENCY,
            "position": {"0": self.first if canary else 1600.0, "1": 1200.0, "2": 800.0, "3": 400.0},
            "finished_reason": {"stop": 990.0, "length": 10.0, "error": 0.0, "abort": 5.0},
            "pod": {"pod-a": 3.3},
        }
        return answers[label]


def run(answers: Answers) -> tuple:
    return answers, analyze(answers, SpeculativeDeployment.from_mapping(BASE), STATUS, NOW)


def test_a_pass_carries_both_tracks_measurements_and_its_look() -> None:
    _, analysis = run(Answers())
    assert analysis.verdict is Verdict.PASS, analysis.reasons
    assert analysis.revision == "c1" and analysis.look == 3 and analysis.evidence_seconds == 60
    assert analysis.canary.acceptance_alpha == 0.8 and analysis.canary.acceptance_rate == 0.5
    assert analysis.canary.acceptance_per_position == [0.8, 0.6, 0.4, 0.2]
    assert analysis.canary.requests == 1000.0 and analysis.canary.error_rate == 0.0
    assert math.isclose(
        analysis.stable.token_latency_p95_seconds or 0, 0.00525
    )  # 950th of 1000: 50/60 into (5, 5.3] ms


def test_queries_select_each_track_at_its_revision_over_the_evidence_range() -> None:
    answers, _ = run(Answers())
    assert any('specfleet_io_revision="c1"' in q and 'specfleet_io_track="canary"' in q for q in answers.queries)
    assert any('specfleet_io_revision="s1"' in q and 'specfleet_io_track="stable"' in q for q in answers.queries)
    assert all("[60s]" in q for q in answers.queries)
    assert answers.times == {NOW.timestamp()}  # one evaluation time: every query sees the same scrapes


def test_low_acceptance_fails_with_its_bound() -> None:
    _, analysis = run(Answers(canary_first_position=600.0))
    assert analysis.verdict is Verdict.FAIL
    assert analysis.reasons[0].startswith("acceptance alpha 0.30") and "upper bound < 0.60" in analysis.reasons[0]


def test_an_unreachable_prometheus_is_an_error_verdict_not_an_exception() -> None:
    _, analysis = run(Answers(fail=True))
    assert analysis.verdict is Verdict.ERROR and "connection refused" in analysis.reasons[0]

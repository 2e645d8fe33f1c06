"""One analysis with a stand-in provider: measurements land in the right fields; failures become Error."""

from datetime import UTC, datetime

from specfleet.api.resource import SpeculativeDeployment
from specfleet.api.status import SpeculativeDeploymentStatus, Verdict
from specfleet.controller.analysis import analyze
from specfleet.metrics.prometheus import ProviderError

from bad_specs import BASE

NOW = datetime(2026, 11, 29, 12, tzinfo=UTC)
STATUS = SpeculativeDeploymentStatus(stable_revision="s1", canary_revision="c1", current_step=0)


class Answers:
    """Answers by the metric a query divides or takes a quantile of, per track."""

    def __init__(self, canary_acceptance: float, fail: bool = False) -> None:
        self.canary_acceptance, self.fail, self.queries = canary_acceptance, fail, []

    def scalar(self, query: str) -> float | None:
        self.queries.append(query)
        if self.fail:
            raise ProviderError("Prometheus at http://x: connection refused")
        canary = 'specfleet_io_track="canary"' in query
        if query.startswith("histogram_quantile(0.95, sum by (le) (rate(vllm:inter_token_latency"):
            return 0.030
        if "finished_reason" in query:
            return 0.0
        if "increase(vllm:spec_decode_num_draft_tokens_total" in query:
            return 5000.0
        if "increase(vllm:request_success_total" in query:
            return 300.0
        if query.startswith("sum(rate(vllm:spec_decode_num_accepted_tokens_total"):
            return self.canary_acceptance if canary else 0.7
        return 1.0

    def by_label(self, query: str, label: str) -> dict[str, float]:
        return {"0": 0.9, "1": 0.7, "2": 0.5}


def test_a_pass_carries_both_tracks_measurements() -> None:
    analysis = analyze(Answers(0.72), SpeculativeDeployment.from_mapping(BASE), STATUS, NOW)
    assert analysis.verdict is Verdict.PASS and analysis.revision == "c1"
    assert analysis.canary.acceptance_rate == 0.72 and analysis.stable.acceptance_rate == 0.7
    assert analysis.canary.acceptance_per_position == [0.9, 0.7, 0.5]


def test_queries_select_each_track_at_its_revision() -> None:
    answers = Answers(0.72)
    analyze(answers, SpeculativeDeployment.from_mapping(BASE), STATUS, NOW)
    assert any('specfleet_io_revision="c1"' in q and 'specfleet_io_track="canary"' in q for q in answers.queries)
    assert any('specfleet_io_revision="s1"' in q and 'specfleet_io_track="stable"' in q for q in answers.queries)


def test_low_acceptance_fails() -> None:
    analysis = analyze(Answers(0.3), SpeculativeDeployment.from_mapping(BASE), STATUS, NOW)
    assert analysis.verdict is Verdict.FAIL and "acceptance rate 0.300" in analysis.reasons[0]


def test_an_unreachable_prometheus_is_an_error_verdict_not_an_exception() -> None:
    analysis = analyze(Answers(0.7, fail=True), SpeculativeDeployment.from_mapping(BASE), STATUS, NOW)
    assert analysis.verdict is Verdict.ERROR and "connection refused" in analysis.reasons[0]

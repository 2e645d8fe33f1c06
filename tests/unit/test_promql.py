"""PromQL building: selectors escape label values and pick exactly one track at one revision."""

from specfleet.metrics import promql
from specfleet.metrics.alerts import RULES

SELECTOR = promql.TrackSelector("ns", "llama", "canary", "abc123")


def test_selector_names_namespace_fleet_track_and_revision() -> None:
    assert SELECTOR.matchers() == (
        '{namespace="ns",specfleet_io_name="llama",specfleet_io_track="canary",specfleet_io_revision="abc123"}'
    )


def test_label_values_are_escaped() -> None:
    hostile = promql.TrackSelector('n"s', "a\\b", "canary", "x\ny")
    assert 'namespace="n\\"s"' in hostile.matchers()
    assert 'specfleet_io_name="a\\\\b"' in hostile.matchers()
    assert "\n" not in hostile.matchers()


def test_acceptance_rate_guards_the_denominator() -> None:
    query = promql.acceptance_rate(SELECTOR, "5m")
    assert query.startswith("sum(rate(vllm:spec_decode_num_accepted_tokens_total{")
    assert query.endswith("[5m])) > 0)")
    assert "vllm:spec_decode_num_accepted_tokens_per_pos_total" not in query


def test_quantiles_use_histogram_buckets_by_le() -> None:
    query = promql.itl_quantile(0.95, SELECTOR, "1m")
    assert query.startswith("histogram_quantile(0.95, sum by (le) (rate(vllm:inter_token_latency_seconds_bucket{")


def test_error_rate_counts_error_and_abort() -> None:
    assert 'finished_reason=~"error|abort"' in promql.error_rate(SELECTOR, "5m")


def test_alert_rules_are_well_formed() -> None:
    assert {r["alert"] for r in RULES} == {
        "SpecfleetLowAcceptanceRate",
        "SpecfleetCanaryInterTokenLatencyWorseThanStable",
    }
    low = next(r for r in RULES if r["alert"] == "SpecfleetLowAcceptanceRate")
    assert low["for"] == "5m" and "< 0.6" in str(low["expr"])

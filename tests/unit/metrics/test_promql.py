"""PromQL building: selectors escape label values and pick exactly one track at one revision."""

from specfleet.metrics import promql
from specfleet.metrics.alerts import RULES
from specfleet_workshop.sim.engine import Metrics
from specfleet_workshop.sim.exposition import families

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


def test_counters_and_buckets_are_read_as_increases_over_the_range() -> None:
    assert promql.increase("vllm:spec_decode_num_drafts_total", SELECTOR, "60s").startswith(
        "sum(increase(vllm:spec_decode_num_drafts_total{"
    )
    buckets = promql.histogram_buckets("vllm:request_time_per_output_token_seconds", SELECTOR, "60s")
    assert buckets.startswith("sum by (le) (increase(vllm:request_time_per_output_token_seconds_bucket{")
    assert buckets.endswith("[60s]))")


def test_latency_judged_is_per_token_and_the_step_histogram_is_named_as_such() -> None:
    assert promql.HISTOGRAMS["token_latency"] == "vllm:request_time_per_output_token_seconds"
    assert promql.HISTOGRAMS["step_latency"] == "vllm:inter_token_latency_seconds"


def test_ranges_are_whole_seconds_and_never_empty() -> None:
    assert promql.seconds(59.6) == "60s"
    assert promql.seconds(0) == "1s"


def test_every_division_is_by_a_count_kept_only_when_positive() -> None:
    """No observation is no answer (an empty vector), never 0/0 (NaN) or x/0 (an infinity the provider
    refuses as a malformed answer, which would make an Error verdict of a quiet track)."""
    queries = [*promql.gauges(SELECTOR, "60s").values(), promql.scrape_interval(SELECTOR, "120s", "1s")]
    divisions = [q for q in queries if " / " in q]
    assert len(divisions) == 3  # two histogram means and the scrape interval
    assert all(q.split(" / ", 1)[1].startswith("(") and q.rstrip(")").endswith("> 0") for q in divisions), divisions
    everything = [*promql.gauges(SELECTOR, "60s").values(), promql.newest_sample(SELECTOR, "300s", "1s")]
    assert all(q.count(" / ") <= 1 for q in everything)


def test_finished_requests_are_split_by_reason_and_load_by_pod() -> None:
    assert promql.finished_by_reason(SELECTOR, "5m").startswith("sum by (finished_reason) (increase(")
    assert promql.request_rate_by_pod(SELECTOR, "5m").startswith("sum by (pod) (rate(vllm:request_success_total{")


def test_alert_rules_are_well_formed() -> None:
    assert {r["alert"] for r in RULES} == {
        "SpecfleetSpeculationNotPaying",
        "SpecfleetLowAcceptanceAlpha",
        "SpecfleetLowAcceptanceRate",
        "SpecfleetCanaryTokenLatencyWorseThanStable",
        "SpecfleetCustomGuardrailFailing",
        "SpecfleetCustomGuardrailUndecided",
        "SpecfleetCanaryRolledBack",
        "SpecfleetFleetDegraded",
        "SpecfleetFleetStuck",
        "SpecfleetReconcileErrors",
        "SpecfleetOperatorDown",
    }
    alpha = next(r for r in RULES if r["alert"] == "SpecfleetLowAcceptanceAlpha")
    assert alpha["for"] == "5m" and '{position="0"}' in str(alpha["expr"]) and "< 0.6" in str(alpha["expr"])
    latency = next(r for r in RULES if r["alert"] == "SpecfleetCanaryTokenLatencyWorseThanStable")
    assert "request_time_per_output_token" in str(latency["expr"])
    paying = next(r for r in RULES if r["alert"] == "SpecfleetSpeculationNotPaying")
    assert str(paying["expr"]) == "specfleet_speculation_paying == 0"


def test_queue_kv_and_preemptions_are_read_from_vllms_own_series() -> None:
    assert promql.HISTOGRAMS["queue_time"] == "vllm:request_queue_time_seconds"
    assert promql.COUNTERS["preemptions"] == "vllm:num_preemptions_total"
    gauges = promql.gauges(SELECTOR, "5m")
    assert gauges["waiting_growth"] == f"sum(delta(vllm:num_requests_waiting{SELECTOR.matchers()}[5m]))"
    assert gauges["kv_cache_usage_mean"] == f"avg(avg_over_time(vllm:kv_cache_usage_perc{SELECTOR.matchers()}[5m]))"
    assert gauges["kv_cache_usage_max"] == f"max(max_over_time(vllm:kv_cache_usage_perc{SELECTOR.matchers()}[5m]))"


def test_every_series_the_judge_reads_is_one_the_simulator_exposes() -> None:
    """Preemptions and prefix-cache hits too: the simulator never preempts nor caches prefixes, and says so
    with a count of 0."""
    exposed = {f.name for f in families(Metrics(k=4), "m", speculative=True, created=0.0)}
    exposed |= {f"{name}_total" for name in exposed}
    read = {
        *promql.COUNTERS.values(),
        *promql.HISTOGRAMS.values(),
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
    }
    assert read - exposed == set()

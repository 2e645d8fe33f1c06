"""PromQL building: selectors escape label values and pick exactly one track at one revision."""

from pathlib import Path

from promtoolkit import evaluated
from specfleet.metrics import promql
from specfleet.metrics.alerts import RULES
from specfleet_workshop.sim.engine import Metrics
from specfleet_workshop.sim.exposition import families

SELECTOR = promql.TrackSelector("ns", "llama", "canary", "abc123")
R = promql.Range("50s", "5s")


def test_selector_names_namespace_fleet_track_and_revision() -> None:
    assert SELECTOR.matchers() == (
        '{namespace="ns",specfleet_io_name="llama",specfleet_io_track="canary",specfleet_io_revision="abc123"}'
    )


def test_label_values_are_escaped() -> None:
    hostile = promql.TrackSelector('n"s', "a\\b", "canary", "x\ny")
    assert 'namespace="n\\"s"' in hostile.matchers()
    assert 'specfleet_io_name="a\\\\b"' in hostile.matchers()
    assert "\n" not in hostile.matchers()


def test_counters_and_buckets_are_read_as_increases_over_the_range_per_series() -> None:
    r = promql.Range("60s", "5s")
    assert promql.increase("vllm:spec_decode_num_drafts_total", SELECTOR, r).startswith(
        "sum(sum_over_time(((vllm:spec_decode_num_drafts_total{"
    )
    buckets = promql.histogram_buckets("vllm:request_time_per_output_token_seconds", SELECTOR, r)
    assert buckets.startswith("sum by (le) (sum_over_time(((vllm:request_time_per_output_token_seconds_bucket{")
    assert buckets.endswith("[60s:5s]))")


def test_latency_judged_is_per_token_and_the_step_histogram_is_named_as_such() -> None:
    assert promql.HISTOGRAMS["token_latency"] == "vllm:request_time_per_output_token_seconds"
    assert promql.HISTOGRAMS["step_latency"] == "vllm:inter_token_latency_seconds"


def test_ranges_are_whole_seconds_and_never_empty() -> None:
    assert promql.seconds(59.6) == "60s"
    assert promql.seconds(0) == "1s"


def test_every_division_is_by_a_count_kept_only_when_positive() -> None:
    """No observation is no answer (an empty vector), never 0/0 (NaN) or x/0 (an infinity the provider
    refuses as a malformed answer, which would make an Error verdict of a quiet track)."""
    queries = [*promql.gauges(SELECTOR, R).values(), promql.scrape_interval(SELECTOR, "120s", "1s")]
    divisions = [q for q in queries if " / " in q]
    assert len(divisions) == 3  # two histogram means and the scrape interval
    assert all(q.split(" / ", 1)[1].startswith("(") and q.rstrip(")").endswith("> 0") for q in divisions), divisions
    everything = [*promql.gauges(SELECTOR, R).values(), promql.newest_sample(SELECTOR, "300s", "1s")]
    assert all(q.count(" / ") <= 1 for q in everything)


def test_finished_requests_are_split_by_reason_and_load_by_pod() -> None:
    assert promql.finished_by_reason(SELECTOR, R).startswith("sum by (finished_reason) (sum_over_time(")


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
    gauges = promql.gauges(SELECTOR, promql.Range("5m", "5s"))
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


def test_each_series_is_counted_between_its_own_samples(tmp_path: Path) -> None:
    """A pod scraped all along counts what it served in the range; one that started inside it counts from its
    first sample (not from zero, not stretched to the range's start); one gone counts up to its last sample;
    one whose counter dropped (vLLM restarted) counts what both processes served. Evaluated by Prometheus'
    own engine (promtool), every 5 s, at 100 s over 60 s read 5 s apart."""
    series = {
        'c{pod="old"}': "0+1x30",  # +1 a scrape from 0 s
        'c{pod="new"}': "_x12 100+2x16",  # first scraped at 60 s, already at 100, then +2 a scrape
        'c{pod="gone"}': "0+4x10 stale",  # +4 a scrape until 50 s, then gone
        'c{pod="restarted"}': "50+1x8 0+3x20",  # +1 a scrape until 40 s, restarted from 0 at 45 s, +3 a scrape
    }
    expr = f"sum by (pod) ({promql.counted('c', promql.Range('60s', '5s'))})"
    expected = [
        {"labels": '{pod="old"}', "value": 13},  # the 13 scrapes from 40 s to 100 s, each against the one before
        {"labels": '{pod="new"}', "value": 16},  # 8 scrapes after its first
        {"labels": '{pod="gone"}', "value": 12},
        {"labels": '{pod="restarted"}', "value": 34},  # 1 before the restart, 0 at it, 11 x 3 after
    ]
    assert evaluated(tmp_path, series, expr, "100s", expected) == ""


def test_each_pods_load_is_read_over_the_time_it_was_scraped(tmp_path: Path) -> None:
    """Two pods at 0.2 requests/s; one lost at 50 s and its replacement serving from 60 s at the same rate:
    each reads 0.2/s over its own part of the range, so neither is a lighter pod and the track is not a lighter
    one (a `rate` over the whole range read the lost pod and its replacement at about half). At 100 s over
    60 s read 5 s apart, as `counted`."""
    m = SELECTOR.matchers()[1:-1]
    total = "vllm:request_success_total"
    series = {
        f'{total}{{{m},pod="kept",finished_reason="stop"}}': "0+1x30",
        f'{total}{{{m},pod="lost",finished_reason="stop"}}': "0+1x10 stale",
        f'{total}{{{m},pod="new",finished_reason="stop"}}': "_x12 0+1x16",
    }
    expr = promql.request_rate_by_pod(SELECTOR, promql.Range("60s", "5s"))
    expected = [{"labels": f'{{pod="{pod}"}}', "value": 0.2} for pod in ("kept", "lost", "new")]
    assert evaluated(tmp_path, series, expr, "100s", expected) == ""


def test_the_watch_reads_every_field_of_a_track_in_one_query_labelled_by_field(tmp_path: Path) -> None:
    matchers = SELECTOR.matchers()[1:-1]
    series = {
        f'vllm:spec_decode_num_drafts_total{{{matchers},pod="a"}}': "0+10x20",
        f'vllm:request_success_total{{{matchers},pod="a",finished_reason="stop"}}': "0+1x20",
        f'vllm:request_success_total{{{matchers},pod="b",finished_reason="stop"}}': "_x10 0+1x10",  # new at 50 s
    }
    expr = f"{promql.watch_evidence(SELECTOR, '10s')}"
    field = promql.WATCH_FIELD
    expected = [
        {"labels": f'{{{field}="drafts"}}', "value": 20},
        {"labels": f'{{{field}="finished",finished_reason="stop"}}', "value": 2},  # pod b has no sample 10 s ago
        {"labels": f'{{{field}="finished_by_pod",pod="a"}}', "value": 2},
    ]
    assert evaluated(tmp_path, series, expr, "55s", expected) == ""

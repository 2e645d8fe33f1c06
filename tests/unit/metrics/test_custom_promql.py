"""The PromQL of user-defined guardrails: the operator's own query around the user's metric names, the
track's matchers always present, the user's label values escaped; promtool parses every query."""

import subprocess
from pathlib import Path

import yaml

from promtoolkit import promtool
from specfleet.api.custom_guardrails import CustomGuardrail
from specfleet.metrics import promql

SELECTOR = promql.TrackSelector("ns", "llama", "canary", "abc123")
TRACK = 'namespace="ns",specfleet_io_name="llama",specfleet_io_track="canary",specfleet_io_revision="abc123"'
RATE = CustomGuardrail.model_validate(
    {
        "name": "tool-calls-parsed",
        "rate": {"events": "tool_calls_parsed_total", "total": "tool_calls_total", "maxWorsening": 0.01},
        "matchLabels": {"tool": "search"},
    }
)
HOSTILE = CustomGuardrail.model_validate(
    {
        "name": "tool-latency",
        "latency": {"histogram": "app:tool_call_duration_seconds", "maxRegression": 0.1},
        "matchLabels": {"tool": '"} or vector(1) or x{a="', "z": "a\\b\nc"},
    }
)


def test_a_rate_reads_both_counters_as_increases_on_the_track_and_the_matched_labels() -> None:
    r = promql.Range("300s", "5s")
    queries = promql.custom_queries(RATE, SELECTOR, r)
    selector = f'{{{TRACK},tool="search"}}'
    assert queries == {
        "events": f"sum({promql.counted('tool_calls_parsed_total' + selector, r)})",
        "total": f"sum({promql.counted('tool_calls_total' + selector, r)})",
    }
    assert queries["total"].endswith("[300s:5s]))")


def test_a_latency_reads_the_histograms_buckets_by_le() -> None:
    (query,) = promql.custom_queries(HOSTILE, SELECTOR, promql.Range("60s", "5s")).values()
    assert query.startswith(f"sum by (le) (sum_over_time(((app:tool_call_duration_seconds_bucket{{{TRACK},")
    assert query.endswith("[60s:5s]))")


def test_label_values_cannot_escape_the_selector() -> None:
    (query,) = promql.custom_queries(HOSTILE, SELECTOR, promql.Range("60s", "5s")).values()
    assert 'tool="\\"} or vector(1) or x{a=\\""' in query and 'z="a\\\\b\\nc"' in query
    # the selector's (five times in a per-series count), and the literal's
    assert "\n" not in query and query.count("{") == query.count("}") == 5 * (1 + 1)
    assert SELECTOR.matchers_with({}) == SELECTOR.matchers()


def test_promtool_parses_every_custom_query(tmp_path: Path) -> None:
    r = promql.Range("300s", "5s")
    queries = [q for g in (RATE, HOSTILE) for q in promql.custom_queries(g, SELECTOR, r).values()]
    queries += [promql.watch_evidence(SELECTOR, "10s", (RATE, HOSTILE))]
    rules = [{"record": f"custom:query{i}", "expr": q} for i, q in enumerate(queries)]
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "custom", "rules": rules}]}))
    result = subprocess.run([promtool(), "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(queries)} rules found" in result.stdout

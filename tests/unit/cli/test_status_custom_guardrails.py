"""`kubectl specfleet status` shows custom guardrails in its Guardrails table, each in its own unit."""

import io

from rich.console import Console

from specfleet.cli.view import render_status

CUSTOM = [
    {"name": "tool-calls-parsed", "rate": {"events": "a_total", "total": "b_total", "maxWorsening": 0.01}},
    {"name": "tool-latency", "latency": {"histogram": "c_seconds", "quantile": 0.99, "maxRegression": 0.1}},
]
CHECKS = [
    {
        "guardrail": "custom:tool-calls-parsed",
        "verdict": "Fail",
        "estimate": 0.19,
        "lower": 0.166,
        "upper": 0.228,
        "limit": 0.01,
    },
    {
        "guardrail": "custom:tool-latency",
        "verdict": "Inconclusive",
        "estimate": 0.04,
        "lower": -0.02,
        "upper": 0.12,
        "limit": 0.1,
        "needs": "~900 more canary c_seconds observations",
    },
]


def test_the_guardrails_table_reads_a_rate_in_points_and_a_latency_as_a_change() -> None:
    obj = {
        "metadata": {"namespace": "ns", "name": "llama"},
        "spec": {"rollout": {"guardrails": {"custom": CUSTOM}}},
        "status": {
            "stableRevision": "s1",
            "canaryRevision": "c1",
            "lastAnalysis": {
                "time": "2026-12-02T00:00:00Z",
                "revision": "c1",
                "step": 0,
                "verdict": "Fail",
                "checks": CHECKS,
                "reasons": ["custom:tool-calls-parsed: ..."],
            },
        },
    }
    console = Console(file=io.StringIO(), width=200)
    console.print(render_status(obj))
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert "custom:tool-calls-parsed (fall vs stable)" in text and "+19.00 pt" in text and "+1.00 pt" in text
    assert "custom:tool-latency (p99 vs stable)" in text and "+4.0%" in text and "+10.0%" in text
    assert "~900 more canary c_seconds observations" in text

"""A user-defined guardrail judged from a real Prometheus scraping the simulator, with the operator running.

The application's own counters: every finished request makes one tool call, and the scenario states the
share of tool calls each drafter's output lets the client parse (`tool_calls_parsed`: what a user has
measured of a drafter, never the number Prometheus should show). The fleet guards it with
`guardrails.custom` as a user would write it; a canary whose drafter breaks tool calls is rolled back
naming the guardrail, one whose drafter parses as well is promoted with the guardrail passed.
"""

import os
import subprocess
import sys
import time
from typing import Any

import pytest

from specfleet.api.spec import Guardrails
from specfleet.api.status import Verdict
from specfleet.controller.analysis import evidence
from specfleet.judge import TrackEvidence, judge
from specfleet.metrics import promql
from specfleet.metrics.prometheus import Prometheus
from specfleet_workshop.sim.exposition import TOOL_CALLS, TOOL_CALLS_PARSED

from fleetkit import (
    EAGLE3_K5,
    OUTCOME_SECONDS,
    ROLLOUT,
    SCENARIO,
    Fleet,
    Operator,
    Simulator,
    canaried,
    promotion_of,
    sdep,
    wait_for,
)

pytestmark = pytest.mark.integration

PARSED = {
    "name": "tool-calls-parsed",
    "rate": {"events": TOOL_CALLS_PARSED, "total": TOOL_CALLS, "maxWorsening": 0.02},
}
"""A user's guardrail: the canary may parse at most 2 points fewer of its tool calls than stable."""
TOOL_SCENARIO: dict[str, Any] = {
    **SCENARIO,
    "defaults": {**SCENARIO["defaults"], "tool_calls_parsed": 0.99},
    "pairs": [*SCENARIO["pairs"], {"target": "*", "drafter": "acme/EAGLE3-sloppy", "tool_calls_parsed": 0.8}],
}
"""Every drafter parses 99% of tool calls, but acme's sloppy one 80% (same acceptance and cost)."""
CHECK = "custom:tool-calls-parsed"


def canary_with(fleet: Fleet, simulator: Simulator, drafter: str) -> tuple[str, str]:
    """A Healthy fleet on the good EAGLE-3 drafter guarded by PARSED, then `drafter`: (stable, canary)."""
    simulator.put(TOOL_SCENARIO)
    rollout = {**ROLLOUT, "guardrails": {**ROLLOUT["guardrails"], "custom": [PARSED]}}
    fleet.apply(sdep(rollout=rollout, speculative=EAGLE3_K5))
    stable = wait_for("Healthy", fleet.phase_is("llama", "Healthy"), timeout=90)["stableRevision"]
    fleet.patch_spec("llama", {"speculative": {**EAGLE3_K5, "model": drafter}})
    canary = wait_for("a canary", lambda: (c := fleet.status("llama").get("canaryRevision")) != stable and c)
    return stable, canary


def test_a_drafter_that_breaks_tool_calls_is_rolled_back_naming_the_guardrail(
    guarded_operator: Operator, simulator: Simulator, fleet: Fleet
) -> None:
    started = time.monotonic()
    stable, _ = canary_with(fleet, simulator, "acme/EAGLE3-sloppy")
    status = wait_for("rollback", fleet.phase_is("llama", "RolledBack"), timeout=300)
    print(f"\na drafter parsing 80% of tool calls rolled back {time.monotonic() - started:.0f} s after the change")
    outcome = canaried(status)[-1]
    assert outcome["outcome"] == "RolledBack" and CHECK in outcome["reason"], outcome
    assert (
        f"{TOOL_CALLS_PARSED} / {TOOL_CALLS}" in outcome["reason"] and "lower bound > limit 2.00%" in outcome["reason"]
    )
    checks = {c["guardrail"]: c for c in status["lastAnalysis"]["checks"]}
    check = checks[CHECK]
    print(f"its check: {check}")
    # What the user has (99% parsed on stable, 80% on the canary: a fall of 0.19) lies within the bounds the
    # check reports: the estimate itself is as noisy as the few hundred tool calls a first look has.
    assert check["verdict"] == "Fail" and check["lower"] <= 0.99 - 0.80 <= check["upper"], check
    plugin = subprocess.run(  # what `kubectl specfleet status llama` runs, at a terminal's width
        [sys.executable, "-m", "specfleet.cli", "status", "llama", "-n", fleet.namespace,
         "--kubeconfig", str(fleet.cluster.kubeconfig)],
        capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    assert f"{CHECK} (fall vs stable)" in plugin.stdout, plugin.stdout + plugin.stderr

    # The same queries, as the operator makes them, answered by the real Prometheus: a misspelt counter
    # reads as no data (Inconclusive), and label values that try to leave the selector stay inside it.
    provider = Prometheus(fleet.cluster.prometheus_url)
    misspelt = {"name": "typo", "rate": {**PARSED["rate"], "events": "tool_call_parsed_total"}}
    hostile = {**PARSED, "name": "hostile", "matchLabels": {"engine": '0"} or vector(1) or x{a="'}}
    e2e = {"name": "e2e", "latency": {"histogram": "vllm:e2e_request_latency_seconds", "maxRegression": 0.2}}
    guards = Guardrails.model_validate({"custom": [misspelt, hostile, e2e]})
    selector = promql.TrackSelector(fleet.namespace, "llama", "stable", stable)

    def stable_read() -> TrackEvidence | None:  # the canary may be rolled back a few scrapes after stable is up
        read = evidence(provider, selector, 60.0, time.time(), guards.custom)
        return read if (read.custom["typo"].total or 0) > 100 else None

    read = wait_for("stable's tool calls over a minute", stable_read, timeout=120)
    assert read.custom["typo"].events is None
    assert read.custom["hostile"].total is None  # no pod has that engine label: nothing, not everything
    histogram = read.custom["e2e"].histogram  # a latency guardrail reads a histogram's buckets as p95 does
    assert histogram is not None and histogram.total > 100, histogram
    result = judge(guards, read, read, speculative=True, confidence=0.99)  # stable as both tracks: no Fail
    verdicts = {c.guardrail: c.verdict for c in result.checks if c.guardrail.startswith("custom:")}
    assert verdicts.pop("custom:e2e") in (Verdict.PASS, Verdict.INCONCLUSIVE)  # a track against itself
    assert verdicts == {"custom:typo": Verdict.INCONCLUSIVE, "custom:hostile": Verdict.INCONCLUSIVE}
    assert any(r.startswith("custom:typo: no data for tool_call_parsed_total") for r in result.reasons), result


@pytest.mark.timeout(OUTCOME_SECONDS + 300)
def test_a_drafter_that_parses_as_well_is_promoted_with_the_guardrail_passed(
    guarded_operator: Operator, simulator: Simulator, fleet: Fleet
) -> None:
    started = time.monotonic()
    _, canary = canary_with(fleet, simulator, "acme/EAGLE3-careful")
    status = promotion_of(fleet, canary)
    print(f"\na drafter parsing 99% of tool calls promoted {time.monotonic() - started:.0f} s after the change")
    checks = {c["guardrail"]: c for c in status["lastAnalysis"]["checks"]}
    assert checks[CHECK]["verdict"] == "Pass" and checks[CHECK]["upper"] <= 0.02
    assert any(r.startswith(f"{CHECK}: {TOOL_CALLS_PARSED} / {TOOL_CALLS}") for r in status["lastAnalysis"]["reasons"])

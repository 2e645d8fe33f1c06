"""User-defined guardrails in the judge: a share of the application's events (tool calls that parsed) and a
quantile of its own histogram, drawn per event from what a user's fleet has (a share, a latency change),
judged with the built-in statistics in the same verdict.
"""

import dataclasses
import math
import random
from datetime import UTC, datetime

import pytest

from specfleet.api.custom_guardrails import MAX_CUSTOM_GUARDRAILS
from specfleet.api.spec import Guardrails
from specfleet.api.status import Analysis, Verdict
from specfleet.judge import CustomReading, TrackEvidence, judge, judged_guardrails
from specfleet.judge.equivalence import PairTally

from judgekit import binned, track

CONFIDENCE = 0.99
PARSED = {
    "name": "tool-calls-parsed",
    "rate": {"events": "tool_calls_parsed_total", "total": "tool_calls_total", "maxWorsening": 0.01},
}
FAILED = {
    "name": "tool-call-errors",
    "rate": {
        "events": "tool_call_errors_total",
        "total": "tool_calls_total",
        "higherIsBetter": False,
        "maxWorsening": 0.01,
    },
}
LATENCY = {"name": "tool-latency", "latency": {"histogram": "tool_call_duration_seconds", "maxRegression": 0.1}}
TOOL_BUCKETS = tuple(0.05 * 1.05**i for i in range(80))


def guards(*custom: dict) -> Guardrails:
    return Guardrails.model_validate({"custom": list(custom)})


def calls(rng: random.Random, share: float, n: int) -> CustomReading:
    """`n` tool calls, each one an event with probability `share`."""
    return CustomReading(events=float(sum(rng.random() < share for _ in range(n))), total=float(n))


def durations(rng: random.Random, median_s: float, n: int) -> CustomReading:
    samples = [rng.lognormvariate(math.log(median_s), 0.3) for _ in range(n)]
    return CustomReading(histogram=binned(samples, TOOL_BUCKETS))


def with_custom(evidence: TrackEvidence, **readings: CustomReading) -> TrackEvidence:
    return dataclasses.replace(evidence, custom={name.replace("_", "-"): r for name, r in readings.items()})


def judged(g: Guardrails, canary: TrackEvidence, stable: TrackEvidence):
    return judge(g, canary, stable, speculative=False, confidence=CONFIDENCE)


def check(result, name: str):
    return next(c for c in result.checks if c.guardrail == f"custom:{name}")


def pair(seed: int, canary: CustomReading, stable: CustomReading, name: str) -> tuple[TrackEvidence, TrackEvidence]:
    key = name.replace("-", "_")
    return (
        with_custom(track(seed=seed), **{key: canary}),
        with_custom(track(seed=seed + 1), **{key: stable}),
    )


def test_a_drafter_that_breaks_tool_calls_fails_with_numbers_and_bounds() -> None:
    rng = random.Random(1)
    canary, stable = pair(1, calls(rng, 0.80, 3000), calls(rng, 0.99, 3000), "tool-calls-parsed")
    result = judged(guards(PARSED), canary, stable)
    found = check(result, "tool-calls-parsed")
    assert result.verdict is Verdict.FAIL and found.verdict is Verdict.FAIL
    assert found.estimate == pytest.approx(0.19, abs=0.02) and found.lower > 0.01 and found.limit == 0.01
    reason = next(r for r in result.reasons if r.startswith("custom:tool-calls-parsed"))
    assert "tool_calls_parsed_total / tool_calls_total" in reason and "99% bounds" in reason
    assert "lower bound > limit 1.00%" in reason


def test_a_drafter_that_parses_as_well_passes_on_its_bound() -> None:
    rng = random.Random(2)
    canary, stable = pair(3, calls(rng, 0.99, 20_000), calls(rng, 0.99, 20_000), "tool-calls-parsed")
    result = judged(guards(PARSED), canary, stable)
    found = check(result, "tool-calls-parsed")
    assert found.verdict is Verdict.PASS and found.upper <= 0.01
    assert result.verdict is Verdict.PASS


def test_a_small_worsening_the_evidence_cannot_settle_yet_is_inconclusive_and_says_what_it_needs() -> None:
    rng = random.Random(3)
    canary, stable = pair(5, calls(rng, 0.985, 1500), calls(rng, 0.99, 1500), "tool-calls-parsed")
    found = check(judged(guards(PARSED), canary, stable), "tool-calls-parsed")
    assert found.verdict is Verdict.INCONCLUSIVE and found.needs and "canary tool_calls_total events" in found.needs


def test_a_rate_where_lower_is_better_fails_a_rise_and_passes_a_fall() -> None:
    rng = random.Random(4)
    worse = pair(7, calls(rng, 0.10, 3000), calls(rng, 0.01, 3000), "tool-call-errors")
    assert check(judged(guards(FAILED), *worse), "tool-call-errors").verdict is Verdict.FAIL
    better = pair(9, calls(rng, 0.001, 20_000), calls(rng, 0.01, 20_000), "tool-call-errors")
    assert check(judged(guards(FAILED), *better), "tool-call-errors").verdict is Verdict.PASS


def test_a_fall_of_a_good_share_never_passes_whatever_the_evidence() -> None:
    rng = random.Random(5)
    canary, stable = pair(11, calls(rng, 0.95, 50_000), calls(rng, 0.99, 50_000), "tool-calls-parsed")
    assert check(judged(guards(PARSED), canary, stable), "tool-calls-parsed").verdict is Verdict.FAIL


def test_no_series_is_inconclusive_naming_the_metric_never_a_pass() -> None:
    canary, stable = track(seed=13), with_custom(track(seed=14), tool_calls_parsed=CustomReading(5000.0, 5000.0))
    result = judged(guards(PARSED), canary, stable)
    found = check(result, "tool-calls-parsed")
    assert found.verdict is Verdict.INCONCLUSIVE and result.verdict is Verdict.INCONCLUSIVE
    assert any("no data for tool_calls_total on the canary track" in r for r in result.reasons)
    latency = judged(guards(LATENCY), track(seed=13), track(seed=14))
    assert any("no data for tool_call_duration_seconds_bucket on the canary track" in r for r in latency.reasons)


def test_matched_labels_are_named_in_the_reason() -> None:
    spec = {**PARSED, "matchLabels": {"tool": "search"}}
    result = judged(guards(spec), track(seed=15), track(seed=16))
    assert any('no data for tool_calls_total {tool="search"}' in r for r in result.reasons)


def test_too_few_events_on_either_track_are_not_judged() -> None:
    rng = random.Random(6)
    canary, stable = pair(17, calls(rng, 0.5, 60), calls(rng, 0.99, 5000), "tool-calls-parsed")
    found = check(judged(guards(PARSED), canary, stable), "tool-calls-parsed")
    assert (
        found.verdict is Verdict.INCONCLUSIVE and found.needs and "more canary tool_calls_total events" in found.needs
    )
    fewer = guards({**PARSED, "minEvents": 50})
    assert check(judged(fewer, canary, stable), "tool-calls-parsed").verdict is Verdict.FAIL


def test_counters_that_disagree_are_not_judged() -> None:
    canary, stable = pair(19, CustomReading(2000.0, 1000.0), CustomReading(990.0, 1000.0), "tool-calls-parsed")
    found = check(judged(guards(PARSED), canary, stable), "tool-calls-parsed")
    assert found.verdict is Verdict.INCONCLUSIVE


def test_a_slower_tool_latency_fails_and_the_same_passes() -> None:
    rng = random.Random(7)
    slower = pair(21, durations(rng, 0.40, 4000), durations(rng, 0.25, 4000), "tool-latency")
    result = judged(guards(LATENCY), *slower)
    found = check(result, "tool-latency")
    assert found.verdict is Verdict.FAIL and found.lower > 0.1
    assert any("tool_call_duration_seconds p95" in r and " ms vs stable " in r for r in result.reasons)
    same = pair(23, durations(rng, 0.25, 20_000), durations(rng, 0.25, 20_000), "tool-latency")
    assert check(judged(guards(LATENCY), *same), "tool-latency").verdict is Verdict.PASS


def test_a_latency_quantile_other_than_the_p95_is_judged_at_that_quantile() -> None:
    rng = random.Random(8)
    spec = {"name": "tool-latency", "latency": {**LATENCY["latency"], "quantile": 0.5}}
    canary, stable = pair(25, durations(rng, 0.40, 4000), durations(rng, 0.25, 4000), "tool-latency")
    found = check(judged(guards(spec), canary, stable), "tool-latency")
    assert found.verdict is Verdict.FAIL and found.estimate == pytest.approx(0.6, abs=0.1)


def test_a_latency_in_one_coarse_bucket_is_not_judged() -> None:
    coarse = CustomReading(histogram=binned([0.3] * 500, (0.1, 1.0)))
    canary, stable = pair(27, coarse, coarse, "tool-latency")
    found = check(judged(guards(LATENCY), canary, stable), "tool-latency")
    assert found.verdict is Verdict.INCONCLUSIVE


def test_custom_guardrails_share_the_false_verdict_budget() -> None:
    assert judged_guardrails(guards(PARSED, LATENCY), False) == judged_guardrails(Guardrails(), False) + 2
    rng = random.Random(9)
    canary, stable = pair(29, calls(rng, 0.97, 3000), calls(rng, 0.99, 3000), "tool-calls-parsed")
    alone = check(judged(guards(PARSED), canary, stable), "tool-calls-parsed")
    many = [PARSED, *({**LATENCY, "name": f"other-{i}"} for i in range(8))]
    shared = check(judged(guards(*many), canary, stable), "tool-calls-parsed")
    assert shared.lower < alone.lower and shared.upper > alone.upper


def test_the_built_in_guardrails_read_the_same_with_or_without_custom_readings() -> None:
    rng = random.Random(10)
    canary, stable = pair(31, calls(rng, 0.99, 3000), calls(rng, 0.99, 3000), "tool-calls-parsed")
    plain = judged(Guardrails(), canary, stable)
    bare = judged(Guardrails(), track(seed=31), track(seed=32))
    assert plain.checks == bare.checks and plain.reasons == bare.reasons


def test_every_guardrail_a_spec_can_hold_fits_in_the_analysis_status() -> None:
    """The most guardrails the CRD allows (every optional limit, 16 custom ones, output equivalence) all get
    their check and reason into status.lastAnalysis: a status the API server refuses would stall the rollout."""
    rng = random.Random(3)
    custom = [{**PARSED, "name": f"rate-{i}"} for i in range(MAX_CUSTOM_GUARDRAILS // 2)]
    custom += [{**LATENCY, "name": f"latency-{i}"} for i in range(MAX_CUSTOM_GUARDRAILS - len(custom))]
    most = Guardrails.model_validate(
        {
            "maxErrorRate": 0.05,
            "maxStepLatencyP95Seconds": 0.5,
            "maxThroughputDrop": 0.2,
            "maxQueueTimeP95Seconds": 1.0,
            "outputEquivalence": {"enabled": True},
            "custom": custom,
        }
    )
    readings = {c["name"]: calls(rng, 0.99, 500) if "rate" in c else durations(rng, 0.2, 500) for c in custom}
    canary = dataclasses.replace(track(seed=1), custom=readings)
    stable = dataclasses.replace(track(seed=2), custom=readings)
    result = judge(most, canary, stable, speculative=True, confidence=CONFIDENCE, pairs=PairTally(pairs=9, identical=9))
    assert len(result.checks) >= judged_guardrails(most, speculative=True)
    analysis = Analysis(
        time=datetime(2026, 12, 2, tzinfo=UTC),
        revision="r",
        step=0,
        verdict=result.verdict,
        reasons=list(result.reasons),
        checks=list(result.checks),
    )
    assert [c.guardrail for c in analysis.checks] == [c.guardrail for c in result.checks]


def test_a_share_far_from_zero_is_bounded_as_tightly_as_its_counts_allow() -> None:
    """Half of 200,000 events good on each track (a cache-hit share, say): the tracks are shown within 1 point.
    A count sequence whose mixture sits near a 0 share, as the error guardrail's does, would still read the
    difference +-5 points here (+-2.3 at a million), so a custom rate keeps Wilson's bound at the sequence's z."""
    half = CustomReading(events=100_000.0, total=200_000.0)
    canary, stable = pair(47, half, half, "tool-calls-parsed")
    found = check(judged(guards(PARSED), canary, stable), "tool-calls-parsed")
    assert found.verdict is Verdict.PASS and found.upper <= 0.01

"""Drift after promotion, judged from a real Prometheus scraping the simulator, with the operator running.

The scenario says what the user's drafter has; the test changes it at run time (the prompt mix moved
and the drafter now guesses worse), never the numbers Prometheus should show.
"""

import json
import time
from typing import Any

import pytest

from fleetkit import EAGLE3_K5, PLAIN, ROLLOUT, SCENARIO, Fleet, Operator, Simulator, sdep, wait_for

pytestmark = pytest.mark.integration

DRIFT_ROLLOUT: dict[str, Any] = {
    **ROLLOUT,
    "analysis": {**ROLLOUT["analysis"], "window": "20s"},
    "drift": {"minDwell": "10s", "looks": 2, "onDrift": "Rollback"},
}


def condition(fleet: Fleet, kind: str) -> dict[str, Any] | None:
    return next((c for c in fleet.status("llama").get("conditions", []) if c["type"] == kind), None)


def eagle_promoted_over_plain(fleet: Fleet, rollout: dict[str, Any]) -> tuple[str, str]:
    """A fleet serving no speculation, then EAGLE-3 canaried and promoted: (plain, eagle) revisions."""
    fleet.apply(sdep(rollout=rollout, speculative=PLAIN))
    plain = wait_for("Healthy", fleet.phase_is("llama", "Healthy"), timeout=90)["stableRevision"]
    fleet.patch_spec("llama", {"speculative": EAGLE3_K5})

    def promoted() -> dict[str, Any] | None:
        status = fleet.status("llama")
        return status if status.get("stableRevision") not in (None, plain) and status["phase"] == "Healthy" else None

    return plain, wait_for("EAGLE-3 promoted", promoted, timeout=240)["stableRevision"]


def test_a_drafter_whose_acceptance_falls_after_promotion_is_flagged_and_rolled_back(
    guarded_operator: Operator, simulator: Simulator, fleet: Fleet
) -> None:
    plain, eagle = eagle_promoted_over_plain(fleet, DRIFT_ROLLOUT)
    paying = wait_for("SpeculationPaying=True", lambda: (c := condition(fleet, "SpeculationPaying")) and c, 120)
    assert paying["status"] == "True", paying

    # The traffic's prompt mix moves: the same drafter now guesses a third as well.
    simulator.put({**SCENARIO, "pairs": [{"target": "*", "drafter": "yuhuili/*", "acceptance": 0.3}]})
    drifted = wait_for(
        "SpeculationPaying=False",
        lambda: (c := condition(fleet, "SpeculationPaying")) and c["status"] == "False" and c,
        timeout=180,
    )
    assert "acceptance alpha" in drifted["message"] and eagle in drifted["message"]
    seen: dict[str, Any] = {}

    def reverted() -> dict[str, Any] | None:
        seen.update(fleet.status("llama"))
        return seen if seen.get("stableRevision") == plain and seen["phase"] == "Healthy" else None

    try:
        back = wait_for("the plain config served again", reverted, timeout=240)
    except BaseException:
        print(json.dumps({k: seen.get(k) for k in ("phase", "conditions", "drift", "history", "canaryRevision")}))
        raise
    assert back["drift"]["revert"]["revision"] == plain
    assert fleet.status("llama")["history"][-1]["outcome"] == "Promoted"


def events(fleet: Fleet, reason: str) -> list[str]:
    """Each message as many times as it was said: a repeat counts on one Event (`count`), not a new one."""
    listing = fleet.core.list_namespaced_event(fleet.namespace, field_selector="involvedObject.name=llama")
    return [e.message for e in listing.items if e.reason == reason for _ in range(e.count or 1)]


def test_longer_answers_after_promotion_are_a_traffic_shift_named_once_and_latency_is_not_compared(
    guarded_operator: Operator, simulator: Simulator, fleet: Fleet
) -> None:
    rollout = {**DRIFT_ROLLOUT, "drift": {"minDwell": "10s", "looks": 2}}  # onDrift: Alert
    eagle_promoted_over_plain(fleet, rollout)

    def profile() -> dict[str, Any] | None:
        return (fleet.status("llama").get("drift") or {}).get("profile")

    before = wait_for("a look that measured the length mix", profile, timeout=120)
    assert before.get("shifted", []) == [], before  # the traffic the config was promoted on
    assert events(fleet, "TrafficShifted") == []

    # The users now ask for answers three times as long (128 -> 384 output tokens); prompts stay as they were.
    changed = time.monotonic()
    simulator.put({**SCENARIO, "defaults": {**SCENARIO["defaults"], "output_tokens": 384}})
    named = wait_for(
        "a TrafficShifted event naming the output mix",
        lambda: [m for m in events(fleet, "TrafficShifted") if "output tokens per request" in m],
        timeout=120,
    )
    print(f"TrafficShifted {time.monotonic() - changed:.0f} s after the change: {named[0]}")
    assert len(named) == 1 and "prompt tokens" not in named[0], named
    drift = fleet.status("llama")["drift"]
    assert drift["profile"]["shifted"] == ["output"], drift
    assert "latency not comparable" in drift["message"] and "per-token p95" not in drift["message"], drift

    # Two more looks at the longer answers: the shift is not named again, and latency stays uncompared.
    for _ in range(2):
        seen = fleet.status("llama")["drift"]["message"]
        wait_for("the next look", lambda seen=seen: fleet.status("llama")["drift"]["message"] != seen, timeout=60)
    drift = fleet.status("llama")["drift"]
    assert drift["profile"]["shifted"] == ["output"] and "not comparable" in drift["message"], drift
    assert [m for m in events(fleet, "TrafficShifted") if "length mix" in m] == named
    paying = condition(fleet, "SpeculationPaying")
    assert paying is None or paying["status"] != "False", paying  # acceptance as promoted: no drift

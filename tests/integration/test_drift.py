"""Drift after promotion, judged from a real Prometheus scraping the simulator, with the operator running.

The scenario says what the user's drafter has; the test changes it at run time (the prompt mix moved
and the drafter now guesses worse), never the numbers Prometheus should show.
"""

import json
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


def test_a_drafter_whose_acceptance_falls_after_promotion_is_flagged_and_rolled_back(
    guarded_operator: Operator, simulator: Simulator, fleet: Fleet
) -> None:
    fleet.apply(sdep(rollout=DRIFT_ROLLOUT, speculative=PLAIN))
    plain = wait_for("Healthy", fleet.phase_is("llama", "Healthy"), timeout=90)["stableRevision"]
    fleet.patch_spec("llama", {"speculative": EAGLE3_K5})

    def promoted() -> dict[str, Any] | None:
        status = fleet.status("llama")
        return status if status.get("stableRevision") not in (None, plain) and status["phase"] == "Healthy" else None

    eagle = wait_for("EAGLE-3 promoted", promoted, timeout=240)["stableRevision"]
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

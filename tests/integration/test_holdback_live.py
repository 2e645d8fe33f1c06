"""A holdback (control group) beside stable, measured from a real Prometheus scraping the simulator.

The scenario says what the user has (a drafter with alpha 0.6 at k=8, a load per pod); the simulator's
closed-form oracle says whether speculation pays at that load; the test never states what Prometheus
should show.
"""

import json
from typing import Any

import pytest

from specfleet.api.vocabulary import ALWAYS_SERVED, LABEL_TRAFFIC
from specfleet.hardware import MI300X
from specfleet_workshop.sim.oracle import Setup, token_latency

from fleetkit import EAGLE3_K5, ROLLOUT, SCENARIO, Fleet, Operator, Simulator, sdep, wait_for

pytestmark = pytest.mark.integration

KNOBS = {**SCENARIO["defaults"], "acceptance": 0.6, "load": 15.0}
HEAVY = {**KNOBS, "load": 80.0}
EAGLE3_K8 = {**EAGLE3_K5, "numSpeculativeTokens": 8}
HOLDBACK_ROLLOUT: dict[str, Any] = {
    **ROLLOUT,
    "analysis": {**ROLLOUT["analysis"], "window": "60s"},
    "drift": {"minDwell": "10s", "looks": 2},
    "holdback": {"replicas": 1},
}


def oracle_speedup(knobs: dict[str, Any], k: int) -> float:
    setup = Setup(gpu=MI300X, tensor_parallel_size=2, knobs=knobs)  # as fleetkit.sdep's pods run
    return token_latency(setup.config(0)) / token_latency(setup.config(k))


def speedup(fleet: Fleet) -> dict[str, Any]:
    return (fleet.status("llama").get("holdback") or {}).get("speedup") or {}


def test_a_holdback_measures_the_speedup_and_load_past_the_knee_is_flagged_against_it(
    guarded_operator: Operator, simulator: Simulator, fleet: Fleet
) -> None:
    assert oracle_speedup(KNOBS, 8) > 1.3 and oracle_speedup(HEAVY, 8) < 0.6  # what the user has, by the oracle
    simulator.put({**SCENARIO, "defaults": KNOBS})
    fleet.apply(sdep(replicas=4, rollout=HOLDBACK_ROLLOUT, speculative=EAGLE3_K8))
    wait_for("Healthy", fleet.phase_is("llama", "Healthy"), timeout=120)

    deployments = fleet.deployments()
    held = deployments["llama-holdback"].spec
    assert (deployments["llama-stable"].spec.replicas, held.replicas) == (3, 1)
    assert "--speculative-config" not in held.template.spec.containers[0].args
    assert held.template.metadata.labels[LABEL_TRAFFIC] == ALWAYS_SERVED

    def selects_both() -> dict[str, str] | None:
        selector = fleet.core.read_namespaced_service("llama", fleet.namespace).spec.selector
        return selector if selector.get(LABEL_TRAFFIC) == ALWAYS_SERVED else None

    wait_for("the fleet Service selects stable and holdback pods", selects_both, timeout=60)

    measured = wait_for("a speed-up with bounds", lambda: (s := speedup(fleet)).get("lower") and s, timeout=240)
    assert measured["lower"] > 1, measured
    expected = oracle_speedup(KNOBS, 8)
    assert abs(measured["estimate"] / expected - 1) < 0.15, (measured, expected)

    simulator.put({**SCENARIO, "defaults": HEAVY})  # the traffic grows to 80 requests/s per pod
    seen: dict[str, Any] = {}

    def not_paying() -> dict[str, Any] | None:
        seen.update(fleet.status("llama"))
        paying = next((c for c in seen.get("conditions", []) if c["type"] == "SpeculationPaying"), {})
        return seen if paying.get("status") == "False" else None

    try:
        drifted = wait_for("SpeculationPaying=False", not_paying, timeout=300)
    except BaseException:
        print(json.dumps({k: seen.get(k) for k in ("phase", "conditions", "drift", "holdback")}, default=str))
        raise
    after = drifted["holdback"]["speedup"]
    assert after["upper"] < 1, after
    print(f"speed-up at 15 requests/s per pod: {measured['message']}; at 80: {after['message']}")
    assert "against the holdback" in drifted["drift"]["message"]

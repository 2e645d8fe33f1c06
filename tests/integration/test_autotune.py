"""An experiment over k on the simulator, judged from a real Prometheus with the operator running.

The scenario says what the user has (a drafter whose per-token acceptance is 0.55 on this traffic, the
load per pod); the simulator's closed-form oracle (`specfleet_workshop.sim.oracle`) says which k is fastest for
that, and the experiment must find it by measuring, and promote it. Six replicas and a 10% first step
give each of the four candidates a slice of one pod: they are measured side by side, over one window.
"""

import json
from typing import Any

import pytest

from specfleet.hardware import MI300X
from specfleet_workshop.sim.oracle import Setup, token_latency

from fleetkit import GOOD_DRAFTER, SCENARIO, Fleet, Operator, Simulator, sdep, wait_for

pytestmark = pytest.mark.integration

CANDIDATES = (1, 3, 5, 8)
REPLICAS = 6
WINDOW_SECONDS = 30
KNOBS = {**SCENARIO["defaults"], "acceptance": 0.55}
ROLLOUT: dict[str, Any] = {
    "steps": [{"weight": 10, "pause": {"duration": "1s"}}],
    "analysis": {"interval": "5s", "window": f"{WINDOW_SECONDS}s"},
    "guardrails": {"minDraftTokens": 200, "minAcceptanceAlpha": 0.4},
    "progressDeadline": "2m",
}


def eagle3(k: int) -> dict[str, Any]:
    return {"method": "eagle3", "model": GOOD_DRAFTER, "revision": "main", "numSpeculativeTokens": k}


@pytest.mark.timeout(900)  # an experiment, a canary and two load stages: ~5 min alone, over 10 on a busy machine
def test_an_experiment_over_k_promotes_the_k_the_model_says_is_fastest(
    guarded_operator: Operator, simulator: Simulator, fleet: Fleet
) -> None:
    simulator.put({**SCENARIO, "defaults": KNOBS})
    setup = Setup(gpu=MI300X, tensor_parallel_size=2, drafter=GOOD_DRAFTER, knobs=KNOBS)
    latency = {k: token_latency(setup.config(k)) for k in (*CANDIDATES, 10)}
    best, runner_up = sorted(CANDIDATES, key=latency.__getitem__)[:2]
    assert latency[runner_up] > 1.05 * latency[best], "the scenario must tell the candidates apart"
    assert latency[10] > 1.05 * latency[best], "and the winner must beat stable"

    fleet.apply(sdep(replicas=REPLICAS, rollout=ROLLOUT, speculative=eagle3(10)))
    stable = wait_for("Healthy", fleet.phase_is("llama", "Healthy"), timeout=90)["stableRevision"]
    # Straight away: the operator's evidence never reaches back past the first scrape of stable's new pods.
    fleet.patch_spec("llama", {"autoTune": {"candidates": [{"numSpeculativeTokens": k} for k in CANDIDATES]}})
    slices = {f"llama-candidate-{i}" for i in range(len(CANDIDATES))}
    wait_for("a slice per candidate at once", lambda: slices <= set(fleet.deployments()))

    def promoted() -> dict[str, Any] | None:
        status = fleet.status("llama")
        experiment = status.get("experiment") or {}
        done = status.get("stableRevision") not in (None, stable) and status.get("phase") == "Healthy"
        return status if done and experiment.get("revision") == status["stableRevision"] else None

    status = wait_for("the experiment's winner promoted", promoted, timeout=420)
    candidates = status["experiment"]["candidates"]
    assert status["experiment"]["sideBySide"] and [c["state"] for c in candidates].count("Chosen") == 1
    assert len({c["lookedAt"] for c in candidates}) == 1  # measured together: the same window for every one
    assert not slices & set(fleet.deployments())  # the slices are gone once the winner is promoted
    measured = {c["numSpeculativeTokens"]: c["tokenLatencyRatio"] for c in candidates}
    chosen = next(c["numSpeculativeTokens"] for c in candidates if c["state"] == "Chosen")
    assert chosen == best, f"measured ratios to stable {measured}, oracle {latency}"
    assert all(c["canary"]["acceptanceAlpha"] == pytest.approx(0.55, abs=0.07) for c in candidates)
    pods = fleet.pods("specfleet.io/name=llama,specfleet.io/track=stable")  # stable now serves the winner
    configs = [arg for pod in pods for arg in pod.spec.containers[0].args if "num_speculative_tokens" in arg]
    assert configs and all(f'"num_speculative_tokens":{best}' in arg.replace(" ", "") for arg in configs)
    assert status["history"][-1]["outcome"] == "Promoted" and f"k={best}" in status["history"][-1]["summary"]
    print(json.dumps({"experiment": status["experiment"], "oracle": latency}))  # the table docs/autotune.md shows

    # The traffic grows past the knee, in two stages (longer answers, more of them: batches of tens, then
    # hundreds): the fleet's looks while Healthy add load points at each batch size, and the proposed
    # schedule backs off. One load past the knee at one k cannot place the knee; two can.
    seen: dict[str, Any] = {}

    def measured_at(batch: float) -> bool:
        seen.update(fleet.status("llama").get("autoTune") or {})
        return any(p["k"] == best and p["batch"] >= batch for p in seen.get("points", []))

    simulator.put({**SCENARIO, "defaults": {**KNOBS, "load": 40.0, "output_tokens": 512}})
    wait_for("a load point with batches of tens", lambda: measured_at(40), timeout=180)
    busy = {**KNOBS, "load": 60.0, "output_tokens": 1024}
    simulator.put({**SCENARIO, "defaults": busy})

    def backs_off() -> dict[str, Any] | None:
        seen.update(fleet.status("llama").get("autoTune") or {})
        proposal = seen.get("proposal") or {}
        rows = proposal.get("schedule") or []
        # Backing off means a smaller k than the winner at the largest batches; the smallest batches may tie
        # lower too (ties within 1% go to the smaller k), so the first row is no yardstick.
        return proposal if rows and rows[-1]["numTokens"] < best else None

    try:
        proposal = wait_for("a schedule that lowers k at large batches", backs_off, timeout=300)
    except BaseException:
        print(json.dumps(seen, indent=1))  # the points and the last proposal, to see why
        raise
    rows = proposal["schedule"]
    assert rows[0]["start"] == 1  # at small batches: a k the model says is as fast as the winner (ties go lower)
    assert token_latency(setup.config(rows[0]["numTokens"])) <= 1.02 * latency[best], proposal
    busy_setup = Setup(gpu=MI300X, tensor_parallel_size=2, drafter=GOOD_DRAFTER, knobs=busy)
    lower = rows[-1]["numTokens"]
    assert token_latency(busy_setup.config(lower)) < token_latency(busy_setup.config(best)), proposal
    assert fleet.status("llama")["phase"] == "Healthy"  # a proposal, not applied (autoTune.apply is off)

"""Output equivalence on the dev cluster: the operator sends greedy prompts to one canary and one stable pod (the
simulator's per-pod endpoints, through --pod-url-template), compares the token ids and judges the share of
identical answers with the rest of the guardrails, from a real Prometheus.

A canary whose simulated pair is wrong on purpose (`divergence: 0.1`: its answers differ from the plain
model's on a tenth of prompts) is rolled back on output equivalence, while the same canary beside it, on a
fleet that does not check output equivalence, passes speed and acceptance and is promoted; a lossless
canary is promoted.
"""

import json
import time
from typing import Any

import pytest

from specfleet.controller.outputs import BUILTIN_PROMPTS
from specfleet_workshop.devcluster.cluster import ClusterInfo

from fleetkit import (
    EAGLE3_K5,
    OUTCOME_SECONDS,
    PLAIN,
    ROLLOUT,
    SCENARIO,
    Fleet,
    Operator,
    Simulator,
    promotion_of,
    sdep,
    wait_for,
)

pytestmark = pytest.mark.integration

LOSSY = {**EAGLE3_K5, "model": "lossy/EAGLE3-drafter"}
"""A drafter as good as the good one (alpha 0.8), whose pair answers a tenth of prompts unlike the plain model."""
GUARDED = {**ROLLOUT, "guardrails": {**ROLLOUT["guardrails"], "outputEquivalence": {"enabled": True}}}


@pytest.fixture
def equivalence_operator(
    dev_cluster: ClusterInfo, crd_installed: None, simulator: Simulator, namespace: str, tmp_path: Any
) -> Any:
    """The operator judging from the dev cluster's Prometheus, reaching pods at the simulator's per-pod routes."""
    simulator.put({**SCENARIO, "pairs": [*SCENARIO["pairs"], {"target": "*", "drafter": "lossy/*", "divergence": 0.1}]})
    template = f"{simulator.url}/pods/{{namespace}}/{{name}}"
    running = Operator(
        dev_cluster,
        namespace,
        tmp_path / "operator.log",
        prometheus_url=dev_cluster.prometheus_url,
        extra=("--pod-url-template", template),
    )
    running.start()
    yield running
    running.stop()


def change_to(fleet: Fleet, canary: dict[str, Any], name: str = "llama", rollout: dict[str, Any] = GUARDED) -> str:
    fleet.apply(sdep(name, rollout=rollout, speculative=PLAIN))
    old = wait_for("Healthy", fleet.phase_is(name, "Healthy"), timeout=90)["stableRevision"]
    fleet.patch_spec(name, {"speculative": canary})
    return wait_for("a canary", lambda: (c := fleet.status(name).get("canaryRevision")) != old and c)


def checks(status: dict[str, Any]) -> dict[str, str]:
    return {c["guardrail"]: c["verdict"] for c in status["lastAnalysis"]["checks"]}


def no_prompt_in(text: str) -> bool:
    return not any(prompt in text for prompt in BUILTIN_PROMPTS)


def test_a_canary_that_diverges_on_a_tenth_of_prompts_is_rolled_back_on_output_equivalence(
    equivalence_operator: Operator, fleet: Fleet
) -> None:
    started = time.monotonic()
    unchecked = change_to(fleet, LOSSY, "unchecked", ROLLOUT)  # the same canary, output equivalence off
    change_to(fleet, LOSSY)
    status = wait_for("rollback", fleet.phase_is("llama", "RolledBack"), timeout=300)
    print(f"\na lossy canary rolled back {time.monotonic() - started:.0f} s after the change")
    outcome = status["history"][-1]
    assert outcome["outcome"] == "RolledBack" and "prompt pairs differed" in outcome["reason"], outcome
    assert "first differences at token" in outcome["reason"] and "upper bound < 98.00%" in outcome["reason"]
    verdicts = checks(status)
    assert verdicts["outputEquivalence"] == "Fail"
    assert [g for g, v in verdicts.items() if v == "Fail"] == ["outputEquivalence"], verdicts
    pairs = status["lastAnalysis"]["outputPairs"]
    assert pairs["prompts"] == len(BUILTIN_PROMPTS) and pairs["failedRequests"] == 0
    assert 0.03 < 1 - pairs["identical"] / pairs["pairs"] < 0.2
    events = fleet.core.list_namespaced_event(fleet.namespace).items
    assert no_prompt_in(json.dumps(status)) and no_prompt_in(" ".join(e.message or "" for e in events))
    assert no_prompt_in(equivalence_operator.log.read_text())
    beside = wait_for(
        "the unchecked canary's promotion",
        lambda: (s := fleet.status("unchecked")).get("stableRevision") == unchecked and s,
        timeout=420,
    )
    passed = checks(beside)
    speed_and_acceptance = ("minAcceptanceAlpha", "maxTokenLatencyP95Regression", "maxTokenLatencyMeanRegression")
    assert all(passed[g] == "Pass" for g in speed_and_acceptance), passed
    assert "outputEquivalence" not in passed and "outputPairs" not in beside["lastAnalysis"]


@pytest.mark.timeout(OUTCOME_SECONDS + 300)
def test_a_canary_with_the_plain_models_answers_is_promoted(equivalence_operator: Operator, fleet: Fleet) -> None:
    started = time.monotonic()
    canary = change_to(fleet, EAGLE3_K5)
    status = promotion_of(fleet, canary)
    print(f"\na lossless canary promoted {time.monotonic() - started:.0f} s after the change")
    assert checks(status)["outputEquivalence"] == "Pass"
    pairs = status["lastAnalysis"]["outputPairs"]
    assert pairs["identical"] == pairs["pairs"] >= 800 and pairs["firstDivergences"] == []

"""A canary judged from Prometheus is never promoted unjudged when the operator loses its Prometheus URL.

Black box: the operator and the simulator are processes, the dev cluster's Prometheus scrapes the pods. The
canary's evidence stays short of `minRequests`, so every analysis is Inconclusive (judged so far, nothing
shown); the operator is then killed and started again without `--prometheus-url`, as after a values file was
emptied. The canary's one step has long finished its pause: an operator deciding from the flag whether to
judge would promote it at once.
"""

from pathlib import Path

import pytest

from specfleet.rollout.types import NO_PROMETHEUS
from specfleet_workshop.devcluster.cluster import ClusterInfo

from fleetkit import EAGLE3_K5, PLAIN, Fleet, Operator, Simulator, canaried, sdep, wait_for

pytestmark = pytest.mark.integration

NEVER_ENOUGH = {"minRequests": 1_000_000}
"""More finished requests than a step of this test sees: every analysis is Inconclusive."""
ROLLOUT = {
    "steps": [{"weight": 50, "pause": {"duration": "1s"}}],
    "analysis": {
        "interval": "5s",
        "window": "30s",
        "onNoData": {"after": "1h"},
        "onProviderError": {"after": "20s", "action": "Pause"},
    },
    "guardrails": NEVER_ENOUGH,
}


@pytest.mark.timeout(420)
def test_an_operator_restarted_without_its_prometheus_holds_the_canary_it_was_judging(
    dev_cluster: ClusterInfo, guarded_operator: Operator, simulator: Simulator, fleet: Fleet, tmp_path: Path
) -> None:
    fleet.apply(sdep(rollout=ROLLOUT, speculative=PLAIN))
    stable = wait_for("Healthy", fleet.phase_is("llama", "Healthy"), timeout=120)["stableRevision"]
    fleet.patch_spec("llama", {"speculative": EAGLE3_K5})
    judged = wait_for(
        "an Inconclusive analysis of the canary",
        lambda: (s := fleet.status("llama")).get("lastAnalysis", {}).get("verdict") == "Inconclusive" and s,
        timeout=240,
    )
    canary = judged["canaryRevision"]
    assert canary != stable and not canaried(judged)

    guarded_operator.kill()
    without = Operator(dev_cluster, fleet.namespace, tmp_path / "without-prometheus.log")
    without.start()
    try:
        held = wait_for(
            "the canary to end or to pause on provider errors",
            lambda: s if (s := fleet.status("llama")).get("phase") == "Paused" or canaried(s) else None,
            timeout=180,
        )
    finally:
        without.stop()
    assert not canaried(held), held["history"]  # neither promoted nor rolled back
    assert held["stableRevision"] == stable and held["canaryRevision"] == canary
    assert held["lastAnalysis"]["verdict"] == "Error" and held["lastAnalysis"]["reasons"] == [NO_PROMETHEUS]
    conditions = {c["type"]: c for c in held["conditions"]}
    assert conditions["Guarded"]["status"] == "False" and conditions["Guarded"]["reason"] == "NoPrometheus"
    assert "Prometheus errors for 20s" in conditions["Progressing"]["message"], conditions["Progressing"]

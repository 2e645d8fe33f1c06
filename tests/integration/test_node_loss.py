"""A node lost mid-step, on the dev cluster with the operator, the simulator and Prometheus running.

Stable's four pods run on two fake nodes of a product only this test's fleet accepts, the canary's two on two
others (`nodeloss`). Mid-step one node of stable's, or of the canary's, is deleted with its pods, as a lost
machine's are, and its Deployment brings them back on the track's other node. Each pod's series counts from its
own first sample (`promql.counted`), and a step whose canary pods are replaced keeps its evidence: the replaced
pods cost their own samples only.
"""

import time
from collections.abc import Iterator

import kubernetes
import pytest

from fleetkit import SCENARIO, Fleet, Operator, Simulator, wait_for
from nodeloss import LOADING_SECONDS, NAME, Pools, canary_in_step, lose_a_node, make_pools, promoted, remove_pools

pytestmark = pytest.mark.integration

STEP_SECONDS = 90
LOST_AFTER = 30.0
"""Seconds into the step at which a node is lost: before any Pass could be shown (an A/A canary needs ~1,700
requests for the error rate, a minute at the canary's 2 pods)."""


@pytest.fixture
def pools(k8s_api: kubernetes.client.ApiClient, namespace: str) -> Iterator[Pools]:
    core = kubernetes.client.CoreV1Api(k8s_api)
    made = make_pools(core, namespace, network=int(namespace.removeprefix("test-")[:2], 16) % 64)
    yield made
    remove_pools(core, made)


@pytest.mark.timeout(900)
@pytest.mark.parametrize("track", ["stable", "canary"])
def test_a_step_keeps_its_evidence_when_a_node_is_lost(
    guarded_operator: Operator,
    simulator: Simulator,
    fleet: Fleet,
    pools: Pools,
    k8s_api: kubernetes.client.ApiClient,
    track: str,
) -> None:
    ready = canary_in_step(fleet, pools, STEP_SECONDS).timestamp()
    time.sleep(max(0.0, ready + LOST_AFTER - time.time()))
    lost_at = time.time()
    lost = lose_a_node(fleet, kubernetes.client.CoreV1Api(k8s_api), pools, track)
    assert lost >= 1
    if track == "canary":  # the operator saw the step short of Ready canary pods while the replacement loaded
        wait_for("the step no longer Ready", lambda: not fleet.status(NAME).get("stepReadyAt"), timeout=LOADING_SECONDS)
    passed = promoted(fleet, timeout=600)
    evidence_from = passed.evidence_from.timestamp()
    print(
        f"\n{track} node lost {lost_at - ready:.0f} s into the step ({lost} {track} pods); the step's Pass read"
        f" {passed.evidence_seconds} s of evidence, from {evidence_from - ready:.0f} s into the step"
    )
    # the Pass read the step's evidence from before the loss: the replaced pods did not restart it (a restart
    # would start the range after `lost_at`)
    assert evidence_from < lost_at, passed


@pytest.mark.timeout(900)
@pytest.mark.parametrize("track", ["stable", "canary"])
def test_a_bad_canary_is_still_caught_when_a_node_is_lost(
    guarded_operator: Operator,
    simulator: Simulator,
    fleet: Fleet,
    pools: Pools,
    k8s_api: kubernetes.client.ApiClient,
    track: str,
) -> None:
    ready = canary_in_step(fleet, pools, STEP_SECONDS).timestamp()
    time.sleep(max(0.0, ready + LOST_AFTER / 2 - time.time()))
    lose_a_node(fleet, kubernetes.client.CoreV1Api(k8s_api), pools, track)
    simulator.put({**SCENARIO, "pairs": [{"target": "*", "drafter": "*", "track": "canary", "acceptance": 0.3}]})
    turned = time.time()
    status = wait_for("rolled back", fleet.phase_is(NAME, "RolledBack"), timeout=300)
    print(f"\nthe drafter turned bad beside a lost {track} node: rolled back {time.time() - turned:.0f} s later")
    assert "acceptance alpha" in status["history"][-1]["reason"]

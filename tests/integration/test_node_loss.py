"""A node lost mid-step, on the dev cluster with the operator, the simulator and Prometheus running.

Stable's four pods run on two fake nodes of a product only this test's fleet accepts, the canary's on a third
(the canary's spec moves it there, which is its only change: an A/A canary). Mid-step one of stable's nodes is
deleted with its pods, as a lost machine's are, and its Deployment brings them back on the other node. Each
pod's series counts from its own first sample (`promql.counted`): the step's evidence keeps what it had, and
the replaced pods cost their own samples only.
"""

import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import kubernetes
import pytest

from specfleet_workshop.devcluster.nodes import pool_of_its_own

from fleetkit import EAGLE3_K5, ROLLOUT, SCENARIO, Fleet, Operator, Simulator, sdep, wait_for

pytestmark = pytest.mark.integration

STEP_SECONDS = 90
LOST_AFTER = 30.0
"""Seconds into the step at which stable's node is lost: before any Pass could be shown (an A/A canary needs
~1,700 requests for the error rate, a minute at the canary's 2 pods)."""


@pytest.fixture
def products(k8s_api: kubernetes.client.ApiClient, namespace: str) -> Iterator[tuple[str, str, list[str]]]:
    """Stable's product on two 8-GPU nodes, the canary's on one; the stable nodes' names."""
    stable, canary = f"AMD_Instinct_MI300X_OAM_{namespace}", f"AMD_Instinct_MI300X_OAM_{namespace}_c"
    core = kubernetes.client.CoreV1Api(k8s_api)
    network = int(namespace.removeprefix("test-")[:2], 16)
    nodes = pool_of_its_own(namespace, stable, network=network)
    nodes += pool_of_its_own(f"{namespace}-c", canary, count=1, network=network + 128)
    for node in nodes:
        core.create_node(node)
    yield stable, canary, [n["metadata"]["name"] for n in nodes[:2]]
    for node in nodes:
        try:
            core.delete_node(node["metadata"]["name"])
        except kubernetes.client.ApiException as error:
            if error.status != 404:  # the lost one is gone already
                raise


def fleet_on(product: str) -> dict[str, Any]:
    rollout = {**ROLLOUT, "steps": [{"weight": 50, "pause": {"duration": f"{STEP_SECONDS}s"}}]}
    document = sdep(replicas=4, speculative=EAGLE3_K5, rollout=rollout)
    document["spec"]["engine"] = {"tensorParallelSize": 1}
    document["spec"]["accelerator"] = {"productNames": [product]}
    return document


def lose_a_stable_node(fleet: Fleet, core: kubernetes.client.CoreV1Api, nodes: list[str]) -> int:
    """Delete the stable node with the most of the fleet's pods, and its pods at once (no kubelet answers for a
    lost machine); the number of pods lost."""
    pods = fleet.pods("specfleet.io/name=llama,specfleet.io/track=stable")
    on = {node: [p for p in pods if p.spec.node_name == node] for node in nodes}
    lost = max(nodes, key=lambda node: len(on[node]))
    core.delete_node(lost)
    for pod in on[lost]:
        core.delete_namespaced_pod(pod.metadata.name, fleet.namespace, grace_period_seconds=0)
    return len(on[lost])


def canary_in_step(fleet: Fleet, stable_product: str, canary_product: str) -> float:
    """A Healthy fleet on stable's nodes, then its canary on the canary's node; the time its step was Ready."""
    fleet.apply(fleet_on(stable_product))
    old = wait_for("Healthy", fleet.phase_is("llama", "Healthy"), timeout=120)["stableRevision"]
    fleet.patch_spec("llama", {"accelerator": {"productNames": [canary_product]}})
    wait_for("a canary", lambda: fleet.status("llama").get("canaryRevision") not in (None, old), timeout=60)
    wait_for("the canary's step Ready", lambda: fleet.status("llama").get("stepReadyAt"), timeout=120)
    return time.time()


@pytest.mark.timeout(900)
def test_a_step_keeps_its_evidence_when_a_stable_node_is_lost(
    guarded_operator: Operator,
    simulator: Simulator,
    fleet: Fleet,
    products: tuple[str, str, list[str]],
    k8s_api: kubernetes.client.ApiClient,
) -> None:
    stable_product, canary_product, stable_nodes = products
    ready = canary_in_step(fleet, stable_product, canary_product)
    time.sleep(max(0.0, ready + LOST_AFTER - time.time()))
    lost_at = time.time()
    lost = lose_a_stable_node(fleet, kubernetes.client.CoreV1Api(k8s_api), stable_nodes)
    assert lost >= 1
    status = wait_for("promoted", fleet.phase_is("llama", "Healthy"), timeout=600)
    passed = status["history"][-1]
    assert passed["outcome"] == "Promoted", passed
    analysis = status["lastAnalysis"]
    judged_at = datetime.fromisoformat(analysis["time"]).timestamp()
    evidence_from = judged_at - analysis["evidenceSeconds"]
    print(
        f"\nnode lost {lost_at - ready:.0f} s into the step ({lost} of 4 stable pods); the step's Pass read"
        f" {analysis['evidenceSeconds']} s of evidence, from {evidence_from - ready:.0f} s into the step"
    )
    # the Pass read the step's evidence from before the loss: the replaced pods did not restart it (a restart
    # would start the range after `lost_at`)
    assert analysis["verdict"] == "Pass" and evidence_from < lost_at, analysis


@pytest.mark.timeout(900)
def test_a_bad_canary_is_still_caught_when_a_stable_node_is_lost(
    guarded_operator: Operator,
    simulator: Simulator,
    fleet: Fleet,
    products: tuple[str, str, list[str]],
    k8s_api: kubernetes.client.ApiClient,
) -> None:
    stable_product, canary_product, stable_nodes = products
    ready = canary_in_step(fleet, stable_product, canary_product)
    time.sleep(max(0.0, ready + LOST_AFTER / 2 - time.time()))
    lose_a_stable_node(fleet, kubernetes.client.CoreV1Api(k8s_api), stable_nodes)
    simulator.put({**SCENARIO, "pairs": [{"target": "*", "drafter": "*", "track": "canary", "acceptance": 0.3}]})
    turned = time.time()
    status = wait_for("rolled back", fleet.phase_is("llama", "RolledBack"), timeout=300)
    print(f"\nthe drafter turned bad beside a lost stable node: rolled back {time.time() - turned:.0f} s later")
    assert "acceptance alpha" in status["history"][-1]["reason"]

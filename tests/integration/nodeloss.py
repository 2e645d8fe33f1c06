"""A node lost mid-step, as tests/integration/test_node_loss.py and benchmarks/node_loss.py play it.

Stable's four pods run on two fake 8-GPU nodes of a product only this fleet accepts, the canary's two on two
nodes of another (the canary's spec moves it there, which is its only change: an A/A canary). Mid-step one
node of a track is deleted with its pods, as a lost machine's are, and the track's Deployment brings them back
on the track's other node, where it loads for LOADING_SECONDS before it is Ready.
"""

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import kubernetes

from specfleet_workshop.devcluster.nodes import pool_of_its_own

from fleetkit import EAGLE3_K5, ROLLOUT, Fleet, sdep, wait_for

NAME = "llama"
LOADING_SECONDS = 20
"""Seconds a pod stays unready after it is scheduled (kwok's pod-ready delay), as a model loads: a replaced
pod leaves its track short for that long, as on a real cluster (instant replacements would leave no gap)."""


@dataclass(frozen=True)
class Pools:
    """The two products' nodes: stable's and the canary's."""

    stable_product: str
    canary_product: str
    stable_nodes: tuple[str, ...]
    canary_nodes: tuple[str, ...]

    def nodes(self, track: str) -> tuple[str, ...]:
        return self.stable_nodes if track == "stable" else self.canary_nodes


def make_pools(core: kubernetes.client.CoreV1Api, namespace: str, network: int) -> Pools:
    """Two 8-GPU nodes for stable's product and two for the canary's, named after `namespace`, on pod networks
    `network` and `network + 64` (0-63: `pool_of_its_own`)."""
    stable, canary = f"AMD_Instinct_MI300X_OAM_{namespace}", f"AMD_Instinct_MI300X_OAM_{namespace}_c"
    stable_nodes = pool_of_its_own(namespace, stable, network=network)
    canary_nodes = pool_of_its_own(f"{namespace}-c", canary, network=network + 64)
    for node in stable_nodes + canary_nodes:
        core.create_node(node)
    names = [n["metadata"]["name"] for n in stable_nodes + canary_nodes]
    return Pools(stable, canary, tuple(names[:2]), tuple(names[2:]))


def remove_pools(core: kubernetes.client.CoreV1Api, pools: Pools) -> None:
    for node in pools.stable_nodes + pools.canary_nodes:
        try:
            core.delete_node(node)
        except kubernetes.client.ApiException as error:
            if error.status != 404:  # the lost one is gone already
                raise


def fleet_on(product: str, pause_seconds: int) -> dict[str, Any]:
    """Four replicas of one product's GPUs whose pods load for LOADING_SECONDS, one step at 50% (two canary pods)
    holding `pause_seconds`."""
    rollout = {**ROLLOUT, "steps": [{"weight": 50, "pause": {"duration": f"{pause_seconds}s"}}]}
    document = sdep(name=NAME, replicas=4, speculative=EAGLE3_K5, rollout=rollout)
    document["spec"]["engine"] = {"tensorParallelSize": 1}
    document["spec"]["accelerator"] = {"productNames": [product]}
    document["spec"]["template"] = {
        "metadata": {"annotations": {"pod-ready.stage.kwok.x-k8s.io/delay": f"{LOADING_SECONDS}s"}}
    }
    return document


def canary_in_step(fleet: Fleet, pools: Pools, pause_seconds: int) -> datetime:
    """A Healthy fleet on stable's nodes, then its canary on the canary's nodes; when its step was Ready."""
    fleet.apply(fleet_on(pools.stable_product, pause_seconds))
    old = wait_for("Healthy", fleet.phase_is(NAME, "Healthy"), timeout=180)["stableRevision"]
    fleet.patch_spec(NAME, {"accelerator": {"productNames": [pools.canary_product]}})
    wait_for("a canary", lambda: fleet.status(NAME).get("canaryRevision") not in (None, old), timeout=60)
    ready = wait_for("the canary's step Ready", lambda: fleet.status(NAME).get("stepReadyAt"), timeout=180)
    return datetime.fromisoformat(ready)


def lose_a_node(fleet: Fleet, core: kubernetes.client.CoreV1Api, pools: Pools, track: str) -> int:
    """Delete the node of `track` ("stable" or "canary") with the most of its pods, and those pods at once (no
    kubelet answers for a lost machine); the number of the track's pods lost."""
    nodes = pools.nodes(track)
    pods = fleet.pods(f"specfleet.io/name={NAME},specfleet.io/track={track}")
    on = {node: [p for p in pods if p.spec.node_name == node] for node in nodes}
    lost = max(nodes, key=lambda node: len(on[node]))
    core.delete_node(lost)
    for pod in on[lost]:
        core.delete_namespaced_pod(pod.metadata.name, fleet.namespace, grace_period_seconds=0)
    return len(on[lost])


@dataclass(frozen=True)
class Passed:
    """A promoted step: when its Pass was judged and from when its evidence was read."""

    judged_at: datetime
    evidence_from: datetime
    evidence_seconds: int


def promoted(fleet: Fleet, timeout: float) -> Passed:
    """Wait for the one-step canary to be promoted; the Pass that ended its step."""
    status = wait_for("promoted", fleet.phase_is(NAME, "Healthy"), timeout=timeout)
    assert status["history"][-1]["outcome"] == "Promoted", status["history"][-1]
    analysis = status["lastAnalysis"]
    assert analysis["verdict"] == "Pass", analysis
    judged = datetime.fromisoformat(analysis["time"])
    seconds = analysis["evidenceSeconds"]
    return Passed(judged, datetime.fromtimestamp(judged.timestamp() - seconds, judged.tzinfo), seconds)

"""A fleet on every GPU of its product, on the dev cluster with the operator and Prometheus running.

Each test gets two fake 8-GPU nodes of a product only its fleet asks for, and a fleet of 16 single-GPU
replicas that fills them. Without `maxSurge` a change cannot fit and status says so at once; with
`maxSurge: 0` a good config is canaried through every step and promoted, and a bad drafter is rolled back,
while a watcher counts the Ready pods every second.
"""

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import kubernetes
import pytest

from specfleet_workshop.devcluster.nodes import pool_of_its_own

from fleetkit import EAGLE3_K5, ROLLOUT, Fleet, Operator, Simulator, sdep, wait_for

pytestmark = pytest.mark.integration

REPLICAS = 16
UNAVAILABLE = 2
STEPS = [{"weight": 25, "pause": {"duration": "1s"}}, {"weight": 50, "pause": {"duration": "1s"}}]
SAME_SERVING = {"engine": {"tensorParallelSize": 1, "env": [{"name": "SPECFLEET_TEST_REVISION", "value": "2"}]}}
"""A good config: a new revision that serves exactly as stable does (k=4 against k=5 would sit near the
mean latency limit, and need thousands of requests to be shown within it)."""


@pytest.fixture
def product(k8s_api: kubernetes.client.ApiClient, namespace: str) -> Iterator[str]:
    """Two kwok nodes with 8 GPUs each, of a product name no other test's fleet accepts."""
    product = f"AMD_Instinct_MI300X_OAM_{namespace}"
    core = kubernetes.client.CoreV1Api(k8s_api)
    nodes = pool_of_its_own(namespace, product, network=int(namespace.removeprefix("test-")[:2], 16))
    for node in nodes:
        core.create_node(node)
    yield product
    for node in nodes:
        core.delete_node(node["metadata"]["name"])


def fleet_of(product: str, **rollout: Any) -> dict[str, Any]:
    document = sdep(replicas=REPLICAS, speculative=EAGLE3_K5, rollout={**ROLLOUT, "steps": STEPS, **rollout})
    document["spec"]["engine"] = {"tensorParallelSize": 1}
    document["spec"]["accelerator"] = {"productNames": [product]}
    return document


class ReadyWatch:
    """Counts the fleet's Ready pods (not being deleted) per track, every second, in a thread."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet, self.lowest, self.samples = fleet, REPLICAS, 0
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def _watch(self) -> None:
        while not self.stopped.wait(1.0):
            ready: dict[str, int] = {}
            for pod in self.fleet.pods("specfleet.io/name=llama"):
                conditions = pod.status.conditions or []
                if pod.metadata.deletion_timestamp is None and any(
                    c.type == "Ready" and c.status == "True" for c in conditions
                ):
                    track = pod.metadata.labels.get("specfleet.io/track", "?")
                    ready[track] = ready.get(track, 0) + 1
            self.lowest, self.samples = min(self.lowest, sum(ready.values())), self.samples + 1

    def stop(self) -> int:
        self.stopped.set()
        self.thread.join()
        print(
            f"Ready pods: lowest {self.lowest} over {self.samples} one-second samples, floor {REPLICAS - UNAVAILABLE}"
        )
        return self.lowest


def test_without_max_surge_a_change_that_cannot_fit_says_so_at_once(
    guarded_operator: Operator, simulator: Simulator, fleet: Fleet, product: str
) -> None:
    fleet.apply(fleet_of(product))
    wait_for("Healthy", fleet.phase_is("llama", "Healthy"), timeout=120)
    changed = time.monotonic()
    fleet.patch_spec("llama", {"speculative": {**EAGLE3_K5, "numSpeculativeTokens": 4}})

    def no_room() -> dict[str, Any] | None:
        conditions = fleet.status("llama").get("conditions", [])
        return next((c for c in conditions if c["reason"] == "InsufficientCapacity"), None)

    condition = wait_for("InsufficientCapacity in status", no_room, timeout=30)
    said_after = time.monotonic() - changed
    print(f"InsufficientCapacity {said_after:.1f} s after the change: {condition['message']}")
    assert said_after <= 10
    assert condition["message"].startswith(f"needs 4 amd.com/gpu on {product} nodes, 0 free; set rollout.maxSurge: 0")
    command = [sys.executable, "-m", "specfleet.cli", "status", "llama", "-n", fleet.namespace, "--kubeconfig",
               str(fleet.cluster.kubeconfig)]  # fmt: skip
    shown = subprocess.run(command, capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "300"})
    assert "InsufficientCapacity: needs 4 amd.com/gpu" in shown.stdout, shown.stdout + shown.stderr


def test_with_max_surge_0_a_good_config_is_promoted_and_a_bad_drafter_rolled_back_by_swapping_pods(
    guarded_operator: Operator, simulator: Simulator, fleet: Fleet, product: str
) -> None:
    fleet.apply(fleet_of(product, maxSurge=0, maxUnavailable=UNAVAILABLE))
    stable = wait_for("Healthy", fleet.phase_is("llama", "Healthy"), timeout=120)["stableRevision"]
    watch = ReadyWatch(fleet)
    try:
        fleet.patch_spec("llama", SAME_SERVING)
        promoted = wait_for(
            "the good config promoted",
            lambda: (s := fleet.status("llama")).get("stableRevision") != stable and s.get("phase") == "Healthy" and s,
            timeout=600,
        )
        assert promoted["history"][-1]["outcome"] == "Promoted"
        fleet.patch_spec("llama", {"speculative": {**EAGLE3_K5, "model": "bad/EAGLE3-drafter"}})
        rolled_back = wait_for("the bad drafter rolled back", fleet.phase_is("llama", "RolledBack"), timeout=600)
        assert rolled_back["stableRevision"] == promoted["stableRevision"]

        def restored() -> bool:
            pods = fleet.pods("specfleet.io/name=llama")
            canary = [p for p in pods if p.metadata.labels.get("specfleet.io/track") == "canary"]
            ready = [p for p in pods if p.metadata.deletion_timestamp is None and p.status.phase == "Running"]
            return not canary and len(ready) == REPLICAS

        wait_for("stable's 16 pods back, no canary pod left", restored, timeout=300)
    finally:
        lowest = watch.stop()
    assert watch.samples > 30
    assert lowest >= REPLICAS - UNAVAILABLE


@pytest.mark.parametrize("mode", ["surge", "swap"])
def test_replicas_scaled_up_and_down_mid_canary_move_the_share_and_the_canary_is_judged_to_its_end(
    guarded_operator: Operator, simulator: Simulator, fleet: Fleet, product: str, mode: str
) -> None:
    """`kubectl scale sdep` (as an HPA or KEDA writes replicas) while the canary is at its second step."""
    steps = [{"weight": 25, "pause": {"duration": "1s"}}, {"weight": 50, "pause": {"duration": "2m"}}]
    budget = {"maxSurge": 0, "maxUnavailable": 1} if mode == "swap" else {}
    document = fleet_of(product, **budget, steps=steps)
    document["spec"]["replicas"] = 8
    fleet.apply(document)
    stable = wait_for("Healthy", fleet.phase_is("llama", "Healthy"), timeout=120)["stableRevision"]
    fleet.patch_spec("llama", SAME_SERVING)
    at_second_step = wait_for("the second step", lambda: fleet.status("llama").get("currentStep") == 1, timeout=300)
    assert at_second_step

    def canary_ready(pods: int) -> Any:
        return lambda: fleet.status("llama").get("readyReplicas", {}).get("canary") == pods

    for replicas, share in ((10, 5), (6, 3)):  # 50% of the new replicas, in a fleet of the new size
        fleet.kubectl("scale", "sdep", "llama", f"--replicas={replicas}")
        wait_for(f"{share} canary pods of {replicas}", canary_ready(share), timeout=180)
    status = wait_for(
        "the canary promoted",
        lambda: (s := fleet.status("llama")).get("stableRevision") != stable and s.get("phase") == "Healthy" and s,
        timeout=420,
    )
    assert status["history"][-1]["outcome"] == "Promoted"
    assert status["history"][-1]["reason"] == "all steps passed"

    def nothing_left() -> bool:
        deployments = fleet.deployments()
        pods = [p for p in fleet.pods("specfleet.io/name=llama") if p.metadata.deletion_timestamp is None]
        alone = set(deployments) == {"llama-stable"} and deployments["llama-stable"].spec.replicas == 6
        return alone and len(pods) == 6

    wait_for("the stable Deployment alone, 6 pods", nothing_left, timeout=120)

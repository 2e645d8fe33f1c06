"""The health GitOps tools read, on the real cluster: `kubectl wait --for=condition=Ready` returns once the
spec is promoted and not before (a canary, a gate), and each phase's status carries `Ready`, `Reconciling` and
`Stalled` as kstatus reads them.

With `SPECFLEET_RECORD_GITOPS=1` each phase's object is written to tests/data/gitops/<phase>.json (without
managedFields): the records the Argo CD Lua and Flux CEL tests (tests/unit/gitops) read.
"""

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest

from specfleet_workshop.devcluster.nodes import pool_of_its_own

from fleetkit import EAGLE3_K5, PLAIN, Fleet, Operator, Simulator, healthy, sdep, start_canary, wait_for

pytestmark = pytest.mark.integration
GATE = [{"weight": 50, "pause": {}}]
RECORDS = Path(__file__).parents[1] / "data" / "gitops"


def record(fleet: Fleet, name: str, phase: str) -> dict[str, Any]:
    """The fleet as the API server serves it now, written down as `phase` when recording."""
    obj = fleet.get(name)
    obj["metadata"].pop("managedFields", None)
    if os.environ.get("SPECFLEET_RECORD_GITOPS"):
        RECORDS.mkdir(parents=True, exist_ok=True)
        (RECORDS / f"{phase}.json").write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")
    return obj


def health(obj: dict[str, Any]) -> dict[str, str]:
    """Ready, Reconciling and Stalled's statuses, each checked to be of the object's generation."""
    found = {c["type"]: c for c in obj["status"]["conditions"]}
    kinds = ("Ready", "Reconciling", "Stalled")
    assert all(found[kind]["observedGeneration"] == obj["metadata"]["generation"] for kind in kinds), found
    return {kind: found[kind]["status"] for kind in kinds}


def stalled(fleet: Fleet, name: str) -> bool:
    """Whether the operator has acted on the fleet's current spec and found it stalled."""
    obj = fleet.get(name)
    current = obj.get("status", {}).get("observedGeneration") == obj["metadata"]["generation"]
    return current and health(obj)["Stalled"] == "True"


def kubectl_wait_ready(fleet: Fleet) -> subprocess.Popen[str]:
    command = [str(fleet.cluster.kubectl), "--kubeconfig", str(fleet.cluster.kubeconfig), "-n", fleet.namespace]
    command += ["wait", "--for=condition=Ready", "--timeout=400s", "sdep/llama"]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def cli(fleet: Fleet, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "specfleet.cli", *args, "--kubeconfig", str(fleet.cluster.kubeconfig)]
    return subprocess.run([*command, "-n", fleet.namespace], capture_output=True, text=True, timeout=120)


def test_kubectl_wait_ready_returns_when_promoted_and_not_before(operator: Operator, fleet: Fleet) -> None:
    healthy(fleet, steps=GATE)
    assert health(record(fleet, "llama", "healthy")) == {"Ready": "True", "Reconciling": "False", "Stalled": "False"}
    fleet.patch_spec("llama", {"speculative": {"numSpeculativeTokens": 3}})
    waiting = kubectl_wait_ready(fleet)
    canarying = wait_for("a canary", lambda: (s := fleet.get("llama"))["status"].get("canaryRevision") and s)
    if canarying["status"]["phase"] == "Progressing":
        assert health(record(fleet, "llama", "canarying"))["Reconciling"] == "True"
    wait_for("the gate", fleet.phase_is("llama", "Paused"))
    assert health(record(fleet, "llama", "paused-at-gate")) == {
        "Ready": "False",
        "Reconciling": "True",
        "Stalled": "False",
    }
    assert waiting.poll() is None, "kubectl wait --for=condition=Ready returned before the promotion"

    promoted = cli(fleet, "promote", "llama", "--wait", "--timeout", "5m")
    assert promoted.returncode == 0, promoted.stdout + promoted.stderr
    _, err = waiting.communicate(timeout=420)
    assert waiting.returncode == 0, err
    assert health(fleet.get("llama"))["Ready"] == "True"

    fleet.patch_spec("llama", {"speculative": {"numSpeculativeTokens": 2}})
    wait_for("the gate again", fleet.phase_is("llama", "Paused"))
    assert cli(fleet, "abort", "llama").returncode == 0
    wait_for("abort", fleet.phase_is("llama", "Aborted"))
    assert health(record(fleet, "llama", "aborted")) == {"Ready": "False", "Reconciling": "False", "Stalled": "True"}


def test_an_invalid_spec_is_stalled(operator: Operator, fleet: Fleet) -> None:
    squatter = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "squatter"}}
    fleet.apply({**squatter, "spec": {"selector": {"app": "other"}, "ports": [{"port": 80}]}})
    fleet.apply(sdep("squatter"))
    wait_for("Degraded", fleet.phase_is("squatter", "Degraded"))
    wait_for("Stalled", lambda: stalled(fleet, "squatter"))
    assert health(record(fleet, "squatter", "invalid-spec"))["Ready"] == "False"


@pytest.fixture
def full_pool(k8s_api: kubernetes.client.ApiClient, namespace: str) -> Iterator[str]:
    """One kwok node with 8 GPUs, of a product name no other test's fleet accepts."""
    product = f"AMD_Instinct_MI300X_OAM_{namespace}"
    core = kubernetes.client.CoreV1Api(k8s_api)
    nodes = pool_of_its_own(namespace, product, count=1, network=int(namespace.removeprefix("test-")[:2], 16))
    for node in nodes:
        core.create_node(node)
    yield product
    for node in nodes:
        core.delete_node(node["metadata"]["name"])


def test_a_rollback_and_a_canary_with_no_room_are_stalled(
    guarded_operator: Operator, simulator: Simulator, fleet: Fleet, full_pool: str
) -> None:
    start_canary(fleet, {**EAGLE3_K5, "model": "bad/EAGLE3-drafter"}, stable=PLAIN)
    wait_for("the rollback", fleet.phase_is("llama", "RolledBack"), timeout=420)
    assert health(record(fleet, "llama", "rolled-back")) == {
        "Ready": "False",
        "Reconciling": "False",
        "Stalled": "True",
    }

    full = sdep("full", replicas=8, speculative=EAGLE3_K5, steps=[{"weight": 25, "pause": {"duration": "1s"}}])
    full["spec"]["engine"] = {"tensorParallelSize": 1}
    full["spec"]["accelerator"] = {"productNames": [full_pool]}
    fleet.apply(full)
    wait_for("Healthy", fleet.phase_is("full", "Healthy"), timeout=120)
    fleet.patch_spec("full", {"speculative": {**EAGLE3_K5, "numSpeculativeTokens": 4}})
    wait_for("Stalled", lambda: stalled(fleet, "full"), timeout=60)
    obj = record(fleet, "full", "no-capacity")
    condition = next(c for c in obj["status"]["conditions"] if c["type"] == "Stalled")
    assert condition["reason"] == "InsufficientCapacity" and health(obj)["Reconciling"] == "False"

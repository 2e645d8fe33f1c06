"""The operator (`specfleet run`, a real process) against the real dev cluster: whole rollouts, end to end.

Each test gets its own namespace and its own operator process watching only that namespace, so a test
can kill and restart "the operator" without touching the others. Waits poll with a deadline.
"""

import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specfleet_workshop.devcluster.cluster import ClusterInfo
from specfleet_workshop.devcluster.gateway import install_httproute_crd

from fleetkit import Fleet, Operator, canaried, healthy, oom_killed, sdep, wait_for

pytestmark = pytest.mark.integration


def test_create_becomes_healthy_on_the_right_fake_amd_nodes(operator: Operator, fleet: Fleet) -> None:
    status = healthy(fleet)
    assert status["readyReplicas"]["stable"] == 2 and status["replicas"] == 2
    pods = fleet.pods("specfleet.io/name=llama")
    assert len(pods) == 2 and all(p.status.phase == "Running" for p in pods)
    nodes = {p.spec.node_name for p in pods}
    for node in nodes:
        labels = fleet.core.read_node(node).metadata.labels
        assert labels["amd.com/gpu.product-name"] == "AMD_Instinct_MI300X_OAM"
    container = pods[0].spec.containers[0]
    assert container.resources.limits == {"amd.com/gpu": "2"}
    assert container.args[:1] == ["meta-llama/Llama-3.1-8B-Instruct"]
    available = next(c for c in status["conditions"] if c["type"] == "Available")
    assert available["status"] == "True"
    listing = fleet.kubectl("get", "sdep", "llama").stdout
    assert "Healthy" in listing and "2/2" in listing and "eagle3 k=4" in listing
    assert status["stableRevision"] in fleet.kubectl("get", "sdep", "llama", "-o", "wide").stdout


def test_scale_subresource_and_drift_correction(operator: Operator, fleet: Fleet) -> None:
    healthy(fleet)
    fleet.kubectl("scale", "sdep/llama", "--replicas=3")
    wait_for("3 stable replicas", lambda: fleet.status("llama").get("readyReplicas", {}).get("stable") == 3)
    assert fleet.deployments()["llama-stable"].spec.replicas == 3
    revision = fleet.status("llama")["stableRevision"]
    assert "canaryRevision" not in fleet.status("llama"), "replicas must not start a canary"

    fleet.kubectl("scale", "deployment/llama-stable", "--replicas=1")  # someone else edits a child
    wait_for("the operator to restore 3 replicas", lambda: fleet.deployments()["llama-stable"].spec.replicas == 3)
    assert fleet.status("llama")["stableRevision"] == revision


def test_speculative_change_walks_the_steps_and_promotes(operator: Operator, fleet: Fleet) -> None:
    before = healthy(fleet)["stableRevision"]
    fleet.patch_spec("llama", {"speculative": {"numSpeculativeTokens": 3}})
    canary = wait_for("a canary", lambda: fleet.status("llama").get("canaryRevision"))
    assert canary != before
    wait_for("the canary Deployment", lambda: "llama-canary" in fleet.deployments())
    wait_for("canary traffic", lambda: fleet.status("llama").get("canaryWeight", 0) > 0)
    status = wait_for(
        "promotion",
        lambda: (s := fleet.status("llama")).get("phase") == "Healthy" and s.get("stableRevision") == canary and s,
    )
    assert status["history"][-1]["outcome"] == "Promoted"
    wait_for("the canary Deployment to go", lambda: "llama-canary" not in fleet.deployments())
    pods = fleet.pods("specfleet.io/name=llama")
    assert {p.metadata.labels["specfleet.io/revision"] for p in pods if p.status.phase == "Running"} == {canary}
    args = fleet.deployments()["llama-stable"].spec.template.spec.containers[0].args
    assert '"num_speculative_tokens":3' in args[args.index("--speculative-config") + 1]


def test_abort_returns_traffic_to_stable_and_is_not_retried(operator: Operator, fleet: Fleet) -> None:
    gate = [{"weight": 50, "pause": {}}]
    healthy(fleet, steps=gate)
    fleet.patch_spec("llama", {"speculative": {"numSpeculativeTokens": 2}})
    wait_for("the manual gate", fleet.phase_is("llama", "Paused"))
    wait_for(  # traffic is given to a canary only after the status write (taken away before it)
        "canary traffic",
        lambda: (
            fleet.core.read_namespaced_service("llama", fleet.namespace).spec.selector == {"specfleet.io/name": "llama"}
        ),
    )

    fleet.annotate("llama", "specfleet.io/abort", "now")
    status = wait_for("abort", fleet.phase_is("llama", "Aborted"))
    assert status["history"][-1]["outcome"] == "Aborted" and "canaryRevision" not in status
    selector = fleet.core.read_namespaced_service("llama", fleet.namespace).spec.selector
    assert selector == {"specfleet.io/name": "llama", "specfleet.io/track": "stable"}
    wait_for("the canary Deployment to go", lambda: "llama-canary" not in fleet.deployments())
    wait_for(
        "the abort annotation to be consumed",
        lambda: "specfleet.io/abort" not in (fleet.get("llama")["metadata"].get("annotations") or {}),
    )
    assert fleet.status("llama")["phase"] == "Aborted" and "llama-canary" not in fleet.deployments()

    fleet.annotate("llama", "specfleet.io/retry", "1")
    wait_for("the canary again", lambda: fleet.status("llama").get("canaryRevision"))


def test_a_change_during_a_canary_replaces_it(operator: Operator, fleet: Fleet) -> None:
    healthy(fleet, steps=[{"weight": 50, "pause": {}}])
    fleet.patch_spec("llama", {"speculative": {"numSpeculativeTokens": 2}})
    first = wait_for("the first canary", lambda: fleet.status("llama").get("canaryRevision"))
    fleet.patch_spec("llama", {"speculative": {"numSpeculativeTokens": 3}})
    second = wait_for("the second canary", lambda: (c := fleet.status("llama").get("canaryRevision")) != first and c)
    history = fleet.status("llama")["history"]
    assert history[-1]["revision"] == first and history[-1]["outcome"] == "Superseded"
    wait_for("the gate at the new revision", fleet.phase_is("llama", "Paused"))
    labels = fleet.deployments()["llama-canary"].spec.template.metadata.labels
    assert labels["specfleet.io/revision"] == second


def test_a_canary_that_never_gets_ready_is_aborted_at_the_deadline(operator: Operator, fleet: Fleet) -> None:
    healthy(fleet, rollout={"progressDeadline": "8s", "steps": [{"weight": 50}]})
    fleet.patch_spec("llama", {"accelerator": {"productNames": ["AMD_Instinct_MI999_OAM"]}})
    status = wait_for("the deadline", fleet.phase_is("llama", "Aborted"))
    reason = status["history"][-1]["reason"]
    assert "ProgressDeadlineExceeded" in reason and "node affinity" in reason
    wait_for("the canary Deployment to go", lambda: "llama-canary" not in fleet.deployments())


def test_a_killed_operator_resumes_at_the_same_step_without_duplicates(operator: Operator, fleet: Fleet) -> None:
    healthy(fleet, steps=[{"weight": 25, "pause": {}}, {"weight": 50, "pause": {}}])
    fleet.patch_spec("llama", {"speculative": {"numSpeculativeTokens": 2}})
    wait_for("the first gate", fleet.phase_is("llama", "Paused"))
    operator.kill()
    fleet.annotate("llama", "specfleet.io/promote", "step")  # given while nobody is running
    operator.start()
    status = wait_for(
        "step 2", lambda: (s := fleet.status("llama")).get("currentStep") == 1 and s.get("phase") == "Paused" and s
    )
    assert status["canaryRevision"]
    operator.kill()
    operator.start()
    fleet.annotate("llama", "specfleet.io/promote", "step")
    wait_for("promotion after a second restart", fleet.phase_is("llama", "Healthy"))
    assert set(fleet.deployments()) <= {"llama-stable", "llama-canary"}
    assert [h["outcome"] for h in canaried(fleet.status("llama"))] == ["Promoted"]


def test_deletion_cleans_up_even_with_the_operator_gone(operator: Operator, fleet: Fleet) -> None:
    healthy(fleet)
    operator.kill()
    assert not (fleet.get("llama")["metadata"].get("finalizers"))
    fleet.kubectl("delete", "sdep/llama", "--wait=true", "--timeout=30s")
    wait_for("the garbage collector to remove Deployments", lambda: not fleet.deployments())
    wait_for("the pods to go", lambda: not fleet.pods("specfleet.io/name=llama"))
    services = fleet.core.list_namespaced_service(fleet.namespace).items
    wait_for("the Service to go", lambda: not fleet.core.list_namespaced_service(fleet.namespace).items)
    assert services is not None


def test_objects_it_did_not_create_are_left_alone(operator: Operator, fleet: Fleet) -> None:
    foreign = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "squatter"},
        "spec": {"selector": {"app": "other"}, "ports": [{"port": 80}]},
    }
    fleet.apply(foreign)
    fleet.apply(sdep("squatter"))
    status = wait_for("Degraded", fleet.phase_is("squatter", "Degraded"))
    condition = next(c for c in status["conditions"] if c["type"] == "SpecValid")
    assert "Service/squatter" in condition["message"]
    service = fleet.core.read_namespaced_service("squatter", fleet.namespace)
    assert service.spec.selector == {"app": "other"} and not service.metadata.owner_references


@pytest.fixture(scope="session")
def httproute_crd(dev_cluster: ClusterInfo) -> None:
    install_httproute_crd(dev_cluster)


ROUTE = {
    "apiVersion": "gateway.networking.k8s.io/v1",
    "kind": "HTTPRoute",
    "metadata": {"name": "llm"},
    "spec": {"rules": [{"backendRefs": [{"name": "llama-stable", "port": 8000}]}]},
}
"""A user's HTTPRoute sending everything to the fleet's stable Service."""


def backend_weights(fleet: Fleet) -> dict[str, int]:
    route = fleet.custom.get_namespaced_custom_object(
        "gateway.networking.k8s.io", "v1", fleet.namespace, "httproutes", "llm"
    )
    return {ref["name"]: ref.get("weight", 1) for ref in route["spec"]["rules"][0]["backendRefs"]}


def test_an_httproute_gets_the_step_weights(httproute_crd: None, operator: Operator, fleet: Fleet) -> None:
    fleet.apply(ROUTE)
    routing = {"trafficRouting": {"httpRoute": {"name": "llm"}}, "steps": [{"weight": 30, "pause": {}}]}
    healthy(fleet, rollout=routing)
    wait_for("stable at 100", lambda: backend_weights(fleet) == {"llama-stable": 100})
    fleet.patch_spec("llama", {"speculative": {"numSpeculativeTokens": 2}})
    wait_for("the gate", fleet.phase_is("llama", "Paused"))
    wait_for("30% to the canary", lambda: backend_weights(fleet) == {"llama-stable": 70, "llama-canary": 30})
    assert fleet.core.read_namespaced_service("llama-canary", fleet.namespace).spec.selector == {
        "specfleet.io/name": "llama",
        "specfleet.io/track": "canary",
    }
    fleet.annotate("llama", "specfleet.io/abort", "now")
    wait_for("all traffic back to stable", lambda: backend_weights(fleet) == {"llama-stable": 100})
    wait_for(
        "the canary Service to go",
        lambda: (
            "llama-canary" not in {s.metadata.name for s in fleet.core.list_namespaced_service(fleet.namespace).items}
        ),
    )


def test_an_httproute_gives_the_holdback_its_share_beside_stable_and_the_canary(
    httproute_crd: None, operator: Operator, fleet: Fleet
) -> None:
    fleet.apply(ROUTE)
    routing = {
        "trafficRouting": {"httpRoute": {"name": "llm"}},
        "steps": [{"weight": 30, "pause": {}}],
        "holdback": {"replicas": 1},
    }
    healthy(fleet, replicas=4, rollout=routing)
    wait_for("a quarter to the holdback", lambda: backend_weights(fleet) == {"llama-stable": 75, "llama-holdback": 25})
    fleet.patch_spec("llama", {"speculative": {"numSpeculativeTokens": 2}})
    wait_for("the gate", fleet.phase_is("llama", "Paused"))
    wait_for(
        "30% to the canary, the holdback's share kept",
        lambda: backend_weights(fleet) == {"llama-stable": 45, "llama-canary": 30, "llama-holdback": 25},
    )
    fleet.annotate("llama", "specfleet.io/abort", "now")
    wait_for(
        "the canary's share back to stable",
        lambda: backend_weights(fleet) == {"llama-stable": 75, "llama-holdback": 25},
    )


# A rollout never acts on stale or partial evidence


def events(fleet: Fleet, reason: str) -> list[str]:
    listed = fleet.core.list_namespaced_event(fleet.namespace, field_selector=f"reason={reason}").items
    return [e.message for e in listed]


def annotations(fleet: Fleet, name: str = "llama") -> dict[str, str]:
    return fleet.get(name)["metadata"].get("annotations") or {}


def specfleet_cli(fleet: Fleet, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "specfleet.cli", *args, "--kubeconfig", str(fleet.cluster.kubeconfig)]
    return subprocess.run([*command, "-n", fleet.namespace], capture_output=True, text=True, timeout=60)


def test_stale_commands_are_dropped_not_kept_for_the_next_canary(operator: Operator, fleet: Fleet) -> None:
    gate = [{"weight": 50, "pause": {}}]
    healthy(fleet, steps=gate)
    refused = specfleet_cli(fleet, "promote", "llama", "--full")
    assert refused.returncode == 1 and "no canary to promote" in refused.stderr
    assert "specfleet.io/promote" not in annotations(fleet)  # the CLI wrote nothing

    fleet.annotate("llama", "specfleet.io/promote", "full")  # by hand, with no canary live
    wait_for("the stale promote to be dropped", lambda: "specfleet.io/promote" not in annotations(fleet))
    wait_for("a CommandIgnored event", lambda: events(fleet, "CommandIgnored"))
    fleet.patch_spec("llama", {"speculative": {"numSpeculativeTokens": 2}})
    status = wait_for("the canary at its gate", fleet.phase_is("llama", "Paused"))
    assert status["stableRevision"] != status["canaryRevision"] and not canaried(status)

    promoted = specfleet_cli(fleet, "promote", "llama")
    assert promoted.returncode == 0, promoted.stderr
    assert f"revision {status['canaryRevision']}" in promoted.stderr
    wait_for("promotion", lambda: fleet.status("llama").get("stableRevision") == status["canaryRevision"])


def test_an_event_said_again_is_one_event_that_counts(operator: Operator, fleet: Fleet) -> None:
    healthy(fleet)
    for said in range(1, 3):  # the same stale promote twice: the same CommandIgnored warning twice
        fleet.annotate("llama", "specfleet.io/promote", "full")
        wait_for(f"stale promote {said} to be dropped", lambda: "specfleet.io/promote" not in annotations(fleet))

    def counted() -> list[tuple[str, int]] | None:
        listed = fleet.core.list_namespaced_event(fleet.namespace, field_selector="reason=CommandIgnored").items
        counts = [(e.message, e.count or 1) for e in listed]
        return counts if sum(count for _, count in counts) >= 2 else None

    counts = wait_for("both CommandIgnored warnings posted", counted)
    assert len(counts) == 1 and counts[0][1] == 2, counts  # one Event, count 2: not two Events


def test_a_rollback_takes_traffic_off_before_the_canary_goes(operator: Operator, fleet: Fleet) -> None:
    healthy(fleet, steps=[{"weight": 50, "pause": {}}])
    fleet.patch_spec("llama", {"speculative": {"numSpeculativeTokens": 2}})
    wait_for("the gate", fleet.phase_is("llama", "Paused"))
    fleet.annotate("llama", "specfleet.io/abort", "now")
    wait_for("abort", fleet.phase_is("llama", "Aborted"))
    selector = fleet.core.read_namespaced_service("llama", fleet.namespace).spec.selector
    if "llama-canary" in fleet.deployments():  # the drain: traffic is already off while its pods remain
        assert selector.get("specfleet.io/track") == "stable"
    wait_for("the canary Deployment to go after the drain", lambda: "llama-canary" not in fleet.deployments())
    status = fleet.status("llama")
    assert "retiringRevision" not in status and [h["outcome"] for h in canaried(status)] == ["Aborted"]


def test_an_unreadable_prometheus_secret_is_an_error_verdict(
    dev_cluster: ClusterInfo, crd_installed: None, fleet: Fleet, tmp_path: Path
) -> None:
    operator = Operator(dev_cluster, fleet.namespace, tmp_path / "operator.log", dev_cluster.prometheus_url)
    operator.start()
    try:
        rollout = {
            "steps": [{"weight": 50, "pause": {"duration": "1h"}}],
            "analysis": {"interval": "2s", "onProviderError": {"after": "6s", "action": "Pause"}},
        }
        prometheus = {"url": dev_cluster.prometheus_url, "authSecret": {"name": "missing", "key": "token"}}
        healthy(fleet, rollout=rollout, prometheus=prometheus)
        fleet.patch_spec("llama", {"speculative": {"numSpeculativeTokens": 2}})
        status = wait_for(
            "an Error verdict", lambda: (s := fleet.status("llama")).get("lastAnalysis", {}).get("verdict") and s
        )
        analysis = status["lastAnalysis"]
        assert analysis["verdict"] == "Error" and "missing" in analysis["reasons"][0]
        assert "not found" in analysis["reasons"][0]
        status = wait_for("onProviderError's Pause", fleet.phase_is("llama", "Paused"))
        assert status["canaryRevision"] and "Traceback" not in operator.log.read_text()
    finally:
        operator.stop()


def test_a_rollout_survives_repeated_sigkills(operator: Operator, fleet: Fleet) -> None:
    """Chaos-lite: >= 10 SIGKILLs at random moments end as an undisturbed rollout does (promoted once)."""
    steps = [{"weight": 25, "pause": {"duration": "20s"}}, {"weight": 50, "pause": {"duration": "20s"}}]
    healthy(fleet, steps=steps)
    fleet.patch_spec("llama", {"speculative": {"numSpeculativeTokens": 3}})
    canary = wait_for("a canary", lambda: fleet.status("llama").get("canaryRevision"))

    def promoted() -> bool:
        status = fleet.status("llama")
        return status.get("phase") == "Healthy" and status.get("stableRevision") == canary

    def started() -> int:
        return operator.log.read_text(errors="replace").count("workers started")

    chance, kills, lives = random.Random(12), 0, 0
    while kills < 10 or not promoted():
        wait_for("the operator's workers", lambda seen=lives: started() > seen, timeout=120)
        time.sleep(chance.uniform(0.0, 4.0))  # a random moment of this life: maybe mid-reconcile
        operator.kill()
        kills, lives = kills + 1, started()
        operator.start()
        assert kills < 40, f"no promotion after {kills} kills: {fleet.status('llama')}"
    status = fleet.status("llama")
    assert [(h["revision"], h["outcome"]) for h in canaried(status)] == [(canary, "Promoted")]
    wait_for("the canary to go", lambda: set(fleet.deployments()) == {"llama-stable"}, timeout=60)
    services = {s.metadata.name for s in fleet.core.list_namespaced_service(fleet.namespace).items}
    assert services == {"llama"}


# Crashes and OOM kills, read from the Kubernetes API


def test_an_oom_killed_canary_pod_rolls_back_and_stable_keeps_serving(operator: Operator, fleet: Fleet) -> None:
    """Unguarded (no Prometheus): the evidence is the pod's status in the API server."""
    healthy(fleet, steps=[{"weight": 50, "pause": {}}])
    fleet.patch_spec("llama", {"speculative": {"numSpeculativeTokens": 2}})
    canary = wait_for("the canary at its gate", fleet.phase_is("llama", "Paused"))["canaryRevision"]
    pods = fleet.pods(f"specfleet.io/track=canary,specfleet.io/revision={canary}")
    victim = pods[0].metadata.name
    container = pods[0].spec.containers[0].name
    oom_killed(fleet, victim, container)
    statuses = fleet.core.read_namespaced_pod_status(victim, fleet.namespace).status.container_statuses
    assert statuses[0].last_state.terminated.reason == "OOMKilled", "kwok overwrote the status"

    status = wait_for("the rollback", fleet.phase_is("llama", "RolledBack"))
    reason = status["history"][-1]["reason"]
    assert status["history"][-1]["outcome"] == "RolledBack" and status["rejectedRevision"] == canary
    assert f"canary pod {victim} container {container} was OOMKilled (restart 1)" in reason
    wait_for("a RolledBack event naming the pod", lambda: any(victim in m for m in events(fleet, "RolledBack")))
    selector = fleet.core.read_namespaced_service("llama", fleet.namespace).spec.selector
    assert selector == {"specfleet.io/name": "llama", "specfleet.io/track": "stable"}
    wait_for("the canary Deployment to go", lambda: "llama-canary" not in fleet.deployments())
    status = wait_for(
        "stable serving alone", lambda: (s := fleet.status("llama"))["readyReplicas"]["stable"] == 2 and s
    )
    assert status["stableRevision"] != canary and status["phase"] == "RolledBack"

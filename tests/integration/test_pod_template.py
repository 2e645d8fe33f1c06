"""`spec.template` on the real API server: every rendered object with every template field passes a server-side
dry-run, and a fleet fitted with all of them rolls out, its pods carrying each field."""

import subprocess
from typing import Any

import pytest
import yaml

from specfleet.api.resource import SpeculativeDeployment
from specfleet.api.vocabulary import Track
from specfleet.render.manifests import render
from specfleet_workshop.devcluster.cluster import ClusterInfo

from fleetkit import Fleet, Operator, healthy, sdep, wait_for
from speckit import FULL_TEMPLATE

pytestmark = pytest.mark.integration

PRIORITY_CLASS = FULL_TEMPLATE["spec"]["priorityClassName"]
SERVICE_ACCOUNT = FULL_TEMPLATE["spec"]["serviceAccountName"]


def fitted(name: str = "llama", **spec: Any) -> dict[str, Any]:
    return sdep(name, template=FULL_TEMPLATE, **spec)


def test_every_rendered_object_passes_a_server_side_dry_run(
    dev_cluster: ClusterInfo, crd_installed: None, namespace: str
) -> None:
    document = fitted(autoTune={"candidates": [{"numSpeculativeTokens": 2}, {"numSpeculativeTokens": 3}]})
    document["metadata"]["namespace"] = namespace
    document["spec"]["rollout"]["holdback"] = {"replicas": 1}
    document["spec"]["replicas"] = 3
    fleet = SpeculativeDeployment.from_mapping(document)
    manifests = [m for track in Track for m in render(fleet, track)]
    deployments = [m for m in manifests if m["kind"] == "Deployment"]
    assert len(deployments) == 5  # stable, canary, holdback, two candidates
    result = subprocess.run(
        [str(dev_cluster.kubectl), "--kubeconfig", str(dev_cluster.kubeconfig), "-n", namespace,
         "apply", "--dry-run=server", "-f", "-"],
        input=yaml.safe_dump_all(manifests), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("(server dry run)") == len(manifests)


def test_a_fitted_fleet_rolls_out_and_a_label_change_is_no_canary(operator: Operator, fleet: Fleet) -> None:
    fleet.make_room_for(FULL_TEMPLATE)
    fleet.apply(fitted())
    before = wait_for("Healthy", fleet.phase_is("llama", "Healthy"), timeout=120)["stableRevision"]
    pod = fleet.pods("specfleet.io/name=llama")[0]
    assert pod.metadata.labels["team"] == "search" and pod.metadata.annotations["mesh.io/inject"] == "false"
    assert pod.spec.service_account_name == SERVICE_ACCOUNT and pod.spec.priority_class_name == PRIORITY_CLASS
    assert [c.name for c in pod.spec.containers] == ["vllm", "log-shipper"]
    assert [c.name for c in pod.spec.init_containers] == ["warm-cache"]
    assert pod.spec.containers[0].resources.requests == {"amd.com/gpu": "2", "cpu": "16", "memory": "128Gi"}
    assert pod.spec.node_selector == {"kubernetes.io/os": "linux"} and pod.spec.affinity.pod_anti_affinity
    assert pod.spec.image_pull_secrets[0].name == "registry-creds"

    labels = {**FULL_TEMPLATE["metadata"]["labels"], "team": "ranking"}
    fleet.patch_spec("llama", {"template": {"metadata": {"labels": labels}}})
    wait_for(
        "the pods relabelled in place",
        lambda: {p.metadata.labels.get("team") for p in fleet.pods("specfleet.io/name=llama")} == {"ranking"},
        timeout=120,
    )
    status = fleet.status("llama")
    assert status["stableRevision"] == before and "canaryRevision" not in status
    assert not [h for h in status.get("history", []) if h["revision"] != before]

    fleet.patch_spec("llama", {"template": {"metadata": {"annotations": {"mesh.io/inject": "true"}}}})
    canary = wait_for("a canary for the annotation", lambda: fleet.status("llama").get("canaryRevision"))
    assert canary != before
    status = wait_for(
        "promotion",
        lambda: (s := fleet.status("llama")).get("stableRevision") == canary and s.get("phase") == "Healthy" and s,
        timeout=180,
    )
    assert status["history"][-1]["outcome"] == "Promoted"


def test_a_template_the_api_server_refuses_is_an_invalid_spec_and_stable_keeps_serving(
    operator: Operator, fleet: Fleet
) -> None:
    """A volume is kept as the object the user wrote (the CRD cannot hold every Kubernetes type): one the API server
    refuses in the rendered Deployment makes the spec invalid, with the server's words, until it is fixed."""
    before = healthy(fleet)["stableRevision"]
    bad = {"spec": {"volumes": [{"name": "scratch", "emptyDir": {"sizeLimit": "-1Gi"}}]}}
    fleet.patch_spec("llama", {"template": bad})
    invalid = wait_for(
        "the spec reported invalid",
        lambda: next((c for c in fleet.status("llama").get("conditions", []) if c["type"] == "SpecValid"
                      and c["status"] == "False"), None),
    )  # fmt: skip
    assert "spec.template.spec.volumes" in invalid["message"] and "sizeLimit" in invalid["message"], invalid
    status = fleet.status("llama")
    assert status["stableRevision"] == before and status["readyReplicas"]["stable"] == 2
    good = {"spec": {"volumes": [{"name": "scratch", "emptyDir": {"medium": "Memory"}}]}}
    fleet.patch_spec("llama", {"template": good})
    wait_for(
        "the fixed template promoted",
        lambda: (s := fleet.status("llama"))["stableRevision"] != before and s.get("phase") == "Healthy",
        timeout=180,
    )


def _pods_in(manifests: list[dict[str, Any]], namespace: str) -> list[dict[str, Any]]:
    """Each Deployment's pod template as a Pod: Pod Security admission judges pods, not Deployments."""
    return [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": m["metadata"]["name"], "namespace": namespace, **m["spec"]["template"]["metadata"]},
            "spec": m["spec"]["template"]["spec"],
        }
        for m in manifests
        if m["kind"] == "Deployment"
    ]


def _dry_run_pods(
    dev_cluster: ClusterInfo, namespace: str, pods: list[dict[str, Any]]
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(dev_cluster.kubectl), "--kubeconfig", str(dev_cluster.kubeconfig), "-n", namespace,
         "create", "--dry-run=server", "-f", "-"],
        input=yaml.safe_dump_all(pods), capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_the_rendered_pods_are_admitted_where_the_namespace_enforces_pod_security_restricted(
    dev_cluster: ClusterInfo, crd_installed: None, namespace: str
) -> None:
    """The API server's own Pod Security admission, at `restricted`: the default pods pass; the documented
    opt-in to seccomp Unconfined is refused there, naming the field."""
    kubectl = [str(dev_cluster.kubectl), "--kubeconfig", str(dev_cluster.kubeconfig)]
    labelled = subprocess.run(
        [*kubectl, "label", "namespace", namespace, "pod-security.kubernetes.io/enforce=restricted"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert labelled.returncode == 0, labelled.stderr
    document = sdep("llama", template={"metadata": {"labels": {"team": "search"}}})
    document["metadata"]["namespace"] = namespace
    fleet = SpeculativeDeployment.from_mapping(document)
    pods = _pods_in([m for track in (Track.STABLE, Track.CANARY) for m in render(fleet, track)], namespace)

    admitted = _dry_run_pods(dev_cluster, namespace, pods)

    assert admitted.returncode == 0, admitted.stderr
    assert admitted.stdout.count("(server dry run)") == len(pods) == 2
    document["spec"]["template"]["spec"] = {"securityContext": {"seccompProfile": {"type": "Unconfined"}}}
    relaxed = _pods_in(render(SpeculativeDeployment.from_mapping(document), Track.STABLE), namespace)
    refused = _dry_run_pods(dev_cluster, namespace, relaxed)
    assert refused.returncode != 0 and "seccompProfile" in refused.stderr, refused.stderr

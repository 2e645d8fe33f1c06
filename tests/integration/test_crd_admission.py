"""The generated CRD on a real API server: good examples are admitted, bad ones refused naming the field."""

import subprocess
from pathlib import Path

import pytest
import yaml

from specfleet.api.resource import SpeculativeDeployment
from specfleet_workshop.devcluster.cluster import ClusterInfo

from bad_specs import BAD_SPECS, BASE, BadSpec, merged

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SERVER_CASES = [case for case in BAD_SPECS if case.server is not None]


def kubectl_apply(cluster: ClusterInfo, namespace: str, document: dict, *extra: str) -> subprocess.CompletedProcess:
    document = {**document, "metadata": {**document["metadata"], "namespace": namespace}}
    return subprocess.run(
        [str(cluster.kubectl), "--kubeconfig", str(cluster.kubeconfig), "apply", "-f", "-", *extra],
        input=yaml.safe_dump(document),
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_most_of_the_table_is_enforced_by_the_api_server_itself() -> None:
    assert len(SERVER_CASES) >= 25


@pytest.mark.parametrize("case", SERVER_CASES, ids=lambda case: case.id)
def test_api_server_refuses_bad_spec_naming_the_field(
    dev_cluster: ClusterInfo, crd_installed: None, namespace: str, case: BadSpec
) -> None:
    result = kubectl_apply(dev_cluster, namespace, case.document())
    assert result.returncode != 0, f"admitted: {result.stdout}"
    assert (case.server_field or case.field) in result.stderr, result.stderr
    assert case.server in result.stderr, result.stderr


@pytest.mark.parametrize("example", sorted((ROOT / "examples").glob("*.yaml")), ids=lambda p: p.name)
def test_examples_are_admitted(dev_cluster: ClusterInfo, crd_installed: None, namespace: str, example: Path) -> None:
    result = kubectl_apply(dev_cluster, namespace, yaml.safe_load(example.read_text()), "--dry-run=server")
    assert result.returncode == 0, result.stderr


def test_api_server_fills_the_models_defaults(dev_cluster: ClusterInfo, crd_installed: None, namespace: str) -> None:
    minimal = {
        "apiVersion": "specfleet.io/v1alpha1",
        "kind": "SpeculativeDeployment",
        "metadata": {"name": "minimal"},
        "spec": {"model": {"name": "m/target"}, "speculative": {"method": "ngram"}},
    }
    result = kubectl_apply(dev_cluster, namespace, minimal, "--dry-run=server", "-o", "yaml")
    assert result.returncode == 0, result.stderr
    spec = yaml.safe_load(result.stdout)["spec"]
    assert spec["rollout"]["steps"] == [
        {"weight": 10, "pause": {"duration": "5m"}},
        {"weight": 50, "pause": {"duration": "10m"}},
    ]
    assert spec["accelerator"]["resourceName"] == "amd.com/gpu"
    assert spec["engine"]["vllmVersion"] == "0.33.0"


def test_api_server_defaults_each_fallback_action_as_the_models_do(
    dev_cluster: ClusterInfo, crd_installed: None, namespace: str
) -> None:
    """Only `after` given: onProviderError pauses, onNoData rolls back, on the server as in the models (the server
    fills in the nested default before the operator ever reads the object)."""
    delays = {"onNoData": {"after": "5m"}, "onProviderError": {"after": "5m"}}
    document = merged(BASE, {"metadata": {"name": "fallbacks"}, "spec": {"rollout": {"analysis": delays}}})
    result = kubectl_apply(dev_cluster, namespace, document, "--dry-run=server", "-o", "yaml")
    assert result.returncode == 0, result.stderr
    stored = yaml.safe_load(result.stdout)["spec"]["rollout"]["analysis"]
    assert stored["onProviderError"] == {"after": "5m", "action": "Pause"}
    assert stored["onNoData"] == {"after": "5m", "action": "Rollback"}
    models = SpeculativeDeployment.from_mapping(document).spec.rollout.analysis
    assert (models.on_provider_error.action.value, models.on_no_data.action.value) == ("Pause", "Rollback")

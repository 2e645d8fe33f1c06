"""The chart's template policy: one value sets the operator's `--template-policy` and the ValidatingAdmissionPolicy
that refuses the same templates at admission (its checks generated from `specfleet.render.policy`)."""

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from specfleet.render.policy import TemplatePolicy, admission_validations

from repokit import KUBE, ROOT

CHART = ROOT / "charts" / "specfleet"
VAP_API = "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy"


def rendered(helm: Path, *args: str) -> list[dict[str, Any]]:
    result = subprocess.run(
        [str(helm), "template", "sf", str(CHART), "--namespace", "ops", *KUBE, *args],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def admission(manifests: list[dict[str, Any]]) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    def one(kind: str) -> dict[str, Any] | None:
        found = [m for m in manifests if m["kind"] == kind]
        assert len(found) <= 1
        return found[0] if found else None

    return one("ValidatingAdmissionPolicy"), one("ValidatingAdmissionPolicyBinding")


@pytest.mark.parametrize("level", [TemplatePolicy.BASELINE, TemplatePolicy.RESTRICTED])
def test_the_admission_policy_holds_the_operators_checks_of_the_level(helm: Path, level: TemplatePolicy) -> None:
    manifests = rendered(helm, "--set", f"templatePolicy={level.value}", "--api-versions", VAP_API)
    policy, binding = admission(manifests)
    assert policy is not None and binding is not None
    assert policy["spec"]["validations"] == admission_validations(level)
    assert policy["spec"]["failurePolicy"] == "Fail"
    assert policy["spec"]["matchConstraints"]["resourceRules"] == [
        {
            "apiGroups": ["specfleet.io"],
            "apiVersions": ["*"],
            "operations": ["CREATE", "UPDATE"],
            "resources": ["speculativedeployments"],
        }
    ]
    assert binding["spec"] == {"policyName": policy["metadata"]["name"], "validationActions": ["Deny"]}
    operator = next(m for m in manifests if m["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert f"--template-policy={level.value}" in operator["args"]


def test_baseline_is_the_default_and_a_cluster_from_1_30_gets_the_admission_policy(helm: Path) -> None:
    manifests = rendered(helm, "--kube-version", "1.30.0")
    policy, _ = admission(manifests)
    assert policy is not None and policy["spec"]["validations"] == admission_validations(TemplatePolicy.BASELINE)
    operator = next(m for m in manifests if m["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert "--template-policy=baseline" in operator["args"]


def test_no_admission_policy_at_privileged_nor_where_the_api_is_not_served(helm: Path) -> None:
    assert admission(rendered(helm, "--set", "templatePolicy=privileged", "--api-versions", VAP_API)) == (None, None)
    assert admission(rendered(helm, "--kube-version", "1.29.0")) == (None, None)


def test_with_watched_namespaces_the_binding_covers_only_them(helm: Path) -> None:
    _, binding = admission(rendered(helm, "--set", "watchNamespaces={team-a,team-b}", "--api-versions", VAP_API))
    assert binding is not None
    assert binding["spec"]["matchResources"]["namespaceSelector"] == {
        "matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["team-a", "team-b"]}]
    }


def test_an_unknown_level_is_refused_naming_the_value(helm: Path) -> None:
    result = subprocess.run(
        [str(helm), "template", "sf", str(CHART), *KUBE, "--set", "templatePolicy=lenient"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode != 0 and "templatePolicy" in result.stderr

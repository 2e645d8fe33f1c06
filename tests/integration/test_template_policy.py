"""A hostile tenant on the real API server: a ServiceAccount bound only to the built-in `edit` role in its namespace
(and the SpeculativeDeployment rights an admin gives app teams) tries each escalation of `spec.template` with
`kubectl --as`. The chart's ValidatingAdmissionPolicy (installed as the chart renders it) refuses each one naming
the field, or the CRD's schema refuses or prunes it; without the admission policy the operator renders no pod
from any of them and says why in SpecValid, naming the field. Either way nothing runs that the tenant could not
have created itself."""

import copy
import re
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from specfleet.api.vocabulary import GROUP, PLURAL, VERSION
from specfleet.render.policy import TemplatePolicy, template_problems
from specfleet_workshop.devcluster.cluster import ClusterInfo
from specfleet_workshop.devcluster.versions import KUBERNETES_VERSION

from fleetkit import Fleet, Operator, sdep, wait_for
from hostile_templates import ESCALATIONS, HOST_NAMESPACES, RESTRICTED_SIDECAR, Hostile
from speckit import FULL_TEMPLATE

pytestmark = pytest.mark.integration

CHART = Path(__file__).resolve().parents[2] / "charts" / "specfleet"
TENANT = "tenant"


def tenant(namespace: str) -> str:
    return f"system:serviceaccount:{namespace}:{TENANT}"


@pytest.fixture
def hostile_tenant(fleet: Fleet) -> str:
    """A ServiceAccount that may do what `edit` allows in the namespace, plus write SpeculativeDeployments (not
    their status): what an app team gets."""
    ns = fleet.namespace
    objects = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": TENANT}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": f"{TENANT}-edit"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
            "subjects": [{"kind": "ServiceAccount", "name": TENANT, "namespace": ns}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "specfleet-author"},
            "rules": [
                {
                    "apiGroups": [GROUP],
                    "resources": [PLURAL],
                    "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
                }
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": f"{TENANT}-specfleet-author"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "specfleet-author"},
            "subjects": [{"kind": "ServiceAccount", "name": TENANT, "namespace": ns}],
        },
    ]
    fleet.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(objects))
    who = tenant(ns)
    wait_for("the tenant's rights", lambda: fleet.kubectl("auth", "can-i", "create", PLURAL, "--as", who, check=False)
             .stdout.strip() == "yes")  # fmt: skip
    can = {  # edit lets it make pods itself; neither a fleet's status nor its own rights
        ("create", "pods"): "yes",
        ("patch", PLURAL, "--subresource=status"): "no",
        ("create", "rolebindings"): "no",
    }
    for (verb, resource, *flags), expected in can.items():
        said = fleet.kubectl("auth", "can-i", verb, resource, *flags, "--as", who, check=False).stdout.strip()
        assert said == expected, (verb, resource, said)
    return who


def hostile_fleet(name: str, template: dict[str, Any]) -> dict[str, Any]:
    document = sdep(name, replicas=1)
    document["spec"]["template"] = copy.deepcopy(template)
    return document


def as_tenant(fleet: Fleet, who: str, document: dict[str, Any], *flags: str) -> Any:
    return fleet.kubectl("apply", "--as", who, *flags, "-f", "-", stdin=yaml.safe_dump(document), check=False)


def admission_field(hostile: Hostile) -> str:
    """How the admission policy names the field: any item of a list, `[*]`."""
    return re.sub(r"\[\d+\]", "[*]", hostile.field)


def slug(hostile: Hostile) -> str:
    return re.sub(r"[^a-z0-9]+", "-", hostile.name.lower()).strip("-")[:40]


@pytest.fixture
def admission_policy(
    dev_cluster: ClusterInfo, fleet: Fleet, request: pytest.FixtureRequest
) -> Iterator[TemplatePolicy]:
    """The chart's ValidatingAdmissionPolicy at the level the test is parametrized with, rendered by the pinned
    helm as an install on this cluster's version would be, bound to the test's namespace only (other tests' fleets
    share the cluster), enforced before the test starts."""
    level: TemplatePolicy = request.param
    release = f"tp-{uuid.uuid4().hex[:6]}"
    values = ["--set", f"templatePolicy={level.value}", "--set", f"watchNamespaces={{{fleet.namespace}}}"]
    manifest = subprocess.run(
        [str(dev_cluster.helm), "template", release, str(CHART), "-n", fleet.namespace, *values,
         "--kube-version", KUBERNETES_VERSION, "--show-only", "templates/template-policy.yaml"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    kinds = [d["kind"] for d in yaml.safe_load_all(manifest) if d]
    assert kinds == ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]
    fleet.kubectl("apply", "-f", "-", stdin=manifest)
    probe = hostile_fleet("probe", ESCALATIONS[0].template)
    wait_for(
        "the admission policy enforced",
        lambda: "ValidatingAdmissionPolicy" in fleet.kubectl("apply", "--dry-run=server", "-f", "-",
                                                             stdin=yaml.safe_dump(probe), check=False).stderr,
    )  # fmt: skip
    yield level
    fleet.kubectl("delete", "--ignore-not-found", "-f", "-", stdin=manifest, check=False)


def deployments_pass(fleet: Fleet, policy: TemplatePolicy) -> None:
    """Every Deployment in the namespace has pods that `policy` admits as they are."""
    api = fleet.apps.api_client
    for deployment in fleet.apps.list_namespaced_deployment(fleet.namespace).items:
        pod = api.sanitize_for_serialization(deployment.spec.template)
        assert template_problems(pod, policy) == [], deployment.metadata.name


@pytest.mark.parametrize(
    "admission_policy", [TemplatePolicy.BASELINE, TemplatePolicy.RESTRICTED], indirect=True, ids=lambda p: p.value
)
def test_the_chart_admission_policy_refuses_each_escalation_naming_the_field(
    operator: Operator, fleet: Fleet, hostile_tenant: str, admission_policy: TemplatePolicy
) -> None:
    level = admission_policy
    fitted = copy.deepcopy(FULL_TEMPLATE)  # every template field, sidecars that meet the level
    if level is TemplatePolicy.RESTRICTED:
        fitted["spec"]["containers"] = [{**RESTRICTED_SIDECAR, "name": "log-shipper"}]
        fitted["spec"]["initContainers"] = [{**RESTRICTED_SIDECAR, "name": "warm-cache"}]
    fitted["metadata"]["annotations"]["container.apparmor.security.beta.kubernetes.io/log-shipper"] = "runtime/default"
    fitted["spec"]["securityContext"]["sysctls"] = [{"name": "net.ipv4.tcp_keepalive_time", "value": "60"}]
    assert template_problems(fitted, level) == []
    admitted = as_tenant(fleet, hostile_tenant, hostile_fleet("fitted", fitted), "--dry-run=server")
    assert admitted.returncode == 0, admitted.stderr  # the CEL refuses no more than the operator does
    for hostile in ESCALATIONS:
        document = hostile_fleet(slug(hostile), hostile.template)
        if level.includes(hostile.level):
            refused = as_tenant(fleet, hostile_tenant, document)
            assert refused.returncode != 0, hostile.name
            assert admission_field(hostile) in refused.stderr, (hostile.name, refused.stderr)
            assert "ValidatingAdmissionPolicy" in refused.stderr
        else:  # a restricted check under baseline: admitted (a dry run: nothing is left behind)
            admitted = as_tenant(fleet, hostile_tenant, document, "--dry-run=server")
            assert admitted.returncode == 0, (hostile.name, admitted.stderr)
    for field in HOST_NAMESPACES:
        document = hostile_fleet(f"host-{field.lower()}", {"spec": {field: True}})
        refused = as_tenant(fleet, hostile_tenant, document)
        assert refused.returncode != 0 and f'unknown field "spec.template.spec.{field}"' in refused.stderr
        # Without strict field validation the schema drops it: the fleet is stored, and harmless.
        pruned = as_tenant(fleet, hostile_tenant, document, "--validate=false")
        assert pruned.returncode == 0, pruned.stderr
        assert field not in (fleet.get(document["metadata"]["name"])["spec"].get("template", {}).get("spec") or {})
    listed = fleet.custom.list_namespaced_custom_object(GROUP, VERSION, fleet.namespace, PLURAL)["items"]
    stored = {f["metadata"]["name"] for f in listed}
    assert stored == {f"host-{field.lower()}" for field in HOST_NAMESPACES}
    wait_for("the pruned fleets' Deployments", lambda: len(fleet.deployments()) >= len(HOST_NAMESPACES), timeout=120)
    deployments_pass(fleet, TemplatePolicy.RESTRICTED)
    for deployment in fleet.deployments().values():
        spec = deployment.spec.template.spec
        assert not (spec.host_network or spec.host_pid or spec.host_ipc)


@pytest.mark.cluster_wide  # alone: a chart installed by another test meanwhile binds its policy to every namespace
def test_without_the_admission_policy_the_operator_renders_no_escalating_pod(
    operator: Operator, fleet: Fleet, hostile_tenant: str
) -> None:
    """A cluster without the chart's admission policy (older than 1.30, or installed another way): the tenant's
    fleets are admitted, and the operator (which may create any pod in the namespace) creates none of them."""
    baseline = [h for h in ESCALATIONS if h.level is TemplatePolicy.BASELINE]
    for hostile in baseline:
        admitted = as_tenant(fleet, hostile_tenant, hostile_fleet(slug(hostile), hostile.template))
        assert admitted.returncode == 0, (hostile.name, admitted.stderr)
    for hostile in baseline:
        condition = wait_for(
            f"{hostile.name}: SpecValid=False",
            lambda h=hostile: next((c for c in fleet.status(slug(h)).get("conditions", [])
                                    if c["type"] == "SpecValid" and c["status"] == "False"), None),
            timeout=120,
        )  # fmt: skip
        assert hostile.field in condition["message"] and "template policy baseline" in condition["message"]
        assert fleet.status(slug(hostile)).get("phase") == "Degraded"
    assert fleet.deployments() == {}
    assert fleet.pods("specfleet.io/name") == []

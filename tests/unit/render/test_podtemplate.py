"""`spec.template` in the rendered pods: every field lands, specfleet's own parts stay, labels alone are no revision."""

from typing import Any

import pytest

from specfleet.api.problems import Severity
from specfleet.api.vocabulary import LABEL_TRACK, Track
from specfleet.hardware import PRODUCT_NAME_LABEL
from specfleet.preflight.job import preflight_job
from specfleet.render.manifests import deployment, revision
from specfleet.render.podtemplate import combined_affinity
from specfleet.validation import validate_document

from bad_specs import BASE, merged
from speckit import ARCH_AFFINITY, FULL_TEMPLATE, sdep


def with_template(template: dict[str, Any]) -> Any:
    return sdep({"spec": {"template": template}})


def pod_of(fleet: Any) -> dict[str, Any]:
    return deployment(fleet, Track.STABLE, revision(fleet.spec), 2)["spec"]["template"]


def test_every_template_field_lands_in_the_pod() -> None:
    pod = pod_of(with_template(FULL_TEMPLATE))
    meta, spec = pod["metadata"], pod["spec"]
    assert meta["labels"]["team"] == "search" and meta["labels"][LABEL_TRACK] == "stable"
    assert meta["annotations"]["mesh.io/inject"] == "false" and meta["annotations"]["prometheus.io/scrape"] == "true"
    assert spec["serviceAccountName"] == "vllm-reader"
    assert "automountServiceAccountToken" not in spec  # the named ServiceAccount's own setting decides
    assert spec["imagePullSecrets"] == [{"name": "registry-creds"}]
    assert spec["priorityClassName"] == "serving-high"
    assert spec["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert spec["securityContext"]["runAsUser"] == 2000
    assert spec["securityContext"]["supplementalGroups"] == [44]
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert [v["name"] for v in spec["volumes"]] == ["dshm", "model-cache", "scratch"]
    assert [c["name"] for c in spec["containers"]] == ["vllm", "log-shipper"]
    assert [c["name"] for c in spec["initContainers"]] == ["warm-cache"]
    vllm = spec["containers"][0]
    assert vllm["resources"]["requests"] == {"cpu": "16", "memory": "128Gi", "amd.com/gpu": "1"}
    assert vllm["resources"]["limits"] == {"memory": "160Gi", "amd.com/gpu": "1"}
    assert vllm["volumeMounts"][-1] == {"name": "scratch", "mountPath": "/scratch", "readOnly": False}


def test_required_node_terms_keep_the_accelerators_product_in_every_term() -> None:
    affinity = pod_of(with_template(FULL_TEMPLATE))["spec"]["affinity"]
    terms = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert len(terms) == 2
    for term in terms:
        keys = [e["key"] for e in term["matchExpressions"]]
        assert keys == ["kubernetes.io/arch", PRODUCT_NAME_LABEL]
    assert affinity["podAntiAffinity"] == ARCH_AFFINITY["podAntiAffinity"]
    assert (
        affinity["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
        == (ARCH_AFFINITY["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"])
    )


def test_a_template_without_required_node_terms_gets_the_accelerators() -> None:
    ours = pod_of(sdep())["spec"]["affinity"]
    theirs = {"podAntiAffinity": ARCH_AFFINITY["podAntiAffinity"]}
    combined = combined_affinity(ours, theirs)
    assert combined is not None
    assert combined["nodeAffinity"] == ours["nodeAffinity"]
    assert combined["podAntiAffinity"] == theirs["podAntiAffinity"]
    assert combined_affinity(None, theirs) == theirs and combined_affinity(ours, None) == ours


def test_no_template_renders_the_pod_as_before() -> None:
    assert pod_of(sdep()) == pod_of(with_template({}))
    assert revision(sdep().spec) == revision(with_template({}).spec)


def test_labels_alone_are_not_a_new_revision_everything_else_is() -> None:
    base = revision(sdep().spec)
    assert revision(with_template({"metadata": {"labels": {"team": "search"}}}).spec) == base
    changes = [
        {"metadata": {"annotations": {"mesh.io/inject": "true"}}},
        {"spec": {"serviceAccountName": "other"}},
        {"spec": {"nodeSelector": {"pool": "b"}}},
        {"spec": {"containers": [{"name": "proxy", "image": "envoy"}]}},
        {"vllm": {"resources": {"requests": {"memory": "64Gi"}}}},
    ]
    revisions = {revision(with_template(change).spec) for change in changes}
    assert base not in revisions and len(revisions) == len(changes)


def test_stable_keeps_its_own_template_while_a_canary_brings_a_new_one() -> None:
    """The stable track renders from its serving snapshot: a canary's template must not leak into it."""
    before = sdep().spec
    after = with_template(FULL_TEMPLATE).spec
    stable = after.with_serving(before.serving())
    assert stable.template is None
    assert after.with_serving(after.serving()).template == after.template


def test_the_preflight_job_can_pull_and_lands_where_the_pods_do() -> None:
    fleet = with_template(FULL_TEMPLATE)
    job = preflight_job(fleet, revision(fleet.spec), fleet.spec.serving())
    pod = job["spec"]["template"]["spec"]
    assert pod["imagePullSecrets"] == [{"name": "registry-creds"}]
    assert pod["priorityClassName"] == "serving-high" and pod["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert pod["affinity"] == pod_of(fleet)["spec"]["affinity"]


@pytest.mark.parametrize(
    "template",
    [
        FULL_TEMPLATE,
        {"vllm": {"resources": {"requests": {"cpu": "500m", "memory": "1.5Gi", "ephemeral-storage": "1e9"}}}},
    ],
)
def test_valid_templates_validate_clean(template: dict[str, Any]) -> None:
    problems = validate_document(merged(BASE, {"spec": {"template": template}}))
    assert not [p for p in problems if p.severity is Severity.ERROR], [str(p) for p in problems]

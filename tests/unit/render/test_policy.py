"""The operator's template policy: what `spec.template` may add to the pods, per Pod Security level, refused with
the field named by the operator, `specfleet validate` and (same checks, as CEL) the chart's admission policy."""

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from specfleet.api.resource import SpeculativeDeployment
from specfleet.api.vocabulary import Track
from specfleet.cli.main import app
from specfleet.observation import desired_revision
from specfleet.render.manifests import render
from specfleet.render.policy import CHECKS, TemplatePolicy, admission_validations, template_problems
from specfleet.validation import errors, validate_document

from bad_specs import BASE
from hostile_templates import ESCALATIONS, RESTRICTED_SIDECAR, Hostile
from speckit import FULL_TEMPLATE

BY_NAME = {h.name: h for h in ESCALATIONS}


def fleet_with(template: dict[str, Any]) -> dict[str, Any]:
    document = copy.deepcopy(BASE)
    document["spec"]["template"] = template
    return document


def refused_fields(template: dict[str, Any], policy: TemplatePolicy) -> list[str]:
    return [p.field for p in template_problems(template, policy)]


@pytest.mark.parametrize("hostile", ESCALATIONS, ids=lambda h: h.name)
def test_each_escalation_is_refused_from_its_level_up_naming_the_field(hostile: Hostile) -> None:
    for policy in TemplatePolicy:
        refused = refused_fields(hostile.template, policy)
        if policy is hostile.level:
            assert len(refused) == 1 and refused[0].startswith(hostile.field), (policy, refused)
        elif policy.includes(hostile.level):  # a hostPath is no restricted volume type either
            assert [f for f in refused if f.startswith(hostile.field)], (policy, refused)
        else:
            assert refused == [], policy


@pytest.mark.parametrize("hostile", ESCALATIONS, ids=lambda h: h.name)
def test_validate_and_the_operator_refuse_it_with_the_same_words(hostile: Hostile) -> None:
    document = fleet_with(hostile.template)
    problems = errors(validate_document(document, hostile.level))
    assert [p.field[: len(hostile.field)] for p in problems] == [hostile.field]
    assert f"template policy {hostile.level.value}" in problems[0].message
    revision, said = desired_revision(SpeculativeDeployment.from_mapping(document), hostile.level)
    assert revision is None and said == (str(problems[0]),)
    assert desired_revision(SpeculativeDeployment.from_mapping(document), TemplatePolicy.PRIVILEGED)[0] is not None


def test_every_check_has_an_escalation_that_only_it_refuses() -> None:
    """The table reaches every check, so the integration tests try each one's CEL on a real API server."""
    hit = []
    for hostile in ESCALATIONS:
        refusing = [
            i for i, check in enumerate(CHECKS) if check.level is hostile.level and check.refused(hostile.template)
        ]
        assert len(refusing) == 1, hostile.name
        hit += refusing
    assert sorted(set(hit)) == list(range(len(CHECKS)))


def test_the_default_is_baseline_so_the_documented_unconfined_opt_in_needs_privileged() -> None:
    unconfined = BY_NAME["pod seccomp Unconfined (the ROCm opt-in)"].template
    assert refused_fields(unconfined, TemplatePolicy.BASELINE) == refused_fields(unconfined, TemplatePolicy.RESTRICTED)
    assert [p.field for p in errors(validate_document(fleet_with(unconfined)))] == [
        "spec.template.spec.securityContext.seccompProfile.type"
    ]
    assert errors(validate_document(fleet_with(unconfined), TemplatePolicy.PRIVILEGED)) == []


def test_a_fitted_template_passes_baseline_and_restricted_names_each_sidecar_that_falls_short() -> None:
    assert refused_fields(FULL_TEMPLATE, TemplatePolicy.BASELINE) == []
    refused = refused_fields(FULL_TEMPLATE, TemplatePolicy.RESTRICTED)
    assert {f.rsplit(".securityContext", 1)[0] for f in refused} == {
        "spec.template.spec.containers[0]",
        "spec.template.spec.initContainers[0]",
    }
    fitted = copy.deepcopy(FULL_TEMPLATE)
    fitted["spec"]["containers"] = [{**RESTRICTED_SIDECAR, "name": "log-shipper"}]
    fitted["spec"]["initContainers"] = [{**RESTRICTED_SIDECAR, "name": "warm-cache"}]
    assert refused_fields(fitted, TemplatePolicy.RESTRICTED) == []


def test_what_specfleet_renders_itself_meets_restricted() -> None:
    """Only what a template adds is judged: specfleet's own pods must pass the strictest level as they are."""
    document = fleet_with({"metadata": {"labels": {"team": "search"}}})
    document["spec"]["storage"] = {"modelCacheClaim": "hf-cache"}
    fleet = SpeculativeDeployment.from_mapping(document)
    tracks = (Track.STABLE, Track.CANARY, Track.HOLDBACK)
    pods = [m["spec"]["template"] for track in tracks for m in render(fleet, track) if m["kind"] == "Deployment"]
    assert pods
    for pod in pods:
        assert template_problems(pod, TemplatePolicy.RESTRICTED) == []


@pytest.mark.parametrize(
    "odd",
    [
        {"spec": {"containers": [{"name": "x", "securityContext": "privileged"}]}},
        {
            "spec": {
                "containers": [{"name": "x", "ports": {"hostPort": 1}}],
                "volumes": [{"name": "v", "hostPath": None}],
            }
        },
        {"spec": {"securityContext": {"sysctls": [None, 3]}}, "metadata": {"annotations": None}},
        {"spec": None, "metadata": []},
    ],
)
def test_odd_shapes_are_judged_never_raised_on(odd: dict[str, Any]) -> None:
    for policy in TemplatePolicy:
        template_problems(odd, policy)


def test_the_admission_policy_holds_every_check_of_the_level_naming_its_field() -> None:
    assert admission_validations(TemplatePolicy.PRIVILEGED) == []
    for policy in (TemplatePolicy.BASELINE, TemplatePolicy.RESTRICTED):
        validations = admission_validations(policy)
        assert all(v["message"].startswith("spec.template.") and "template policy" in v["message"] for v in validations)
        assert len({v["expression"] for v in validations}) == len(validations)
    assert len(admission_validations(TemplatePolicy.RESTRICTED)) > len(admission_validations(TemplatePolicy.BASELINE))


def test_specfleet_validate_takes_the_operators_policy(tmp_path: Path) -> None:
    manifest = tmp_path / "fleet.yaml"
    manifest.write_text(yaml.safe_dump(fleet_with(BY_NAME["hostPath volume"].template)))
    runner = CliRunner()
    refused = runner.invoke(app, ["validate", "-f", str(manifest)])
    assert refused.exit_code == 1 and "spec.template.spec.volumes[0].hostPath" in refused.output
    admitted = runner.invoke(app, ["validate", "-f", str(manifest), "--template-policy", "privileged"])
    assert admitted.exit_code == 0, admitted.output

"""`specfleet validate`'s judgement: every bad spec in the table gives its message, naming the field."""

import json

import pytest
import yaml

from specfleet.api.problems import Problem, Severity
from specfleet.hardware import MI300X, PRODUCTS
from specfleet.validation import errors, is_another_kind, reports_json, validate_document, validate_text

from bad_specs import BAD_SPECS, BASE, DELETE, BadSpec, merged


def test_the_base_of_the_table_is_valid() -> None:
    assert errors(validate_document(BASE)) == []


def test_the_table_is_large_and_ids_are_unique() -> None:
    assert len(BAD_SPECS) >= 25
    assert len({case.id for case in BAD_SPECS}) == len(BAD_SPECS)


@pytest.mark.parametrize("case", BAD_SPECS, ids=lambda case: case.id)
def test_bad_spec_is_refused_naming_the_field(case: BadSpec) -> None:
    problems = errors(validate_document(case.document()))
    lines = [str(p) for p in problems]
    assert any(p.field == case.field and case.offline in p.message for p in problems), lines


def test_deep_speculation_is_a_warning_not_an_error() -> None:
    problems = validate_document(merged(BASE, {"spec": {"speculative": {"numSpeculativeTokens": 12}}}))
    assert errors(problems) == []
    assert [p.field for p in problems if p.severity is Severity.WARNING] == ["spec.speculative.numSpeculativeTokens"]


def test_unpinned_drafter_is_a_warning() -> None:
    problems = validate_document(merged(BASE, {"spec": {"speculative": {"revision": DELETE}}}))
    assert errors(problems) == []
    assert "spec.speculative.revision" in [p.field for p in problems]


def test_wrong_kind_is_named() -> None:
    problems = validate_document({**BASE, "kind": "Deployment"})
    assert problems and problems[0].field == "apiVersion"
    assert "SpeculativeDeployment" in problems[0].message


def test_every_problem_of_a_document_is_reported_not_only_the_first() -> None:
    doc = merged(BASE, {"spec": {"replicas": -1, "engine": {"gpuMemoryUtilization": 2}}})
    fields = {p.field for p in errors(validate_document(doc))}
    assert {"spec.replicas", "spec.engine.gpuMemoryUtilization"} <= fields


def _of(problems: list[Problem], severity: Severity) -> dict[str, str]:
    return {p.field: p.message for p in problems if p.severity is severity}


def test_a_product_name_no_node_carries_is_a_warning_naming_the_known_ones() -> None:
    problems = validate_document(merged(BASE, {"spec": {"accelerator": {"productNames": ["MI325X"]}}}))
    assert errors(problems) == []
    warning = _of(problems, Severity.WARNING)["spec.accelerator.productNames[0]"]
    assert "did you mean AMD_Instinct_MI325_OAM?" in warning
    assert all(product.product_name in warning for product in PRODUCTS)


def test_weights_too_big_for_an_unknown_product_are_not_checked_and_a_note_says_so() -> None:
    huge = {"model": {"sizeGiB": 400}, "accelerator": {"productNames": ["AMD_Instinct_MI999_OAM"]}}
    problems = validate_document(merged(BASE, {"spec": huge}))
    assert errors(problems) == []
    assert "not checked" in _of(problems, Severity.NOTE)["spec.accelerator.productNames"]
    assert "did you mean" not in _of(problems, Severity.WARNING)["spec.accelerator.productNames[0]"]


def test_the_budget_is_checked_against_the_known_products_of_a_list_with_an_unknown_one() -> None:
    names = ["MI999", "AMD_Instinct_MI355_OAM", "AMD_Instinct_MI300X_OAM"]
    problems = validate_document(
        merged(BASE, {"spec": {"model": {"sizeGiB": 400}, "accelerator": {"productNames": names}}})
    )
    assert "budget of a MI300X" in _of(problems, Severity.ERROR)["spec.model.sizeGiB"]  # the smallest known one
    assert list(_of(problems, Severity.WARNING)) == ["spec.accelerator.productNames[0]"]
    assert "spec.accelerator.productNames" not in _of(problems, Severity.NOTE)


def test_no_product_named_is_a_note_that_the_budget_is_not_checked() -> None:
    problems = validate_document(merged(BASE, {"spec": {"accelerator": {"productNames": []}}}))
    note = _of(problems, Severity.NOTE)["spec.accelerator.productNames"]
    assert "any GPU" in note and MI300X.product_name in note
    assert _of(problems, Severity.WARNING) == {}


def test_undeclared_sizes_are_notes_naming_the_budget_they_were_not_checked_against() -> None:
    undeclared = merged(BASE, {"spec": {"model": {"sizeGiB": DELETE}, "speculative": {"sizeGiB": DELETE}}})
    notes = _of(validate_document(undeclared), Severity.NOTE)
    budget = f"{MI300X.vram_gib * 0.9:.1f} GiB budget of a MI300X"
    assert budget in notes["spec.model.sizeGiB"] and budget in notes["spec.speculative.sizeGiB"]
    declared = merged(BASE, {"spec": {"speculative": {"sizeGiB": 0.8}}})
    assert _of(validate_document(declared), Severity.NOTE) == {}


def test_a_note_of_the_spec_is_not_repeated_for_each_candidate() -> None:
    candidates = [{"numSpeculativeTokens": 2}, {"method": "draft_model", "model": "meta-llama/Llama-3.2-1B-Instruct"}]
    problems = validate_document(merged(BASE, {"spec": {"autoTune": {"candidates": candidates}}}))
    notes = [p.field for p in problems if p.severity is Severity.NOTE]
    assert notes == ["spec.speculative.sizeGiB", "spec.autoTune.candidates[1].sizeGiB"]


@pytest.mark.parametrize(("replicas", "held", "warned"), [(2, 2, True), (1, 1, True), (0, 1, True), (3, 2, False)])
def test_a_holdback_that_cannot_run_is_a_warning_not_a_refusal(replicas: int, held: int, warned: bool) -> None:
    """Not an error: `replicas` is also written through the scale subresource (kubectl scale, an HPA, KEDA), and a
    refusal there would block scaling a fleet with a holdback down; the operator says in status why none runs."""
    document = merged(BASE, {"spec": {"replicas": replicas, "rollout": {"holdback": {"replicas": held}}}})
    problems = validate_document(document)
    assert errors(problems) == []
    warnings = _of(problems, Severity.WARNING)
    assert ("spec.rollout.holdback.replicas" in warnings) is warned
    if warned:
        assert f"replicas {replicas}" in warnings["spec.rollout.holdback.replicas"]


SECRET = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "hf-token"}, "stringData": {"token": "x"}}


def test_objects_of_other_kinds_are_skipped_but_a_typo_in_ours_is_not() -> None:
    assert is_another_kind(SECRET)
    assert not is_another_kind({**BASE, "kind": "SpeculativeDeploymnet"})
    assert not is_another_kind({"spec": {}})
    assert errors(validate_document({**BASE, "kind": "SpeculativeDeploymnet"}))


def test_a_file_with_a_secret_and_a_fleet_checks_the_fleet_and_counts_the_secret() -> None:
    bad = merged(BASE, {"metadata": {"name": "bad"}, "spec": {"replicas": -1}})
    report = validate_text("fleet.yaml", yaml.safe_dump_all([SECRET, BASE, None, bad]))
    assert [(d.position, d.name, d.valid) for d in report.documents] == [(2, "llama-eagle3", True), (4, "bad", False)]
    assert [(s.position, s.kind, s.name) for s in report.skipped] == [(1, "Secret", "hf-token")]


def test_a_json_file_is_read_as_json_and_a_broken_file_is_one_invalid_report() -> None:
    assert validate_text("fleet.json", json.dumps(BASE)).documents[0].valid
    (broken,) = validate_text("fleet.yaml", "spec: [unclosed\n").documents
    assert not broken.valid and broken.position is None
    assert broken.problems[0].message.startswith("not valid YAML") and "\n" not in broken.problems[0].message
    assert not validate_text("fleet.json", "{").documents[0].valid


def test_the_json_report_has_each_document_and_is_invalid_without_any() -> None:
    warned = merged(BASE, {"spec": {"speculative": {"numSpeculativeTokens": 12}}})
    report = reports_json([validate_text("a.yaml", yaml.safe_dump_all([SECRET, warned]))])
    assert report["valid"] is True
    (document,) = report["documents"]
    assert document["file"] == "a.yaml" and document["name"] == "llama-eagle3" and document["errors"] == []
    assert [w["field"] for w in document["warnings"]] == ["spec.speculative.numSpeculativeTokens"]
    assert report["skipped"] == [{"file": "a.yaml", "document": 1, "kind": "Secret", "name": "hf-token"}]
    assert reports_json([validate_text("only-a-secret.yaml", yaml.safe_dump(SECRET))])["valid"] is False

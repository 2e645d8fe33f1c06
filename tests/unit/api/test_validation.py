"""`specfleet validate`'s judgement: every bad spec in the table gives its message, naming the field."""

import pytest

from specfleet.api.problems import Severity
from specfleet.validation import errors, validate_document

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

"""Hostile and odd SpeculativeDeployments: `specfleet validate` and the real API server agree on what is
refused, and the operator's pure core never crashes on anything the API server admits.

hypothesis mutates the examples (near-valid documents: a field set to an out-of-range number, a value of
the wrong type, an unknown field, a required one removed, an empty list...) and each document goes
through both sides: the pydantic models (which generate the CRD) and a server-side dry run with strict
field validation. They must agree on accept/refuse; a refusal must name the same field on both sides.
Every admitted document, as the server stored it (defaults filled), is then parsed and decided on as
the operator would: never an exception, and when vLLM would refuse it, SpecValid=False naming the field.
"""

import copy
import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from specfleet.api.resource import SpeculativeDeployment
from specfleet.api.status import SpeculativeDeploymentStatus
from specfleet.api.vocabulary import GROUP, PLURAL, VERSION, ConditionType
from specfleet.observation import desired_revision, parse
from specfleet.rollout import Observation, decide
from specfleet.validation import errors, spec_problems, validate_document

from fleetkit import Fleet, Operator, wait_for

pytestmark = pytest.mark.integration

EXAMPLES = [yaml.safe_load(p.read_text()) for p in sorted((Path(__file__).parents[2] / "examples").glob("*.yaml"))]
ODD_VALUES = st.one_of(
    st.integers(min_value=-(2**40), max_value=2**40),
    st.sampled_from([0, -1, 1, 2, 64, 101, 10**6, 0.5, -0.5, 1.5, 1e308]),
    st.booleans(),
    st.none(),
    st.sampled_from(["", "-x", "1h", "30s", "0s", "abc", "ngram", "eagle3", "Rollback", "Pause", "--flag", "a\nb"]),
    st.lists(st.integers(min_value=-5, max_value=200), max_size=3),
    st.just({}),
    st.just({"unexpected": 1}),
)


def leaf_paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value inside `value` (mappings and lists), the containers included."""
    found = [path] if path else []
    if isinstance(value, dict):
        for key, child in value.items():
            found += leaf_paths(child, (*path, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            found += leaf_paths(child, (*path, index))
    return found


def set_path(document: dict[str, Any], path: tuple[Any, ...], value: Any) -> None:
    parent = document
    for part in path[:-1]:
        parent = parent[part]
    if value is REMOVE and isinstance(parent, dict):
        parent.pop(path[-1], None)
    elif value is not REMOVE:
        parent[path[-1]] = copy.deepcopy(value)  # never the same object twice in one document


REMOVE = object()


@st.composite
def near_valid(draw: st.DrawFn) -> dict[str, Any]:
    """An example with one to three fields of its spec changed, removed, or added."""
    document = copy.deepcopy(draw(st.sampled_from(EXAMPLES)))
    document["metadata"].pop("namespace", None)  # created in the test's namespace
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        paths = [("spec", *p) for p in leaf_paths(document["spec"])]
        path = draw(st.sampled_from(paths))
        kind = draw(st.sampled_from(["value", "value", "remove", "extra"]))
        if kind == "extra":
            target = path if isinstance(_get(document, path), dict) else path[:-1]
            if isinstance(_get(document, target), dict):
                set_path(document, (*target, draw(st.sampled_from(["bogus", "numSpeculativeTokenz"]))), 1)
            continue
        set_path(document, path, REMOVE if kind == "remove" else draw(ODD_VALUES))
    return document


def _get(document: dict[str, Any], path: tuple[Any, ...]) -> Any:
    for part in path:
        document = document[part]
    return document


def model_verdict(document: dict[str, Any]) -> set[str] | None:
    """None when the models accept the document, else the YAML paths of the fields they refuse."""
    try:
        SpeculativeDeployment.from_mapping(document)
    except ValidationError:
        return {p.field for p in validate_document(document)}
    return None


def server_verdict(api: kubernetes.client.CustomObjectsApi, namespace: str, document: dict[str, Any]) -> Any:
    """The object as the API server would store it, or the ApiException explaining why it refuses it."""
    try:
        return api.create_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, document, dry_run="All", field_validation="Strict"
        )
    except kubernetes.client.ApiException as error:
        if error.status not in (400, 422):
            raise
        return error


def named_by_server(error: kubernetes.client.ApiException, fields: set[str]) -> bool:
    """Whether the server's message names one of `fields` (it writes `spec.a.b[0].c` or `.spec.a`)."""
    text = re.sub(r"\[(\d+)\]", r"[\1]", error.body or "")
    return any(field.split("[")[0].rsplit(".", 1)[-1] in text for field in fields)


def operator_decides(stored: dict[str, Any]) -> None:
    """What the operator does with an admitted object: parse, render, decide, without an exception."""
    parsed = parse(stored)
    assert parsed.sdep is not None, parsed.problems  # the server admitted it: the models must read it
    revision, problems = desired_revision(parsed.sdep)
    observation = Observation(
        now=datetime(2026, 11, 30, tzinfo=UTC), generation=1, desired_revision=revision, problems=problems
    )
    decision = decide(parsed.sdep.spec, SpeculativeDeploymentStatus(), observation)
    valid = next(c for c in decision.status.conditions if c.type == ConditionType.SPEC_VALID)
    refused = errors(spec_problems(parsed.sdep.spec))
    assert (valid.status == "False") == bool(refused or problems), (valid, refused, problems)
    if refused:
        assert all(p.field in valid.message for p in refused), (valid.message, refused)


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    derandomize=True,
)
@given(document=near_valid())
def test_validate_and_the_api_server_agree_and_the_operator_takes_what_is_admitted(
    k8s_api: kubernetes.client.ApiClient, crd_installed: None, namespace: str, document: dict[str, Any]
) -> None:
    api = kubernetes.client.CustomObjectsApi(k8s_api)
    refused_by_models = model_verdict(document)
    answer = server_verdict(api, namespace, document)
    event("refused" if isinstance(answer, kubernetes.client.ApiException) else "admitted")
    if isinstance(answer, kubernetes.client.ApiException):
        assert refused_by_models is not None, f"the API server refuses what validate admits: {answer.body}"
        assert named_by_server(answer, refused_by_models), (refused_by_models, answer.body)
        return
    assert refused_by_models is None, f"validate refuses what the API server admits: {refused_by_models}"
    operator_decides(answer)


def test_the_largest_object_the_schema_admits_still_gets_its_status(
    operator: Operator, fleet: Fleet, k8s_api: kubernetes.client.ApiClient
) -> None:
    """Every list and string of the spec at its schema maximum, and annotations at the API server's own
    256 KiB limit: the object is admitted, and the operator's status (with its history) still fits under
    etcd's 1.5 MiB request limit, so the object is judged like any other instead of failing every write."""
    document = copy.deepcopy(EXAMPLES[0])
    document["metadata"] = {"name": "largest", "annotations": {f"example.com/a{i}": "x" * 60_000 for i in range(4)}}
    engine = document["spec"].setdefault("engine", {})
    engine["env"] = [{"name": f"E{i}", "value": "v" * 4096} for i in range(64)]
    engine["extraArgs"] = [f"--x{i}={'a' * 1000}" for i in range(64)]
    fleet.custom.create_namespaced_custom_object(GROUP, VERSION, fleet.namespace, PLURAL, document)
    size = len(json.dumps(fleet.get("largest")))
    conditions = wait_for("a status", lambda: fleet.status("largest").get("conditions"), timeout=60)
    assert {c["type"] for c in conditions} >= {"SpecValid", "Available", "Progressing"}, conditions
    assert fleet.status("largest")["observedGeneration"] == 1
    assert size > 500_000, size  # what the test claims: an object this large

"""The CRD is generated from the models, is structural, and defaults like the models do."""

import importlib
import inspect
import pkgutil
import re
from typing import Any

import yaml

import specfleet.api
from specfleet.api.base import ApiModel
from specfleet.api.crd import PRINTER_COLUMNS, crd, crd_yaml, without_nulls
from specfleet.api.spec import SpeculativeDeploymentSpec

from repokit import ROOT

FORBIDDEN_KEYS = {"$ref", "$defs", "anyOf", "oneOf", "allOf", "const", "title", "examples"}


def _schema() -> dict[str, Any]:
    return crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def _walk(node: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    nodes = [(path, node)]
    for name, child in node.get("properties", {}).items():
        nodes += _walk(child, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        nodes += _walk(node["items"], f"{path}[]")
    return nodes


def test_committed_crd_matches_the_models() -> None:
    committed = (ROOT / "crds" / "specfleet.io_speculativedeployments.yaml").read_text()
    assert committed == crd_yaml(), "run: specfleet crd > crds/specfleet.io_speculativedeployments.yaml"


def test_yaml_round_trips() -> None:
    assert yaml.safe_load(crd_yaml()) == crd()


INT_OR_STRING = [{"type": "integer"}, {"type": "string"}]
"""The one `anyOf` a structural schema allows, under `x-kubernetes-int-or-string`."""


def _structural_violations(path: str, node: dict[str, Any]) -> list[str]:
    int_or_string = node.get("x-kubernetes-int-or-string") is True and node.get("anyOf", INT_OR_STRING) == INT_OR_STRING
    found = [f"{path}: {key}" for key in FORBIDDEN_KEYS & node.keys() if not (key == "anyOf" and int_or_string)]
    if "type" not in node and not node.get("x-kubernetes-preserve-unknown-fields") and not int_or_string:
        found.append(f"{path}: no type")
    if "properties" in node and "additionalProperties" in node:
        found.append(f"{path}: additionalProperties beside properties")
    if "exclusiveMinimum" in node and not (node["exclusiveMinimum"] is True and "minimum" in node):
        found.append(f"{path}: exclusiveMinimum must be boolean with minimum")
    return found


def test_every_node_is_structural() -> None:
    violations = [v for path, node in _walk(_schema()) for v in _structural_violations(path or "<root>", node)]
    assert violations == []


def test_the_structural_check_catches_a_ref() -> None:
    assert _structural_violations("x", {"$ref": "#/$defs/Y"}) == ["x: $ref", "x: no type"]


def test_lists_and_strings_under_spec_are_bounded_for_cel_cost() -> None:
    for path, node in _walk(_schema()["properties"]["spec"], "spec"):
        if node.get("type") == "array":
            assert "maxItems" in node, path
        if node.get("type") == "string" and "enum" not in node:
            assert "maxLength" in node, path


def test_every_python_rule_has_its_cel_half_in_the_crd() -> None:
    rules_in_crd = {rule["rule"] for _, node in _walk(_schema()) for rule in node.get("x-kubernetes-validations", [])}
    models = [m for m in _all_models(SpeculativeDeploymentSpec) if m.rules]
    assert models, "expected models with rules"
    for model in models:
        for rule in model.rules:
            if rule.cel is not None:
                assert rule.cel in rules_in_crd, f"{model.__name__}: {rule.message}"


def _all_models(model: type[ApiModel]) -> set[type[ApiModel]]:
    found = {model}
    for field in model.model_fields.values():
        for arg in _type_args(field.annotation):
            if isinstance(arg, type) and issubclass(arg, ApiModel) and arg not in found:
                found |= _all_models(arg)
    return found


def _type_args(annotation: Any) -> list[Any]:
    args = list(getattr(annotation, "__args__", ()))
    nested = [a for arg in args for a in _type_args(arg)]
    return [annotation, *args, *nested]


def _apply_defaults(node: dict[str, Any], value: Any) -> Any:
    """What the API server's structural defaulting does to `value`."""
    if isinstance(value, dict):
        properties = node.get("properties", {})
        out = dict(value)
        for name, child in properties.items():
            if name not in out and "default" in child:
                out[name] = child["default"]
            if name in out:
                out[name] = _apply_defaults(child, out[name])
        return out
    if isinstance(value, list) and "items" in node:
        return [_apply_defaults(node["items"], item) for item in value]
    return value


def test_api_server_defaults_equal_the_models_defaults() -> None:
    minimal = {"model": {"name": "m"}, "speculative": {"method": "ngram"}}
    by_server = _apply_defaults(_schema()["properties"]["spec"], minimal)
    by_models = SpeculativeDeploymentSpec.model_validate(minimal).model_dump(mode="json", by_alias=True)
    assert by_server == without_nulls(by_models)


def _node_at(json_path: str) -> dict[str, Any]:
    node = _schema()
    for part in json_path.strip(".").split("."):
        assert part in node.get("properties", {}), json_path
        node = node["properties"][part]
    return node


def test_printer_columns_and_scale_paths_point_into_the_schema() -> None:
    version = crd()["spec"]["versions"][0]
    paths = [c["jsonPath"] for c in PRINTER_COLUMNS if not c["jsonPath"].startswith(".metadata")]
    paths += [p for p in version["subresources"]["scale"].values()]
    for json_path in paths:
        _node_at(json_path)


def test_printer_columns_have_the_type_of_their_field() -> None:
    for column in PRINTER_COLUMNS:
        if not column["jsonPath"].startswith(".metadata"):
            assert _node_at(column["jsonPath"])["type"] == column["type"], column["name"]


def test_the_revision_hashes_are_columns_of_the_wide_output_only() -> None:
    wide = {c["jsonPath"] for c in PRINTER_COLUMNS if c.get("priority", 0) > 0}
    assert wide == {".status.stableRevision", ".status.canaryRevision"}


KUBERNETES_NAMES = frozenset(
    {
        "SpeculativeDeployment",
        "ObjectMeta",
        "PodTemplate",
        "ResourceRequirements",
        "VolumeMount",
        "LocalObjectReference",
    }
)
"""Classes of specfleet.api named as Kubernetes names what a user writes: a description may name those."""


def _api_class_names() -> frozenset[str]:
    """The classes specfleet.api defines whose names only a reader of its Python knows: every CamelCase name of
    two words or more (a one-word name such as `Step` reads as the word)."""
    names: set[str] = set()
    for module in pkgutil.iter_modules(specfleet.api.__path__):
        loaded = importlib.import_module(f"specfleet.api.{module.name}")
        names |= {n for n, o in vars(loaded).items() if inspect.isclass(o) and o.__module__ == loaded.__name__}
    return frozenset(n for n in names if not re.fullmatch(r"[A-Z][a-z]+", n)) - KUBERNETES_NAMES


def _fields(node: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    """Every field at every depth: the properties, and the properties of list items (an item is no field)."""
    fields = []
    for name, child in node.get("properties", {}).items():
        fields += [(f"{path}.{name}", child), *_fields(child, f"{path}.{name}")]
    if isinstance(node.get("items"), dict):
        fields += _fields(node["items"], f"{path}[]")
    return fields


def _description_problems(schema: dict[str, Any], class_names: frozenset[str]) -> list[str]:
    problems = []
    for path, node in _fields(schema):
        description = node.get("description", "").strip()
        if not description:
            problems.append(f"{path}: no description")
        named = sorted(name for name in class_names if re.search(rf"\b{name}\b", description))
        if named:
            problems.append(f"{path}: names the Python class {', '.join(named)}")
    return problems


def test_every_field_has_a_description_that_names_no_python_class() -> None:
    schema = _schema()
    ours = {**schema, "properties": {k: v for k, v in schema["properties"].items() if k != "metadata"}}
    assert _description_problems(ours, _api_class_names()) == []  # the API server takes metadata bare


def test_the_description_check_catches_a_missing_description_and_a_class_name() -> None:
    item = {"type": "object", "description": "an item", "properties": {"d": {"type": "integer"}}}
    listed = {"type": "array", "description": "a list", "items": item}
    named = {"type": "object", "description": "see AutoTuneSpec", "properties": {"c": listed}}
    schema = {"properties": {"a": {"type": "string"}, "b": named}}
    assert "AutoTuneSpec" in _api_class_names() and "Step" not in _api_class_names()
    assert _description_problems(schema, _api_class_names()) == [
        ".a: no description",
        ".b: names the Python class AutoTuneSpec",
        ".b.c[].d: no description",
    ]


def test_names_short_names_and_category() -> None:
    names = crd()["spec"]["names"]
    assert names["kind"] == "SpeculativeDeployment"
    assert "sdep" in names["shortNames"]
    assert names["categories"] == ["specfleet"]

"""Generate the SpeculativeDeployment CRD from the pydantic models, the one source of truth.

pydantic emits JSON Schema 2020-12; Kubernetes wants a *structural* OpenAPI v3 schema. The
conversion inlines `$ref`s, drops the `null` branch of optional fields, turns numeric exclusive
bounds into OpenAPI's boolean form, removes what structural schemas forbid, and writes object
defaults as `{}` so the API server fills nested defaults itself.
"""

import copy
from typing import Any

import yaml
from pydantic import BaseModel

from specfleet.api import resource
from specfleet.api.spec import SpeculativeDeploymentSpec
from specfleet.api.status import SpeculativeDeploymentStatus
from specfleet.api.vocabulary import GROUP, KIND, PLURAL, VERSION

Schema = dict[str, Any]

_DROPPED_KEYS = ("title", "examples", "const", "$defs")

WIDE = 1
"""Printer-column priority shown only by `kubectl get -o wide`."""

PRINTER_COLUMNS: list[dict[str, Any]] = [
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    {"name": "Step", "type": "string", "description": "Canary step / steps", "jsonPath": ".status.stepProgress"},
    {
        "name": "Weight",
        "type": "integer",
        "description": "Canary share of traffic, %",
        "jsonPath": ".status.canaryWeight",
    },
    {"name": "Ready", "type": "string", "description": "Ready pods / replicas", "jsonPath": ".status.readySummary"},
    {"name": "Config", "type": "string", "description": "Speculative config", "jsonPath": ".status.config"},
    {"name": "Stable", "type": "string", "priority": WIDE, "jsonPath": ".status.stableRevision"},
    {"name": "Canary", "type": "string", "priority": WIDE, "jsonPath": ".status.canaryRevision"},
    {
        "name": "Alpha",
        "type": "number",
        "format": "float",
        "description": "Canary per-token acceptance alpha at the last analysis",
        "jsonPath": ".status.lastAnalysis.canary.acceptanceAlpha",
    },
    {
        "name": "P95-Token-ms",
        "type": "number",
        "format": "float",
        "description": "Canary p95 per-token latency (ms) at the last analysis",
        "jsonPath": ".status.canaryTokenLatencyP95Ms",
    },
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]

NAME_RULE = {
    "rule": f"self.metadata.name.size() <= {resource.MAX_NAME_LENGTH} && "
    f"self.metadata.name.matches('{resource.NAME_PATTERN}')",
    "message": f"metadata.name must be a DNS-1035 label of at most {resource.MAX_NAME_LENGTH} characters "
    "(lower-case letters, digits and '-', starting with a letter): it names the child Deployments and Services",
}


def structural_schema(model: type[BaseModel]) -> Schema:
    """The model's JSON schema, converted to a Kubernetes structural schema."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    definitions = raw.get("$defs", {})
    return _convert(raw, definitions)


def _convert(node: Schema, definitions: dict[str, Schema]) -> Schema:
    node = _inline(node, definitions)
    node = _drop_null_branch(node, definitions)
    out: Schema = {}
    for key, value in node.items():
        if key in _DROPPED_KEYS:
            continue
        if key == "properties":
            out[key] = {name: _convert(child, definitions) for name, child in value.items()}
        elif key == "items" or (key == "additionalProperties" and isinstance(value, dict)):
            out[key] = _convert(value, definitions)
        elif key == "additionalProperties" and value is False:
            continue  # extra="forbid": the API server refuses unknown fields on its own
        elif key == "propertyNames":  # not structural: the same check as a CEL rule over the keys
            out.setdefault("x-kubernetes-validations", []).append(_keys_rule(value))
        elif key == "patternProperties":  # a map with a key pattern: its values, and the pattern as CEL
            ((pattern, values),) = value.items()
            out["additionalProperties"] = _convert(values, definitions)
            out.setdefault("x-kubernetes-validations", []).append(_keys_rule({"pattern": pattern}))
        elif key == "description":
            out[key] = " ".join(value.split())
        elif key in ("exclusiveMinimum", "exclusiveMaximum"):
            out["minimum" if key == "exclusiveMinimum" else "maximum"] = value
            out[key] = True
        else:
            out[key] = value
    if "default" in out:
        out["default"] = _structural_default(out)
        if out["default"] is None:
            del out["default"]
    return _readable_order(out)


def _keys_rule(names: Schema) -> dict[str, str]:
    """A map's `propertyNames` (a pattern and a length) as the CEL rule the API server can evaluate."""
    checks = []
    if "pattern" in names:
        checks.append(f"k.matches('{names['pattern']}')")
    if "maxLength" in names:
        checks.append(f"size(k) <= {names['maxLength']}")
    if "minLength" in names:
        checks.append(f"size(k) >= {names['minLength']}")
    wanted = ", ".join(f"{name} {value}" for name, value in names.items())
    return {"rule": f"self.all(k, {' && '.join(checks)})", "message": f"keys must have {wanted}"}


def _readable_order(node: Schema) -> Schema:
    """type and description first, nested properties last: easier to read in the committed YAML."""
    first = [k for k in ("type", "description", "default", "enum") if k in node]
    last = [k for k in ("properties", "items", "required", "x-kubernetes-validations") if k in node]
    middle = [k for k in node if k not in first and k not in last]
    return {k: node[k] for k in first + middle + last}


def without_nulls(value: Any) -> Any:
    """A default as the API server stores it: unset optional fields are absent, not null."""
    if isinstance(value, dict):
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [without_nulls(v) for v in value]
    return value


def _inline(node: Schema, definitions: dict[str, Schema]) -> Schema:
    """Replace a `$ref` by a copy of its definition; the node's own keys (description, default) win."""
    if "$ref" not in node:
        return node
    name = node["$ref"].rsplit("/", 1)[-1]
    merged = copy.deepcopy(definitions[name])
    merged.update({k: v for k, v in node.items() if k != "$ref"})
    return _inline(merged, definitions)


def _drop_null_branch(node: Schema, definitions: dict[str, Schema]) -> Schema:
    """`X | None` is `anyOf: [X, {type: null}]`: keep X (absent means unset; null is never stored)."""
    branches = node.get("anyOf")
    if branches is None or node.get("x-kubernetes-int-or-string"):
        return node
    kept = [b for b in branches if b.get("type") != "null"]
    if len(kept) != 1:
        raise ValueError(f"cannot express a union of {len(kept)} types structurally: {node}")
    merged = _inline(copy.deepcopy(kept[0]), definitions)
    merged.update({k: v for k, v in node.items() if k != "anyOf"})
    return _drop_null_branch(merged, definitions)


def _structural_default(node: Schema) -> Any:
    """Write an object default as `{}` when the properties' own defaults rebuild it exactly."""
    default = without_nulls(node["default"])
    if not (isinstance(default, dict) and node.get("type") == "object"):
        return default
    return {} if default == _implied_default(node) else default


def _implied_default(node: Schema) -> dict[str, Any]:
    """What the API server writes into `{}` for this object: each property's default, recursively."""
    implied = {}
    for name, child in node.get("properties", {}).items():
        if "default" in child:
            value = child["default"]
            implied[name] = _implied_default(child) if value == {} and child.get("type") == "object" else value
    return implied


def crd() -> Schema:
    """The CustomResourceDefinition object."""
    spec_schema = structural_schema(SpeculativeDeploymentSpec)
    status_schema = structural_schema(SpeculativeDeploymentStatus)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{PLURAL}.{GROUP}",
            "labels": {"app.kubernetes.io/name": "specfleet", "app.kubernetes.io/part-of": "specfleet"},
        },
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": resource.SINGULAR,
                "shortNames": list(resource.SHORT_NAMES),
                "categories": list(resource.CATEGORIES),
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {
                        "status": {},
                        "scale": {
                            "specReplicasPath": ".spec.replicas",
                            "statusReplicasPath": ".status.replicas",
                            "labelSelectorPath": ".status.selector",
                        },
                    },
                    "additionalPrinterColumns": PRINTER_COLUMNS,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": SpeculativeDeploymentSpec.__doc__,
                            "required": ["spec"],
                            "properties": {
                                "apiVersion": {"type": "string", "description": f"`{GROUP}/{VERSION}`."},
                                "kind": {"type": "string", "description": f"`{KIND}`."},
                                # the API server refuses anything but a bare type on a CR's metadata
                                "metadata": {"type": "object"},
                                "spec": spec_schema,
                                "status": status_schema,
                            },
                            "x-kubernetes-validations": [NAME_RULE],
                        }
                    },
                }
            ],
        },
    }


def crd_yaml() -> str:
    """The CRD as the YAML committed under crds/ (and the chart); stable across runs."""
    header = "# Generated by `specfleet crd` from operator/specfleet/api; do not edit by hand.\n"
    return header + yaml.safe_dump(crd(), sort_keys=False, width=100)

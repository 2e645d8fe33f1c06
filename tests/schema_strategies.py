"""Documents drawn from the CRD's own OpenAPI schema: every value the API server's structural checks admit,
biased to the edges a hostile tenant would type (the bounds, zero, the longest string, the empty list).

Only what the structural schema says is drawn; CEL rules and the operator's own checks then admit or refuse
the document, as they do on the cluster. hypothesis-jsonschema would be the library for this, but its last
release does not run on current hypothesis.
"""

import math
from typing import Any

from hypothesis import strategies as st

MAX_LIST = 3
"""Items drawn per list at most (within the schema's own bounds): the judge's cost grows with them, its edges
do not."""


def _number(schema: dict[str, Any], integer: bool) -> st.SearchStrategy[Any]:
    low, high = schema.get("minimum"), schema.get("maximum")
    if integer:
        low = -(2**53) if low is None else math.ceil(low) + (1 if schema.get("exclusiveMinimum") else 0)
        high = 2**53 if high is None else math.floor(high) - (1 if schema.get("exclusiveMaximum") else 0)
        edges = {low, high, *(v for v in (0, 1, -1) if low <= v <= high)}
        return st.sampled_from(sorted(edges)) | st.integers(min_value=low, max_value=high)
    low = -1e308 if low is None else low
    high = 1e308 if high is None else high
    exclusive = {
        "exclude_min": bool(schema.get("exclusiveMinimum")),
        "exclude_max": bool(schema.get("exclusiveMaximum")),
    }
    edges = [v for v in (low, high, 0.0, 1.0, 5e-324, 1e-9) if low <= v <= high]
    edges = [
        v for v in edges if not ((exclusive["exclude_min"] and v == low) or (exclusive["exclude_max"] and v == high))
    ]
    floats = st.floats(min_value=low, max_value=high, allow_nan=False, allow_infinity=False, **exclusive)
    return (st.sampled_from(edges) | floats) if edges else floats


def _string(schema: dict[str, Any]) -> st.SearchStrategy[str]:
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    longest = schema.get("maxLength", 64)
    if "pattern" in schema:
        return st.from_regex(schema["pattern"], fullmatch=True).filter(
            lambda text: schema.get("minLength", 0) <= len(text) <= longest
        )
    return st.text(min_size=schema.get("minLength", 0), max_size=min(longest, 64))


def from_schema(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values the structural `schema` admits (an openAPIV3Schema of a CRD version, or a part of it)."""
    if "anyOf" in schema or schema.get("x-kubernetes-int-or-string"):
        choices = schema.get("anyOf") or [{"type": "integer", "minimum": 0}, {"type": "string", "maxLength": 8}]
        rest = {key: value for key, value in schema.items() if key not in ("anyOf", "x-kubernetes-int-or-string")}
        return st.one_of([from_schema({**rest, **choice}) for choice in choices])
    kind = schema.get("type")
    if kind == "object":
        if "properties" not in schema:
            return st.just({})  # maps and preserved fields: their contents are not the judge's
        required = set(schema.get("required", ()))
        fields = {name: from_schema(part) for name, part in schema["properties"].items()}
        optional = sorted(set(fields) - required)
        return st.fixed_dictionaries(
            {name: fields[name] for name in sorted(required)},
            optional={name: fields[name] for name in optional},
        )
    if kind == "array":
        low = schema.get("minItems", 0)
        return st.lists(
            from_schema(schema["items"]),
            min_size=low,
            max_size=max(low, min(schema.get("maxItems", MAX_LIST), MAX_LIST)),
        )
    if kind == "integer":
        return _number(schema, integer=True)
    if kind == "number":
        return _number(schema, integer=False)
    if kind == "boolean":
        return st.booleans()
    if kind == "string":
        return _string(schema)
    return st.none()

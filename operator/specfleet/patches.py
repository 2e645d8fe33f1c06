"""Pure helpers to decide whether a write is needed, and what the smallest write is."""

import copy
import hashlib
import json
from collections.abc import Mapping
from typing import Any

APPLIED_ANNOTATION = "specfleet.io/applied"


def stamped(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """The manifest with a digest of itself as an annotation.

    `contains` alone cannot see a key that the new manifest dropped (a Service selector losing its
    track label): the digest changes then, so the object is applied again.
    """
    out = copy.deepcopy(dict(manifest))
    digest = hashlib.sha256(json.dumps(out, sort_keys=True).encode()).hexdigest()[:16]
    out["metadata"].setdefault("annotations", {})[APPLIED_ANNOTATION] = digest
    return out


def contains(observed: Any, desired: Any) -> bool:
    """Whether every field of `desired` has the same value in `observed` (server defaults may add more)."""
    if isinstance(desired, Mapping):
        return isinstance(observed, Mapping) and all(
            k in observed and contains(observed[k], v) for k, v in desired.items()
        )
    if isinstance(desired, list):
        return (
            isinstance(observed, list)
            and len(observed) == len(desired)
            and all(contains(o, d) for o, d in zip(observed, desired, strict=True))
        )
    return observed == desired


def merge_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The RFC 7386 merge patch that turns `old` into `new`: changed keys, and nulls for removed ones."""
    patch: dict[str, Any] = {key: None for key in old if key not in new}
    for key, value in new.items():
        before = old.get(key)
        if isinstance(value, Mapping) and isinstance(before, Mapping):
            nested = merge_patch(before, value)
            if nested:
                patch[key] = nested
        elif before != value or key not in old:
            patch[key] = value
    return patch

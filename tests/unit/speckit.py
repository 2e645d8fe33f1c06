"""Builders of SpeculativeDeployment objects from the suite's valid document, bad_specs.BASE."""

from typing import Any

from specfleet.api.resource import SpeculativeDeployment

from bad_specs import BASE, merged


def sdep(patch: dict[str, Any] | None = None) -> SpeculativeDeployment:
    """A SpeculativeDeployment: bad_specs.BASE with `patch` merged over it."""
    return SpeculativeDeployment.from_mapping(merged(BASE, patch or {}))

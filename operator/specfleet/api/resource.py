"""The `SpeculativeDeployment` kind: names, the whole object, and parsing it from YAML or the API."""

import json
from collections.abc import Mapping
from datetime import date, datetime
from typing import Annotated, Any

from pydantic import Field

from specfleet.api.base import ApiModel, without_null_fields
from specfleet.api.spec import SpeculativeDeploymentSpec
from specfleet.api.status import SpeculativeDeploymentStatus
from specfleet.api.vocabulary import API_VERSION, GROUP, KIND, VERSION

SINGULAR = "speculativedeployment"
SHORT_NAMES = ("sdep", "specdeploy")
CATEGORIES = ("specfleet",)

MAX_NAME_LENGTH = 50
"""Child names are `<name>-canary` and so on, and Service names are DNS-1035 labels of 63 at most."""
NAME_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"


class ObjectMeta(ApiModel):
    """The parts of metadata specfleet reads; the rest passes through untouched."""

    model_config = ApiModel.model_config | {"extra": "ignore"}

    name: Annotated[str, Field(min_length=1, max_length=MAX_NAME_LENGTH, pattern=NAME_PATTERN)]
    namespace: str = "default"
    uid: str | None = None
    generation: int | None = None
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    managed_fields: list[dict[str, Any]] = []
    """Who set which field when: tells a command annotation given again from one never removed."""

    def annotation_set_at(self, key: str) -> str:
        """When `key` was last written, from managedFields ('' when the server did not say)."""
        times = [
            str(entry.get("time", ""))
            for entry in self.managed_fields
            if f"f:{key}" in ((entry.get("fieldsV1") or {}).get("f:metadata") or {}).get("f:annotations", {})
        ]
        return max(times, default="")


class SpeculativeDeployment(ApiModel):
    """A whole SpeculativeDeployment object as stored by the API server."""

    api_version: Annotated[str, Field(pattern=f"^{GROUP}/{VERSION}$")] = API_VERSION
    kind: Annotated[str, Field(pattern=f"^{KIND}$")] = KIND
    metadata: ObjectMeta
    spec: SpeculativeDeploymentSpec
    status: SpeculativeDeploymentStatus = SpeculativeDeploymentStatus()

    @classmethod
    def from_mapping(cls, body: Mapping[str, Any]) -> "SpeculativeDeployment":
        """Parse a manifest or an API body (kopf's Body is a Mapping too) with the API server's JSON typing.

        Strict JSON parsing refuses what the API server refuses (`true` or `"2"` for an integer, a number
        for a string) instead of coercing it; `null` is absent, as the API server prunes it from
        non-nullable fields before defaulting; timestamps that YAML parsed are sent back as RFC 3339.
        """
        pruned = without_null_fields(cls, dict(body))
        return cls.model_validate_json(json.dumps(pruned, default=_rfc3339), strict=True)


def _rfc3339(value: Any) -> str:
    """YAML turns unquoted timestamps into datetimes; JSON (and the API server) has them as strings."""
    if isinstance(value, datetime | date):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not a JSON value")

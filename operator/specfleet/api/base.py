"""The base of every API model: camelCase on the wire, and cross-field rules written once.

A cross-field rule is a `Rule`: a CEL expression that the API server evaluates (it lands in the CRD
as `x-kubernetes-validations`) and the same rule as a Python predicate that `specfleet validate` and
the operator evaluate offline. Both halves sit side by side in the model that owns them, and the
integration tests send every bad example to a real API server, so the two cannot drift silently.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict, GetJsonSchemaHandler, model_validator
from pydantic.alias_generators import to_camel
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, PydanticCustomError


@dataclass(frozen=True)
class Rule:
    """A cross-field invariant, in CEL for the API server and in Python for everything else."""

    cel: str | None
    """None for rules the API server cannot evaluate (e.g. over free-form maps): enforced offline only."""
    message: str
    holds: Callable[[Any], bool]
    field_path: str | None = None  # relative to the model, e.g. ".model"; names the field in errors

    def to_schema(self) -> dict[str, str] | None:
        if self.cel is None:
            return None
        rule = {"rule": self.cel, "message": self.message}
        if self.field_path:
            rule["fieldPath"] = self.field_path
        return rule


class ApiModel(BaseModel):
    """camelCase aliases, unknown fields refused (as kubectl's strict field validation does)."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        extra="forbid",
        frozen=True,
        use_attribute_docstrings=True,
    )

    rules: ClassVar[tuple[Rule, ...]] = ()

    @model_validator(mode="after")
    def _check_rules(self) -> Self:
        for rule in type(self).rules:
            if not rule.holds(self):
                raise PydanticCustomError("rule", rule.message, {"field_path": rule.field_path or ""})
        return self

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        """Put the CEL halves of `rules` into the schema, where the CRD generator finds them."""
        json_schema = handler(core_schema)
        if cls.rules:
            target = handler.resolve_ref_schema(json_schema)
            rules = [schema for rule in cls.rules if (schema := rule.to_schema()) is not None]
            if rules:
                target["x-kubernetes-validations"] = rules
        return json_schema

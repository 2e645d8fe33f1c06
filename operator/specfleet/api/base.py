"""The base of every API model: camelCase on the wire, and cross-field rules written once.

A cross-field rule is a `Rule`: a CEL expression that the API server evaluates (it lands in the CRD
as `x-kubernetes-validations`) and the same rule as a Python predicate that `specfleet validate` and
the operator evaluate offline. Both halves sit side by side in the model that owns them, and the
integration tests send every bad example to a real API server, so the two cannot drift silently.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Self, get_args, get_origin

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


class UnknownFieldError(AttributeError):
    """A copy of a model was asked to change fields the model does not have (a misspelt name, say)."""

    def __init__(self, model: str, fields: list[str]) -> None:
        self.model, self.fields = model, fields
        super().__init__(f"{model} has no field {', '.join(fields)}")


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

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """pydantic's copy, but a key that names no field raises instead of vanishing from the copy (pydantic
        sets it as an attribute that no dump, and so no status write, ever carries)."""
        unknown = sorted(set(update or ()) - set(type(self).model_fields))
        if unknown:
            raise UnknownFieldError(type(self).__name__, unknown)
        return super().model_copy(update=update, deep=deep)

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


def without_null_fields(model: type[BaseModel], data: Any) -> Any:
    """`data` without the `null`s of `model`'s known fields, at every depth: the API server prunes those
    before defaulting (an empty `replicas:` in YAML gets the default), while an unknown field stays an
    unknown field even when it is null."""
    if not isinstance(data, Mapping):
        return data
    fields = {field.alias or name: field for name, field in model.model_fields.items()}
    pruned = {}
    for key, value in data.items():
        field = fields.get(key)
        if field is None:
            pruned[key] = value
        elif value is not None:
            pruned[key] = _prune_value(field.annotation, value)
    return pruned


def _prune_value(annotation: Any, value: Any) -> Any:
    models = [t for t in _types_in(annotation) if isinstance(t, type) and issubclass(t, BaseModel)]
    if not models:
        return value
    if isinstance(value, list):
        return [without_null_fields(models[0], item) for item in value]
    return without_null_fields(models[0], value)


def _types_in(annotation: Any) -> list[Any]:
    """The classes an annotation is made of: `Annotated[list[Step], ...] | None` -> [list, Step, NoneType]."""
    args = get_args(annotation)
    if not args:
        return [annotation]
    found = [get_origin(annotation)]
    for arg in args:
        found += _types_in(arg)
    return found

"""Problems found in a SpeculativeDeployment, each naming the field it is about."""

from dataclasses import dataclass
from enum import StrEnum


class Severity(StrEnum):
    """ERROR refuses the spec; WARNING is a risk it may run with; NOTE says what could not be checked, and why."""

    ERROR = "error"
    WARNING = "warning"
    NOTE = "note"


@dataclass(frozen=True)
class Problem:
    """One thing wrong (or risky) with a spec: `field` is a path such as `spec.speculative.model`."""

    field: str
    message: str
    severity: Severity = Severity.ERROR

    def __str__(self) -> str:
        prefix = "" if self.severity is Severity.ERROR else f"{self.severity.value}: "
        return f"{prefix}{self.field}: {self.message}"


class InvalidSpecError(ValueError):
    """A spec that cannot be rendered; carries every problem, not only the first."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("; ".join(str(p) for p in problems))

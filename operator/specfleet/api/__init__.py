"""The SpeculativeDeployment API: pydantic models (the source of truth) and the CRD made from them.

The models load on first use (PEP 562): building them takes about 0.15 s, which importing
`specfleet.api.vocabulary` (the names the CLI, the simulator and the benchmarks need) must not pay.
"""

import importlib
from typing import TYPE_CHECKING, Any

from specfleet.api.vocabulary import API_VERSION, GROUP, KIND, PLURAL, VERSION

if TYPE_CHECKING:
    from specfleet.api.problems import InvalidSpecError, Problem, Severity
    from specfleet.api.resource import SpeculativeDeployment
    from specfleet.api.spec import SpeculativeDeploymentSpec, SpeculativeMethod
    from specfleet.api.status import Phase, SpeculativeDeploymentStatus, Verdict

_MODULE_OF = {
    "InvalidSpecError": "problems",
    "Problem": "problems",
    "Severity": "problems",
    "SpeculativeDeployment": "resource",
    "SpeculativeDeploymentSpec": "spec",
    "SpeculativeMethod": "spec",
    "Phase": "status",
    "SpeculativeDeploymentStatus": "status",
    "Verdict": "status",
}

__all__ = [
    "API_VERSION",
    "GROUP",
    "KIND",
    "PLURAL",
    "VERSION",
    "InvalidSpecError",
    "Phase",
    "Problem",
    "Severity",
    "SpeculativeDeployment",
    "SpeculativeDeploymentSpec",
    "SpeculativeDeploymentStatus",
    "SpeculativeMethod",
    "Verdict",
]


def __getattr__(name: str) -> Any:
    if name not in _MODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_MODULE_OF[name]}"), name)


def __dir__() -> list[str]:
    return sorted(__all__)

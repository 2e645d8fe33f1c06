"""The SpeculativeDeployment API: pydantic models (the source of truth) and the CRD made from them."""

from specfleet.api.problems import InvalidSpecError, Problem, Severity
from specfleet.api.resource import API_VERSION, GROUP, KIND, PLURAL, VERSION, SpeculativeDeployment
from specfleet.api.spec import SpeculativeDeploymentSpec, SpeculativeMethod
from specfleet.api.status import Phase, SpeculativeDeploymentStatus, Verdict

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

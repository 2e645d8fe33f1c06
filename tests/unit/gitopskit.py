"""The SpeculativeDeployments recorded from the dev cluster in each phase (tests/data/gitops, written by
tests/integration/test_gitops_health.py with SPECFLEET_RECORD_GITOPS=1), and what a GitOps tool should say of
each."""

import copy
import json
from typing import Any

from repokit import ROOT

RECORDS = ROOT / "tests" / "data" / "gitops"
ARGOCD = ROOT / "gitops" / "argocd"
KIND_DIR = ARGOCD / "resource_customizations" / "specfleet.io" / "SpeculativeDeployment"
FLUX = ROOT / "gitops" / "flux" / "healthcheckexprs.yaml"

ARGOCD_HEALTH = {
    "healthy": "Healthy",
    "canarying": "Progressing",
    "paused-at-gate": "Suspended",
    "aborted": "Degraded",
    "rolled-back": "Degraded",
    "invalid-spec": "Degraded",
    "no-capacity": "Degraded",
}
"""Each recorded phase and the Argo CD health it must show (Argo CD shows Argo Rollouts the same way)."""

FLUX_HEALTH = {
    "healthy": "Current",
    "canarying": "InProgress",
    "paused-at-gate": "InProgress",
    "aborted": "Failed",
    "rolled-back": "Failed",
    "invalid-spec": "Failed",
    "no-capacity": "Failed",
}
"""Each recorded phase and the kstatus result Flux must reach from the healthCheckExprs."""


def recorded(phase: str) -> dict[str, Any]:
    obj: dict[str, Any] = json.loads((RECORDS / f"{phase}.json").read_text())
    return obj


def of_a_newer_spec(phase: str) -> dict[str, Any]:
    """The record with its spec changed since the operator wrote the status (generation ahead)."""
    obj = copy.deepcopy(recorded(phase))
    obj["metadata"]["generation"] += 1
    return obj

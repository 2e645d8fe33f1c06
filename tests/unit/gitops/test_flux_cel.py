"""The Flux healthCheckExprs (gitops/flux), evaluated by a CEL library on the fleets recorded from the dev cluster
in each phase, in the order Flux's kustomize-controller reads them: `inProgress`, then `failed`, then `current`;
none true is in progress."""

from typing import Any

import celpy
import pytest
import yaml

from gitopskit import FLUX, FLUX_HEALTH, of_a_newer_spec, recorded
from repokit import ROOT

ORDER = (("inProgress", "InProgress"), ("failed", "Failed"), ("current", "Current"))


def flux_status(obj: dict[str, Any]) -> str:
    (check,) = yaml.safe_load(FLUX.read_text())["healthCheckExprs"]
    assert (check["apiVersion"], check["kind"]) == (obj["apiVersion"], obj["kind"])
    env = celpy.Environment()
    activation = {key: celpy.json_to_cel(value) for key, value in obj.items()}
    for field, result in ORDER:
        if env.program(env.compile(check[field])).evaluate(activation):
            return result
    return "InProgress"


@pytest.mark.parametrize("phase", sorted(FLUX_HEALTH))
def test_each_recorded_phase_reads_as_kstatus_should(phase: str) -> None:
    assert flux_status(recorded(phase)) == FLUX_HEALTH[phase]


@pytest.mark.parametrize("phase", sorted(FLUX_HEALTH))
def test_a_status_of_an_older_spec_is_in_progress(phase: str) -> None:
    assert flux_status(of_a_newer_spec(phase)) == "InProgress"


def test_docs_show_these_expressions() -> None:
    (check,) = yaml.safe_load(FLUX.read_text())["healthCheckExprs"]
    doc = (ROOT / "docs" / "gitops.md").read_text()
    shown = next(block for block in doc.split("```yaml")[1:] if "healthCheckExprs:" in block).split("```")[0]
    assert yaml.safe_load(shown)["spec"]["healthCheckExprs"] == [check]

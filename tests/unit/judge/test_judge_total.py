"""For every spec the CRD's schema admits and every answer Prometheus can give, an analysis ends in a verdict.

Specs are drawn from the generated CRD itself (`schema_strategies`), so a new field or a widened bound is
fuzzed the day it ships; each is kept only if the operator's model admits it, as the API server's CEL rules
would. Answers are what the provider passes on: finite numbers from zero through the tiniest subnormal to
1e308, missing series, any labels. The cases found by hand and by this test stay as `@example`s.
"""

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import yaml
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from specfleet.api.resource import SpeculativeDeployment
from specfleet.api.status import SpeculativeDeploymentStatus, Verdict
from specfleet.controller.analysis import analyze

from bad_specs import BASE, merged
from repokit import ROOT
from schema_strategies import from_schema

CRD = yaml.safe_load((ROOT / "crds" / "specfleet.io_speculativedeployments.yaml").read_text())
ROLLOUT = CRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["rollout"]
NOW = datetime(2026, 12, 3, 12, tzinfo=UTC)
STATUS = SpeculativeDeploymentStatus(
    stable_revision="s1", canary_revision="c1", current_step=0, analyses=2, evidence_since=NOW - timedelta(minutes=9)
)
VALUES = st.one_of(
    st.sampled_from([0.0, 5e-324, 1e-300, 1e-9, 0.5, 1.0, 3.0, 1e6, 1e300, 1e308]),
    st.floats(min_value=0, max_value=1e308),
)
"""What a counter's increase, a gauge or a bucket can read: finite (the provider refuses NaN and infinities
as malformed) and, for increases, not negative (Prometheus corrects counter resets)."""
LABELS = {
    "le": st.sampled_from(["+Inf", "0.001", "0.005", "0.02", "0.1", "1", "1e308", "0"]),
    "position": st.sampled_from(["0", "1", "2", "3", "7", "²", "٣", "9" * 5000]),  # what isdigit takes, int not
    "finished_reason": st.sampled_from(["stop", "length", "error", "abort"]),
    "pod": st.sampled_from(["a", "b", "c"]),
}


class Answers:
    """A metrics provider whose every answer is drawn by hypothesis, query by query."""

    def __init__(self, data: st.DataObject) -> None:
        self.data = data

    def scalar(self, query: str, at: float | None = None) -> float | None:
        return self.data.draw(st.none() | VALUES)

    def by_label(self, query: str, label: str, at: float | None = None) -> dict[str, float]:
        values = LABELS.get(label, st.text(max_size=3))
        return self.data.draw(st.dictionaries(values, VALUES, max_size=5))


def admitted(rollout: dict[str, Any]) -> SpeculativeDeployment:
    try:
        return SpeculativeDeployment.from_mapping(merged(BASE, {"spec": {"rollout": rollout}}))
    except ValidationError:
        assume(False)
        raise


ZERO_MIN_REQUESTS = {"guardrails": {"minRequests": 0}}
"""The schema's lower bound: with no finished request the judge divided by zero."""


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(rollout=from_schema(ROLLOUT), data=st.data())
@example(rollout=ZERO_MIN_REQUESTS, data=None).via("minRequests 0, an empty Prometheus")
def test_every_admitted_spec_and_answer_ends_in_a_verdict(rollout: dict[str, Any], data: st.DataObject | None) -> None:
    sdep = admitted(rollout)
    provider = Answers(data) if data is not None else EmptyPrometheus()

    analysis = analyze(provider, sdep, STATUS, NOW)

    assert analysis.verdict in Verdict
    if analysis.verdict is Verdict.PASS:  # never on evidence without a finished request on both tracks
        assert analysis.canary.requests > 0 and analysis.stable.requests > 0
    assert not [path for path, value in numbers(analysis.model_dump()) if not math.isfinite(value)]


class EmptyPrometheus:
    """No series for any query: a fresh Prometheus, a scrape gap, an idle canary."""

    def scalar(self, query: str, at: float | None = None) -> float | None:
        return None

    def by_label(self, query: str, label: str, at: float | None = None) -> dict[str, float]:
        return {}


def numbers(value: Any, path: str = "") -> list[tuple[str, float]]:
    """Every number in a dumped model, by its path: status is JSON, where NaN and infinities do not exist."""
    if isinstance(value, dict):
        return [n for key, v in value.items() for n in numbers(v, f"{path}.{key}")]
    if isinstance(value, list | tuple):
        return [n for i, v in enumerate(value) for n in numbers(v, f"{path}[{i}]")]
    return [(path, float(value))] if isinstance(value, int | float) and not isinstance(value, bool) else []

"""`rollout.guardrails.custom`: what a user writes is parsed into a rate or a latency, and what cannot be
judged, or could read another track, is refused naming the field (the bad_specs rows send the same to
`specfleet validate` and to the real API server)."""

import pytest
from pydantic import ValidationError

from specfleet.api.crd import structural_schema
from specfleet.api.custom_guardrails import CHECK_PREFIX, TRACK_LABELS, CustomGuardrail
from specfleet.api.resource import SpeculativeDeployment
from specfleet.api.spec import Guardrails
from specfleet.api.status import GuardrailCheck, Verdict
from specfleet.metrics import names

EXAMPLE = [
    {
        "name": "tool-calls-parsed",
        "rate": {"events": "tool_calls_parsed_total", "total": "tool_calls_total", "maxWorsening": 0.01},
    },
    {
        "name": "tool-latency",
        "latency": {"histogram": "tool_call_duration_seconds", "quantile": 0.99, "maxRegression": 0.2},
        "matchLabels": {"tool": "search"},
        "minEvents": 200,
    },
]


def test_a_rate_and_a_latency_are_parsed_with_their_defaults() -> None:
    parsed, latency = Guardrails.model_validate({"custom": EXAMPLE}).custom
    assert parsed.rate is not None and parsed.latency is None
    assert parsed.rate.higher_is_better and parsed.rate.max_worsening == 0.01 and parsed.min_events == 100
    assert parsed.check_name == "custom:tool-calls-parsed"
    assert (
        latency.latency is not None and latency.latency.quantile == 0.99 and latency.match_labels == {"tool": "search"}
    )
    assert Guardrails().custom == []


def test_the_check_name_fits_the_status_field() -> None:
    longest = CustomGuardrail.model_validate(
        {"name": "a" * 48, "latency": {"histogram": "x_seconds", "maxRegression": 0.1}}
    )
    GuardrailCheck(guardrail=longest.check_name, verdict=Verdict.PASS)
    assert longest.check_name.startswith(CHECK_PREFIX)
    with pytest.raises(ValidationError):
        CustomGuardrail.model_validate({"name": "a" * 49, "latency": {"histogram": "x_seconds", "maxRegression": 0.1}})


def test_the_labels_refused_in_match_labels_are_the_ones_the_track_selector_sets() -> None:
    assert TRACK_LABELS == (names.NAMESPACE, names.SDEP, names.TRACK, names.REVISION)


@pytest.mark.parametrize(
    ("guardrail", "says"),
    [
        ({"name": "x", "rate": {"events": "a_total", "total": "b", "maxWorsening": 0.01}}, "total must be a counter"),
        ({"name": "x", "latency": {"histogram": "a_sum", "maxRegression": 0.1}}, "base name"),
        ({"name": "x", "latency": {"histogram": "a_count", "maxRegression": 0.1}}, "base name"),
        ({"name": "x", "latency": {"histogram": "requests_total", "maxRegression": 0.1}}, "base name"),
        ({"name": "x", "latency": {"histogram": "a", "quantile": 0, "maxRegression": 0.1}}, "greater than 0"),
        ({"name": "x", "latency": {"histogram": "a"}}, "maxRegression"),
        ({"name": "x", "rate": {"events": "a_total", "total": "b_total"}}, "maxWorsening"),
        ({"name": "X y", "latency": {"histogram": "a", "maxRegression": 0.1}}, "pattern"),
        ({"name": "x", "latency": {"histogram": "a", "maxRegression": 0.1}, "matchLabels": {"le": "1"}}, "le"),
        ({"name": "x", "latency": {"histogram": "a", "maxRegression": 0.1}, "matchLabels": {"__name__": "y"}}, "__"),
        ({"name": "x", "latency": {"histogram": "a", "maxRegression": 0.1}, "matchLabels": {"a-b": "y"}}, "pattern"),
        ({"name": "x", "latency": {"histogram": "a b", "maxRegression": 0.1}}, "pattern"),
        ({"name": "x", "latency": {"histogram": "a", "maxRegression": 0.1}, "promql": "up"}, "Extra inputs"),
    ],
)
def test_what_cannot_be_judged_or_could_escape_the_track_is_refused(guardrail: dict, says: str) -> None:
    with pytest.raises(ValidationError, match=says):
        Guardrails.model_validate({"custom": [guardrail]})


def test_the_crd_carries_every_rule_for_the_api_server() -> None:
    rules = str(structural_schema(SpeculativeDeployment))
    for cel in (
        "self.events.endsWith('_total')",
        "self.total.endsWith('_total')",
        "has(self.rate) != has(self.latency)",
        "self.custom.exists_one(b, b.name == a.name)",
        "!self.histogram.matches('_(bucket|sum|count|total|created|info|ratio|perc|percent)$')",
    ):
        assert cel in rules

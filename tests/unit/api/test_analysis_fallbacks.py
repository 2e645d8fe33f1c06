"""`analysis.onNoData` and `analysis.onProviderError`: what each does when a spec gives only `after`.

A Prometheus outage is no evidence against a canary, so onProviderError pauses by default even when only its
delay is set; too long without conclusive data rolls back. The models and the CRD (whose nested defaults the
API server fills in before the operator reads the object) must agree.
"""

from typing import Any

import pytest

from specfleet.api.crd import structural_schema
from specfleet.api.resource import SpeculativeDeployment
from specfleet.api.spec import AnalysisSpec, FallbackAction, SpeculativeDeploymentSpec

from bad_specs import BASE, merged


def analysis(**fields: Any) -> AnalysisSpec:
    document = merged(BASE, {"spec": {"rollout": {"analysis": fields}}})
    return SpeculativeDeployment.from_mapping(document).spec.rollout.analysis


def test_only_a_delay_keeps_each_fallbacks_own_action() -> None:
    given = analysis(onNoData={"after": "5m"}, onProviderError={"after": "5m"})
    assert (given.on_no_data.after, given.on_no_data.action) == ("5m", FallbackAction.ROLLBACK)
    assert (given.on_provider_error.after, given.on_provider_error.action) == ("5m", FallbackAction.PAUSE)


def test_unset_fallbacks_take_their_defaults() -> None:
    given = analysis()
    assert (given.on_no_data.after, given.on_no_data.action) == ("30m", FallbackAction.ROLLBACK)
    assert (given.on_provider_error.after, given.on_provider_error.action) == ("10m", FallbackAction.PAUSE)


@pytest.mark.parametrize("action", list(FallbackAction))
def test_a_given_action_is_kept(action: FallbackAction) -> None:
    given = analysis(
        onNoData={"after": "1m", "action": action.value}, onProviderError={"after": "1m", "action": action.value}
    )
    assert given.on_no_data.action is action and given.on_provider_error.action is action


def test_the_crd_fills_in_the_same_nested_defaults() -> None:
    schema = structural_schema(SpeculativeDeploymentSpec)
    fallbacks = schema["properties"]["rollout"]["properties"]["analysis"]["properties"]
    assert fallbacks["onNoData"]["properties"]["action"]["default"] == FallbackAction.ROLLBACK.value
    assert fallbacks["onProviderError"]["properties"]["action"]["default"] == FallbackAction.PAUSE.value
    assert fallbacks["onProviderError"]["default"] == {"after": "10m", "action": FallbackAction.PAUSE.value}

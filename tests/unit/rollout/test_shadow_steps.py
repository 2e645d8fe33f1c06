"""Shadow steps (`steps[].mirror`): the canary sees a copy of stable's requests through the HTTPRoute's
RequestMirror filter while every user is served by stable, then the weighted steps serve users; and the opt-in
header (`httpRoute.canaryHeader`) that sends a request to the canary at any step."""

import random

from specfleet.api.spec import HeaderMatch
from specfleet.api.status import Phase
from specfleet.api.vocabulary import Track
from specfleet.render.manifests import route_rules
from specfleet_workshop.sim.gateway import Backend, parse_rules, route_request

from rolloutkit import Fleet, healthy_fleet, make_spec
from speckit import sdep

ROUTED = {"httpRoute": {"name": "llm"}}
SHADOW_THEN_USERS = [{"mirror": 50, "pause": {"duration": "1m"}}, {"weight": 50, "pause": {"duration": "1m"}}]


def shadow_canary(replicas: int = 2) -> Fleet:
    """A Healthy routed fleet whose k changed: its canary at a 50% shadow step, then a 50% weighted one."""
    rollout = {"steps": SHADOW_THEN_USERS, "trafficRouting": ROUTED}
    fleet = healthy_fleet(replicas=replicas, rollout=rollout)
    fleet.change(replicas=replicas, rollout=rollout, speculative={"numSpeculativeTokens": 2})
    fleet.step()
    return fleet


def test_a_shadow_step_mirrors_and_gives_users_none_of_the_canary() -> None:
    fleet = shadow_canary()
    decision = fleet.converge()
    assert fleet.status.current_step == 0 and fleet.status.step_ready_at is not None
    assert decision.route_weight(Track.CANARY) == 0 and decision.canary_mirror == 50
    canary, stable = decision.target(Track.CANARY), decision.target(Track.STABLE)
    assert canary is not None and canary.replicas == 1  # sized for half of stable's two pods' requests
    assert stable is not None and stable.replicas == 2  # stable serves every user: it gives no pod way


def test_the_weighted_step_after_the_shadow_step_serves_users_and_stops_mirroring() -> None:
    fleet = shadow_canary()
    fleet.converge()
    fleet.wait(61)
    assert fleet.status.current_step == 1
    decision = fleet.converge()
    assert decision.route_weight(Track.CANARY) == 50 and decision.canary_mirror == 0
    stable = decision.target(Track.STABLE)
    assert stable is not None and stable.replicas == 1  # now it gives way to the canary pod serving users


def test_a_rollback_in_a_shadow_step_stops_the_mirror() -> None:
    fleet = shadow_canary()
    fleet.converge()
    fleet.commands["specfleet.io/abort"] = "now"
    decision = fleet.step()
    assert fleet.status.phase is Phase.ABORTED
    assert not decision.canary_traffic and decision.canary_mirror == 0


def test_a_step_label_says_shadow() -> None:
    fleet = shadow_canary()
    fleet.converge()
    assert any("shadow, mirror 50%" in c.message for c in fleet.status.conditions)


def test_a_shadow_step_in_replica_ratio_mode_is_refused_naming_the_field() -> None:
    try:
        make_spec(rollout={"steps": SHADOW_THEN_USERS})
    except ValueError as error:
        assert "steps[].mirror needs trafficRouting.httpRoute" in str(error)
    else:
        raise AssertionError("a mirror without an HTTPRoute was accepted")


def test_the_route_gets_a_request_mirror_filter_to_the_canary_and_loses_it_after() -> None:
    fleet = sdep()
    own = {"type": "RequestHeaderModifier", "requestHeaderModifier": {"set": [{"name": "x-a", "value": "b"}]}}
    rules = [{"backendRefs": [{"name": "llama-eagle3-stable", "port": 8000}], "filters": [own]}]
    shadow = route_rules(fleet, rules, 0, canary_mirror=20)
    assert shadow[0]["backendRefs"] == [{"name": "llama-eagle3-stable", "port": 8000, "weight": 100}]
    assert shadow[0]["filters"] == [
        own,
        {
            "type": "RequestMirror",
            "requestMirror": {"backendRef": {"name": "llama-eagle3-canary", "port": 8000}, "percent": 20},
        },
    ]
    assert route_rules(fleet, shadow, 0, canary_mirror=20) == shadow  # written once
    after = route_rules(fleet, shadow, 10)
    assert after[0]["filters"] == [own]
    assert {ref["name"]: ref["weight"] for ref in after[0]["backendRefs"]} == {
        "llama-eagle3-stable": 90,
        "llama-eagle3-canary": 10,
    }


def test_a_canary_header_gets_a_twin_rule_to_the_canary_that_goes_when_the_canary_does() -> None:
    fleet = sdep()
    header = HeaderMatch(name="x-canary", value="yes")
    match = {"path": {"type": "PathPrefix", "value": "/v1"}}
    rules = [{"matches": [match], "backendRefs": [{"name": "llama-eagle3-stable", "port": 8000}]}]
    pinned = route_rules(fleet, rules, 0, canary_mirror=20, canary_header=header)
    assert len(pinned) == 2 and pinned[1] == {
        "name": "llama-eagle3-canary-header-0",
        "matches": [{**match, "headers": [{"type": "Exact", "name": "x-canary", "value": "yes"}]}],
        "backendRefs": [{"name": "llama-eagle3-canary", "port": 8000}],
    }
    assert route_rules(fleet, pinned, 0, canary_mirror=20, canary_header=header) == pinned  # written once
    ended = route_rules(fleet, pinned, 0)
    assert ended == [{**rules[0], "backendRefs": [{"name": "llama-eagle3-stable", "port": 8000, "weight": 100}]}]


def test_the_stand_in_gateway_sends_a_pinned_request_to_the_canary_whatever_the_weights() -> None:
    fleet = sdep()
    header = HeaderMatch(name="x-canary", value="yes")
    rules = [{"backendRefs": [{"name": "llama-eagle3-stable", "port": 8000}]}]
    written = route_rules(fleet, rules, 0, canary_mirror=20, canary_header=header)
    route = {"metadata": {"namespace": fleet.metadata.namespace}, "spec": {"rules": written}}
    stable = Backend(fleet.metadata.namespace, "llama-eagle3-stable")
    canary = Backend(fleet.metadata.namespace, "llama-eagle3-canary")
    pods = {stable: ["s0"], canary: ["c0"]}
    parsed, rng = parse_rules(route), random.Random(1)
    pinned = [route_request(parsed, {"X-Canary": "yes"}, pods, rng) for _ in range(200)]
    assert all(d.served == (canary, "c0") and not d.mirrored for d in pinned)
    users = [route_request(parsed, {}, pods, rng) for _ in range(200)]
    assert all(d.served == (stable, "s0") for d in users)

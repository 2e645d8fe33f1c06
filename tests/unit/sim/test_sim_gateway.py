"""The stand-in gateway: requests follow an HTTPRoute's weights, header matches and RequestMirror filters to the
backends' Ready pods, and the fleets behind a route take no per-pod load of their own."""

import math
import random
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from specfleet_workshop.sim import Simulator
from specfleet_workshop.sim.gateway import Backend, Routes, parse_rules, route_request
from specfleet_workshop.sim.scenario import ScenarioError, load_scenario

from simkit import GOOD, MI325X_NODE, vllm_pod

STABLE, CANARY = Backend("team", "web-stable"), Backend("team", "web-canary")
PODS = {STABLE: ["team/s0", "team/s1"], CANARY: ["team/c0"]}


def route(*rules: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"namespace": "team", "name": "llm"}, "spec": {"rules": list(rules)}}


def weighted(canary: int) -> dict[str, Any]:
    return {"backendRefs": [{"name": "web-stable", "weight": 100 - canary}, {"name": "web-canary", "weight": canary}]}


def mirrored(percent: int) -> dict[str, Any]:
    mirror = {"type": "RequestMirror", "requestMirror": {"backendRef": {"name": "web-canary"}, "percent": percent}}
    return {"backendRefs": [{"name": "web-stable", "weight": 100}], "filters": [mirror]}


def within_sampling_error(count: int, total: int, share: float) -> bool:
    """`count` of `total` Bernoulli draws at `share` lies within 4 standard errors of it."""
    return abs(count - total * share) <= 4 * math.sqrt(total * share * (1 - share)) + 1


@pytest.mark.parametrize("weight", [10, 25, 50, 90])
def test_the_canary_gets_its_weight_of_requests(weight: int) -> None:
    rules, rng = parse_rules(route(weighted(weight))), random.Random(weight)
    served = [route_request(rules, {}, PODS, rng).served for _ in range(4000)]
    canary = sum(1 for s in served if s is not None and s[0] == CANARY)
    assert all(s is not None for s in served)
    assert within_sampling_error(canary, 4000, weight / 100), canary


def test_a_mirror_copies_its_percent_and_users_never_reach_the_canary() -> None:
    rules, rng = parse_rules(route(mirrored(20))), random.Random(1)
    deliveries = [route_request(rules, {}, PODS, rng) for _ in range(4000)]
    assert all(d.served is not None and d.served[0] == STABLE for d in deliveries)
    copies = sum(1 for d in deliveries for backend, _ in d.mirrored if backend == CANARY)
    assert within_sampling_error(copies, 4000, 0.2), copies


def test_a_fraction_mirror_and_an_unset_percent() -> None:
    mirror = {"type": "RequestMirror", "requestMirror": {"backendRef": {"name": "web-canary"}}}
    every = parse_rules(route({"backendRefs": [{"name": "web-stable"}], "filters": [mirror]}))
    assert every[0].mirrors == ((CANARY, 1.0),)
    half = {**mirror, "requestMirror": {**mirror["requestMirror"], "fraction": {"numerator": 1, "denominator": 2}}}
    assert parse_rules(route({"backendRefs": [{"name": "web-stable"}], "filters": [half]}))[0].mirrors == (
        (CANARY, 0.5),
    )


def test_a_header_match_rule_takes_its_requests_wherever_it_stands() -> None:
    pinned = {"matches": [{"headers": [{"name": "X-Canary", "value": "yes"}]}], "backendRefs": [{"name": "web-canary"}]}
    rules, rng = parse_rules(route(weighted(10), pinned)), random.Random(2)
    with_header = [route_request(rules, {"x-canary": "yes"}, PODS, rng).served for _ in range(500)]
    assert all(s is not None and s[0] == CANARY for s in with_header)
    other_value = [route_request(rules, {"x-canary": "no"}, PODS, rng).served for _ in range(2000)]
    assert within_sampling_error(sum(1 for s in other_value if s and s[0] == CANARY), 2000, 0.1)


def test_a_backend_without_ready_pods_is_unserved_and_weight_zero_is_never_picked() -> None:
    rules, rng = parse_rules(route(weighted(50))), random.Random(3)
    deliveries = [route_request(rules, {}, {STABLE: PODS[STABLE]}, rng) for _ in range(200)]
    assert {d.backend for d in deliveries} == {STABLE, CANARY}
    assert all((d.served is None) == (d.backend == CANARY) for d in deliveries)
    zero = parse_rules(route(weighted(0)))
    assert all(route_request(zero, {}, PODS, rng).backend == STABLE for _ in range(200))


def test_a_request_no_rule_matches_is_unrouted() -> None:
    only = {"matches": [{"headers": [{"name": "x-team", "value": "a"}]}], "backendRefs": [{"name": "web-stable"}]}
    delivery = route_request(parse_rules(route(only)), {}, PODS, random.Random(4))
    assert delivery.backend is None and delivery.served is None


@pytest.mark.parametrize(
    ("stream", "field"),
    [({"route": "llm", "load": 1}, "gateway[0].route"), ({"route": "team/llm", "load": 0}, "gateway[0].load")],
)
def test_a_bad_gateway_stream_names_its_field(stream: dict[str, Any], field: str) -> None:
    with pytest.raises(ScenarioError, match=re.escape(field)):
        load_scenario(f"gateway: [{stream}]".replace("'", '"'))


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def sim(tmp_path: Path, clock: FakeClock) -> Iterator[Simulator]:
    scenario = load_scenario("defaults: {load: 5}\ngateway: [{route: team/llm, load: 40}]\n")
    simulator = Simulator(scenario, listen=("127.0.0.1", 0), seed=5, clock=clock)
    with simulator:
        yield simulator


def selectors() -> dict[Backend, dict[str, str]]:
    return {
        STABLE: {"specfleet.io/name": "web", "specfleet.io/track": "stable"},
        CANARY: {"specfleet.io/name": "web", "specfleet.io/track": "canary"},
    }


def test_the_simulator_routes_a_fleet_level_load_by_the_route(sim: Simulator, clock: FakeClock) -> None:
    """A stream of 40 requests/s at a route giving the canary 25%: the canary's one pod gets a quarter of them,
    and no pod of the fleet gets the scenario's per-pod load besides (5/s each would be 15/s more)."""
    for name, track in [("web-stable-0", "stable"), ("web-stable-1", "stable"), ("web-canary-0", "canary")]:
        sim.upsert_pod(vllm_pod(name, GOOD, track=track, sdep="web"), MI325X_NODE)
    sim.set_routes(Routes(rules={"team/llm": parse_rules(route(weighted(25)))}, selectors=selectors()))
    clock.now += 300
    [stream] = sim.gateway()
    assert stream["unrouted"] == 0
    canary, stable = stream["backends"]["team/web-canary"]["served"], stream["backends"]["team/web-stable"]["served"]
    assert within_sampling_error(canary, canary + stable, 0.25), stream
    arrived = sum(p["load"] for p in sim.describe())
    assert arrived == 0.0  # the pods' own load is off: every request they see came through the route


def test_the_simulator_mirrors_without_serving_users_from_the_canary(sim: Simulator, clock: FakeClock) -> None:
    for name, track in [("web-stable-0", "stable"), ("web-canary-0", "canary")]:
        sim.upsert_pod(vllm_pod(name, GOOD, track=track, sdep="web"), MI325X_NODE)
    sim.set_routes(Routes(rules={"team/llm": parse_rules(route(mirrored(30)))}, selectors=selectors()))
    clock.now += 300
    [stream] = sim.gateway()
    canary = stream["backends"]["team/web-canary"]
    assert canary["served"] == 0 and canary["unserved"] == 0
    assert within_sampling_error(canary["mirrored"], stream["requests"], 0.3), stream


def test_a_pod_of_no_routed_fleet_keeps_its_own_load(sim: Simulator) -> None:
    sim.upsert_pod(vllm_pod("other-0", GOOD, sdep="other"), MI325X_NODE)
    sim.set_routes(Routes(rules={"team/llm": parse_rules(route(weighted(25)))}, selectors=selectors()))
    assert [p["load"] for p in sim.describe()] == [5.0]


def test_an_inferencepool_backend_gets_the_pod_with_the_shortest_queue() -> None:
    """As an endpoint picker would: the pool's Ready pod with the fewest waiting and running requests."""
    pool = {"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": "web-canary"}
    rules = parse_rules(route({"backendRefs": [pool]}))
    canary = Backend("team", "web-canary", "InferencePool")
    assert rules[0].backends == ((canary, 1),)
    queues = {"team/c0": 3, "team/c1": 0, "team/c2": 5}
    picked = {
        route_request(rules, {}, {canary: list(queues)}, random.Random(i), queues.__getitem__).served for i in range(50)
    }
    assert picked == {(canary, "team/c1")}


def test_an_unknown_backend_kind_is_not_routed_to() -> None:
    other = {"group": "example.com", "kind": "Widget", "name": "w"}
    assert parse_rules(route({"backendRefs": [other]}))[0].backends == ()

"""A track's InferencePool (Gateway API Inference Extension v1) and an HTTPRoute whose backends are the fleet's
InferencePools: weighted per step and mirrored in a shadow step, as with the track Services, and routed so by the
stand-in gateway."""

import random

from specfleet.api.spec import EndpointPickerRef
from specfleet.api.vocabulary import LABEL_NAME, LABEL_TRACK, Track
from specfleet.render.manifests import inference_pool, route_rules
from specfleet_workshop.sim.gateway import INFERENCE_POOL, Backend, parse_rules, route_request

from speckit import sdep

PICKER = EndpointPickerRef(name="llm-epp", port=9002)
POOL = {"group": "inference.networking.k8s.io", "kind": "InferencePool"}


def test_each_track_has_its_own_pool_selecting_its_pods_on_the_serving_port() -> None:
    fleet = sdep()
    stable, canary = inference_pool(fleet, Track.STABLE, PICKER), inference_pool(fleet, Track.CANARY, PICKER)
    assert stable["apiVersion"] == "inference.networking.k8s.io/v1" and stable["kind"] == "InferencePool"
    assert stable["metadata"]["name"] == "llama-eagle3-stable" and canary["metadata"]["name"] == "llama-eagle3-canary"
    assert stable["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "specfleet"
    assert stable["spec"] == {
        "selector": {"matchLabels": {LABEL_NAME: "llama-eagle3", LABEL_TRACK: "stable"}},
        "targetPorts": [{"number": 8000}],
        "endpointPickerRef": {"name": "llm-epp-stable", "port": {"number": 9002}, "failureMode": "FailClose"},
    }
    assert canary["spec"]["selector"]["matchLabels"][LABEL_TRACK] == "canary"  # never stable's pool
    assert canary["spec"]["endpointPickerRef"]["name"] == "llm-epp-canary"  # nor its picker
    routed = inference_pool(fleet, Track.STABLE, PICKER, route="shop/llm")
    assert routed["metadata"]["annotations"] == {"specfleet.io/http-route": "shop/llm"}  # kept while it sends here


def test_pool_backends_are_weighted_per_step_and_mirrored_in_a_shadow_step() -> None:
    fleet = sdep()
    rules = [{"backendRefs": [{**POOL, "name": "llama-eagle3-stable", "port": 8000}]}]
    shadow = route_rules(fleet, rules, 0, canary_mirror=20, backend_kind="InferencePool")
    assert shadow[0]["backendRefs"] == [{**POOL, "name": "llama-eagle3-stable", "port": 8000, "weight": 100}]
    mirror = {"backendRef": {**POOL, "name": "llama-eagle3-canary", "port": 8000}, "percent": 20}
    assert shadow[0]["filters"] == [{"type": "RequestMirror", "requestMirror": mirror}]
    assert route_rules(fleet, shadow, 0, canary_mirror=20, backend_kind="InferencePool") == shadow  # written once
    weighted = route_rules(fleet, shadow, 25, backend_kind="InferencePool")
    assert "filters" not in weighted[0]
    assert {(r["kind"], r["name"]): r["weight"] for r in weighted[0]["backendRefs"]} == {
        ("InferencePool", "llama-eagle3-stable"): 75,
        ("InferencePool", "llama-eagle3-canary"): 25,
    }
    ended = route_rules(fleet, weighted, 0, backend_kind="InferencePool")
    assert ended[0]["backendRefs"] == [{**POOL, "name": "llama-eagle3-stable", "port": 8000, "weight": 100}]


def test_backends_of_the_other_kind_are_left_alone() -> None:
    fleet = sdep()
    pools = [{"backendRefs": [{**POOL, "name": "llama-eagle3-stable", "port": 8000}]}]
    assert route_rules(fleet, pools, 25) == pools  # Services are the default: a same-named pool is not the fleet's
    services = [{"backendRefs": [{"name": "llama-eagle3-stable", "port": 8000}]}]
    assert route_rules(fleet, services, 25, backend_kind="InferencePool") == services


def test_the_stand_in_gateway_serves_users_from_stable_pool_and_copies_to_the_canary_pool() -> None:
    fleet = sdep()
    rules = [{"backendRefs": [{**POOL, "name": "llama-eagle3-stable", "port": 8000}]}]
    written = route_rules(fleet, rules, 0, canary_mirror=50, backend_kind="InferencePool")
    route = {"metadata": {"namespace": fleet.metadata.namespace}, "spec": {"rules": written}}
    stable = Backend(fleet.metadata.namespace, "llama-eagle3-stable", INFERENCE_POOL)
    canary = Backend(fleet.metadata.namespace, "llama-eagle3-canary", INFERENCE_POOL)
    parsed, rng = parse_rules(route), random.Random(7)
    deliveries = [route_request(parsed, {}, {stable: ["s0", "s1"], canary: ["c0"]}, rng) for _ in range(2000)]
    assert all(d.served is not None and d.served[0] == stable for d in deliveries)
    copies = sum(1 for d in deliveries if d.mirrored == ((canary, "c0"),))
    assert abs(copies - 1000) <= 4 * (2000 * 0.25) ** 0.5  # half of them, within 4 standard errors

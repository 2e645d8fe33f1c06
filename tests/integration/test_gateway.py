"""Traffic through the simulator's stand-in gateway (`specfleet_workshop.sim.gateway`): a fleet-level load offered to
the user's HTTPRoute follows the weights, RequestMirror filters and header matches the operator writes there, to
the tracks' Ready pods, and the canary is judged from a real Prometheus on the requests the route gave it.

The gateway is a stand-in (as kwok stands in for kubelets); the API server, the HTTPRoute CRD, Prometheus and the
operator are real. What a test states is what a user has: the drafter's alpha, the load at the gateway, the steps.
"""

import json
import math
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from specfleet_workshop.devcluster.cluster import ClusterInfo
from specfleet_workshop.devcluster.gateway import install_httproute_crd, install_inference_pool_crd

from fleetkit import (
    EAGLE3_K5,
    OUTCOME_SECONDS,
    PLAIN,
    ROLLOUT,
    SCENARIO,
    Fleet,
    Operator,
    Simulator,
    healthy,
    outcome_of,
    promotion_of,
    sdep,
    wait_for,
)

pytestmark = pytest.mark.integration

ROUTE = {
    "apiVersion": "gateway.networking.k8s.io/v1",
    "kind": "HTTPRoute",
    "metadata": {"name": "llm"},
    "spec": {"rules": [{"backendRefs": [{"name": "llama-stable", "port": 8000}]}]},
}
"""A user's HTTPRoute sending everything to the fleet's stable Service."""
ROUTED = {"httpRoute": {"name": "llm"}}
BAD_DRAFTER = {**EAGLE3_K5, "model": "bad/EAGLE3-drafter"}


@pytest.fixture(scope="session")
def httproute_crd(dev_cluster: ClusterInfo) -> None:
    install_httproute_crd(dev_cluster)


@pytest.fixture(scope="session")
def inference_pool_crd(dev_cluster: ClusterInfo) -> None:
    install_inference_pool_crd(dev_cluster)


@pytest.fixture
def pooling_operator(
    dev_cluster: ClusterInfo, crd_installed: None, namespace: str, tmp_path: Path
) -> Iterator[Operator]:
    """The operator judging canaries from the dev cluster's Prometheus, owning InferencePools (`--inference-pools`)."""
    running = Operator(
        dev_cluster, namespace, tmp_path / "operator.log", dev_cluster.prometheus_url, extra=("--inference-pools",)
    )
    running.start()
    yield running
    running.stop()


def through_gateway(simulator: Simulator, fleet: Fleet, load: float, **streams: dict[str, str]) -> None:
    """The scenario's drafters, with `load` requests/s offered to the route `llm` (and a stream per header set)."""
    gateway = [{"route": f"{fleet.namespace}/llm", "load": load}]
    gateway += [{"route": f"{fleet.namespace}/llm", "load": 5.0, "headers": headers} for headers in streams.values()]
    simulator.put({**SCENARIO, "gateway": gateway})


def gateway(simulator: Simulator) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"{simulator.url}/gateway", timeout=60) as answer:
        return json.loads(answer.read())


def backend(stream: dict[str, Any], fleet: Fleet, service: str) -> dict[str, int]:
    return stream["backends"].get(f"{fleet.namespace}/{service}", {"served": 0, "unserved": 0, "mirrored": 0})


def within_sampling_error(count: int, total: int, share: float) -> bool:
    """`count` of `total` requests routed independently at `share` lies within 4 standard errors of it."""
    return abs(count - total * share) <= 4 * math.sqrt(total * share * (1 - share)) + 1


def at_gate(fleet: Fleet, step: int) -> bool:
    status = fleet.status("llama")
    return status.get("currentStep") == step and status.get("phase") == "Paused"


def canary_share_at(simulator: Simulator, fleet: Fleet, weight: int) -> tuple[int, int, int]:
    """Once the gateway routes by `weight`, of the next 1,500 or more requests: those the canary served, all of
    them, and those not served (no rule took them, or no Ready pod of the backend it picked)."""
    canary = f"{fleet.namespace}/llama-canary"
    wait_for(
        f"the gateway to route {weight}% to the canary",
        lambda: gateway(simulator)[0]["routing"]["weights"].get(canary) == weight,
    )
    before = gateway(simulator)[0]
    now = wait_for(
        "1,500 more requests", lambda: (g := gateway(simulator)[0])["requests"] - before["requests"] >= 1500 and g
    )
    served = backend(now, fleet, "llama-canary")["served"] - backend(before, fleet, "llama-canary")["served"]

    def unserved(stream: dict[str, Any]) -> int:
        return stream["unrouted"] + sum(counts["unserved"] for counts in stream["backends"].values())

    return served, now["requests"] - before["requests"], unserved(now) - unserved(before)


@pytest.mark.timeout(600)
def test_the_canary_serves_its_route_weight_of_the_gateways_requests_at_each_step(
    httproute_crd: None, operator: Operator, simulator: Simulator, fleet: Fleet
) -> None:
    follows_route_weights(simulator, fleet, ROUTE, ROUTED)


def follows_route_weights(simulator: Simulator, fleet: Fleet, route: dict[str, Any], routing: dict[str, Any]) -> None:
    """4 replicas, 40 requests/s at the gateway, two gated steps of 25% and 50%: at each, of the requests the
    gateway routes by the step's weights, the canary's backend (Service or pool, as `route` and `routing` say)
    serves that share within sampling error, and none goes unserved."""
    through_gateway(simulator, fleet, load=40.0)
    fleet.apply(route)
    steps = [{"weight": 25, "pause": {}}, {"weight": 50, "pause": {}}]
    healthy(fleet, replicas=4, rollout={"trafficRouting": routing, "steps": steps, "unguarded": True})
    fleet.patch_spec("llama", {"speculative": {"numSpeculativeTokens": 2}})
    for step, weight in enumerate((25, 50)):
        wait_for(f"step {step + 1}'s gate", lambda: at_gate(fleet, step))  # noqa: B023 (called at once)
        served, total, unserved = canary_share_at(simulator, fleet, weight)
        assert within_sampling_error(served, total, weight / 100), (weight, served, total)
        assert unserved == 0
        fleet.annotate("llama", "specfleet.io/promote", "now")
    wait_for("promoted", fleet.phase_is("llama", "Healthy"), timeout=120)


def shadow_rollout(*steps: dict[str, Any]) -> dict[str, Any]:
    return {**ROLLOUT, "trafficRouting": ROUTED, "steps": list(steps)}


@pytest.mark.timeout(OUTCOME_SECONDS + 300)
def test_a_bad_drafter_in_a_shadow_step_is_rolled_back_before_any_user_request_reaches_it(
    httproute_crd: None, guarded_operator: Operator, simulator: Simulator, fleet: Fleet
) -> None:
    """alpha 0.3 against a plain stable, judged on a copy of half of stable's requests: rolled back, and the
    gateway counted no user-facing request served by (or sent to) the canary."""
    through_gateway(simulator, fleet, load=30.0)
    fleet.apply(ROUTE)
    rollout = shadow_rollout({"mirror": 50, "pause": {"duration": "1s"}}, {"weight": 50, "pause": {"duration": "1s"}})
    old = healthy(fleet, rollout=rollout, speculative=PLAIN)["stableRevision"]
    fleet.patch_spec("llama", {"speculative": BAD_DRAFTER})
    rolled_back_unseen_by_users(fleet, simulator, old)


@pytest.mark.timeout(OUTCOME_SECONDS + 300)
def test_a_good_drafter_is_promoted_through_a_shadow_step_then_a_weighted_one(
    httproute_crd: None, guarded_operator: Operator, simulator: Simulator, fleet: Fleet
) -> None:
    """alpha 0.8 at k 5 against a plain stable: shadow at 50% (the canary's pods see stable's per-pod load),
    then 25% of users, then promoted; users met the canary only in the weighted step."""
    through_gateway(simulator, fleet, load=40.0)
    fleet.apply(ROUTE)
    rollout = shadow_rollout({"mirror": 50, "pause": {"duration": "1s"}}, {"weight": 25, "pause": {"duration": "1s"}})
    healthy(fleet, replicas=4, rollout=rollout, speculative=PLAIN)
    fleet.patch_spec("llama", {"speculative": EAGLE3_K5})
    canary = wait_for("a canary", lambda: fleet.status("llama").get("canaryRevision"))
    shadow = wait_for(
        "the shadow step's analysis",
        lambda: (s := fleet.status("llama")).get("currentStep") == 0 and s.get("lastAnalysis") and s,
        timeout=300,  # the first analysis waits for Prometheus to have scraped every canary pod
    )
    counts = backend(gateway(simulator)[0], fleet, "llama-canary")
    assert shadow["lastAnalysis"] and counts["served"] == 0 and counts["mirrored"] > 0
    promotion_of(fleet, canary)
    counts = backend(gateway(simulator)[0], fleet, "llama-canary")
    assert counts["served"] > 0 and counts["mirrored"] > 0


@pytest.mark.timeout(600)
def test_a_request_with_the_canary_header_is_always_answered_by_the_canary(
    httproute_crd: None, operator: Operator, simulator: Simulator, fleet: Fleet
) -> None:
    """Testers' requests carry `x-canary: yes`: the canary answers every one of them, in a shadow step where it
    answers no other user too."""
    through_gateway(simulator, fleet, load=20.0, testers={"x-canary": "yes"})
    fleet.apply(ROUTE)
    routing = {**ROUTED["httpRoute"], "canaryHeader": {"name": "x-canary", "value": "yes"}}
    steps = [{"mirror": 50, "pause": {}}, {"weight": 50, "pause": {}}]
    healthy(fleet, rollout={"trafficRouting": {"httpRoute": routing}, "steps": steps})
    fleet.patch_spec("llama", {"speculative": {"numSpeculativeTokens": 2}})
    wait_for("the shadow step's gate", lambda: at_gate(fleet, 0))
    canary = f"{fleet.namespace}/llama-canary"
    wait_for("the gateway to pin the testers", lambda: gateway(simulator)[1]["routing"]["weights"] == {canary: 1})
    testers = gateway(simulator)[1]
    later = wait_for(
        "200 more testers' requests",
        lambda: (g := gateway(simulator))[1]["requests"] >= testers["requests"] + 200 and g,
        timeout=180,
    )
    pinned = backend(later[1], fleet, "llama-canary")["served"] - backend(testers, fleet, "llama-canary")["served"]
    assert pinned == later[1]["requests"] - testers["requests"], later[1]
    assert backend(later[0], fleet, "llama-canary")["served"] == 0, later[0]  # users: stable's
    fleet.annotate("llama", "specfleet.io/abort", "now")
    wait_for("the pinning rule to go", lambda: all("canary-header" not in str(r) for r in route_rules_of(fleet)))


def route_rules_of(fleet: Fleet) -> list[dict[str, Any]]:
    route = fleet.custom.get_namespaced_custom_object(
        "gateway.networking.k8s.io", "v1", fleet.namespace, "httproutes", "llm"
    )
    return route["spec"]["rules"]


POOL_REF = {"group": "inference.networking.k8s.io", "kind": "InferencePool"}
POOL_ROUTE = {**ROUTE, "spec": {"rules": [{"backendRefs": [{**POOL_REF, "name": "llama-stable"}]}]}}
"""A user's HTTPRoute sending everything to the fleet's stable InferencePool."""
POOLED = {**ROUTED, "inferencePool": {"endpointPickerRef": {"name": "llm-epp", "port": 9002}}}


@pytest.mark.timeout(OUTCOME_SECONDS + 300)
def test_with_inference_pools_a_bad_drafter_in_a_shadow_step_is_rolled_back_before_any_user_request_reaches_it(
    httproute_crd: None, inference_pool_crd: None, pooling_operator: Operator, simulator: Simulator, fleet: Fleet
) -> None:
    """The route sends to InferencePools, one per track, that the fleet owns: alpha 0.3 against a plain stable,
    judged on a copy of half of stable's requests sent to the canary's pool, is rolled back; the gateway counted no
    user-facing request served by (or sent to) the canary's pool, and stable's pool selects stable's pods alone."""
    through_gateway(simulator, fleet, load=30.0)
    fleet.apply(POOL_ROUTE)
    rollout = {**ROLLOUT, "trafficRouting": POOLED, "steps": [{"mirror": 50, "pause": {"duration": "1s"}},
                                                              {"weight": 50, "pause": {"duration": "1s"}}]}  # fmt: skip
    old = healthy(fleet, rollout=rollout, speculative=PLAIN)["stableRevision"]
    stable_pool = fleet.custom.get_namespaced_custom_object(
        "inference.networking.k8s.io", "v1", fleet.namespace, "inferencepools", "llama-stable"
    )
    assert stable_pool["spec"]["selector"]["matchLabels"]["specfleet.io/track"] == "stable"
    fleet.patch_spec("llama", {"speculative": BAD_DRAFTER})
    wait_for(
        "the route to mirror to the canary's pool",
        lambda: gateway(simulator)[0]["routing"]["mirrors"].get(f"{fleet.namespace}/llama-canary") == 0.5,
        timeout=300,
    )
    rolled_back_unseen_by_users(fleet, simulator, old)
    wait_for("the canary's pool to go", lambda: "llama-canary" not in pools_of(fleet))


@pytest.mark.timeout(600)
def test_with_inference_pools_the_canarys_pool_serves_its_route_weight_of_the_gateways_requests_at_each_step(
    httproute_crd: None, inference_pool_crd: None, pooling_operator: Operator, simulator: Simulator, fleet: Fleet
) -> None:
    """The same weighted steps with the route sending to the fleet's InferencePools: the gateway picks within each
    pool by least queue, and the canary's pool serves the route's weight of the requests."""
    follows_route_weights(simulator, fleet, POOL_ROUTE, POOLED)


@pytest.mark.timeout(300)
def test_without_the_inference_pools_flag_a_pooled_fleet_is_held_and_says_which_flag(
    httproute_crd: None, inference_pool_crd: None, operator: Operator, fleet: Fleet
) -> None:
    """An operator run without `--inference-pools`: the fleet routed through pools gets no pool and no pod, its
    SpecValid condition and a Warning event name the flag and the chart value."""
    fleet.apply(POOL_ROUTE)
    fleet.apply(sdep(rollout={"trafficRouting": POOLED}))
    held = wait_for(
        "SpecValid False",
        lambda: next((c for c in fleet.status("llama").get("conditions", []) if c["type"] == "SpecValid"
                      and c["status"] == "False"), None),
    )  # fmt: skip
    assert "--inference-pools" in held["message"] and "inferencePools.enabled" in held["message"], held
    said = wait_for(
        "the Warning event",
        lambda: [e.message for e in fleet.core.list_namespaced_event(fleet.namespace).items
                 if e.reason == "InvalidSpec" and e.type == "Warning"],
    )  # fmt: skip
    assert "spec.rollout.trafficRouting.inferencePool" in said[0] and "--inference-pools" in said[0]
    assert pools_of(fleet) == set() and not [d for d in fleet.deployments() if d.startswith("llama")]


PICKED = {
    **ROUTED,
    "inferencePool": {
        "endpointPickerTemplate": {
            "image": "registry.k8s.io/gateway-api-inference-extension/epp:v1.0.0",
            "args": ["--config-file", "/config/plugins.yaml"],
            "configMap": {"name": "llm-epp-plugins"},
        }
    },
}


@pytest.mark.timeout(600)
def test_a_picker_template_runs_a_picker_per_pool_admitted_where_pod_security_is_restricted(
    httproute_crd: None, inference_pool_crd: None, pooling_operator: Operator, simulator: Simulator, fleet: Fleet
) -> None:
    """The fleet runs an endpoint picker per track's pool from the template, in a namespace whose Pod Security
    admission enforces `restricted`: each pool names its picker's Service, the real controllers create the
    picker's pod (kwok runs no container in it: the stand-in gateway still picks the pool's pod by least queue),
    and the canary's picker goes with the canary."""
    fleet.kubectl("label", "namespace", fleet.namespace, "pod-security.kubernetes.io/enforce=restricted")
    through_gateway(simulator, fleet, load=20.0)
    fleet.apply(POOL_ROUTE)
    healthy(fleet, rollout={"trafficRouting": PICKED, "steps": [{"weight": 50, "pause": {}}], "unguarded": True})
    fleet.patch_spec("llama", {"speculative": {"numSpeculativeTokens": 2}})
    wait_for("the canary's gate", lambda: at_gate(fleet, 0))
    for track in ("stable", "canary"):
        pool = fleet.custom.get_namespaced_custom_object(
            "inference.networking.k8s.io", "v1", fleet.namespace, "inferencepools", f"llama-{track}"
        )
        assert pool["spec"]["endpointPickerRef"]["name"] == f"llama-epp-{track}"
        picker = fleet.apps.read_namespaced_deployment(f"llama-epp-{track}", fleet.namespace)
        assert picker.spec.template.spec.containers[0].args[:2] == ["--pool-name", f"llama-{track}"]
        assert fleet.core.read_namespaced_service(f"llama-epp-{track}", fleet.namespace).spec.ports[0].port == 9002
        wait_for(
            f"the {track} picker's pod admitted",
            lambda: fleet.pods(f"specfleet.io/endpoint-picker=llama-epp-{track}"),  # noqa: B023 (called at once)
        )
    served = wait_for(
        "the canary's pool to serve",
        lambda: backend(gateway(simulator)[0], fleet, "llama-canary")["served"] > 0,
    )
    assert served
    fleet.annotate("llama", "specfleet.io/abort", "now")
    wait_for("the canary's picker to go", lambda: "llama-epp-canary" not in fleet.deployments(), timeout=120)
    assert "llama-epp-stable" in fleet.deployments()


def pools_of(fleet: Fleet) -> set[str]:
    listed = fleet.custom.list_namespaced_custom_object(
        "inference.networking.k8s.io", "v1", fleet.namespace, "inferencepools"
    )
    return {item["metadata"]["name"] for item in listed["items"]}


def rolled_back_unseen_by_users(fleet: Fleet, simulator: Simulator, old: str) -> None:
    """The canary rolled back on acceptance with stable kept, and the gateway counted no user-facing request
    served by (or sent to) it, only mirrored copies: it was judged on real requests no user saw answered."""
    status = outcome_of(fleet)
    outcome = status["history"][-1]
    assert outcome["outcome"] == "RolledBack" and "acceptance alpha" in outcome["reason"], outcome
    assert status["stableRevision"] == old
    [stream] = gateway(simulator)
    canary = backend(stream, fleet, "llama-canary")
    assert canary["served"] == 0 and canary["unserved"] == 0, stream
    assert canary["mirrored"] > 0, stream

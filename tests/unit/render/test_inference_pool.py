"""A track's InferencePool (Gateway API Inference Extension v1) and an HTTPRoute whose backends are the fleet's
InferencePools: weighted per step and mirrored in a shadow step, as with the track Services, and routed so by the
stand-in gateway."""

import random
import re
from typing import Any

import yaml
from hypothesis import HealthCheck, assume, given, settings
from pydantic import ValidationError

from specfleet.api.problems import InvalidSpecError
from specfleet.api.resource import SpeculativeDeployment
from specfleet.api.spec import PICKER_FLAG_PATTERN, EndpointPickerRef
from specfleet.api.vocabulary import LABEL_NAME, LABEL_TRACK, Track
from specfleet.render.manifests import Manifest, endpoint_picker, inference_pool, route_rules
from specfleet.render.policy import TemplatePolicy, template_problems
from specfleet_workshop.sim.gateway import INFERENCE_POOL, Backend, parse_rules, route_request

from bad_specs import picker
from repokit import ROOT
from schema_strategies import from_schema
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


PICKER_CRD = yaml.safe_load((ROOT / "crds" / "specfleet.io_speculativedeployments.yaml").read_text())
TEMPLATE_SCHEMA = PICKER_CRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"][
    "rollout"
]["properties"]["trafficRouting"]["properties"]["inferencePool"]["properties"]["endpointPickerTemplate"]
EPP_IMAGE = "registry.k8s.io/gateway-api-inference-extension/epp:v1.0.0"


def picked(**template: Any) -> SpeculativeDeployment:
    """A fleet whose InferencePools' endpoint pickers it renders from `template` (with an image)."""
    return sdep(picker(**template))


def rendered_picker(fleet: SpeculativeDeployment, track: Track) -> tuple[Manifest, Manifest]:
    routing = fleet.spec.rollout.traffic_routing
    assert routing is not None and routing.inference_pool is not None
    template = routing.inference_pool.endpoint_picker_template
    assert template is not None
    deployment, service = endpoint_picker(fleet, track, template)
    return deployment, service


def test_a_picker_template_renders_a_picker_per_track_serving_that_tracks_pool_alone() -> None:
    fleet = picked(args=["--config-file", "/config/plugins.yaml"], configMap={"name": "epp-plugins"})
    routing = fleet.spec.rollout.traffic_routing
    assert routing is not None and routing.inference_pool is not None
    for track in (Track.STABLE, Track.CANARY, Track.HOLDBACK):
        deployment, service = rendered_picker(fleet, track)
        name = f"llama-eagle3-epp-{track.value}"
        assert deployment["kind"] == "Deployment" and service["kind"] == "Service"
        assert deployment["metadata"]["name"] == service["metadata"]["name"] == name
        [container] = deployment["spec"]["template"]["spec"]["containers"]
        assert container["image"] == EPP_IMAGE
        assert container["args"][:4] == ["--pool-name", f"llama-eagle3-{track.value}", "--pool-namespace", "default"]
        assert container["args"][-2:] == ["--config-file", "/config/plugins.yaml"]  # the user's flags last
        ports = [(p["name"], p["port"]) for p in service["spec"]["ports"]]
        assert ports == [("grpc-ext-proc", 9002), ("http-metrics", 9090)]
        pool = inference_pool(fleet, track, routing.inference_pool.picker(fleet.metadata.name))
        assert pool["spec"]["endpointPickerRef"] == {"name": name, "port": {"number": 9002}, "failureMode": "FailClose"}


def test_no_service_or_pool_of_the_fleet_selects_a_picker_and_the_pickers_service_selects_it_alone() -> None:
    fleet = picked()
    deployment, service = rendered_picker(fleet, Track.CANARY)
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert LABEL_NAME not in labels and LABEL_TRACK not in labels  # the fleet's selectors all need its name
    assert service["spec"]["selector"].items() <= labels.items()
    assert deployment["spec"]["selector"]["matchLabels"] == service["spec"]["selector"]
    stable_picker, _ = rendered_picker(fleet, Track.STABLE)
    assert not service["spec"]["selector"].items() <= stable_picker["spec"]["template"]["metadata"]["labels"].items()
    assert deployment["metadata"]["labels"][LABEL_NAME] == "llama-eagle3"  # owned and pruned as a child of the fleet


def test_a_picker_without_a_service_account_gets_no_token_and_one_named_gets_its_own_setting() -> None:
    plain, _ = rendered_picker(picked(), Track.STABLE)
    assert plain["spec"]["template"]["spec"]["automountServiceAccountToken"] is False
    assert "serviceAccountName" not in plain["spec"]["template"]["spec"]
    named, _ = rendered_picker(picked(serviceAccountName="llm-epp"), Track.STABLE)
    pod = named["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "llm-epp" and "automountServiceAccountToken" not in pod


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(template=from_schema(TEMPLATE_SCHEMA))
def test_every_admitted_picker_template_renders_a_pod_security_restricted_pod_with_plain_env(
    template: dict[str, Any],
) -> None:
    """Whatever a tenant puts in the template: the picker pod meets Pod Security `restricted` (judged by the same
    checks as a vLLM pod's template), its env holds no Secret, and it is the pool's picker, not another's."""
    try:
        fleet = picked(**template)
    except (ValidationError, InvalidSpecError):
        assume(False)
        raise
    deployment, _ = rendered_picker(fleet, Track.CANARY)
    pod = deployment["spec"]["template"]
    assert template_problems(pod, TemplatePolicy.RESTRICTED) == []
    [container] = pod["spec"]["containers"]
    assert all("secretKeyRef" not in str(env.get("valueFrom", "")) for env in container["env"])
    namespace = {"name": "NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}
    assert [env for env in container["env"] if env["name"] == "NAMESPACE"] == [namespace]  # where its pool is
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    ours = ["--pool-name", "--pool-namespace", "--grpc-port", "--grpc-health-port", "--metrics-port"]
    assert [a for a in container["args"] if re.match(PICKER_FLAG_PATTERN, a)] == ours  # none of them twice
    assert container["args"][1] == "llama-eagle3-canary"

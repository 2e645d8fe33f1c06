"""What the operator reaches on a fleet's behalf: the Prometheus allow-list (which per-fleet URLs may be asked,
with the fleet's token), the ReferenceGrant that lets a fleet's HTTPRoute live in another namespace, and which
routes still send to a Service. Hostile values first: each names a trick that would send a token elsewhere."""

import pytest

from specfleet.reach import (
    UrlRefusedError,
    admitted,
    grants_route,
    inference_pools_refusal,
    parse_prefix,
    prometheus_allow_list,
    prometheus_refusal,
    references_service,
)

OWN = "http://prometheus-operated.monitoring.svc:9090"
THANOS = "https://thanos.obs.svc/tenant-a"


@pytest.mark.parametrize(
    "url",
    [
        OWN,
        f"{OWN}/",
        "HTTP://Prometheus-Operated.Monitoring.svc:9090",  # scheme and host are case-insensitive
        f"{THANOS}",
        f"{THANOS}/",
        f"{THANOS}/prometheus",
        "https://thanos.obs.svc:443/tenant-a",  # the scheme's default port, said
    ],
)
def test_urls_under_an_allowed_prefix_are_admitted(url: str) -> None:
    assert admitted(url, [OWN, THANOS]), url
    assert prometheus_refusal(url, [OWN, THANOS]) is None


@pytest.mark.parametrize(
    "url",
    [
        "http://prometheus-operated.monitoring.svc:9090@evil.example",  # userinfo: the host is evil.example
        "http://prometheus-operated.monitoring.svc@evil.example:9090",
        "http://user:password@prometheus-operated.monitoring.svc:9090",  # credentials belong in authSecret
        "http://prometheus-operated.monitoring.svc.evil.example:9090",  # a longer host is another host
        "http://prometheus-operated.monitoring.svc:9091",  # another port
        "https://prometheus-operated.monitoring.svc:9090",  # another scheme
        "http://prometheus-operated.monitoring.svc:9090.evil.example",
        "http://evil.example/http://prometheus-operated.monitoring.svc:9090",
        "http://prometheus-operated.monitoring.svc:9090#@evil.example",  # a fragment
        "http://prometheus-operated.monitoring.svc:9090?token=secret",  # a query
        "http://prometheus-operated.monitoring.svc:9090?",
        "http://prometheus-operated.monitoring.svc:9090\\@evil.example",
        "https://thanos.obs.svc/tenant-ab",  # a path prefix ends at a segment
        "https://thanos.obs.svc/tenant-a/../tenant-b",  # dot segments climb out of the prefix
        "https://thanos.obs.svc/tenant-a/%2e%2e/tenant-b",
        "https://thanos.obs.svc/tenant-a/./x",
        "https://thanos.obs.svc/",
        "https://thanos.obs.svc",
        "http://\uff50rometheus-operated.monitoring.svc:9090",  # a fullwidth p: not ASCII
        "http://prometheus-operated.monitoring.svc:9090/\n",
        "ftp://prometheus-operated.monitoring.svc:9090",
        "http://:9090",
        "http://[::1",
        "",
    ],
)
def test_hostile_urls_are_refused_naming_the_field_and_the_allow_list(url: str) -> None:
    assert not admitted(url, [OWN, THANOS]), url
    said = prometheus_refusal(url, [OWN, THANOS])
    assert said is not None and "spec.prometheus.url" in said and "allow-list" in said
    assert "secret" not in said and "password" not in said  # the refusal never repeats credentials


def test_nothing_is_admitted_by_an_empty_allow_list() -> None:
    said = prometheus_refusal(OWN, [])
    assert said is not None and "empty" in said and "--allow-prometheus-url" in said


def test_the_refusal_names_the_allowed_prefixes_without_the_admins_credentials() -> None:
    allowed = prometheus_allow_list("http://admin:hunter2@prom.monitoring:9090/?k=v", [THANOS])
    said = prometheus_refusal("http://10.0.0.7:9090", allowed)
    assert said is not None and "http://prom.monitoring:9090/" in said and THANOS in said
    assert "hunter2" not in said and "admin:" not in said and "k=v" not in said


def test_an_allowed_prefix_with_credentials_or_a_fragment_is_refused() -> None:
    for entry in ("http://u:p@prom:9090", "http://prom:9090#x", "http://prom:9090?x=1", "prom:9090", "http://prom/../"):
        with pytest.raises(UrlRefusedError):
            parse_prefix(entry)
        with pytest.raises(UrlRefusedError):
            prometheus_allow_list(None, [entry])


def test_the_operators_own_url_admits_itself_without_its_userinfo_and_query() -> None:
    allowed = prometheus_allow_list("http://admin:pw@prom.monitoring:9090/?dedup=true", [])
    assert admitted("http://prom.monitoring:9090", allowed)
    assert not admitted("http://admin:pw@prom.monitoring:9090", allowed)  # a fleet's URL carries no credentials
    assert prometheus_allow_list(None, []) == ()


GRANT = {
    "metadata": {"namespace": "routes"},
    "spec": {
        "from": [{"group": "specfleet.io", "kind": "SpeculativeDeployment", "namespace": "team-a"}],
        "to": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute"}],
    },
}


def test_a_reference_grant_from_the_fleets_namespace_to_httproutes_grants_every_route() -> None:
    assert grants_route([GRANT], "team-a", "llm")


@pytest.mark.parametrize(
    "change",
    [
        {"from": [{"group": "specfleet.io", "kind": "SpeculativeDeployment", "namespace": "team-b"}]},
        {"from": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "namespace": "team-a"}]},
        {"from": [{"group": "", "kind": "SpeculativeDeployment", "namespace": "team-a"}]},
        {"to": [{"group": "", "kind": "Service"}]},
        {"to": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": "other"}]},
        {"to": [{"group": "gateway.networking.k8s.io", "kind": "Gateway"}]},
        {"from": []},
        {"to": None},
    ],
)
def test_a_grant_for_something_else_grants_nothing(change: dict[str, object]) -> None:
    grant = {**GRANT, "spec": {**GRANT["spec"], **change}}
    assert not grants_route([grant], "team-a", "llm")
    assert not grants_route([], "team-a", "llm")


def test_a_grant_naming_the_route_grants_that_route_only() -> None:
    named = {**GRANT, "spec": {**GRANT["spec"], "to": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute",
                                                         "name": "llm"}]}}  # fmt: skip
    assert grants_route([named], "team-a", "llm") and not grants_route([named], "team-a", "llm-2")


def test_malformed_grants_grant_nothing_and_never_raise() -> None:
    for grant in ({}, {"spec": None}, {"spec": {"from": "x", "to": 3}}, {"spec": {"from": [None], "to": [1]}}):
        assert not grants_route([grant], "team-a", "llm")  # type: ignore[list-item]


def route(*refs: dict[str, object], mirror: dict[str, object] | None = None) -> dict[str, object]:
    rule: dict[str, object] = {"backendRefs": list(refs)}
    if mirror is not None:
        rule["filters"] = [{"type": "RequestMirror", "requestMirror": {"backendRef": mirror}}]
    return {"metadata": {"namespace": "team-a", "name": "llm"}, "spec": {"rules": [rule]}}


def test_a_route_references_a_service_by_name_in_its_namespace_or_the_one_it_names() -> None:
    assert references_service(route({"name": "llama-stable", "port": 8000}), "team-a", "llama-stable")
    other = {**route({"name": "llama-stable", "namespace": "team-a"}), "metadata": {"namespace": "routes"}}
    assert references_service(other, "team-a", "llama-stable")
    assert references_service(route({"name": "x"}, mirror={"name": "llama-canary"}), "team-a", "llama-canary")


def test_a_route_to_another_services_namespace_or_kind_is_no_reference() -> None:
    assert not references_service(route({"name": "llama"}), "team-a", "llama-stable")
    assert not references_service(route({"name": "llama-stable", "namespace": "team-b"}), "team-a", "llama-stable")
    assert not references_service(route({"name": "llama-stable", "kind": "Backend", "group": "x.io"}), "team-a",
                                  "llama-stable")  # fmt: skip
    elsewhere = {**route({"name": "llama-stable"}), "metadata": {"namespace": "routes"}}
    assert not references_service(elsewhere, "team-a", "llama-stable")
    assert not references_service({"spec": {"rules": "x"}}, "team-a", "llama-stable")
    pool = ("inference.networking.k8s.io", "InferencePool")
    pooled = route({"group": pool[0], "kind": pool[1], "name": "llama-stable"})
    assert references_service(pooled, "team-a", "llama-stable", pool)
    assert not references_service(pooled, "team-a", "llama-stable")  # a pool is not the Service of that name
    assert not references_service(route({"name": "llama-stable"}), "team-a", "llama-stable", pool)


def test_pools_the_operator_does_not_own_hold_the_fleet_naming_the_flag_and_the_chart_value() -> None:
    said = inference_pools_refusal(owned=False, served=True)
    assert said is not None and said.startswith("spec.rollout.trafficRouting.inferencePool: ")
    assert "--inference-pools" in said and "inferencePools.enabled=true" in said and "held" in said
    assert inference_pools_refusal(owned=False, served=False) == said  # the flag first: no CRD looked for


def test_pools_whose_crd_is_not_served_hold_the_fleet_naming_the_crd() -> None:
    said = inference_pools_refusal(owned=True, served=False)
    assert said is not None and "inference.networking.k8s.io/v1" in said and "CRDs" in said and "held" in said


def test_pools_owned_and_served_are_not_refused() -> None:
    assert inference_pools_refusal(owned=True, served=True) is None

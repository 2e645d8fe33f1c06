"""A hostile tenant on the dev cluster: a ServiceAccount bound only to the built-in `edit` role in its namespace
(which the SpeculativeDeployment kind aggregates into, as a cluster admin grants tenants a CRD's kind) tries to
make the operator reach where the tenant cannot, with `kubectl --as`. Each try is refused naming the field, or
made harmless:

- credentials in `spec.prometheus.url` (userinfo, a query, a fragment): refused by the API server;
- a URL to an internal host with `authSecret`: admitted, but the operator never asks it nor reads the Secret,
  the canary holds on an Error verdict naming the field and the allow-list, and the token appears nowhere the
  operator writes (its logs, Events, status, its metrics);
- an HTTPRoute in another namespace: left untouched (SpecValid False naming the field) until that namespace's
  owner grants it with a ReferenceGrant, which the tenant cannot create;
- `trafficRouting` removed while the route still sends to `<name>-stable`: the Service stays until the route
  leaves it.
"""

import json
import threading
import urllib.request
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml

from specfleet.api.vocabulary import GROUP, PLURAL
from specfleet_workshop.devcluster.cluster import ClusterInfo
from specfleet_workshop.devcluster.gateway import install_httproute_crd
from specfleet_workshop.fleetpods.loopback import free_port

from fleetkit import Fleet, Operator, canaried, running, sdep, wait_for

pytestmark = pytest.mark.integration

GATEWAY = "gateway.networking.k8s.io"
TENANT = "tenant"


@pytest.fixture
def tenant(fleet: Fleet, k8s_api: kubernetes.client.ApiClient) -> Iterator[str]:
    """The `--as` user: a ServiceAccount of the test's namespace bound to `edit` there, and nothing else. The
    SpeculativeDeployment kind is aggregated into `edit` by a ClusterRole of this test's own (the aggregation
    controller adds its rules to `edit`), removed afterwards."""
    rbac = kubernetes.client.RbacAuthorizationV1Api(k8s_api)
    aggregated = f"specfleet-edit-{fleet.namespace}"
    rbac.create_cluster_role(
        {
            "metadata": {"name": aggregated, "labels": {"rbac.authorization.k8s.io/aggregate-to-edit": "true"}},
            "rules": [{"apiGroups": [GROUP], "resources": [PLURAL], "verbs": ["*"]}],
        }
    )
    fleet.core.create_namespaced_service_account(fleet.namespace, {"metadata": {"name": TENANT}})
    binding = {
        "metadata": {"name": TENANT},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [{"kind": "ServiceAccount", "name": TENANT, "namespace": fleet.namespace}],
    }
    rbac.create_namespaced_role_binding(fleet.namespace, binding)
    user = f"system:serviceaccount:{fleet.namespace}:{TENANT}"
    wait_for(
        "edit to aggregate the SpeculativeDeployment kind",
        lambda: fleet.kubectl("auth", "can-i", "patch", f"{PLURAL}.{GROUP}", "--as", user, check=False).returncode == 0,
    )
    yield user
    rbac.delete_cluster_role(aggregated)


def as_tenant(fleet: Fleet, user: str, *args: str, stdin: str | None = None, namespace: str | None = None) -> Any:
    command = ["--as", user, *args] + (["-n", namespace] if namespace else [])
    return fleet.kubectl(*command, stdin=stdin, check=False)


# credentials in a Prometheus URL


@pytest.mark.parametrize(
    "url",
    [
        "http://prometheus-operated.monitoring.svc@evil.example:9090",
        "http://user:planted-password@prometheus-operated.monitoring.svc:9090",
        "http://prometheus-operated.monitoring.svc:9090/#@evil.example",
        "http://prometheus-operated.monitoring.svc:9090/?token=planted",
    ],
)
def test_a_tenant_cannot_put_credentials_in_a_prometheus_url(
    crd_installed: None, fleet: Fleet, tenant: str, url: str
) -> None:
    refused = as_tenant(fleet, tenant, "apply", "-f", "-", stdin=yaml.safe_dump(sdep(prometheus={"url": url})))
    assert refused.returncode != 0, refused.stdout
    assert "spec.prometheus.url" in refused.stderr and "no userinfo" in refused.stderr, refused.stderr
    plain = sdep(prometheus={"url": "http://prometheus-operated.monitoring.svc:9090"})
    admitted = as_tenant(fleet, tenant, "apply", "-f", "-", stdin=yaml.safe_dump(plain))
    assert admitted.returncode == 0, admitted.stderr  # the tenant may name a Prometheus: the refusal is the URL's


# a URL to an internal host, with the tenant's token


class Recorder(BaseHTTPRequestHandler):
    """An internal host the tenant would like the operator to call: it records every request and answers as a
    Prometheus with no data would (so an operator that asks it would carry on asking)."""

    seen: list[tuple[str, str]] = []

    def do_GET(self) -> None:
        self.seen.append((self.path, self.headers.get("Authorization", "")))
        body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": []}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_GET

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def internal_host() -> Iterator[tuple[str, list[tuple[str, str]]]]:
    seen: list[tuple[str, str]] = []
    handler = type("RecordingHost", (Recorder,), {"seen": seen})
    server = ThreadingHTTPServer(("127.0.0.1", free_port()), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", seen
    server.shutdown()
    server.server_close()


HELD = {
    "steps": [{"weight": 50, "pause": {"duration": "1h"}}],
    "analysis": {"interval": "2s", "onProviderError": {"after": "1h", "action": "Rollback"}},
}
"""A canary that an Error verdict holds (Progressing) for longer than any test waits."""


def test_a_url_to_an_internal_host_with_an_auth_secret_is_never_asked_and_the_token_stays_in_its_secret(
    dev_cluster: ClusterInfo,
    crd_installed: None,
    fleet: Fleet,
    tenant: str,
    internal_host: tuple[str, list[tuple[str, str]]],
    tmp_path: Path,
) -> None:
    url, seen = internal_host
    token = f"planted-token-{uuid.uuid4().hex}"
    admin_password = f"planted-admin-{uuid.uuid4().hex}"
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "prom-token"}, "stringData": {"token": token}}
    assert as_tenant(fleet, tenant, "apply", "-f", "-", stdin=yaml.safe_dump(secret)).returncode == 0
    # the admin's own Prometheus carries the admin's credentials in its URL: another thing never to repeat
    prometheus = dev_cluster.prometheus_url.replace("://", f"://admin:{admin_password}@", 1)
    metrics_port = free_port()
    log = tmp_path / "operator.log"
    extra = ("--metrics-port", str(metrics_port), "--log-format", "json", "--verbose")
    with running(Operator(dev_cluster, fleet.namespace, log, prometheus, extra=extra)):
        spec = {"prometheus": {"url": url, "authSecret": {"name": "prom-token", "key": "token"}}, "rollout": HELD}
        applied = as_tenant(fleet, tenant, "apply", "-f", "-", stdin=yaml.safe_dump(sdep(**spec)))
        assert applied.returncode == 0, applied.stderr  # the API server cannot know the allow-list: admitted
        stable = wait_for("Healthy", fleet.phase_is("llama", "Healthy"), timeout=90)["stableRevision"]
        change = json.dumps({"spec": {"speculative": {"numSpeculativeTokens": 2}}})
        assert as_tenant(fleet, tenant, "patch", "sdep", "llama", "--type", "merge", "-p", change).returncode == 0
        status = wait_for(
            "an Error verdict", lambda: (s := fleet.status("llama")).get("lastAnalysis", {}).get("verdict") and s
        )
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=30).read().decode()
    reason = status["lastAnalysis"]["reasons"][0]
    assert status["lastAnalysis"]["verdict"] == "Error", status["lastAnalysis"]
    assert "spec.prometheus.url" in reason and "allow-list" in reason and "no request was made" in reason
    assert dev_cluster.prometheus_url.rstrip("/") in reason  # what is allowed, without the admin's userinfo
    assert status["phase"] == "Progressing" and status["stableRevision"] == stable and not canaried(status)
    assert seen == [], "the operator called the tenant's internal host"
    events = fleet.core.list_namespaced_event(fleet.namespace).items
    written = {
        "operator log": log.read_text(),
        "events": "\n".join(f"{e.reason} {e.message}" for e in events),
        "status": json.dumps(fleet.get("llama")),
        "operator metrics": metrics,
    }
    assert "llama" in written["status"] and "specfleet_" in written["operator metrics"]
    for where, text in written.items():
        for planted in (token, admin_password):
            assert planted not in text, f"a planted credential appears in the {where}"


# an HTTPRoute in another namespace


@pytest.fixture(scope="session")
def gateway_crds(dev_cluster: ClusterInfo) -> None:
    install_httproute_crd(dev_cluster)


@pytest.fixture
def other_namespace(fleet: Fleet) -> Iterator[str]:
    """Another team's namespace, holding the route the tenant would like to steer."""
    name = f"routes-{uuid.uuid4().hex[:8]}"
    fleet.core.create_namespace({"metadata": {"name": name}})
    yield name
    fleet.core.delete_namespace(name)


def route(namespace: str, backend: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": f"{GATEWAY}/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": "llm", "namespace": namespace},
        "spec": {"rules": [{"backendRefs": [backend]}]},
    }


def read_route(fleet: Fleet, namespace: str) -> dict[str, Any]:
    return fleet.custom.get_namespaced_custom_object(GATEWAY, "v1", namespace, "httproutes", "llm")


def spec_valid(fleet: Fleet) -> dict[str, Any]:
    conditions = fleet.status("llama").get("conditions") or []
    return next((c for c in conditions if c["type"] == "SpecValid"), {})


def test_a_route_in_another_namespace_is_written_only_once_that_namespace_grants_it(
    gateway_crds: None, operator: Operator, fleet: Fleet, tenant: str, other_namespace: str
) -> None:
    backend = {"name": "llama-stable", "namespace": fleet.namespace, "port": 8000}
    fleet.kubectl("apply", "-n", other_namespace, "-f", "-", stdin=yaml.safe_dump(route(other_namespace, backend)))
    before = read_route(fleet, other_namespace)
    routing = {"trafficRouting": {"httpRoute": {"name": "llm", "namespace": other_namespace}}}
    applied = as_tenant(fleet, tenant, "apply", "-f", "-", stdin=yaml.safe_dump(sdep(rollout=routing)))
    assert applied.returncode == 0, applied.stderr
    held = wait_for(
        "the fleet held, saying why", lambda: spec_valid(fleet).get("status") == "False" and spec_valid(fleet)
    )
    assert "spec.rollout.trafficRouting.httpRoute.namespace" in held["message"] and "ReferenceGrant" in held["message"]
    after = read_route(fleet, other_namespace)
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"], "the route was written"
    # the tenant cannot write the route itself, nor grant itself the operator's reach there
    weights = json.dumps({"spec": {"rules": [{"backendRefs": [{"name": "llama-stable", "weight": 100}]}]}})
    patched = as_tenant(fleet, tenant, "patch", "httproute", "llm", "--type", "merge", "-p", weights,
                        namespace=other_namespace)  # fmt: skip
    assert patched.returncode != 0 and "forbidden" in patched.stderr.lower(), patched.stderr
    grant = {
        "apiVersion": f"{GATEWAY}/v1beta1",
        "kind": "ReferenceGrant",
        "metadata": {"name": "fleets-may-route", "namespace": other_namespace},
        "spec": {
            "from": [{"group": GROUP, "kind": "SpeculativeDeployment", "namespace": fleet.namespace}],
            "to": [{"group": GATEWAY, "kind": "HTTPRoute", "name": "llm"}],
        },
    }
    granted = as_tenant(fleet, tenant, "apply", "-f", "-", stdin=yaml.safe_dump(grant), namespace=other_namespace)
    assert granted.returncode != 0 and "forbidden" in granted.stderr.lower(), granted.stderr
    # the route namespace's owner consents; the operator sees it on its next look (it does not watch grants)
    fleet.kubectl("apply", "-n", other_namespace, "-f", "-", stdin=yaml.safe_dump(grant))
    wait_for(
        "the operator to set the route's weights",
        lambda: read_route(fleet, other_namespace)["spec"]["rules"][0]["backendRefs"][0].get("weight") == 100,
        timeout=120,
    )
    wait_for("Healthy", fleet.phase_is("llama", "Healthy"))


# trafficRouting removed while the route still sends to the fleet's Service


def services(fleet: Fleet) -> set[str]:
    return {s.metadata.name for s in fleet.core.list_namespaced_service(fleet.namespace).items}


def test_removing_traffic_routing_keeps_the_service_the_route_still_sends_to(
    gateway_crds: None, operator: Operator, fleet: Fleet, tenant: str
) -> None:
    fleet.apply(route(fleet.namespace, {"name": "llama-stable", "port": 8000}))
    routing = {"trafficRouting": {"httpRoute": {"name": "llm"}}}
    assert as_tenant(fleet, tenant, "apply", "-f", "-", stdin=yaml.safe_dump(sdep(rollout=routing))).returncode == 0
    wait_for("Healthy", fleet.phase_is("llama", "Healthy"))
    wait_for("the route's weights", lambda: read_route(fleet, fleet.namespace)["spec"]["rules"][0]["backendRefs"])
    assert "llama-stable" in services(fleet)
    removed = json.dumps({"spec": {"rollout": {"trafficRouting": None}}})
    assert as_tenant(fleet, tenant, "patch", "sdep", "llama", "--type", "merge", "-p", removed).returncode == 0

    def kept() -> list[Any]:
        return [e for e in fleet.core.list_namespaced_event(fleet.namespace).items if e.reason == "ServiceStillRouted"]

    wait_for("the operator to keep llama-stable, or delete it", lambda: kept() or "llama-stable" not in services(fleet))
    assert "llama-stable" in services(fleet), "the operator deleted a Service the route still sends to"
    assert "HTTPRoute" in kept()[0].message and "llama-stable" in kept()[0].message
    # the route's owner points it at the fleet Service: then nothing sends to llama-stable, and it goes
    fleet.apply(route(fleet.namespace, {"name": "llama", "port": 8000}))
    wait_for("llama-stable to go", lambda: "llama-stable" not in services(fleet), timeout=120)
    assert "llama" in services(fleet)

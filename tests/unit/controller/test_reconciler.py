"""The shell's write discipline, with a recording stand-in for the API: status writes carry the
resourceVersion they were decided from, nothing else is written when that precondition fails or when
the watch cache has not caught up with our own last write; an unreadable Prometheus auth Secret is an
Error verdict, not an exception; a retiring canary is kept until its traffic is observed off."""

import asyncio
import json
import logging
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic.exceptions import ConflictError, ForbiddenError, UnprocessibleEntityError
from prometheus_client import REGISTRY
from urllib3.exceptions import MaxRetryError, NewConnectionError

from specfleet.api.resource import SpeculativeDeployment
from specfleet.api.spec import EndpointPickerRef, EndpointPickerTemplate
from specfleet.api.status import Phase, SpeculativeDeploymentStatus
from specfleet.api.vocabulary import LABEL_NAME, LABEL_REVISION, LABEL_TRACK, Command, Track
from specfleet.controller import reconciler as reconciler_module
from specfleet.controller.kube import SecretError
from specfleet.controller.notifier import DeliveryPolicy, Notifier
from specfleet.controller.queue import WorkQueue
from specfleet.controller.reconciler import RECONCILE_ERROR, RECONCILE_STALLED, Reconciler, failed_sync
from specfleet.controller.sinks import SINKS
from specfleet.controller.store import Store
from specfleet.hardware import GPU_RESOURCE, MI300X, PRODUCT_NAME_LABEL
from specfleet.notify.targets import parse_targets
from specfleet.render.manifests import deployment, endpoint_picker, inference_pool, revision, service
from specfleet.rollout import Decision, Observation, decide
from specfleet.rollout.types import NO_PROMETHEUS, GpuRequest, GpuRoom

from bad_specs import BASE, merged
from receiverkit import receiving

NOW = datetime(2026, 11, 29, 12, tzinfo=UTC)
KEY = ("default", "llama-eagle3")
STEPS = {"steps": [{"weight": 50, "pause": {}}], "analysis": {"interval": "1m"}}


FORBIDDEN = ForbiddenError(ApiException(status=403, reason="Forbidden"))


class RecordingKube:
    """Records every write; answers reads from nothing; can be told to refuse the status write."""

    def __init__(
        self,
        status_conflict: bool = False,
        secret_error: str | None = None,
        nodes: list[dict[str, Any]] | Exception | None = None,
        cluster_pods: list[dict[str, Any]] | Exception | None = None,
        delivers: bool = True,
    ) -> None:
        self.delivers = delivers
        """Whether what it creates reaches the store `watch` (as a watch delivers it), or never does."""
        self.watch: Store | None = None
        self.writes: list[tuple[str, ...]] = []
        self.status_writes: list[tuple[dict[str, Any], str | None]] = []
        self.status_conflict, self.secret_error = status_conflict, secret_error
        self.events: list[str] = []
        self.nodes: list[dict[str, Any]] | Exception = FORBIDDEN if nodes is None else nodes
        """Without nodes given, listing them is refused (as with `capacityCheck: false`): no room is known,
        so a capacity check changes no decision."""
        self.cluster_pods: list[dict[str, Any]] | Exception = [] if cluster_pods is None else cluster_pods
        self.lists: list[str] = []
        self.secret_reads: list[str] = []
        self.kinds: set[str] = set()
        """The kinds the API server serves beyond the built-in ones (HTTPRoute, ReferenceGrant)."""
        self.objects: dict[tuple[str, str, str], dict[str, Any] | Exception] = {}
        """What `read` answers: (kind, namespace, name) -> the object, or the error reading it raises."""

    def apply(self, manifest: dict[str, Any]) -> None:
        self.writes.append(("apply", manifest["kind"], manifest["metadata"]["name"]))

    def create(self, manifest: dict[str, Any]) -> None:
        self.writes.append(("create", manifest["kind"], manifest["metadata"]["name"]))
        if self.delivers and self.watch is not None:
            self.watch.put_child(manifest["kind"], manifest, deleted=False)

    def delete(self, api_version: str, kind: str, namespace: str, name: str, uid: str) -> None:
        self.writes.append(("delete", kind, name))

    def patch_status(self, namespace: str, name: str, status: dict[str, Any], resource_version: str) -> str:
        if self.status_conflict:
            raise ConflictError(ApiException(status=409, reason="Conflict"))
        self.status_writes.append((status, resource_version))
        return str(int(resource_version) + 1)

    def merge_patch(self, *args: Any) -> None:
        self.writes.append(("patch", *map(str, args[:4])))

    def remove_annotations(self, namespace: str, name: str, keys: list[str], resource_version: str) -> None:
        self.writes.append(("remove-annotations", *keys))

    def has_kind(self, api_version: str, kind: str) -> bool:
        return kind in self.kinds

    def read(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        found = self.objects.get((kind, namespace, name))
        if isinstance(found, Exception):
            raise found
        return found

    def list_in(self, api_version: str, kind: str, namespace: str) -> list[dict[str, Any]]:
        self.lists.append(f"{kind} in {namespace}")
        found = [o for (k, ns, _), o in self.objects.items() if k == kind and ns == namespace]
        return [o for o in found if isinstance(o, dict)]

    def read_secret(self, namespace: str, name: str, key: str) -> str:
        self.secret_reads.append(f"{namespace}/{name}")
        if self.secret_error:
            raise SecretError(f"Secret {namespace}/{name}: {self.secret_error}")
        return "token"

    def post_event(self, involved: dict[str, Any], event_type: str, reason: str, message: str) -> None:
        self.events.append(reason)

    def list_nodes(self) -> list[dict[str, Any]]:
        self.lists.append("Node")
        if isinstance(self.nodes, Exception):
            raise self.nodes
        return self.nodes

    def list_pods_on_nodes(self) -> list[dict[str, Any]]:
        self.lists.append("Pod")
        if isinstance(self.cluster_pods, Exception):
            raise self.cluster_pods
        return self.cluster_pods


def body(status: SpeculativeDeploymentStatus | None = None, **spec: Any) -> dict[str, Any]:
    obj = merged(BASE, {"metadata": {"uid": "u1", "resourceVersion": "10", "generation": 2}, "spec": spec})
    if status is not None:
        obj["status"] = status.model_dump(mode="json", by_alias=True, exclude_none=True)
    return obj


def pods(track: Track, rev: str, count: int) -> list[dict[str, Any]]:
    labels = {LABEL_NAME: KEY[1], LABEL_TRACK: track.value, LABEL_REVISION: rev}
    return [
        {
            "metadata": {"name": f"{track.value}-{i}", "namespace": KEY[0], "labels": labels},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        }
        for i in range(count)
    ]


def canary_world(rollout: dict[str, Any] = STEPS, **spec: Any) -> tuple[Store, dict[str, Any]]:
    """A live canary at its first step, Ready for 5 minutes: an analysis is due."""
    old = SpeculativeDeployment.from_mapping(body(rollout=rollout, **spec))
    new = SpeculativeDeployment.from_mapping(body(rollout=rollout, speculative={"numSpeculativeTokens": 2}, **spec))
    stable_rev, canary_rev = revision(old.spec), revision(new.spec)
    status = SpeculativeDeploymentStatus(
        phase=Phase.PROGRESSING,
        stable_revision=stable_rev,
        stable_serving=old.spec.serving(),
        canary_revision=canary_rev,
        current_step=0,
        step_started_at=NOW - timedelta(minutes=10),
        step_ready_at=NOW - timedelta(minutes=5),
        canary_started_at=NOW - timedelta(minutes=10),
        evidence_since=NOW - timedelta(minutes=5),
    )
    obj = body(status, rollout=rollout, speculative={"numSpeculativeTokens": 2}, **spec)
    store = Store()
    store.put_sdep(obj, deleted=False)
    for track, sdep, rev in ((Track.STABLE, old, stable_rev), (Track.CANARY, new, canary_rev)):
        child = deployment(sdep, track, rev, 1)
        child["metadata"]["uid"] = f"uid-{track.value}"
        store.put_child("Deployment", child, deleted=False)
        for pod in pods(track, rev, 1):
            store.put_child("Pod", pod, deleted=False)
    return store, obj


def reconcile(kube: RecordingKube, store: Store, reconciler: Reconciler | None = None) -> float | None:
    kube.watch = store
    reconciler = reconciler or Reconciler(kube, store, WorkQueue(), clock=lambda: NOW)  # type: ignore[arg-type]
    return asyncio.run(reconciler.reconcile(KEY))


# 5. the Prometheus auth Secret


@pytest.mark.parametrize("problem", ["not found", "forbidden: the operator may not read it", "has no key token"])
def test_an_unreadable_auth_secret_is_an_error_verdict_not_an_exception(problem: str) -> None:
    prometheus = {"url": "http://prometheus:9090", "authSecret": {"name": "prom-token", "key": "token"}}
    store, _ = canary_world(prometheus=prometheus)
    kube = RecordingKube(secret_error=problem)
    reconciler = Reconciler(
        kube, store, WorkQueue(), clock=lambda: NOW, default_prometheus_url="http://prometheus:9090"
    )  # type: ignore[arg-type]
    after = reconcile(kube, store, reconciler)
    assert after is not None and after > 0
    (status, _rv), *_ = kube.status_writes
    analysis = status["lastAnalysis"]
    assert analysis["verdict"] == "Error"
    assert "prom-token" in analysis["reasons"][0] and problem in analysis["reasons"][0]
    assert status["unjudgedSince"]


def test_an_analysis_due_without_any_prometheus_is_an_error_verdict() -> None:
    store, _ = canary_world()  # no spec.prometheus, and the reconciler has no default URL
    kube = RecordingKube()
    reconcile(kube, store)
    (status, _rv), *_ = kube.status_writes
    assert status["lastAnalysis"]["verdict"] == "Error" and status["lastAnalysis"]["reasons"] == [NO_PROMETHEUS]
    assert status["unjudgedSince"] and "Promoted" not in str(status)


def test_a_fleets_prometheus_url_off_the_allow_list_is_never_asked_nor_given_the_token(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Fail closed: an Error verdict naming the field and the allow-list (onProviderError applies), the Secret
    not even read, no client made for the URL; the same URL once an admin allows it is asked, with the token."""
    asked: list[tuple[object, ...]] = []
    monkeypatch.setattr(reconciler_module, "Prometheus", lambda *args: asked.append(args) or NoAnswer())
    prometheus = {"url": "http://10.0.0.9:9090/", "authSecret": {"name": "prom-token", "key": "token"}}
    store, _ = canary_world(prometheus=prometheus)
    kube = RecordingKube()
    own = "http://prometheus.monitoring:9090"
    reconciler = Reconciler(kube, store, WorkQueue(), clock=lambda: NOW, default_prometheus_url=own)  # type: ignore[arg-type]
    reconcile(kube, store, reconciler)
    (status, _rv), *_ = kube.status_writes
    analysis = status["lastAnalysis"]
    assert analysis["verdict"] == "Error" and status["unjudgedSince"]
    # held, as onProviderError says: the merge patch written keeps the canary and leaves stable as it was
    assert status["phase"] in ("Progressing", "Paused") and status.get("canaryRevision", "kept") is not None
    assert "stableRevision" not in status
    assert "spec.prometheus.url" in analysis["reasons"][0] and "allow-list" in analysis["reasons"][0]
    assert f"{own}/" in analysis["reasons"][0]
    assert asked == [] and kube.secret_reads == []

    allowing = Reconciler(
        kube, store, WorkQueue(), clock=lambda: NOW, default_prometheus_url=own,  # type: ignore[arg-type]
        allowed_prometheus_urls=("http://10.0.0.9:9090",),
    )  # fmt: skip
    reconcile(kube, RecordingKube().watch or store, allowing)
    assert asked == [("http://10.0.0.9:9090/", "token")]  # one client, for the watch and the analysis
    assert set(kube.secret_reads) == {"default/prom-token"}


class NoAnswer:
    """A Prometheus that has no data."""

    def scalar(self, query: str, at: float | None = None) -> float | None:
        return None

    def by_label(self, query: str, label: str, at: float | None = None) -> dict[str, float]:
        return {}


def test_the_wait_a_pass_asks_for_counts_from_what_it_observed_not_from_when_it_ended() -> None:
    """A pass that took 2 s (its queries, its status write) asks to be woken 2 s sooner: the next scrape's look
    or an analysis is due at a moment, not a fixed wait after a slow pass."""
    store, _ = canary_world()
    quick = RecordingKube()
    promptly = reconcile(quick, store, Reconciler(quick, store, WorkQueue(), clock=lambda: NOW))  # type: ignore[arg-type]
    store, _ = canary_world()
    slow = RecordingKube()
    late = NOW + timedelta(seconds=2)
    reconciler = Reconciler(slow, store, WorkQueue(), clock=lambda: late if slow.status_writes else NOW)  # type: ignore[arg-type]
    after = reconcile(slow, store, reconciler)
    assert promptly is not None and after is not None and promptly > 2
    assert after == pytest.approx(promptly - 2)


class AskedNothingAnswered(NoAnswer):
    """A Prometheus with no data that keeps the queries it was asked, in order."""

    def __init__(self) -> None:
        self.queries: list[str] = []
        self.moments: list[float | None] = []

    def scalar(self, query: str, at: float | None = None) -> float | None:
        self.queries.append(query)
        self.moments.append(at)
        return None

    def by_label(self, query: str, label: str, at: float | None = None) -> dict[str, float]:
        self.queries.append(query)
        return {}

    def series(self, query: str, at: float | None = None) -> list[tuple[dict[str, str], float]]:
        self.queries.append(query)
        return []


def test_a_pass_with_an_analysis_due_looks_at_the_newest_scrape_before_the_analysis_queries(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A canary that turned bad is failed by the watch without waiting for an analysis's queries (seconds on a
    loaded Prometheus): the watch's first query is the pass's first."""
    prometheus = AskedNothingAnswered()
    monkeypatch.setattr(reconciler_module, "Prometheus", lambda *args: prometheus)
    store, _ = canary_world()
    kube = RecordingKube()
    own = "http://prometheus.monitoring:9090"
    reconcile(kube, store, Reconciler(kube, store, WorkQueue(), clock=lambda: NOW, default_prometheus_url=own))  # type: ignore[arg-type]
    first, *rest = prometheus.queries
    assert first.startswith("max(timestamp(")  # the canary's newest sample: the watch's first query
    assert rest  # the analysis asked after it


def test_the_watch_asks_at_the_precise_moment_while_the_status_records_whole_seconds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A pass 0.7 s into a second: a scrape stored in that fraction is seen (asked at the moment, not at the
    second's start), and the analysis the pass writes is timed in whole seconds as Kubernetes keeps them."""
    prometheus = AskedNothingAnswered()
    monkeypatch.setattr(reconciler_module, "Prometheus", lambda *args: prometheus)
    store, _ = canary_world()
    kube = RecordingKube()
    moment = NOW + timedelta(milliseconds=700)
    own = "http://prometheus.monitoring:9090"
    reconcile(kube, store, Reconciler(kube, store, WorkQueue(), clock=lambda: moment, default_prometheus_url=own))  # type: ignore[arg-type]
    assert prometheus.moments[0] == moment.timestamp()
    (status, _rv), *_ = kube.status_writes
    assert status["lastAnalysis"]["time"] == NOW.isoformat().replace("+00:00", "Z")


# 6. traffic routing: another namespace's consent, Services a route still sends to

ROUTES_NS = "routes"


def routed_world(route_namespace: str | None) -> tuple[Store, RecordingKube]:
    """A live canary whose traffic the HTTPRoute `llm` (in `route_namespace`, else the fleet's) splits."""
    ref = {"name": "llm"} | ({"namespace": route_namespace} if route_namespace else {})
    store, _ = canary_world(rollout={**STEPS, "trafficRouting": {"httpRoute": ref}})
    kube = RecordingKube()
    kube.kinds = {"HTTPRoute", "ReferenceGrant"}
    backend = {"name": f"{KEY[1]}-stable", "namespace": KEY[0], "port": 8000}
    route = {"metadata": {"name": "llm", "namespace": route_namespace or KEY[0], "resourceVersion": "5"},
             "spec": {"rules": [{"backendRefs": [backend]}]}}  # fmt: skip
    kube.objects["HTTPRoute", route_namespace or KEY[0], "llm"] = route
    return store, kube


def grant(name: str | None = None) -> dict[str, Any]:
    to = {"group": "gateway.networking.k8s.io", "kind": "HTTPRoute"} | ({"name": name} if name else {})
    return {
        "metadata": {"name": "fleets-may-route", "namespace": ROUTES_NS},
        "spec": {"from": [{"group": "specfleet.io", "kind": "SpeculativeDeployment", "namespace": KEY[0]}], "to": [to]},
    }


def route_writes(kube: RecordingKube) -> list[tuple[str, ...]]:
    return [w for w in kube.writes if w[:3] == ("patch", "gateway.networking.k8s.io/v1", "HTTPRoute")]


class BodyRecordingKube(RecordingKube):
    """Also keeps the bodies of what it patches and creates."""

    def __init__(self) -> None:
        super().__init__()
        self.bodies: list[dict[str, Any]] = []

    def merge_patch(self, *args: Any) -> None:
        super().merge_patch(*args)
        self.bodies.append(args[4])

    def create(self, manifest: dict[str, Any]) -> None:
        super().create(manifest)
        self.bodies.append(manifest)


def test_a_shadow_step_mirrors_on_the_route_and_keeps_the_fleet_service_on_stable() -> None:
    """Users reach the fleet through the route or its Service `<name>`: in a shadow step neither sends them to
    the canary; the route copies half of stable's requests to it."""
    shadow = {"steps": [{"mirror": 50, "pause": {}}], "analysis": {"interval": "1m"}}
    store, _ = canary_world(rollout={**shadow, "trafficRouting": {"httpRoute": {"name": "llm"}}})
    kube = BodyRecordingKube()
    kube.kinds = {"HTTPRoute"}
    stable = {"name": f"{KEY[1]}-stable", "port": 8000}
    route = {"metadata": {"name": "llm", "namespace": KEY[0], "resourceVersion": "5"},
             "spec": {"rules": [{"backendRefs": [stable]}]}}  # fmt: skip
    kube.objects["HTTPRoute", KEY[0], "llm"] = route
    reconcile(kube, store)
    [rules] = [b["spec"]["rules"] for b in kube.bodies if "rules" in b.get("spec", {})]
    canary = {"name": f"{KEY[1]}-canary", "port": 8000}
    assert rules == [
        {
            "backendRefs": [{**stable, "weight": 100}],
            "filters": [{"type": "RequestMirror", "requestMirror": {"backendRef": canary, "percent": 50}}],
        }
    ]
    [fleet_service] = [b for b in kube.bodies if b.get("kind") == "Service" and b["metadata"]["name"] == KEY[1]]
    assert fleet_service["spec"]["selector"]["specfleet.io/track"] == "stable"


POOLED = {"httpRoute": {"name": "llm"}, "inferencePool": {"endpointPickerRef": {"name": "llm-epp", "port": 9002}}}


PICKED = {**POOLED, "inferencePool": {"endpointPickerTemplate": {"image": "epp:v1", "serviceAccountName": "epp"}}}
"""The same pools, with endpoint pickers the fleet renders from a template."""


def pooled_world(kinds: set[str], routing: dict[str, Any] = POOLED) -> tuple[Store, BodyRecordingKube]:
    """A canary at a shadow step whose route `llm` sends to the InferencePool `<name>-stable`."""
    shadow = {"steps": [{"mirror": 50, "pause": {}}], "analysis": {"interval": "1m"}}
    store, _ = canary_world(rollout={**shadow, "trafficRouting": routing})
    kube = BodyRecordingKube()
    kube.kinds = kinds
    stable = {"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": f"{KEY[1]}-stable", "port": 8000}
    route = {"metadata": {"name": "llm", "namespace": KEY[0], "resourceVersion": "5"},
             "spec": {"rules": [{"backendRefs": [stable]}]}}  # fmt: skip
    kube.objects["HTTPRoute", KEY[0], "llm"] = route
    return store, kube


def pooling(kube: RecordingKube, store: Store, enabled: bool = True) -> Reconciler:
    """A reconciler of `specfleet run --inference-pools` (or without it)."""
    return Reconciler(kube, store, WorkQueue(), clock=lambda: NOW, inference_pools=enabled)  # type: ignore[arg-type]


def held_for(kube: BodyRecordingKube) -> str:
    """The SpecValid=False message the fleet's last status write holds it with (and its Warning event's)."""
    status = kube.status_writes[-1][0]
    [spec_valid] = [c for c in status["conditions"] if c["type"] == "SpecValid" and c["status"] == "False"]
    assert "InvalidSpec" in kube.events and status["phase"] == "Degraded"
    return str(spec_valid["message"])


def test_without_the_inference_pools_flag_the_pooled_fleet_is_held_saying_which_flag() -> None:
    store, kube = pooled_world({"HTTPRoute", "InferencePool"})
    reconcile(kube, store, pooling(kube, store, enabled=False))
    assert not [w for w in kube.writes if "InferencePool" in w[1:3]] and route_writes(kube) == []
    said = held_for(kube)
    assert "spec.rollout.trafficRouting.inferencePool" in said and "--inference-pools" in said
    assert "inferencePools.enabled" in said


def test_a_pooled_fleet_owns_a_pool_per_track_and_mirrors_to_the_canary_pool_on_the_route() -> None:
    store, kube = pooled_world({"HTTPRoute", "InferencePool"})
    reconcile(kube, store, pooling(kube, store))
    pools = {b["metadata"]["name"]: b["spec"] for b in kube.bodies if b.get("kind") == "InferencePool"}
    assert set(pools) == {f"{KEY[1]}-stable", f"{KEY[1]}-canary"}
    assert pools[f"{KEY[1]}-canary"]["selector"]["matchLabels"]["specfleet.io/track"] == "canary"
    assert pools[f"{KEY[1]}-canary"]["endpointPickerRef"]["name"] == "llm-epp-canary"  # a picker serves one pool
    [rules] = [b["spec"]["rules"] for b in kube.bodies if "rules" in b.get("spec", {})]
    mirror = rules[0]["filters"][0]["requestMirror"]
    assert mirror["backendRef"]["kind"] == "InferencePool" and mirror["backendRef"]["name"] == f"{KEY[1]}-canary"
    assert [(r["kind"], r["name"], r["weight"]) for r in rules[0]["backendRefs"]] == [
        ("InferencePool", f"{KEY[1]}-stable", 100)
    ]


def test_a_picker_template_runs_a_picker_per_pool_that_its_pool_names_and_they_go_when_it_goes() -> None:
    store, kube = pooled_world({"HTTPRoute", "InferencePool"}, PICKED)
    reconcile(kube, store, pooling(kube, store))
    made = {(b["kind"], b["metadata"]["name"]) for b in kube.bodies if "kind" in b}
    pickers = {f"{KEY[1]}-epp-stable", f"{KEY[1]}-epp-canary"}
    assert {(kind, name) for name in pickers for kind in ("Deployment", "Service")} <= made
    pools = {b["metadata"]["name"]: b["spec"] for b in kube.bodies if b.get("kind") == "InferencePool"}
    assert {pool["endpointPickerRef"]["name"] for pool in pools.values()} == pickers
    sdep = SpeculativeDeployment.from_mapping(store.sdeps[KEY])
    for track in (Track.STABLE, Track.CANARY):
        for manifest in endpoint_picker(sdep, track, picker_of(sdep)):
            manifest["metadata"]["uid"] = f"uid-{manifest['kind']}-{manifest['metadata']['name']}"
            store.put_child(manifest["kind"], manifest, deleted=False)
    ref = {"endpointPickerRef": {"name": "llm-epp", "port": 9002}}  # the user runs their own pickers now
    routing = {"inferencePool": {"endpointPickerTemplate": None, **ref}}
    changed = {"spec": {"rollout": {"trafficRouting": routing}}, "metadata": {"resourceVersion": "12", "generation": 3}}
    store.put_sdep(merged(store.sdeps[KEY], changed), deleted=False)
    reconcile(kube, store, pooling(kube, store))
    deleted = {(w[1], w[2]) for w in kube.writes if w[0] == "delete"}
    assert {(kind, name) for name in pickers for kind in ("Deployment", "Service")} <= deleted


def picker_of(sdep: SpeculativeDeployment) -> EndpointPickerTemplate:
    routing = sdep.spec.rollout.traffic_routing
    template = routing.inference_pool.endpoint_picker_template if routing and routing.inference_pool else None
    assert template is not None
    return template


def test_without_the_inferencepool_crd_the_pooled_fleet_is_held_and_the_route_left_alone() -> None:
    store, kube = pooled_world({"HTTPRoute"})
    reconcile(kube, store, pooling(kube, store))
    assert not [w for w in kube.writes if "InferencePool" in w[1:3]] and route_writes(kube) == []
    assert "serves no InferencePool kind" in held_for(kube)


def test_without_the_httproute_crd_a_routed_fleet_is_held_not_split_by_replica_ratio() -> None:
    """Split by replica ratio instead, a weighted step would give the canary another share than the spec says,
    and a shadow step no mirrored request at all: held, the status says which CRD is missing."""
    store, _ = canary_world(rollout={**STEPS, "trafficRouting": {"httpRoute": {"name": "llm"}}})
    kube = BodyRecordingKube()
    kube.kinds = set()
    reconcile(kube, store)
    said = held_for(kube)
    assert "spec.rollout.trafficRouting.httpRoute" in said and "serves no HTTPRoute kind" in said
    services = [b for b in kube.bodies if b.get("kind") == "Service" and b["metadata"]["name"] == KEY[1]]
    assert all(b["spec"]["selector"].get("specfleet.io/track") == "stable" for b in services), services


def test_a_route_in_another_namespace_is_not_touched_without_a_reference_grant_and_the_fleet_says_why() -> None:
    store, kube = routed_world(ROUTES_NS)
    reconcile(kube, store)
    assert route_writes(kube) == [] and "ReferenceGrant in routes" in kube.lists
    status = kube.status_writes[-1][0]
    spec_valid = next(c for c in status["conditions"] if c["type"] == "SpecValid")
    assert (
        spec_valid["status"] == "False" and "spec.rollout.trafficRouting.httpRoute.namespace" in spec_valid["message"]
    )
    assert "ReferenceGrant" in spec_valid["message"] and status["phase"] == "Degraded"


@pytest.mark.parametrize("route", [None, "llm"])
def test_a_reference_grant_in_the_routes_namespace_lets_the_fleet_set_its_weights(route: str | None) -> None:
    store, kube = routed_world(ROUTES_NS)
    kube.objects["ReferenceGrant", ROUTES_NS, "fleets-may-route"] = grant(route)
    reconcile(kube, store)
    assert route_writes(kube), kube.writes


def test_a_grant_for_another_route_or_an_unreadable_grant_list_holds_the_fleet() -> None:
    store, kube = routed_world(ROUTES_NS)
    kube.objects["ReferenceGrant", ROUTES_NS, "fleets-may-route"] = grant("another-route")
    reconcile(kube, store)
    assert route_writes(kube) == []
    store, kube = routed_world(ROUTES_NS)
    kube.kinds = {"HTTPRoute"}  # no ReferenceGrant kind served: nothing can grant
    reconcile(kube, store)
    spec_valid = next(c for c in kube.status_writes[-1][0]["conditions"] if c["type"] == "SpecValid")
    assert route_writes(kube) == [] and "serves no ReferenceGrant kind" in spec_valid["message"]


def test_a_route_in_the_fleets_own_namespace_needs_no_grant() -> None:
    store, kube = routed_world(None)
    reconcile(kube, store)
    assert route_writes(kube) and not [name for name in kube.lists if name.startswith("ReferenceGrant")]


def test_without_traffic_routing_a_service_a_route_still_sends_to_is_kept_until_it_does_not() -> None:
    """trafficRouting removed from a live fleet: its `-stable` Service stays while the route it was made for
    still sends to it (deleting it would break the route), with a Warning event saying so; it goes once the
    route no longer names it. The `-canary` Service, which the route does not name, goes at once."""
    store, kube = routed_world(None)
    sdep = SpeculativeDeployment.from_mapping(store.sdeps[KEY])
    store.put_sdep(merged(store.sdeps[KEY], {"spec": {"rollout": {"trafficRouting": None}}}), deleted=False)
    for track in (Track.STABLE, Track.CANARY):
        manifest = service(sdep, track, route=f"{KEY[0]}/llm")
        manifest["metadata"]["uid"] = f"uid-svc-{track.value}"
        store.put_child("Service", manifest, deleted=False)
    reconciler = Reconciler(kube, store, WorkQueue(), clock=lambda: NOW)  # type: ignore[arg-type]
    reconcile(kube, store, reconciler)
    deleted = [w[2] for w in kube.writes if w[:2] == ("delete", "Service")]
    assert deleted == [f"{KEY[1]}-canary"] and kube.events.count("ServiceStillRouted") == 1
    route = kube.objects["HTTPRoute", KEY[0], "llm"]
    assert isinstance(route, dict)
    route["spec"]["rules"][0]["backendRefs"][0]["name"] = KEY[1]  # the user points the route at the fleet Service
    store.put_sdep(merged(store.sdeps[KEY], {"metadata": {"resourceVersion": "12"}}), deleted=False)
    reconcile(kube, store, reconciler)
    deleted = [w[2] for w in kube.writes if w[:2] == ("delete", "Service")]
    assert f"{KEY[1]}-stable" in deleted


def test_without_pool_routing_a_pool_the_route_still_sends_to_is_kept_until_it_does_not() -> None:
    """trafficRouting.inferencePool removed from a live fleet: its `-stable` InferencePool stays while the route
    still sends to it, with a Warning event; the `-canary` one, which the route does not name, goes at once."""
    store, kube = pooled_world({"HTTPRoute", "InferencePool"})
    sdep = SpeculativeDeployment.from_mapping(store.sdeps[KEY])
    picker = EndpointPickerRef(name="llm-epp", port=9002)
    store.put_sdep(
        merged(store.sdeps[KEY], {"spec": {"rollout": {"trafficRouting": {"inferencePool": None}}}}), deleted=False
    )
    for track in (Track.STABLE, Track.CANARY):
        manifest = inference_pool(sdep, track, picker, route=f"{KEY[0]}/llm")
        manifest["metadata"]["uid"] = f"uid-pool-{track.value}"
        store.put_child("InferencePool", manifest, deleted=False)
    reconciler = pooling(kube, store)
    reconcile(kube, store, reconciler)
    deleted = [w[2] for w in kube.writes if w[:2] == ("delete", "InferencePool")]
    assert deleted == [f"{KEY[1]}-canary"] and kube.events.count("InferencePoolStillRouted") == 1
    route = kube.objects["HTTPRoute", KEY[0], "llm"]
    assert isinstance(route, dict)
    route["spec"]["rules"][0]["backendRefs"][0] = {"name": f"{KEY[1]}-stable", "port": 8000}  # back to the Service
    store.put_sdep(merged(store.sdeps[KEY], {"metadata": {"resourceVersion": "12"}}), deleted=False)
    reconcile(kube, store, reconciler)
    assert f"{KEY[1]}-stable" in [w[2] for w in kube.writes if w[:2] == ("delete", "InferencePool")]


def test_a_service_whose_route_cannot_be_read_is_kept() -> None:
    store, kube = routed_world(None)
    sdep = SpeculativeDeployment.from_mapping(store.sdeps[KEY])
    store.put_sdep(merged(store.sdeps[KEY], {"spec": {"rollout": {"trafficRouting": None}}}), deleted=False)
    manifest = service(sdep, Track.STABLE, route=f"{KEY[0]}/llm")
    manifest["metadata"]["uid"] = "uid-svc-stable"
    store.put_child("Service", manifest, deleted=False)
    kube.objects["HTTPRoute", KEY[0], "llm"] = FORBIDDEN
    reconcile(kube, store)
    assert not [w for w in kube.writes if w[:2] == ("delete", "Service")]


# 10. status writes and the watch cache


def test_the_status_write_carries_the_resource_version_it_was_decided_from() -> None:
    store, obj = canary_world()
    kube = RecordingKube()
    reconcile(kube, store)
    assert kube.status_writes and all(rv == obj["metadata"]["resourceVersion"] for _, rv in kube.status_writes)


def test_a_refused_status_write_writes_nothing_but_taking_traffic_off_the_canary() -> None:
    store, _ = canary_world()
    store.put_sdep(
        merged(store.sdeps[KEY], {"metadata": {"annotations": {"specfleet.io/abort": "now"}}}), deleted=False
    )
    kube = RecordingKube(status_conflict=True)
    with pytest.raises(ConflictError):
        reconcile(kube, store)
    assert kube.writes == [("create", "Service", KEY[1])] and kube.events == []  # the stable-only Service


def test_a_watch_cache_behind_our_own_write_is_not_acted_on_again() -> None:
    store, _ = canary_world()
    store.put_sdep(
        merged(store.sdeps[KEY], {"metadata": {"annotations": {"specfleet.io/abort": "now"}}}), deleted=False
    )
    kube = RecordingKube()
    reconciler = Reconciler(kube, store, WorkQueue(), clock=lambda: NOW)  # type: ignore[arg-type]
    reconcile(kube, store, reconciler)
    assert kube.events.count("Aborted") == 1
    writes = len(kube.writes) + len(kube.status_writes)
    reconcile(kube, store, reconciler)  # the cache still shows the object before the abort was written
    assert len(kube.writes) + len(kube.status_writes) == writes and kube.events.count("Aborted") == 1
    fresh = merged(store.sdeps[KEY], {"metadata": {"resourceVersion": "11"}})
    store.put_sdep(fresh, deleted=False)  # the watch delivers something newer: acted on again
    reconcile(kube, store, reconciler)
    assert len(kube.writes) + len(kube.status_writes) > writes


def test_a_child_created_but_not_yet_in_the_watch_cache_is_not_created_again() -> None:
    store, _ = canary_world()  # no fleet Service yet: the first pass creates it
    kube = RecordingKube(delivers=False)
    reconciler = Reconciler(kube, store, WorkQueue(), clock=lambda: NOW)  # type: ignore[arg-type]
    reconcile(kube, store, reconciler)
    assert kube.writes.count(("create", "Service", KEY[1])) == 1
    store.put_sdep(merged(store.sdeps[KEY], {"metadata": {"resourceVersion": "11"}}), deleted=False)
    writes = len(kube.writes) + len(kube.status_writes)
    assert reconcile(kube, store, reconciler) == reconciler_module.CACHE_BEHIND_SECONDS  # the Service is on its way
    assert len(kube.writes) + len(kube.status_writes) == writes

    # a watch that never delivers it: waited for only EXPECTATION_SECONDS
    reconciler._expected[KEY] = dict.fromkeys(reconciler._expected[KEY], time.monotonic() - 1)
    reconcile(kube, store, reconciler)
    assert kube.writes.count(("create", "Service", KEY[1])) == 2


def test_a_created_child_the_watch_delivered_lets_the_next_pass_go_on() -> None:
    store, _ = canary_world()
    kube = RecordingKube()
    reconciler = Reconciler(kube, store, WorkQueue(), clock=lambda: NOW)  # type: ignore[arg-type]
    reconcile(kube, store, reconciler)
    store.put_sdep(merged(store.sdeps[KEY], {"metadata": {"resourceVersion": "11"}}), deleted=False)
    assert reconcile(kube, store, reconciler) != reconciler_module.CACHE_BEHIND_SECONDS
    assert kube.writes.count(("create", "Service", KEY[1])) == 1 and not reconciler._expected


def test_every_transition_event_is_also_logged_so_the_operator_log_tells_the_rollout(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store, _ = canary_world()
    store.put_sdep(
        merged(store.sdeps[KEY], {"metadata": {"annotations": {"specfleet.io/abort": "now"}}}), deleted=False
    )
    with caplog.at_level(logging.INFO, logger="specfleet.reconciler"):
        reconcile(RecordingKube(), store)
    aborted = [r for r in caplog.records if "Aborted" in r.getMessage()]
    assert len(aborted) == 1 and aborted[0].levelno == logging.WARNING, caplog.text
    assert f"{KEY[0]}/{KEY[1]}: Aborted: canary" in aborted[0].getMessage()


class UnreachableKube(RecordingKube):
    """An API server that is restarting: every call fails to connect."""

    def _refused(self, *args: Any, **kwargs: Any) -> Any:
        raise MaxRetryError(None, "/apis", NewConnectionError(None, "Connection refused"))  # type: ignore[arg-type]

    apply = create = patch_status = read = _refused


def test_an_unreachable_api_server_is_one_warning_and_a_retry_not_a_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store, _ = canary_world()
    queue = WorkQueue()
    reconciler = Reconciler(UnreachableKube(), store, queue, clock=lambda: NOW)  # type: ignore[arg-type]

    async def one_pass() -> float:
        queue.add(KEY)
        worker = asyncio.create_task(reconciler.run_worker())
        for _ in range(500):
            if caplog.records and KEY in queue._due:  # logged, and queued again (after the status says so)
                break
            await asyncio.sleep(0.01)
        worker.cancel()
        return queue._due[KEY] - time.monotonic()

    with caplog.at_level(logging.INFO, logger="specfleet.reconciler"):
        after = asyncio.run(one_pass())
    (record,) = caplog.records
    assert record.levelno == logging.WARNING and "API server unreachable: MaxRetryError" in record.getMessage()
    assert record.exc_info is None
    assert 0 < after <= 5.0  # looked at again after the error backoff


def test_a_reconcile_that_keeps_failing_is_tried_again_ever_less_often(caplog: pytest.LogCaptureFixture) -> None:
    store, _ = canary_world()
    queue = WorkQueue()
    reconciler = Reconciler(UnreachableKube(), store, queue, clock=lambda: NOW)  # type: ignore[arg-type]

    async def waits_after(failures: int) -> list[float]:
        worker = asyncio.create_task(reconciler.run_worker())
        waits = []
        for _ in range(failures):
            queue.add(KEY)  # due now, whatever the backoff said: as a watch event would
            for _ in range(500):
                if len(caplog.records) > len(waits) and KEY in queue._due:
                    break
                await asyncio.sleep(0.01)
            waits.append(queue._due[KEY] - time.monotonic())
        worker.cancel()
        return waits

    with caplog.at_level(logging.INFO, logger="specfleet.reconciler"):
        waits = asyncio.run(waits_after(3))

    assert [round(wait / 5) for wait in waits] == [1, 2, 4]
    assert "3 failures in a row" in caplog.records[-1].getMessage()


class ForbiddenKube(RecordingKube):
    """An API server that refuses the operator every child write (an RBAC rule removed): the status write
    before the children goes through, each Deployment create or apply is a 403."""

    def _forbidden(self, *args: Any, **kwargs: Any) -> None:
        refused = ApiException(status=403, reason="Forbidden")
        refused.body = json.dumps({"message": 'deployments.apps is forbidden: User "specfleet" cannot create'})
        raise ForbiddenError(refused)

    apply = create = _forbidden

    def read(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        assert self.watch is not None
        return self.watch.sdeps.get((namespace, name))


def test_a_failing_reconcile_says_so_in_status_with_what_failed_and_its_analysis_still_counts() -> None:
    store, _ = canary_world()
    kube = ForbiddenKube()
    kube.watch = store
    queue = WorkQueue()
    reconciler = Reconciler(kube, store, queue, clock=lambda: NOW)  # type: ignore[arg-type]

    async def one_pass() -> None:
        queue.add(KEY)
        worker = asyncio.create_task(reconciler.run_worker())
        for _ in range(500):
            if len(kube.status_writes) >= 2:
                break
            await asyncio.sleep(0.01)
        worker.cancel()

    asyncio.run(one_pass())
    (decided, _), (failed, _) = kube.status_writes[:2]
    assert decided["lastAnalysis"]["verdict"] == "Error"  # written before the children: onProviderError counts it
    synced = next(c for c in failed["conditions"] if c["type"] == "Synced")
    assert synced["status"] == "False" and synced["reason"] == "ReconcileError"
    assert "API error 403 Forbidden: deployments.apps is forbidden" in synced["message"], synced
    assert synced["message"].endswith("next try at 2026-11-29T12:00:05Z"), synced  # NOW + the first 5 s wait


def failed_pass_after(earlier_failures: int) -> dict[str, Any]:
    """The Synced condition a reconcile refused by the API server writes, after `earlier_failures` in a row."""
    store, _ = canary_world()
    kube = ForbiddenKube()
    kube.watch = store
    queue = WorkQueue()
    reconciler = Reconciler(kube, store, queue, clock=lambda: NOW)  # type: ignore[arg-type]
    for _ in range(earlier_failures):
        reconciler.backoff.failed(KEY)

    async def one_pass() -> None:
        queue.add(KEY)
        worker = asyncio.create_task(reconciler.run_worker())
        for _ in range(500):
            if len(kube.status_writes) >= 2:
                break
            await asyncio.sleep(0.01)
        worker.cancel()

    asyncio.run(one_pass())
    failed, _ = kube.status_writes[1]
    return next(c for c in failed["conditions"] if c["type"] == "Synced")


def test_a_reconcile_that_fails_ten_times_in_a_row_is_stalled_and_still_retried_at_the_cap() -> None:
    ninth = failed_pass_after(8)
    tenth = failed_pass_after(9)

    assert ninth["reason"] == RECONCILE_ERROR and "(9 times in a row)" in ninth["message"], ninth
    assert ninth["message"].endswith("next try at 2026-11-29T12:05:00Z"), ninth  # 5 s x 2^8 capped at 5 minutes
    assert tenth["reason"] == RECONCILE_STALLED and "(10 times in a row)" in tenth["message"], tenth
    assert tenth["message"].endswith("next try at 2026-11-29T12:05:00Z"), tenth


def test_the_synced_message_names_the_failure_and_the_time_of_the_next_try() -> None:
    retry_at = datetime.fromisoformat("2026-11-29T14:00:20+01:00")  # said in UTC, whatever zone the clock has

    assert failed_sync(1, False, "API error 500", retry_at) == (
        RECONCILE_ERROR,
        "the last reconcile failed (once): API error 500; next try at 2026-11-29T13:00:20Z",
    )
    reason, message = failed_sync(12, True, "x" * 5000, retry_at)
    assert reason == RECONCILE_STALLED and "(12 times in a row)" in message and len(message) < 500


# 4. a retiring canary goes only once its traffic is seen off


def test_a_retiring_canary_is_deleted_only_after_the_service_is_seen_without_it() -> None:
    store, obj = canary_world()
    status = SpeculativeDeploymentStatus.model_validate(obj["status"]).model_copy(
        update={
            "canary_revision": None,
            "current_step": None,
            "retiring_revision": obj["status"]["canaryRevision"],
            "traffic_off_at": NOW - timedelta(minutes=1),
            "rejected_revision": obj["status"]["canaryRevision"],
        }
    )
    obj = {**obj, "status": status.model_dump(mode="json", by_alias=True, exclude_none=True)}
    store.put_sdep(obj, deleted=False)
    sdep = SpeculativeDeployment.from_mapping(obj)
    both = {
        "metadata": {
            "name": KEY[1],
            "namespace": KEY[0],
            "uid": "uid-service",
            "labels": {LABEL_NAME: KEY[1]},
            "ownerReferences": [{"uid": "u1", "controller": True}],
        },
        "spec": {"selector": {LABEL_NAME: KEY[1]}},
    }
    store.put_child("Service", both, deleted=False)  # the crash came between the status and the Service
    kube = RecordingKube()
    reconcile(kube, store)
    assert ("apply", "Service", KEY[1]) in kube.writes
    assert not any(w[0] == "delete" for w in kube.writes)
    stable_only = merged(both, {"spec": {"selector": {LABEL_TRACK: "stable"}}})
    store.put_child("Service", stable_only, deleted=False)
    store.put_sdep(merged(obj, {"metadata": {"resourceVersion": "12"}}), deleted=False)
    kube = RecordingKube()
    reconcile(kube, store)
    assert ("delete", "Deployment", f"{sdep.metadata.name}-canary") in kube.writes


# The capacity check before a canary step creates pods

GPU_NODE = {
    "metadata": {"name": "gpu-1", "labels": {PRODUCT_NAME_LABEL: MI300X.product_name}},
    "spec": {"taints": [{"key": GPU_RESOURCE, "effect": "NoSchedule"}]},
    "status": {"allocatable": {GPU_RESOURCE: "8"}, "conditions": [{"type": "Ready", "status": "True"}]},
}
BUSY = {"spec": {"nodeName": "gpu-1", "containers": [{"resources": {"limits": {GPU_RESOURCE: "6"}}}]}}
REQUEST = GpuRequest(pods=1, per_pod=4, resource=GPU_RESOURCE, products=(MI300X.product_name,))


class Decisions:
    """Stands in for `decide` in the reconciler: the real decision, asking for a capacity check while the
    observation has no room (the state machine's side is not what is tested here); records what it saw."""

    def __init__(self, ask: bool = True) -> None:
        self.ask = ask
        self.rooms: list[GpuRoom | None] = []

    def __call__(self, spec: Any, status: Any, observation: Observation) -> Decision:
        self.rooms.append(observation.room)
        decision = decide(spec, status, observation)
        return replace(decision, capacity_due=REQUEST) if self.ask and observation.room is None else decision


def test_a_capacity_check_lists_nodes_and_pods_and_decides_again_with_the_room(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store, _ = canary_world()
    decisions = Decisions()
    monkeypatch.setattr(reconciler_module, "decide", decisions)
    kube = RecordingKube(nodes=[GPU_NODE], cluster_pods=[BUSY])
    reconcile(kube, store)
    assert kube.lists == ["Node", "Pod"]
    first, last = decisions.rooms[0], decisions.rooms[-1]  # an analysis (an Error: no Prometheus) may come between
    assert first is None and last == GpuRoom(request=REQUEST, free=2, fitting=0, nodes=1)
    assert kube.status_writes  # the reconcile went on to its writes


def test_no_capacity_check_unless_a_decision_asks(monkeypatch: pytest.MonkeyPatch) -> None:
    store, _ = canary_world()
    decisions = Decisions(ask=False)
    monkeypatch.setattr(reconciler_module, "decide", decisions)
    kube = RecordingKube(nodes=[GPU_NODE], cluster_pods=[BUSY])
    reconcile(kube, store)
    assert kube.lists == [] and set(decisions.rooms) == {None}


@pytest.mark.parametrize("refused", ["nodes", "pods in all namespaces"])
def test_no_rbac_for_nodes_or_pods_is_one_warning_per_process_and_no_room(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, refused: str
) -> None:
    store, _ = canary_world()
    decisions = Decisions()
    monkeypatch.setattr(reconciler_module, "decide", decisions)
    kube = RecordingKube(nodes=FORBIDDEN if refused == "nodes" else [GPU_NODE], cluster_pods=FORBIDDEN)
    reconciler = Reconciler(kube, store, WorkQueue(), clock=lambda: NOW)  # type: ignore[arg-type]
    with caplog.at_level(logging.INFO, logger="specfleet.reconciler"):
        for version in ("10", "20", "30"):
            store.put_sdep(merged(store.sdeps[KEY], {"metadata": {"resourceVersion": version}}), deleted=False)
            reconcile(kube, store, reconciler)
    (warning,) = [r for r in caplog.records if "capacity" in r.getMessage()]
    assert warning.levelno == logging.WARNING and warning.exc_info is None
    message = warning.getMessage()
    assert f"listing {refused} was refused (API error 403 Forbidden)" in message
    assert "get, list on nodes and list on pods in all namespaces" in message and "capacityCheck" in message
    assert set(decisions.rooms) == {None} and len(kube.status_writes) == 3  # every pass went on without a room
    assert kube.lists.count("Node") == 3  # asked again each time: RBAC granted later is used at once


@pytest.mark.parametrize(
    "error",
    [
        ApiException(status=500, reason="Internal Server Error"),
        MaxRetryError(None, "/api/v1/nodes", NewConnectionError(None, "Connection refused")),  # type: ignore[arg-type]
        TypeError("a bug in the count"),
    ],
)
def test_a_capacity_check_that_fails_never_stops_the_reconcile(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, error: Exception
) -> None:
    store, _ = canary_world()
    decisions = Decisions()
    monkeypatch.setattr(reconciler_module, "decide", decisions)
    kube = RecordingKube(nodes=[GPU_NODE], cluster_pods=error)
    with caplog.at_level(logging.INFO, logger="specfleet.reconciler"):
        after = reconcile(kube, store)
    assert after is not None and kube.status_writes and set(decisions.rooms) == {None}
    (record,) = [r for r in caplog.records if "capacity check" in r.getMessage()]
    assert record.levelno >= logging.WARNING and f"{KEY[0]}/{KEY[1]}" in record.getMessage()


# 11. a child the API server refuses


class RefusingKube(RecordingKube):
    """Refuses to create or apply the canary's Deployment as invalid (422), as for a template's bad volume."""

    MESSAGE = 'Deployment.apps "llama-eagle3-canary" is invalid: spec.template.spec.volumes[2].name: Invalid value'

    def create(self, manifest: dict[str, Any]) -> None:
        self._refuse(manifest)
        super().create(manifest)

    def apply(self, manifest: dict[str, Any]) -> None:
        self._refuse(manifest)
        super().apply(manifest)

    refusals = 0

    def _refuse(self, manifest: dict[str, Any]) -> None:
        if manifest["kind"] == "Deployment" and manifest["metadata"]["name"].endswith("-canary"):
            self.refusals += 1
            error = ApiException(status=422, reason="Unprocessable Entity")
            error.body = json.dumps({"kind": "Status", "message": self.MESSAGE})
            raise UnprocessibleEntityError(error)


def test_a_child_the_api_server_refuses_makes_the_spec_invalid_with_the_servers_words_until_it_changes() -> None:
    store, obj = canary_world()
    store.children("Deployment", KEY).pop(f"{KEY[1]}-canary")  # the canary's Deployment is still to be created
    kube = RefusingKube()
    reconciler = Reconciler(kube, store, WorkQueue(), clock=lambda: NOW)  # type: ignore[arg-type]
    reconcile(kube, store, reconciler)  # the refusal is met while applying
    store.put_sdep(merged(obj, {"metadata": {"resourceVersion": "11"}}), deleted=False)  # our status write, seen
    reconcile(kube, store, reconciler)  # and said on the next pass
    status = kube.status_writes[-1][0]
    spec_valid = next(c for c in status["conditions"] if c["type"] == "SpecValid")
    assert spec_valid["status"] == "False" and RefusingKube.MESSAGE in spec_valid["message"]
    assert "InvalidSpec" in kube.events and status["phase"] == "Degraded"

    store.put_sdep(merged(obj, {"metadata": {"generation": 3, "resourceVersion": "12"}}), deleted=False)  # a fix
    assert kube.refusals == 1, "an invalid child is not sent again while the spec is unchanged"
    reconcile(kube, store, reconciler)
    assert kube.refusals == 2, "a new generation is rendered and applied again"


# 12. notifications: derived from the pass, recorded in the status it writes, delivered off the reconcile path


def aborted_world() -> Store:
    """A canary at its gate that a user aborts."""
    store, obj = canary_world()
    store.put_sdep(merged(obj, {"metadata": {"annotations": {Command.ABORT.annotation: "now"}}}), deleted=False)
    return store


def aborts_sent() -> float:
    labels = {"sink": "webhook", "transition": "Aborted"}
    return REGISTRY.get_sample_value("specfleet_notifications_sent_total", labels) or 0.0


def webhook_at(url: str) -> Notifier:
    own = parse_targets(f"targets: [{{sink: webhook, url: '{url}'}}]", "operator", SINKS.keys())
    return Notifier(own, policy=DeliveryPolicy(attempts=1, timeout=60.0))


def test_an_abort_is_recorded_with_its_status_and_delivered_after_the_pass_not_by_it() -> None:
    """The receiver holds the request 30 s: the pass returns with nothing delivered, and the receiver gets the
    request meanwhile from the notifier's worker. Then an operator restarted on the written status offers nothing."""
    store, kube = aborted_world(), RecordingKube()
    kube.watch = store
    before = aborts_sent()

    async def one_pass() -> tuple[float, int]:
        with receiving(delay=30.0) as receiver:
            notifier = webhook_at(f"http://127.0.0.1:{receiver.port}/hook")
            notifier.start()
            reconciler = Reconciler(kube, store, WorkQueue(), clock=lambda: NOW, notifier=notifier)  # type: ignore[arg-type]
            await reconciler.reconcile(KEY)
            sent_when_the_pass_returned = aborts_sent()
            arrived = await asyncio.to_thread(receiver.wait_for, 1, 10.0)
            await notifier.stop()
            return sent_when_the_pass_returned, len(arrived)

    sent_when_the_pass_returned, arrived = asyncio.run(one_pass())
    assert sent_when_the_pass_returned == before and arrived == 1
    (status, _rv), *_ = kube.status_writes
    (key,) = status["notified"]
    assert status["phase"] == "Aborted" and key.startswith("u1/2/Aborted/0/")

    written = merged(body(SpeculativeDeploymentStatus.model_validate(status)), {"metadata": {"resourceVersion": "11"}})
    restarted_store = Store()
    restarted_store.put_sdep(written, deleted=False)
    notifier = webhook_at("http://127.0.0.1:9/hook")
    restarted = Reconciler(kube, restarted_store, WorkQueue(), clock=lambda: NOW, notifier=notifier)  # type: ignore[arg-type]
    reconcile(kube, restarted_store, restarted)
    assert notifier.queue.qsize() == 0


def test_without_a_notifier_the_status_records_nothing() -> None:
    store, kube = aborted_world(), RecordingKube()
    reconcile(kube, store)
    (status, _rv), *_ = kube.status_writes
    assert status["phase"] == "Aborted" and "notified" not in status


class DeploymentsRefusedKube(RecordingKube):
    """The API server fails every Deployment write (after the status write, which it takes)."""

    def apply(self, manifest: dict[str, Any]) -> None:
        if manifest["kind"] == "Deployment":
            raise ApiException(status=500, reason="Internal Server Error")
        super().apply(manifest)

    def create(self, manifest: dict[str, Any]) -> None:
        self.apply(manifest)
        super().create(manifest)


def test_a_pass_that_fails_after_its_status_write_still_hands_its_notifications_on() -> None:
    """The status written says the abort was notified: the notification must be queued whatever fails later."""
    store, kube = aborted_world(), DeploymentsRefusedKube()
    kube.watch = store

    async def failing_pass() -> list[str]:
        notifier = webhook_at("http://127.0.0.1:9/hook")
        reconciler = Reconciler(kube, store, WorkQueue(), clock=lambda: NOW, notifier=notifier)  # type: ignore[arg-type]
        with pytest.raises(ApiException):
            await reconciler.reconcile(KEY)
        await asyncio.sleep(0)  # one turn of the loop: it takes what the pass's thread handed it
        return [notifier.queue.get_nowait().transition.value for _ in range(notifier.queue.qsize())]

    assert asyncio.run(failing_pass()) == ["Aborted"]
    (status, _rv), *_ = kube.status_writes
    assert status["notified"][0].startswith("u1/2/Aborted/0/")

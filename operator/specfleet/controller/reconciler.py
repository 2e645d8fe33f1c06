"""One reconcile of one SpeculativeDeployment: observe -> decide -> apply. Nothing is decided here."""

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from kubernetes.dynamic.exceptions import ApiException, ConflictError

from specfleet.api.resource import SpeculativeDeployment
from specfleet.api.status import Phase, SpeculativeDeploymentStatus
from specfleet.controller.analysis import analyze
from specfleet.controller.kube import Kube
from specfleet.controller.metrics import RECONCILE_SECONDS, RECONCILES, TRANSITIONS
from specfleet.controller.queue import WorkQueue
from specfleet.controller.store import Key, Store
from specfleet.metrics.prometheus import Prometheus
from specfleet.observation import controlled_by, observe, parse
from specfleet.patches import contains, merge_patch, stamped
from specfleet.render.manifests import (
    Manifest,
    Track,
    child_name,
    deployment,
    fleet_selector,
    route_rules,
    service,
)
from specfleet.rollout import Decision, Observation, decide

logger = logging.getLogger("specfleet.reconciler")

HTTPROUTE_API_VERSION = "gateway.networking.k8s.io/v1"
RESYNC_SECONDS = 300.0
"""Look at every object at least this often, even when no watch event arrives."""
ERROR_BACKOFF_SECONDS = 5.0


def utcnow() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


@dataclass
class Reconciler:
    kube: Kube
    store: Store
    queue: WorkQueue
    clock: Callable[[], datetime] = utcnow
    resync_seconds: float = RESYNC_SECONDS
    default_prometheus_url: str | None = None
    """`specfleet run --prometheus-url`: used for objects whose spec names no Prometheus."""
    _conflicts: dict[Key, set[str]] = field(default_factory=dict)
    _providers: dict[tuple[str, str | None], Prometheus] = field(default_factory=dict)

    def _prometheus_url(self, sdep: SpeculativeDeployment) -> str | None:
        return sdep.spec.prometheus.url or self.default_prometheus_url

    def _provider(self, sdep: SpeculativeDeployment, url: str) -> Prometheus:
        secret = sdep.spec.prometheus.auth_secret
        token = self.kube.read_secret(sdep.metadata.namespace, secret.name, secret.key) if secret else None
        if (url, token) not in self._providers:
            self._providers[url, token] = Prometheus(url, token)
        return self._providers[url, token]

    async def run_worker(self) -> None:
        """Take keys off the queue forever; one key is never reconciled twice at once."""
        while True:
            key = await self.queue.get()
            try:
                with RECONCILE_SECONDS.time():
                    after = await self.reconcile(key)
                RECONCILES.labels("ok").inc()
            except ApiException as error:
                RECONCILES.labels("error").inc()
                logger.warning("reconcile %s/%s: API error %s %s", *key, error.status, error.reason)
                after = ERROR_BACKOFF_SECONDS
            except Exception:
                RECONCILES.labels("error").inc()
                logger.exception("reconcile %s/%s failed", *key)
                after = ERROR_BACKOFF_SECONDS
            finally:
                self.queue.done(key)
            if after is not None and key in self.store.sdeps:
                self.queue.add(key, after)

    async def reconcile(self, key: Key) -> float | None:
        """Returns when to look again (seconds), or None when the object is gone."""
        body = self.store.sdeps.get(key)
        if body is None or body.get("metadata", {}).get("deletionTimestamp"):
            self._conflicts.pop(key, None)
            return None  # children go with their owner references; no finalizer needed
        parsed = parse(body)
        if parsed.problems:
            logger.error("%s/%s: %s", *key, "; ".join(parsed.problems))
        if parsed.sdep is None:
            return self.resync_seconds
        sdep = parsed.sdep
        deployments = {track: self._owned(key, sdep, "Deployment", child_name(sdep, track)) for track in Track}
        pods = self.store.children("Pod", key).values()
        url = self._prometheus_url(sdep)
        observation = observe(sdep, deployments, pods, self.clock(), guarded=url is not None)
        if self._conflicts.get(key):
            names = ", ".join(sorted(self._conflicts[key]))
            observation = _with_problem(observation, f"objects not created by specfleet already use the names {names}")
        decision = decide(sdep.spec, sdep.status, observation)
        if decision.analysis_due and url is not None:
            provider = await asyncio.to_thread(self._provider, sdep, url)
            analysis = await asyncio.to_thread(analyze, provider, sdep, decision.status, observation.now)
            decision = decide(sdep.spec, sdep.status, replace(observation, analysis=analysis))
        children = {kind: self.store.children(kind, key) for kind in ("Deployment", "Service")}
        await asyncio.to_thread(self._apply, key, body, sdep, decision, children)
        after = decision.requeue_after.total_seconds() if decision.requeue_after is not None else None
        return min(after, self.resync_seconds) if after is not None else self.resync_seconds

    def _owned(self, key: Key, sdep: SpeculativeDeployment, kind: str, name: str) -> dict[str, Any] | None:
        obj = self.store.children(kind, key).get(name)
        return obj if obj is not None and controlled_by(obj, sdep.metadata.uid) else None

    def _apply(
        self,
        key: Key,
        body: dict[str, Any],
        sdep: SpeculativeDeployment,
        decision: Decision,
        children: dict[str, dict[str, Any]],
    ) -> None:
        """Children in a safe order (the Service before any deletion), then status, events, annotations.

        Runs in a thread: it reads only the `children` snapshot taken on the event loop, never the store.
        """
        if not decision.hold_children:
            wanted = [stamped(m) for m in self._desired_children(sdep, decision)]
            if self._routed(sdep) and decision.route_weight == 0:
                self._set_route_weights(sdep, 0)  # traffic back to stable before any canary object goes
            for manifest in wanted:
                self._ensure(key, sdep, manifest, children.get(manifest["kind"], {}).get(manifest["metadata"]["name"]))
            if self._routed(sdep) and decision.route_weight > 0:
                self._set_route_weights(sdep, decision.route_weight)  # canary Service exists by now
            self._delete_unwanted(key, sdep, {(m["kind"], m["metadata"]["name"]) for m in wanted}, children)
        self._write_status(body, sdep, decision.status)
        for event in decision.events:
            TRANSITIONS.labels(event.reason).inc()
            self.kube.post_event(body, event.type, event.reason, event.message)
        if decision.done_commands:
            self.kube.remove_annotations(*key, list(decision.done_commands))

    def _routed(self, sdep: SpeculativeDeployment) -> bool:
        """Whether traffic is split by an HTTPRoute (named in the spec, and its CRD installed)."""
        routing = sdep.spec.rollout.traffic_routing
        return bool(routing and routing.http_route) and self.kube.has_kind(HTTPROUTE_API_VERSION, "HTTPRoute")

    def _desired_children(self, sdep: SpeculativeDeployment, decision: Decision) -> list[Manifest]:
        children = [service(sdep, canary_traffic=decision.canary_traffic)]
        routed = self._routed(sdep)
        for track, target in ((Track.STABLE, decision.stable), (Track.CANARY, decision.canary)):
            if target is not None:
                serving = sdep.model_copy(update={"spec": sdep.spec.with_serving(target.serving)})
                children.append(deployment(serving, track, target.revision, target.replicas))
                if routed:
                    children.append(service(sdep, track))
        return children

    def _set_route_weights(self, sdep: SpeculativeDeployment, weight: int) -> None:
        """Set the fleet's backend weights on the user's HTTPRoute (only those; the route stays theirs)."""
        ref = sdep.spec.rollout.traffic_routing.http_route  # type: ignore[union-attr]
        namespace = ref.namespace or sdep.metadata.namespace
        route = self.kube.read(HTTPROUTE_API_VERSION, "HTTPRoute", namespace, ref.name)
        if route is None:
            logger.warning(
                "%s/%s: HTTPRoute %s/%s not found", sdep.metadata.namespace, sdep.metadata.name, namespace, ref.name
            )
            return
        rules = route.get("spec", {}).get("rules") or []
        wanted = route_rules(sdep, rules, weight)
        if wanted != rules:
            body = {"metadata": {"resourceVersion": route["metadata"]["resourceVersion"]}, "spec": {"rules": wanted}}
            self.kube.merge_patch(HTTPROUTE_API_VERSION, "HTTPRoute", namespace, ref.name, body)

    def _ensure(
        self, key: Key, sdep: SpeculativeDeployment, manifest: Manifest, observed: dict[str, Any] | None
    ) -> None:
        """Create what is missing; re-apply what drifted; never take over an object someone else made."""
        name = manifest["metadata"]["name"]
        if observed is not None and not controlled_by(observed, sdep.metadata.uid):
            self._conflicts.setdefault(key, set()).add(f"{manifest['kind']}/{name}")
            return
        if observed is not None and contains(observed, manifest):
            return
        if observed is None:
            try:
                self.kube.create(manifest)
                return
            except ConflictError:
                meta = manifest["metadata"]
                existing = self.kube.read(manifest["apiVersion"], manifest["kind"], meta["namespace"], meta["name"])
                if existing is None or not controlled_by(existing, sdep.metadata.uid):
                    self._conflicts.setdefault(key, set()).add(f"{manifest['kind']}/{name}")
                    return
        self._conflicts.get(key, set()).discard(f"{manifest['kind']}/{name}")
        self.kube.apply(manifest)

    def _delete_unwanted(
        self,
        key: Key,
        sdep: SpeculativeDeployment,
        wanted: set[tuple[str, str]],
        children: dict[str, dict[str, Any]],
    ) -> None:
        for kind, api_version in (("Deployment", "apps/v1"), ("Service", "v1")):
            for name, obj in children.get(kind, {}).items():
                if (kind, name) not in wanted and controlled_by(obj, sdep.metadata.uid):
                    self.kube.delete(api_version, kind, key[0], name, obj["metadata"]["uid"])

    def _write_status(
        self, body: dict[str, Any], sdep: SpeculativeDeployment, status: SpeculativeDeploymentStatus
    ) -> None:
        new = status.model_copy(update={"selector": fleet_selector(sdep)}).model_dump(
            mode="json", by_alias=True, exclude_none=True
        )
        patch = merge_patch(body.get("status") or {}, new)
        if patch:
            self.kube.patch_status(sdep.metadata.namespace, sdep.metadata.name, patch)
            if status.phase in (Phase.ROLLED_BACK, Phase.ABORTED, Phase.DEGRADED):
                logger.warning("%s/%s is %s", sdep.metadata.namespace, sdep.metadata.name, status.phase.value)


def _with_problem(observation: Observation, problem: str) -> Observation:
    return replace(observation, desired_revision=None, problems=(*observation.problems, problem))

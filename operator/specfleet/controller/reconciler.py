"""One reconcile of one SpeculativeDeployment: observe -> decide -> apply. Nothing is decided here.

Write discipline: a decision is made from one cached version of the object and its
status is written with that version's resourceVersion as a precondition, *before* any child is touched.
If anything changed the object since (a user's edit, another replica, our own last write that the watch
has not delivered yet) the API server refuses the write and nothing else is written; the next pass
decides from the newer version. After a successful write, a cache still showing the version we wrote
over is not acted on at all (even where deciding again would change no status), until the watch
catches up. So a decision is never replayed on a stale status, and a status is never a mix of two.
"""

import asyncio
import contextlib
import functools
import json
import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from kubernetes.dynamic.exceptions import (
    ApiException,
    ConflictError,
    ForbiddenError,
    ResourceNotFoundError,
    UnprocessibleEntityError,
)
from urllib3.exceptions import HTTPError

from specfleet.api.resource import SpeculativeDeployment
from specfleet.api.spec import EndpointPickerRef
from specfleet.api.status import Analysis, ConditionStatus, SpeculativeDeploymentStatus, StatusChanges, Verdict
from specfleet.api.vocabulary import (
    ANNOTATION_HTTP_ROUTE,
    API_VERSION,
    GROUP,
    INFERENCE_GROUP,
    INFERENCEPOOL_API_VERSION,
    KIND,
    LABEL_TRACK,
    LABEL_TRAFFIC,
    SINGLE_TRACKS,
    ConditionType,
    Track,
)
from specfleet.capacity import room
from specfleet.controller.analysis import analyze, analyze_candidate, measure_fleet
from specfleet.controller.kube import Kube, SecretError
from specfleet.controller.metrics import RECONCILE_SECONDS, RECONCILES, TRANSITIONS
from specfleet.controller.notifier import Notifier
from specfleet.controller.outputs import DEFAULT_POD_URL_TEMPLATE, collect_pairs
from specfleet.controller.queue import FailureBackoff, WorkQueue
from specfleet.controller.store import PREFLIGHT_POD, Key, Store
from specfleet.controller.watch import Watched, watch_canary
from specfleet.metrics.prometheus import Prometheus
from specfleet.notify.transitions import Fleet, Notification, notifications
from specfleet.observation import controlled_by, observe, parse
from specfleet.patches import contains, merge_patch, stamped
from specfleet.preflight.job import preflight_job
from specfleet.reach import (
    GATEWAY_GROUP,
    ROUTE_NAMESPACE_FIELD,
    UrlPrefix,
    grants_route,
    http_route_refusal,
    inference_pools_refusal,
    prometheus_allow_list,
    prometheus_refusal,
    references_service,
)
from specfleet.render.manifests import (
    BackendKind,
    Manifest,
    child_name,
    deployment,
    endpoint_picker,
    fleet_selector,
    inference_pool,
    picker_name,
    route_rules,
    service,
)
from specfleet.render.policy import DEFAULT_POLICY, TemplatePolicy
from specfleet.rollout import Decision, FleetLook, Observation, TrackTarget, decide
from specfleet.rollout.types import NO_PROMETHEUS, GpuRequest, GpuRoom, Watch, set_condition

logger = logging.getLogger("specfleet.reconciler")

HTTPROUTE_API_VERSION = "gateway.networking.k8s.io/v1"
REFERENCEGRANT_API_VERSIONS = ("gateway.networking.k8s.io/v1", "gateway.networking.k8s.io/v1beta1")
"""v1 first; older Gateway API releases serve ReferenceGrant as v1beta1 only."""
RESYNC_SECONDS = 300.0
"""Look at every object at least this often, even when no watch event arrives."""
ERROR_BACKOFF_SECONDS = 5.0
"""The wait after a first failed reconcile; it doubles with each failure in a row, up to ERROR_BACKOFF_CAP_SECONDS."""
ERROR_BACKOFF_CAP_SECONDS = 300.0
CACHE_BEHIND_SECONDS = 1.0
"""Look again this soon when the watch cache has not delivered our own last write (its event wakes us too)."""
EXPECTATION_SECONDS = 30.0
"""Longest wait for the watch to deliver a child this process created, before a pass goes ahead without it."""
CAPACITY_RBAC = "get, list on nodes and list on pods in all namespaces (the chart's capacityCheck: true)"
"""What the capacity check reads, for the warning when the operator may not."""


T = TypeVar("T")


def utcnow() -> datetime:
    """The precise time: a pass observes it in whole seconds (`_seconds`, what the status records), while the
    watch asks Prometheus at the moment itself, so a scrape stored a fraction of a second ago is seen."""
    return datetime.now(UTC)


def _seconds(moment: datetime) -> datetime:
    return moment.replace(microsecond=0)


@dataclass
class Reconciler:
    kube: Kube
    store: Store
    queue: WorkQueue[Key]
    clock: Callable[[], datetime] = utcnow
    resync_seconds: float = RESYNC_SECONDS
    default_prometheus_url: str | None = None
    """`specfleet run --prometheus-url`: used for objects whose spec names no Prometheus."""
    allowed_prometheus_urls: tuple[str, ...] = ()
    """`specfleet run --allow-prometheus-url`: prefixes a spec's own `prometheus.url` may be under, beside
    `default_prometheus_url` (see `reach.prometheus_allow_list`). A URL under none is never asked."""
    pod_url_template: str = DEFAULT_POD_URL_TEMPLATE
    """`specfleet run --pod-url-template`: how the operator reaches a pod (output equivalence's requests)."""
    template_policy: TemplatePolicy = DEFAULT_POLICY
    """`specfleet run --template-policy`: what a fleet's `spec.template` may add to the pods (`render.policy`);
    a template it refuses makes the spec invalid, and nothing is rendered from it."""
    inference_pools: bool = False
    """`specfleet run --inference-pools`: own the InferencePools of fleets with `trafficRouting.inferencePool`;
    without it none is written, and such a fleet is held saying so (`reach.inference_pools_refusal`)."""
    threads: Executor | None = None
    """Where blocking calls (the Kubernetes client, Prometheus) run: one thread per worker, so `--workers`
    objects are reconciled at once. None: asyncio's default pool, which has only cores + 4 threads."""
    writes: Executor | None = None
    """Where the writes of one pass that do not depend on each other run at once (a fleet's children, its
    events): a fleet's first pass then takes two round trips to the API server instead of four. None: one
    after the other, in the calling thread."""
    notifier: Notifier | None = None
    """Where a pass's transitions go once its status is written (`specfleet run --notifications-config`,
    `--namespace-notifications`); None: none are derived, and `status.notified` stays as it is."""
    owns: Callable[[Key], Awaitable[bool]] | None = None
    """The shard gate (`controller.shards.ShardGate.owns`), asked before anything of a pass is read or written:
    False leaves the object to another process (the gate queues it again if it must look again). None: all."""
    _conflicts: dict[Key, set[str]] = field(default_factory=dict)
    _refused: dict[Key, tuple[int, str]] = field(default_factory=dict)
    """A child the API server refused as invalid (422), per object: (the generation it was rendered from, what the
    server said). The spec is reported invalid until a new generation renders something else."""
    _providers: dict[tuple[str, str | None], Prometheus] = field(default_factory=dict)
    _written_over: dict[Key, str] = field(default_factory=dict)
    """The resourceVersion our last status write replaced, per object: a cache still at it is behind."""
    _expected: dict[Key, dict[tuple[str, str], float]] = field(default_factory=dict)
    """Children this process created, per object, that the watch has not delivered yet: (kind, name) -> until
    when to wait for them (the "expectations" of Kubernetes' own controllers)."""
    _capacity_denied: bool = False
    """The operator was refused listing nodes or pods, and said so (once: a process has one Reconciler)."""
    backoff: FailureBackoff[Key] = field(
        default_factory=lambda: FailureBackoff(ERROR_BACKOFF_SECONDS, ERROR_BACKOFF_CAP_SECONDS)
    )
    """Per object: how long a reconcile that keeps failing waits before the next try."""
    _allowed: tuple[UrlPrefix, ...] = ()
    _still_routed_said: dict[Key, set[str]] = field(default_factory=dict)
    """The Services kept for a route that still sends to them, per object, that an event has told of."""
    _clients: dict[Key, tuple[str, Prometheus]] = field(default_factory=dict)
    """The Prometheus client (and its URL) each fleet was last given: a watch, at every scrape, reuses it rather
    than read the auth Secret each time (the analyses read it at every interval, so a rotated token is taken
    within one); a URL changed in the spec is checked against the allow-list again."""
    _watched: dict[Key, Watched] = field(default_factory=dict)
    """The scrape each fleet's last watch judged, so each scrape is judged once (a restart judges one again, and
    decides the same)."""

    def __post_init__(self) -> None:
        self._allowed = prometheus_allow_list(self.default_prometheus_url, self.allowed_prometheus_urls)

    def _prometheus_url(self, sdep: SpeculativeDeployment) -> str | None:
        return sdep.spec.prometheus.url or self.default_prometheus_url

    def _provider(self, sdep: SpeculativeDeployment, url: str) -> Prometheus:
        """The client for `url`, with the spec's token. A URL the spec names is checked against the allow-list
        before anything else, so a tenant cannot make the operator read its Secret and send the token to a host
        of the tenant's choosing (or probe one from inside the cluster)."""
        if sdep.spec.prometheus.url is not None:
            refused = prometheus_refusal(url, self._allowed)
            if refused is not None:
                raise UrlNotAllowedError(refused)
        secret = sdep.spec.prometheus.auth_secret
        token = self.kube.read_secret(sdep.metadata.namespace, secret.name, secret.key) if secret else None
        if (url, token) not in self._providers:
            self._providers[url, token] = Prometheus(url, token)
        self._clients[sdep.metadata.namespace, sdep.metadata.name] = (url, self._providers[url, token])
        return self._providers[url, token]

    async def run_worker(self) -> None:
        """Take keys off the queue forever; one key is never reconciled twice at once."""
        while True:
            key = await self.queue.get()
            try:
                with RECONCILE_SECONDS.time():
                    after = await self.reconcile(key)
                RECONCILES.labels("ok").inc()
                self.backoff.succeeded(key)
            except ConflictError:
                RECONCILES.labels("conflict").inc()
                logger.info("reconcile %s/%s: the object changed since it was read; deciding again", *key)
                after = CACHE_BEHIND_SECONDS
            except ApiException as error:
                after = self._failed(key)
                logger.warning("reconcile %s/%s: API error %s %s%s", *key, error.status, error.reason, self._retry(key))
                await self._report_failure(key, f"{_said(error)}: {_server_message(error)}", after)
            except (HTTPError, OSError) as error:  # the API server is restarting or unreachable: not a bug
                after = self._failed(key)
                logger.warning(
                    "reconcile %s/%s: API server unreachable: %s%s", *key, type(error).__name__, self._retry(key)
                )
                await self._report_failure(key, f"API server unreachable: {type(error).__name__}", after)
            except Exception as error:
                after = self._failed(key)
                logger.exception("reconcile %s/%s failed%s", *key, self._retry(key))
                await self._report_failure(
                    key, f"{type(error).__name__} (a bug: the operator's log has the traceback)", after
                )
            finally:
                self.queue.done(key)
            if after is not None and key in self.store.sdeps:
                self.queue.add(key, after)

    def _failed(self, key: Key) -> float:
        RECONCILES.labels("error").inc()
        return self.backoff.failed(key)

    async def _report_failure(self, key: Key, what: str, after: float) -> None:
        """Say in the object's status that its reconcile failed and when it is tried again (condition `Synced`),
        so that `kubectl describe` shows what the log says. Best effort: the API server may be what failed."""
        if key not in self.store.sdeps:
            return
        retry_at = _seconds(self.clock()) + timedelta(seconds=after)
        reason, message = failed_sync(self.backoff.failures(key), self.backoff.stalled(key), what, retry_at)
        try:
            await self._blocking(self._write_condition, key, reason, message)
        except Exception as error:  # the failure itself is logged already; this write is only a courtesy
            logger.debug("%s/%s: the failure could not be written to status: %s", *key, _said(error))

    def _write_condition(self, key: Key, reason: str, message: str) -> None:
        """Read afresh (the failed pass may have written the status the store has not seen), then patch over it."""
        body = self.kube.read(API_VERSION, KIND, *key)
        if body is None:
            return
        status = SpeculativeDeploymentStatus.model_validate(body.get("status") or {})
        meta = body.get("metadata", {})
        conditions = set_condition(
            status.conditions,
            ConditionType.SYNCED,
            ConditionStatus.FALSE,
            reason,
            message,
            _seconds(self.clock()),
            int(meta.get("generation") or 0),
        )
        old = body.get("status") or {}
        new = {**old, "conditions": [c.model_dump(mode="json", by_alias=True, exclude_none=True) for c in conditions]}
        patch = merge_patch(old, new)
        if patch:
            version = str(meta.get("resourceVersion", ""))
            written = self.kube.patch_status(meta["namespace"], meta["name"], patch, version)
            if written != version:
                self._written_over[key] = version

    def _retry(self, key: Key) -> str:
        """What the log adds to a failure: how many in a row, once there are several (the wait doubles)."""
        failures = self.backoff.failures(key)
        return f" ({failures} failures in a row: tried again less often)" if failures > 1 else ""

    async def _blocking(self, call: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.threads, functools.partial(call, *args))

    async def reconcile(self, key: Key) -> float | None:
        """Returns when to look again (seconds), or None when the object is gone."""
        body = self.store.sdeps.get(key)
        if body is None or body.get("metadata", {}).get("deletionTimestamp"):
            self._conflicts.pop(key, None)
            self._refused.pop(key, None)
            self._written_over.pop(key, None)
            self._expected.pop(key, None)
            self._still_routed_said.pop(key, None)
            self._watched.pop(key, None)
            self._clients.pop(key, None)
            self.queue.forget(key)
            return None  # children go with their owner references; no finalizer needed
        if self.owns is not None and not await self.owns(key):
            return None  # another shard's, or not handed over yet
        if self._written_over.get(key) == body.get("metadata", {}).get("resourceVersion"):
            return CACHE_BEHIND_SECONDS  # the watch has not delivered our last status write yet
        self._written_over.pop(key, None)
        if self._awaiting_created_children(key):
            return CACHE_BEHIND_SECONDS  # nor a child we created: a pass now would create it again (a 409)
        parsed = parse(body)
        if parsed.problems:
            logger.error("%s/%s: %s", *key, "; ".join(parsed.problems))
        if parsed.sdep is None:
            return self.resync_seconds
        sdep = parsed.sdep
        deployments = {track: self._owned(key, sdep, "Deployment", child_name(sdep, track)) for track in SINGLE_TRACKS}
        slices = {
            index: self._owned(key, sdep, "Deployment", child_name(sdep, Track.CANDIDATE, index))
            for index in range(len(sdep.spec.candidates))
        }
        pods = self.store.children("Pod", key).values()
        url = self._prometheus_url(sdep)
        routed = await self._blocking(self._routed, sdep)
        unconsented = await self._blocking(self._route_unconsented, sdep) if routed else None
        observation = observe(
            sdep,
            deployments,
            pods,
            _seconds(self.clock()),
            prometheus=url is not None,
            routed=routed,
            preflight_jobs=self.store.children("Job", key).values(),
            preflight_pods=self.store.children(PREFLIGHT_POD, key).values(),
            candidate_deployments=slices,
            template_policy=self.template_policy,
        )
        if self._conflicts.get(key):
            names = ", ".join(sorted(self._conflicts[key]))
            observation = _with_problem(observation, f"objects not created by specfleet already use the names {names}")
        if unconsented is not None:  # hold everything, the route above all: the operator may not write it
            observation = _with_problem(observation, unconsented)
        unrouted = await self._blocking(self._traffic_refused, sdep)
        if unrouted is not None:  # no route or pool can be written: hold rather than split traffic otherwise
            observation = _with_problem(observation, unrouted)
        refused = self._refused.get(key)
        if refused is not None and refused[0] == sdep.metadata.generation:
            observation = _with_problem(observation, refused[1])
        elif refused is not None:  # the spec changed: render and apply again
            del self._refused[key]
        decision = await self._decide(key, sdep, url, observation)
        decision, notes = self._notifications(sdep, decision, observation.now)
        children = {kind: self.store.children(kind, key) for kind in ("Deployment", "Service", "InferencePool", "Job")}
        await self._blocking(self._apply, key, body, sdep, decision, children, self._offering(notes))
        if decision.requeue_after is None:
            return self.resync_seconds
        # The decision's wait counts from the observation; the pass itself (its queries and writes) took some of it.
        spent = (self.clock() - observation.now).total_seconds()
        return min(max(decision.requeue_after.total_seconds() - spent, 0.0), self.resync_seconds)

    async def _decide(
        self, key: Key, sdep: SpeculativeDeployment, url: str | None, observation: Observation
    ) -> Decision:
        """The pass's decision: `decide`, then what it asked to be measured or checked first, deciding again
        only with an answer that can change it. An analysis's verdict and a fleet look always can (they move
        the rollout, or are recorded in the status), so a pass that measures decides twice; a GPU room that
        fits changes nothing (`GpuRoom.fits`), so only a room too small is decided again. Each ask is answered
        at most once a pass; what a pass costs: docs/architecture.md#one-pass-of-the-operator. A watch (the live
        canary's newest scrape checked for failures) comes first, so a canary that turned bad is failed without
        waiting for an analysis's queries, and is decided again only when it found one; otherwise the pass
        looks again at the canary's next scrape."""
        decision = self._decision(sdep, observation)
        watch = None
        if decision.watch_due and url is not None:
            watch = await self._watch(key, sdep, url, decision.status, self.clock())
            if watch.failure is not None:
                observation = replace(observation, watch=watch)
                decision = self._decision(sdep, observation)
        if decision.analysis_due or decision.candidate_analyses_due:
            observation = await self._analyses(sdep, url, decision, observation)
            decision = self._decision(sdep, observation)
        if decision.capacity_due is not None:
            gpu_room = await self._blocking(self._room, key, sdep, decision.capacity_due)
            if gpu_room is not None and not gpu_room.fits:  # None: unknown, so the decision stands as it is
                observation = replace(observation, room=gpu_room)
                decision = self._decision(sdep, observation)
        if decision.fleet_look_due and url is not None:
            look = await self._look(sdep, url, decision.status, observation.now)
            decision = self._decision(sdep, replace(observation, fleet_look=look))
        if decision.watch_due and watch is not None and watch.next_at is not None:
            wait = max(watch.next_at - observation.now, timedelta(0))
            if decision.requeue_after is None or wait < decision.requeue_after:
                decision = replace(decision, requeue_after=wait)
        return decision

    async def _watch(self, key: Key, sdep: SpeculativeDeployment, url: str, status: Any, now: datetime) -> Watch:
        """The live canary's newest scrape checked for failures, once per scrape. Never raises: a Prometheus that
        cannot be asked is the analyses' business (their Error verdicts), and a bug is logged."""
        revision = status.canary_revision
        try:
            known = self._clients.get(key)
            provider = known[1] if known is not None and known[0] == url else None
            provider = provider or await self._blocking(self._provider, sdep, url)
            watch, watched = await self._blocking(watch_canary, provider, sdep, status, now, self._watched.get(key))
        except (SecretError, UrlNotAllowedError):
            return Watch(revision)
        except Exception:
            logger.exception("%s/%s: the watch failed", sdep.metadata.namespace, sdep.metadata.name)
            return Watch(revision)
        if watched is None:
            self._watched.pop(key, None)
        else:
            self._watched[key] = watched
        return watch

    def _notifications(
        self, sdep: SpeculativeDeployment, decision: Decision, now: datetime
    ) -> tuple[Decision, list[Notification]]:
        """The transitions this decision makes, and the decision with its status recording them (`notified`)."""
        if self.notifier is None:
            return decision, []
        meta = sdep.metadata
        fleet = Fleet(meta.namespace, meta.name, meta.uid or "", meta.generation or 0)
        notes, status = notifications(fleet, sdep.spec, sdep.status, decision.status, now)
        return (replace(decision, status=status), notes) if notes else (decision, [])

    def _offering(self, notes: list[Notification]) -> Callable[[], None]:
        """What `_apply` calls once the status recording `notes` is written (from its thread): they go to the
        notifier's queue on the event loop, whatever the rest of the pass does (the status says they were sent)."""
        if self.notifier is None or not notes:
            return lambda: None
        loop, offer = asyncio.get_running_loop(), self.notifier.offer

        def offered() -> None:
            for note in notes:
                loop.call_soon_threadsafe(offer, note)

        return offered

    def _decision(self, sdep: SpeculativeDeployment, observation: Observation) -> Decision:
        """One call of the pure `decide` (a seam for counting them: benchmarks/pass_cost.py)."""
        return decide(sdep.spec, sdep.status, observation)

    async def _analyses(
        self, sdep: SpeculativeDeployment, url: str | None, decision: Decision, observation: Observation
    ) -> Observation:
        """The observation with the analyses the decision asked for (the canary's, side-by-side slices'): Error
        verdicts, so that onProviderError applies and nothing advances, when no Prometheus can be asked."""
        status, now, due = decision.status, observation.now, decision.candidate_analyses_due

        def unanswered(reason: str) -> Observation:
            analysis = _error(status, now, reason) if decision.analysis_due else None
            slices = {i: _error(status, now, reason, i) for i in due}
            return replace(observation, analysis=analysis, candidate_analyses=slices)

        if url is None:
            return unanswered(NO_PROMETHEUS)
        try:
            provider = await self._blocking(self._provider, sdep, url)
        except (SecretError, UrlNotAllowedError) as error:  # an Error verdict: onProviderError applies, no retries
            return unanswered(_unasked(error))
        analysis = None
        try:
            if decision.analysis_due:
                pairs = None
                if sdep.spec.rollout.guardrails.output_equivalence.enabled:
                    pods = list(self.store.children("Pod", (sdep.metadata.namespace, sdep.metadata.name)).values())
                    template = self.pod_url_template
                    pairs = await self._blocking(collect_pairs, self.kube, sdep, status, pods, now, template)
                analysis = await self._blocking(analyze, provider, sdep, status, now, pairs)
            slices = {i: await self._blocking(analyze_candidate, provider, sdep, status, now, i) for i in due}
        except Exception as error:  # a bug: still a verdict, so that the pass writes it and the fallbacks count
            logger.exception("%s/%s: the analysis failed", sdep.metadata.namespace, sdep.metadata.name)
            return unanswered(f"the analysis failed ({type(error).__name__}: a bug, the operator's log has it)")
        return replace(observation, analysis=analysis, candidate_analyses=slices)

    def _room(self, key: Key, sdep: SpeculativeDeployment, request: GpuRequest) -> GpuRoom | None:
        """What the nodes have free for the pods the decision is about to ask for, or None when the nodes
        cannot be read: then the decision stands as it was, and a canary that does not fit is told by the
        scheduler's message once its pods are Pending. Two cluster-wide lists, only when a decision asks
        (before a step creates pods), never a watch. Runs in a thread; never raises."""
        listing = "nodes"
        try:
            nodes = self.kube.list_nodes()
            listing = "pods in all namespaces"
            pods = self.kube.list_pods_on_nodes()
            return room(sdep.spec, request, nodes, pods)
        except ForbiddenError as error:
            if not self._capacity_denied:  # a missing RBAC rule stays missing: say it once, not per reconcile
                self._capacity_denied = True
                logger.warning(
                    "capacity check off: listing %s was refused (%s); the operator needs %s. Until then a "
                    "canary step that does not fit is told by the scheduler's message only",
                    listing,
                    _said(error),
                    CAPACITY_RBAC,
                )
            return None
        except (ApiException, HTTPError, OSError) as error:
            logger.warning("%s/%s: capacity check skipped: %s", *key, _said(error))
            return None
        except Exception:  # a bug in the count must not stop a rollout: the scheduler still speaks
            logger.exception("%s/%s: capacity check failed", *key)
            return None

    async def _look(
        self, sdep: SpeculativeDeployment, url: str, status: SpeculativeDeploymentStatus, now: datetime
    ) -> FleetLook:
        """The stable track measured while Healthy (load points for the load-aware depth)."""
        assert status.stable_revision is not None
        try:
            provider = await self._blocking(self._provider, sdep, url)
        except (SecretError, UrlNotAllowedError) as error:
            return FleetLook(time=now, revision=status.stable_revision, error=_unasked(error))
        return await self._blocking(measure_fleet, provider, sdep, status, now)

    def _awaiting_created_children(self, key: Key) -> bool:
        """Whether a child this process created is not in the store yet (and was created less than
        EXPECTATION_SECONDS ago); forgets the ones that arrived."""
        expected = self._expected.get(key)
        if not expected:
            return False
        now = time.monotonic()
        for kind, name in list(expected):
            if self.store.has_child(kind, key, name) or expected[kind, name] < now:
                del expected[kind, name]
        if not expected:
            del self._expected[key]
        return bool(expected)

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
        status_written: Callable[[], None] = lambda: None,
    ) -> None:
        """The decision's writes, one named step each, in the order the write discipline needs: traffic off
        the canary, the status (with its precondition; then `status_written`, which hands the pass's
        notifications on), the wanted children, route weights, pruning, the preflight Job, events, done commands.
        A refused status write raises and ends the pass there. A decision that holds the children (the spec
        cannot be rendered) writes the status, events and commands only.

        Runs in a thread: it reads only the `children` snapshot taken on the event loop, never the store.
        """
        held = decision.hold_children
        wanted = [] if held else [stamped(m) for m in self._desired_children(sdep, decision)]
        applied = set() if held else self._take_traffic_off_canary(key, sdep, decision, wanted, children)
        version = self._write_status(key, body, sdep, decision.status)
        status_written()
        if not held:
            self._ensure_children(key, sdep, wanted, children, applied)
            self._scale_retiring_canary(key, sdep, decision, children)
            self._set_canary_route_weights(sdep, decision)
            self._prune_children(key, body, sdep, decision, wanted, children)
            self._reconcile_preflight(key, sdep, decision.preflight, children.get("Job", {}))
        self._post_events(key, body, decision)
        self._remove_done_commands(key, decision, version)

    def _take_traffic_off_canary(
        self,
        key: Key,
        sdep: SpeculativeDeployment,
        decision: Decision,
        wanted: list[Manifest],
        children: dict[str, dict[str, Any]],
    ) -> set[str]:
        """First, before the status: a decision that takes traffic off the canary sets the HTTPRoute's canary
        weight to 0 and narrows the fleet Service to stable. This is safe whatever version of the object it
        was decided from, and it must come before the status that says so (a status saying Aborted means
        traffic is already on stable). Returns the Services it applied, which `_ensure_children` leaves.
        Without an HTTPRoute or a canary Deployment there is no traffic to take off (a new fleet's first
        pass): the Service is then written with the other children, and the pass saves a round trip."""
        if decision.canary_traffic:
            return set()
        routed = self._routed(sdep)
        if not routed and child_name(sdep, Track.CANARY) not in children.get("Deployment", {}):
            return set()
        if routed:  # traffic back to stable before any canary object goes
            holdback_service = children.get("Service", {}).get(child_name(sdep, Track.HOLDBACK))
            self._set_route_weights(sdep, 0, decision.route_weight(Track.HOLDBACK) if holdback_service else 0)
        fleet = next(m for m in wanted if m["kind"] == "Service" and m["metadata"]["name"] == sdep.metadata.name)
        self._ensure(key, sdep, fleet, children.get("Service", {}).get(sdep.metadata.name))
        return {sdep.metadata.name}

    def _ensure_children(
        self,
        key: Key,
        sdep: SpeculativeDeployment,
        wanted: list[Manifest],
        children: dict[str, dict[str, Any]],
        applied: set[str],
    ) -> None:
        """After the status write has proved the decision was made from the latest version: every wanted
        Deployment and Service exists as rendered, before anything is deleted or routed to (written at once;
        the first error is raised once all are done)."""
        todo = [m for m in wanted if not (m["kind"] == "Service" and m["metadata"]["name"] in applied)]

        def ensure(manifest: Manifest) -> None:
            self._ensure(key, sdep, manifest, children.get(manifest["kind"], {}).get(manifest["metadata"]["name"]))

        if self.writes is None or len(todo) < 2:
            for manifest in todo:
                ensure(manifest)
        else:
            for future in [self.writes.submit(ensure, manifest) for manifest in todo]:
                future.result()

    def _scale_retiring_canary(
        self, key: Key, sdep: SpeculativeDeployment, decision: Decision, children: dict[str, dict[str, Any]]
    ) -> None:
        """A retiring canary whose pods move back to stable one by one (`rollout.maxSurge` set) keeps the
        replicas the decision gives it: only that field changes, its template stays the one it was."""
        if not decision.keep_canary or decision.retiring_replicas is None:
            return
        observed = children.get("Deployment", {}).get(child_name(sdep, Track.CANARY))
        if observed is None or not controlled_by(observed, sdep.metadata.uid):
            return
        if observed.get("spec", {}).get("replicas") != decision.retiring_replicas:
            body = {"spec": {"replicas": decision.retiring_replicas}}
            self.kube.merge_patch("apps/v1", "Deployment", key[0], observed["metadata"]["name"], body)

    def _set_canary_route_weights(self, sdep: SpeculativeDeployment, decision: Decision) -> None:
        """After the children: the HTTPRoute sends (or, in a shadow step, mirrors) traffic to the canary or the
        holdback only once their Services exist (weights back to 0 were set first, by `_take_traffic_off_canary`)."""
        pinned = decision.canary_traffic and decision.target(Track.CANARY) is not None
        if self._routed(sdep) and (any(decision.route_weights.values()) or decision.canary_mirror or pinned):
            self._set_route_weights(
                sdep,
                decision.route_weight(Track.CANARY),
                decision.route_weight(Track.HOLDBACK),
                decision.canary_mirror,
                pinned=pinned,
            )

    def _prune_children(
        self,
        key: Key,
        body: dict[str, Any],
        sdep: SpeculativeDeployment,
        decision: Decision,
        wanted: list[Manifest],
        children: dict[str, dict[str, Any]],
    ) -> None:
        """After the wanted children and the route, so nothing is deleted before what replaces it exists:
        delete the Deployments and Services the decision no longer wants. A draining canary the decision
        keeps stays, and so do a canary and ended slices the fleet Service, as last observed, may still send
        to (see `_canary_still_selected`), and a track's Service that its HTTPRoute still sends to (see
        `_still_routed`). A track's endpoint picker (`endpointPickerTemplate`) stays as long as its pool does."""
        keep = {(m["kind"], m["metadata"]["name"]) for m in wanted}
        still_selected = self._canary_still_selected(sdep, children)
        if decision.keep_canary or still_selected:
            canary, picker = child_name(sdep, Track.CANARY), picker_name(sdep, Track.CANARY)
            keep |= {("Deployment", canary), ("Service", canary), ("InferencePool", canary)}
            keep |= {("Deployment", picker), ("Service", picker)}  # the pool kept names it
        if still_selected and not decision.candidates:  # the slices ended: they go once the Service left them
            prefix = f"{child_name(sdep, Track.CANDIDATE)}-"
            keep |= {("Deployment", name) for name in children.get("Deployment", {}) if name.startswith(prefix)}
        keep |= self._still_routed(key, body, sdep, "Service", keep, children.get("Service", {}))
        routed_pools = self._still_routed(key, body, sdep, "InferencePool", keep, children.get("InferencePool", {}))
        for track in SINGLE_TRACKS:  # a pool kept for its route keeps the picker it may name
            if ("InferencePool", child_name(sdep, track)) in routed_pools:
                keep |= {("Deployment", picker_name(sdep, track)), ("Service", picker_name(sdep, track))}
        self._delete_unwanted(key, sdep, keep | routed_pools, children)

    def _still_routed(
        self, key: Key, body: dict[str, Any], sdep: SpeculativeDeployment, kind: str, keep: set[tuple[str, str]],
        backends: dict[str, Any],
    ) -> set[tuple[str, str]]:  # fmt: skip
        """The track Services (or InferencePools, `kind`) about to be deleted that the HTTPRoute they were made for
        (their annotation) still sends to, or that cannot be asked: deleting one would break the route
        (`trafficRouting` removed while the route still names `<name>-stable`), so it stays, with one Warning event,
        until the route leaves it."""
        kept: set[tuple[str, str]] = set()
        said = self._still_routed_said.setdefault(key, set())
        group = INFERENCE_GROUP if kind == "InferencePool" else ""
        for name, observed in backends.items():
            route = ((observed.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_HTTP_ROUTE)
            if (kind, name) in keep or not route or not controlled_by(observed, sdep.metadata.uid):
                continue
            namespace, _, route_name = str(route).partition("/")
            if not namespace or not route_name:  # not an annotation this operator wrote: no route recorded
                continue
            try:
                found = self.kube.read(HTTPROUTE_API_VERSION, "HTTPRoute", namespace, route_name)
                sends = found is not None and references_service(found, key[0], name, (group, kind))
                why = f"HTTPRoute {route} still sends to it" if sends else ""
            except ResourceNotFoundError:  # no HTTPRoute kind served any more: no route can send to it
                why = ""
            except (ApiException, HTTPError, OSError) as error:  # fail closed: a Service is not deleted blind
                why = f"HTTPRoute {route} could not be read ({_said(error)})"
            if not why:
                said.discard(f"{kind}/{name}")
                continue
            kept.add((kind, name))
            if f"{kind}/{name}" not in said:
                said.add(f"{kind}/{name}")
                message = f"{kind} {name} kept: {why}; it is deleted once no route sends to it"
                logger.warning("%s/%s: %s", *key, message)
                self.kube.post_event(body, "Warning", f"{kind}StillRouted", message)
        return kept

    def _post_events(self, key: Key, body: dict[str, Any], decision: Decision) -> None:
        """After the writes: an event (and its log line) tells of a decision that was applied, never of one
        whose status write was refused."""
        for event in decision.events:
            TRANSITIONS.labels(event.reason).inc()
            level = logging.WARNING if event.type == "Warning" else logging.INFO
            logger.log(level, "%s/%s: %s: %s", *key, event.reason, event.message)
            post = functools.partial(self.kube.post_event, body, event.type, event.reason, event.message)
            if self.writes is None:
                post()
            else:  # nothing waits for an event: the pass ends without its round trip
                self.writes.submit(post).add_done_callback(functools.partial(_log_failed_event, key))

    def _remove_done_commands(self, key: Key, decision: Decision, version: str) -> None:
        """Last: the acted-on command annotations go, over the version the status write left, so the status
        that acknowledges them is stored first; an annotation changed meanwhile (maybe the same command
        given again) conflicts, and the next pass looks at it again."""
        if decision.done_commands:
            with contextlib.suppress(ConflictError):
                self.kube.remove_annotations(*key, list(decision.done_commands), version)

    def _canary_still_selected(self, sdep: SpeculativeDeployment, children: dict[str, dict[str, Any]]) -> bool:
        """Whether the fleet Service, as last observed, still sends to the canary track: then the canary is
        deleted only in a later pass, after the Service without it has been seen (whatever happened in
        between, e.g. a restart, pods that may still receive traffic are never deleted)."""
        observed = children.get("Service", {}).get(child_name(sdep, None))
        selector = (observed or {}).get("spec", {}).get("selector") or {}
        narrowed = LABEL_TRACK in selector or LABEL_TRAFFIC in selector  # stable (and the holdback) alone
        return observed is not None and not narrowed and not self._routed(sdep)

    def _route_unconsented(self, sdep: SpeculativeDeployment) -> str | None:
        """Why the fleet's HTTPRoute, in another namespace, may not be written (None: it may). The route's
        namespace consents with a Gateway API ReferenceGrant from SpeculativeDeployments of the fleet's namespace
        to HTTPRoutes (all, or this one by name), as a route's namespace grants a reference to a Service in
        another. Without one nothing is written there: a tenant's fleet cannot steer another tenant's traffic
        with the operator's permissions. A missing kind or permission holds the fleet too, saying which."""
        routing = sdep.spec.rollout.traffic_routing
        ref = routing.http_route if routing is not None else None
        namespace = sdep.metadata.namespace
        if ref is None or ref.namespace in (None, namespace):
            return None
        wanted = (
            f"a ReferenceGrant in {ref.namespace} from {GROUP}/{KIND} in {namespace} to {GATEWAY_GROUP}/HTTPRoute "
            f"(all, or named {ref.name})"
        )
        untouched = f"HTTPRoute {ref.namespace}/{ref.name} is left untouched until it is there"
        api_version = next((v for v in REFERENCEGRANT_API_VERSIONS if self.kube.has_kind(v, "ReferenceGrant")), None)
        if api_version is None:
            return (
                f"{ROUTE_NAMESPACE_FIELD}: another namespace needs {wanted}, and the API server serves no "
                f"ReferenceGrant kind (install Gateway API's CRDs); {untouched}"
            )
        try:
            grants = self.kube.list_in(api_version, "ReferenceGrant", ref.namespace)
        except ForbiddenError:
            return (
                f"{ROUTE_NAMESPACE_FIELD}: another namespace needs {wanted}, and the operator may not list "
                f"ReferenceGrants in {ref.namespace} (the chart's gatewayAPI.enabled); {untouched}"
            )
        if grants_route(grants, namespace, ref.name):
            return None
        return f"{ROUTE_NAMESPACE_FIELD}: namespace {ref.namespace} has not consented: it needs {wanted}; {untouched}"

    def _routed(self, sdep: SpeculativeDeployment) -> bool:
        """Whether traffic is split by an HTTPRoute (named in the spec, and its CRD installed)."""
        routing = sdep.spec.rollout.traffic_routing
        return bool(routing and routing.http_route) and self.kube.has_kind(HTTPROUTE_API_VERSION, "HTTPRoute")

    def _traffic_refused(self, sdep: SpeculativeDeployment) -> str | None:
        """Why the route or the InferencePools the fleet's traffic goes through cannot be written (None: they can,
        or it names none)."""
        routing = sdep.spec.rollout.traffic_routing
        if routing is not None and routing.http_route is not None:
            refused = http_route_refusal(served=self.kube.has_kind(HTTPROUTE_API_VERSION, "HTTPRoute"))
            if refused is not None:
                return refused
        if routing is None or routing.inference_pool is None:
            return None
        served = self.inference_pools and self.kube.has_kind(INFERENCEPOOL_API_VERSION, "InferencePool")
        return inference_pools_refusal(owned=self.inference_pools, served=served)

    def _pooled(self, sdep: SpeculativeDeployment) -> EndpointPickerRef | None:
        """The endpoint picker of the fleet's InferencePools when the route's backends are InferencePools (named in
        the spec beside the route, `--inference-pools`, and both CRDs installed); None: no pool is written."""
        routing = sdep.spec.rollout.traffic_routing
        pools = routing.inference_pool if routing is not None else None
        if pools is None or not self.inference_pools or not self._routed(sdep):
            return None
        if not self.kube.has_kind(INFERENCEPOOL_API_VERSION, "InferencePool"):
            return None
        return pools.picker(sdep.metadata.name)

    def _backend_kind(self, sdep: SpeculativeDeployment) -> BackendKind:
        routing = sdep.spec.rollout.traffic_routing
        return "InferencePool" if routing is not None and routing.inference_pool is not None else "Service"

    def _desired_children(self, sdep: SpeculativeDeployment, decision: Decision) -> list[Manifest]:
        users_on_canary = decision.canary_traffic and not decision.canary_mirror  # a shadow step serves none
        children = [service(sdep, canary_traffic=users_on_canary, holdback_traffic=decision.holdback_traffic)]
        routed, pooled = self._routed(sdep), self._pooled(sdep)
        routing = sdep.spec.rollout.traffic_routing
        pools = routing.inference_pool if routing is not None else None
        picker_template = pools.endpoint_picker_template if pools is not None else None
        with_holdback = Track.HOLDBACK in decision.targets
        for track, target in decision.targets.items():
            serving = sdep.model_copy(update={"spec": sdep.spec.with_serving(target.serving)})
            always = track is Track.HOLDBACK or (track is Track.STABLE and with_holdback)
            children.append(deployment(serving, track, target.revision, target.replicas, always_served=always))
            if routed:
                children.append(service(sdep, track, route=self._route_name(sdep)))
            if pooled is not None:
                children.append(inference_pool(sdep, track, pooled, route=self._route_name(sdep)))
            if pooled is not None and picker_template is not None:
                children += endpoint_picker(sdep, track, picker_template)
        for index, target in decision.candidates:
            serving = sdep.model_copy(update={"spec": sdep.spec.with_serving(target.serving)})
            children.append(deployment(serving, Track.CANDIDATE, target.revision, target.replicas, candidate=index))
        return children

    def _route_name(self, sdep: SpeculativeDeployment) -> str | None:
        """The fleet's HTTPRoute as namespace/name."""
        routing = sdep.spec.rollout.traffic_routing
        ref = routing.http_route if routing is not None else None
        return f"{ref.namespace or sdep.metadata.namespace}/{ref.name}" if ref is not None else None

    def _set_route_weights(
        self,
        sdep: SpeculativeDeployment,
        weight: int,
        holdback_weight: int = 0,
        mirror: int = 0,
        *,
        pinned: bool = False,
    ) -> None:
        """Set the fleet's backend weights, its canary mirror and (`pinned`: the canary takes traffic) the rules
        sending `canaryHeader` requests to the canary on the user's HTTPRoute (only those; the route stays
        theirs)."""
        routing = sdep.spec.rollout.traffic_routing
        ref = routing.http_route if routing is not None else None
        if ref is None:  # the callers ask `_routed` first
            raise ValueError(f"{sdep.metadata.namespace}/{sdep.metadata.name} names no HTTPRoute to set weights on")
        namespace = ref.namespace or sdep.metadata.namespace
        route = self.kube.read(HTTPROUTE_API_VERSION, "HTTPRoute", namespace, ref.name)
        if route is None:
            logger.warning(
                "%s/%s: HTTPRoute %s/%s not found", sdep.metadata.namespace, sdep.metadata.name, namespace, ref.name
            )
            return
        rules = route.get("spec", {}).get("rules") or []
        header = ref.canary_header if pinned else None
        wanted = route_rules(
            sdep,
            rules,
            weight,
            holdback_weight,
            route_namespace=namespace,
            canary_mirror=mirror,
            canary_header=header,
            backend_kind=self._backend_kind(sdep),
        )
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
        try:
            if observed is None:
                try:
                    self.kube.create(manifest)
                    self._expected.setdefault(key, {})[manifest["kind"], name] = time.monotonic() + EXPECTATION_SECONDS
                    return
                except ConflictError:
                    meta = manifest["metadata"]
                    existing = self.kube.read(manifest["apiVersion"], manifest["kind"], meta["namespace"], name)
                    if existing is None or not controlled_by(existing, sdep.metadata.uid):
                        self._conflicts.setdefault(key, set()).add(f"{manifest['kind']}/{name}")
                        return
            self._conflicts.get(key, set()).discard(f"{manifest['kind']}/{name}")
            self.kube.apply(manifest)
        except UnprocessibleEntityError as error:  # what the spec renders is invalid (a template's volume, say)
            said = f"the API server refused {manifest['kind']}/{name} rendered from the spec: {_server_message(error)}"
            logger.error("%s/%s: %s", *key, said)
            self._refused[key] = (sdep.metadata.generation or 0, said[:1024])

    def _delete_unwanted(
        self,
        key: Key,
        sdep: SpeculativeDeployment,
        wanted: set[tuple[str, str]],
        children: dict[str, dict[str, Any]],
    ) -> None:
        kinds = (("Deployment", "apps/v1"), ("Service", "v1"), ("InferencePool", INFERENCEPOOL_API_VERSION))
        for kind, api_version in kinds:
            for name, obj in children.get(kind, {}).items():
                if (kind, name) not in wanted and controlled_by(obj, sdep.metadata.uid):
                    self.kube.delete(api_version, kind, key[0], name, obj["metadata"]["uid"])

    def _reconcile_preflight(
        self, key: Key, sdep: SpeculativeDeployment, target: TrackTarget | None, jobs: dict[str, Any]
    ) -> None:
        """Last of the children, after the status write like them: the preflight Job the decision asks for
        exists (created once: a Job's template cannot change, and its name holds the revision); the fleet's
        other preflight Jobs go, their pods with them."""
        wanted = preflight_job(sdep, target.revision, target.serving) if target is not None else None
        name: str | None = wanted["metadata"]["name"] if wanted is not None else None
        for job_name, job in jobs.items():
            if job_name != name and controlled_by(job, sdep.metadata.uid):
                self.kube.delete("batch/v1", "Job", key[0], job_name, job["metadata"]["uid"])
        if wanted is None or name is None:  # a wanted Job always has a name
            return
        observed = jobs.get(name)
        if observed is None:
            try:
                self.kube.create(wanted)
            except ConflictError:  # created meanwhile: by us (the watch is behind) or by someone else
                observed = self.kube.read("batch/v1", "Job", key[0], name)
        if observed is not None and not controlled_by(observed, sdep.metadata.uid):
            self._conflicts.setdefault(key, set()).add(f"Job/{name}")
        else:
            self._conflicts.get(key, set()).discard(f"Job/{name}")

    def _write_status(
        self, key: Key, body: dict[str, Any], sdep: SpeculativeDeployment, status: SpeculativeDeploymentStatus
    ) -> str:
        """Write the status if it changed, only over the version it was decided from; the version after it."""
        version = str(body.get("metadata", {}).get("resourceVersion", ""))
        new = status.model_copy(update=StatusChanges(selector=fleet_selector(sdep))).model_dump(
            mode="json", by_alias=True, exclude_none=True
        )
        patch = merge_patch(body.get("status") or {}, new)
        if not patch:
            return version
        written = self.kube.patch_status(sdep.metadata.namespace, sdep.metadata.name, patch, version)
        if written != version:
            self._written_over[key] = version
        return written


def _error(status: SpeculativeDeploymentStatus, now: datetime, reason: str, candidate: int | None = None) -> Analysis:
    """An Error verdict for an analysis (of the canary, or of a side-by-side candidate) that could not even ask
    Prometheus."""
    if candidate is None:
        assert status.canary_revision is not None
        revision, step, look = status.canary_revision, status.current_step or 0, status.analyses + 1
    else:
        assert status.experiment is not None
        measured = next(c for c in status.experiment.candidates if c.index == candidate)
        revision, step, look = measured.revision, 0, measured.looks + 1
    last = status.last_analysis
    kept = last.output_pairs if candidate is None and last is not None and last.revision == revision else None
    return Analysis(
        time=now,
        revision=revision,
        step=step,
        look=look,
        verdict=Verdict.ERROR,
        reasons=[reason[:1000]],
        output_pairs=kept,
    )


MESSAGE_LIMIT = 400
"""Characters of a failure's own words in the Synced condition: an API server's message names the field or the
permission in far fewer."""


class UrlNotAllowedError(Exception):
    """The Prometheus URL a spec names is not under the operator's allow-list; the message names the field."""


RECONCILE_ERROR = "ReconcileError"
"""`Synced=False` while a fleet's reconcile fails: the backoff is still short, the cause may pass by itself."""
RECONCILE_STALLED = "ReconcileStalled"
"""`Synced=False` once it has failed `FailureBackoff.stall_after` times in a row: retried at the capped wait, but
something (RBAC, a webhook, a bug) needs a person."""


def failed_sync(failures: int, stalled: bool, what: str, retry_at: datetime) -> tuple[str, str]:
    """The `Synced=False` condition's reason and message after a failed reconcile: what failed, how often in a row,
    and the time of the next try (a time, not a wait, so it stays true while the condition is read later)."""
    times = f"{failures} times in a row" if failures > 1 else "once"
    retry = retry_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    message = f"the last reconcile failed ({times}): {what[:MESSAGE_LIMIT]}; next try at {retry}"
    return (RECONCILE_STALLED if stalled else RECONCILE_ERROR), message


def _unasked(error: Exception) -> str:
    """The reason of an analysis that could not ask Prometheus at all."""
    return str(error) if isinstance(error, UrlNotAllowedError) else f"Prometheus auth: {error}"


def _server_message(error: ApiException) -> str:
    """The API server's own message (it names the field), not the client's dump of the whole response."""
    try:
        return str(json.loads(error.body or "")["message"])
    except (TypeError, ValueError, KeyError):
        return str(error.reason)


def _log_failed_event(key: Key, done: "Future[None]") -> None:
    if isinstance(error := done.exception(), Exception):
        logger.warning("%s/%s: an event could not be posted: %s", *key, _said(error))


def _said(error: Exception) -> str:
    """An API error as `403 Forbidden`, anything else by its type (a connection error's text is long)."""
    if isinstance(error, ApiException):
        return f"API error {error.status} {error.reason}"
    return type(error).__name__


def _with_problem(observation: Observation, problem: str) -> Observation:
    return replace(observation, desired_revision=None, problems=(*observation.problems, problem))

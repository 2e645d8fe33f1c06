"""kopf wiring: watch events fill the store and wake the queue; workers reconcile.

Only `on.event` handlers are used, never `on.create/update`, timers or daemons: those would make kopf
put a finalizer and progress annotations on every object, so deleting a SpeculativeDeployment while
the operator is down would hang. Here deletion never waits for specfleet: owner references let the
Kubernetes garbage collector remove the children.

Every replica watches (so a new leader starts with a warm store) and only the holder of a
coordination.k8s.io Lease runs workers. Leader election is on unless turned off: a second `specfleet run`
on the same fleets (another replica, a laptop run) must find the first and stand by, and only a Lease
both can see tells it; its default is `specfleet` in the watched namespace (`choose_election`).
kopf's peering cannot be used for that: it pauses kopf's own watches and handlers but not our worker
tasks, it pauses every replica of equal priority, and a replica it resumes would act on a store that
stopped updating while it was paused.
"""

import asyncio
import logging
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import kopf
from kubernetes.dynamic.exceptions import ConflictError

from specfleet.api.vocabulary import (
    FIELD_MANAGER,
    GROUP,
    INFERENCE_GROUP,
    LABEL_NAME,
    LABEL_PREFLIGHT,
    PLURAL,
    VERSION,
)
from specfleet.controller.kube import Kube, connection_info
from specfleet.controller.metrics import LEADER, FleetCollector
from specfleet.controller.notifier import DeliveryPolicy, Notifier
from specfleet.controller.outputs import DEFAULT_POD_URL_TEMPLATE
from specfleet.controller.queue import WorkQueue
from specfleet.controller.reconciler import Reconciler
from specfleet.controller.shards import LEASE_API_VERSION, ShardGate
from specfleet.controller.sinks import SINKS
from specfleet.controller.store import PREFLIGHT_POD, Key, Store, key_of, owner_key
from specfleet.notify.targets import NAMESPACE_SECRET, TARGETS_KEY, Targets, parse_targets
from specfleet.notify.transitions import Fleet
from specfleet.reach import parse_prefix
from specfleet.render.policy import DEFAULT_POLICY, TemplatePolicy
from specfleet.sharding import Shard

MANAGED = {"app.kubernetes.io/managed-by": FIELD_MANAGER}
CHILD_EVENT_SECONDS = 0.5
"""A child's event looks at its fleet this much later, so one pass sees a burst of them (a Deployment's pods
created, scheduled, started, Ready) instead of one pass each."""
REFUSED_TARGET = "NotificationTargetRefused"
"""The reason of the Warning event that tells a namespace one of its notification targets is refused."""
INITIAL_SYNC_SECONDS = 2.0
"""Give the first LIST of every watch a moment to fill the store before the first reconcile."""

logger = logging.getLogger("specfleet.handlers")


def _default_identity() -> str:
    """The pod name (the hostname in a pod), made unique so a restarted process never inherits a lease."""
    return f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class LeaderElection:
    """Which Lease elects the one replica that reconciles, and client-go's default timings.

    A leader that could not renew for `renew_deadline` stops its workers; the others take over only when
    the lease has not changed for `lease_duration`, so the two never run workers at the same time (short
    of a reconcile already in flight, which finishes its writes).
    """

    namespace: str
    name: str
    identity: str = field(default_factory=_default_identity)
    lease_duration: int = 15
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    @classmethod
    def parse(cls, reference: str) -> "LeaderElection":
        """`NAMESPACE/NAME` (the form of `specfleet run --leader-election`)."""
        namespace, _, name = reference.partition("/")
        if not namespace or not name or "/" in name:
            raise ValueError(f"expected NAMESPACE/NAME, got {reference!r}")
        return cls(namespace, name)


DEFAULT_LEASE = "specfleet"
"""The Lease `specfleet run` elects with when no --leader-election names one."""
ELECTION_OFF = "off"
"""`--leader-election off`: no Lease; this process acts as if it were the only one."""


def choose_election(flag: str | None, namespaces: list[str], pod_namespace: str | None) -> LeaderElection | None:
    """The election a `specfleet run` takes part in. `flag`: its --leader-election (None: not given).

    Without a flag every run elects: with `DEFAULT_LEASE` in the first watched namespace (sorted, so two runs
    over the same namespaces meet in one Lease), else in the namespace of its own pod, else in `default`. Two
    plain runs on one namespace then compete for one Lease and one stands by; runs that elect differently
    (two releases) are kept apart by the stamps (`specfleet.sharding`).
    """
    if flag == ELECTION_OFF:
        return None
    if flag:
        return LeaderElection.parse(flag)
    namespace = min(namespaces) if namespaces else pod_namespace or "default"
    return LeaderElection(namespace, DEFAULT_LEASE)


class Leadership:
    """Campaigns for the Lease and keeps it; `try_hold` blocks (API calls), so it runs in a thread."""

    def __init__(self, kube: Kube, election: LeaderElection, clock: Callable[[], float] = time.monotonic) -> None:
        self.kube, self.election, self.clock = kube, election, clock
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = 0.0

    def try_hold(self) -> str | None:
        """Create, renew or take over the Lease; returns its holder afterwards (None: nobody, or unknown).

        Expiry is judged by how long the holder's record has stayed unchanged on this replica's own
        monotonic clock (as client-go does), never by comparing timestamps written by other machines.
        """
        election = self.election
        lease = self.kube.read(LEASE_API_VERSION, "Lease", election.namespace, election.name)
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        spec: dict[str, Any] = {
            "holderIdentity": election.identity,
            "leaseDurationSeconds": election.lease_duration,
            "renewTime": now,
        }
        if lease is None:
            manifest = {
                "apiVersion": LEASE_API_VERSION,
                "kind": "Lease",
                "metadata": {"name": election.name, "namespace": election.namespace},
                "spec": {**spec, "acquireTime": now, "leaseTransitions": 0},
            }
            try:
                self.kube.create(manifest)
            except ConflictError:
                return None  # another replica created it first; look again next period
            return election.identity
        held = lease.get("spec") or {}
        holder = held.get("holderIdentity")
        record = (holder, held.get("renewTime"), held.get("leaseDurationSeconds"))
        if record != self._observed:
            self._observed, self._observed_at = record, self.clock()
        duration = held.get("leaseDurationSeconds") or election.lease_duration
        if holder and holder != election.identity and self.clock() - self._observed_at < duration:
            return str(holder)
        if holder != election.identity:
            spec |= {"acquireTime": now, "leaseTransitions": (held.get("leaseTransitions") or 0) + 1}
        body = {"metadata": {"resourceVersion": lease["metadata"]["resourceVersion"]}, "spec": spec}
        try:
            self.kube.merge_patch(LEASE_API_VERSION, "Lease", election.namespace, election.name, body)
        except ConflictError:
            return None  # changed under us (someone renewed or took it); look again next period
        return election.identity

    def release(self) -> None:
        """Give the lease up on shutdown, so another replica takes over at once instead of after it expires."""
        election = self.election
        lease = self.kube.read(LEASE_API_VERSION, "Lease", election.namespace, election.name)
        if lease is None or (lease.get("spec") or {}).get("holderIdentity") != election.identity:
            return
        body = {"metadata": {"resourceVersion": lease["metadata"]["resourceVersion"]}, "spec": {"holderIdentity": None}}
        self.kube.merge_patch(LEASE_API_VERSION, "Lease", election.namespace, election.name, body)

    async def run(self, start: Callable[[], None], stop: Callable[[], Awaitable[None]]) -> None:
        """Call `start` on winning the lease and `stop` on losing it (another holder, or no renewal in time)."""
        election, leading, renewed_at, seen = self.election, False, 0.0, None
        while True:
            try:
                holder = await asyncio.to_thread(self.try_hold)
            except Exception as error:  # API unreachable, forbidden...: not renewed, judged below
                logger.warning("lease %s/%s: %s", election.namespace, election.name, error)
                holder = None
            if holder == election.identity:
                renewed_at = self.clock()
                if not leading:
                    logger.info("lease %s/%s acquired by %s", election.namespace, election.name, holder)
                    leading = True
                    start()
            elif leading and (holder is not None or self.clock() - renewed_at >= election.renew_deadline):
                logger.warning("lease %s/%s lost (holder: %s)", election.namespace, election.name, holder)
                leading = False
                await stop()
            if not leading and holder is not None and holder != seen:  # once per holder, not every retry
                logger.info(
                    "lease %s/%s held by %s: this replica stands by (specfleet_leader 0) and takes over when the "
                    "holder stops or its Lease goes unrenewed for %d s",
                    election.namespace,
                    election.name,
                    holder,
                    election.lease_duration,
                )
            if holder is not None:
                seen = holder
            await asyncio.sleep(election.retry_period)


class EventsOnlyDiffBase(kopf.AnnotationsDiffBaseStorage):
    """kopf deep-copies every object at every watch event to diff it for change handlers (on.create,
    on.update); specfleet has none, only event handlers, and that copy was a tenth of the operator's CPU
    while 1,000 fleets converged. The essence it diffs is empty instead."""

    def build(self, *, body: kopf.Body, extra_fields: Iterable[Any] | None = None) -> kopf.BodyEssence:
        return kopf.BodyEssence()


def write_threads(workers: int) -> int:
    """Threads for the writes a pass makes at once (`Reconciler.writes`): two children per fleet and its
    events, for every worker."""
    return 2 * workers


def api_connections(workers: int) -> int:
    """HTTP connections to the API server: one per worker and per write thread, plus the watches' spare."""
    return workers + write_threads(workers) + 2


@dataclass
class OperatorOptions:
    workers: int = 4
    resync_seconds: float = 300.0
    metrics_port: int | None = None
    prometheus_url: str | None = None
    allowed_prometheus_urls: tuple[str, ...] = ()
    """`--allow-prometheus-url`: prefixes a spec's `prometheus.url` may be under, beside `prometheus_url`."""
    pod_url_template: str = DEFAULT_POD_URL_TEMPLATE
    leader_election: LeaderElection | None = None
    """None (`--leader-election off`): this process takes itself for the only one and reconciles from the start.
    Its name is the base: a shard's Lease is `Shard.lease_name(base)`."""
    shard: Shard = field(default_factory=Shard)
    """`--shards`/`--shard`: which fleets this process owns (`specfleet.sharding`); needs leader election
    when there is more than one."""
    template_policy: TemplatePolicy = DEFAULT_POLICY
    """`--template-policy`: what a fleet's `spec.template` may add to the pods the operator creates."""
    inference_pools: bool = False
    """`--inference-pools`: own the InferencePools of fleets routed through them (watched only then: without the
    chart's permission, a watch of them would be refused wherever their CRD is installed)."""
    notification_targets: str | None = None
    """`--notifications-config`: the text of the operator's own `targets.yaml` (None: no such file)."""
    namespace_notifications: bool = False
    """`--namespace-notifications`: each namespace's Secret `specfleet-notifications` adds its targets."""
    allowed_notification_urls: tuple[str, ...] = ()
    """`--allow-notification-url`: prefixes a namespace's target URLs must be under."""
    notification_policy: DeliveryPolicy = field(default_factory=DeliveryPolicy)

    @property
    def notifying(self) -> bool:
        return self.notification_targets is not None or self.namespace_notifications


@dataclass(frozen=True)
class ChildWatch:
    """One kind of child whose watch events wake its fleet: which objects, and the label naming the fleet."""

    group: str
    version: str
    plural: str
    kind: str
    """The store's name for it (`Store.put_child`)."""
    labels: dict[str, Any]
    owner_label: str = LABEL_NAME


CHILD_WATCHES = (
    ChildWatch("apps", "v1", "deployments", "Deployment", MANAGED),
    ChildWatch("", "v1", "services", "Service", MANAGED),
    ChildWatch(INFERENCE_GROUP, "v1", "inferencepools", "InferencePool", MANAGED),
    ChildWatch("", "v1", "pods", "Pod", {LABEL_NAME: kopf.PRESENT}),
    ChildWatch("batch", "v1", "jobs", "Job", {LABEL_PREFLIGHT: kopf.PRESENT}),
    ChildWatch("", "v1", "pods", PREFLIGHT_POD, {LABEL_PREFLIGHT: kopf.PRESENT}, LABEL_PREFLIGHT),
)
"""The children the operator watches: its own Deployments, Services and InferencePools (with `--inference-pools`,
once their CRD is served, which kopf notices), the pods of its fleets, preflight Jobs
and their pods."""


@dataclass
class FleetWatcher:
    """A SpeculativeDeployment's watch event: the shard gate keeps (or drops) it, and its fleet is looked at now.

    Except while its reconcile keeps failing (`backing_off`) and the event changes nothing a person asked for
    (its spec, commands, labels, deletion): the failed pass's own status writes would otherwise make it due at
    once, and the backoff would never wait."""

    gate: ShardGate
    queue: WorkQueue[Key]
    backing_off: Callable[[Key], bool] = lambda key: False

    async def on_event(self, event: kopf.RawEvent, **_: Any) -> None:
        deleted = event.get("type") == "DELETED"
        before = self.gate.store.sdeps.get(key_of(event["object"]))
        key = self.gate.observe(event["object"], deleted=deleted)
        if key is None:  # another shard's fleet, not kept and nothing to forget
            return
        if not deleted and before is not None and self.backing_off(key) and _asked(before) == _asked(event["object"]):
            return  # its own writes: the retry stays where the backoff put it
        self.queue.add(key)


def _asked(fleet: Mapping[str, Any]) -> tuple[Any, ...]:
    """What a person changes on a fleet: its spec (generation), commands and stamps (annotations), labels, deletion."""
    meta = fleet.get("metadata") or {}
    return (meta.get("generation"), meta.get("annotations"), meta.get("labels"), meta.get("deletionTimestamp"))


@dataclass
class ChildWatcher:
    """A child's watch event: into the store, and its fleet looked at `CHILD_EVENT_SECONDS` later."""

    watch: ChildWatch
    gate: ShardGate
    store: Store
    queue: WorkQueue[Key]

    async def on_event(self, event: kopf.RawEvent, **_: Any) -> None:
        child = event["object"]
        if not self.gate.keeps_children_of(owner_key(child, self.watch.owner_label) or ("", "")):
            return  # another shard's fleet's
        deleted = event.get("type") == "DELETED"
        owner = self.store.put_child(self.watch.kind, child, deleted=deleted, label=self.watch.owner_label)
        if owner is not None and owner in self.store.sdeps:
            self.queue.add(owner, CHILD_EVENT_SECONDS)


@dataclass
class Workers:
    """The reconcile workers, running while this process leads (or always, without an election)."""

    reconciler: Reconciler
    gate: ShardGate
    store: Store
    queue: WorkQueue[Key]
    count: int
    tasks: list["asyncio.Task[None]"] = field(default_factory=list)

    @property
    def running(self) -> bool:
        return bool(self.tasks)

    def start(self) -> None:
        self.gate.begin_term()
        for key in list(self.store.sdeps):
            self.queue.add(key)  # keys dropped by workers cancelled at a lost lease come back
        self.tasks.extend(asyncio.create_task(self.reconciler.run_worker()) for _ in range(self.count))
        LEADER.set(1)
        logger.info("specfleet: %d workers started", self.count)

    async def stop(self) -> None:
        LEADER.set(0)
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        self.tasks.clear()
        self.gate.end_term()


@dataclass
class Lifecycle:
    """What kopf's startup and cleanup do: settings, the metrics endpoint, and the workers started at once or
    by the lease; on cleanup the workers stop and a held lease is given up."""

    workers: Workers
    leadership: Leadership | None
    collector: FleetCollector
    metrics_port: int | None
    shard: Shard
    notifier: Notifier | None = None
    background: list["asyncio.Task[None]"] = field(default_factory=list)

    async def configure(self, settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.posting.enabled = False  # events are posted deliberately, not from log lines
        settings.persistence.diffbase_storage = EventsOnlyDiffBase()
        settings.watching.server_timeout = 300
        if self.metrics_port is not None:
            from prometheus_client import REGISTRY, start_http_server

            REGISTRY.register(self.collector)
            start_http_server(self.metrics_port)
        if self.notifier is not None:
            self.notifier.start()
        self.background.append(asyncio.create_task(self.begin()))

    async def begin(self) -> None:
        # kopf starts watching only once the startup handlers have returned: wait here, not in them
        await asyncio.sleep(INITIAL_SYNC_SECONDS)
        if self.leadership is None:
            self.workers.start()
            return
        election = self.leadership.election
        logger.info(
            "specfleet: shard %d of %d watching; workers start when this replica holds the lease %s/%s",
            self.shard.index,
            self.shard.count,
            election.namespace,
            election.name,
        )
        await self.leadership.run(self.workers.start, self.workers.stop)

    async def stop(self, **_: Any) -> None:
        for task in self.background:
            task.cancel()
        await asyncio.gather(*self.background, return_exceptions=True)
        was_leading = self.workers.running
        await self.workers.stop()
        if self.notifier is not None:
            await self.notifier.stop()
        if self.leadership is not None and was_leading:
            try:
                await asyncio.to_thread(self.leadership.release)
            except Exception as error:  # the others then wait for the lease to expire instead
                logger.warning("could not release the lease: %s", error)
        if self.metrics_port is not None:
            from prometheus_client import REGISTRY

            REGISTRY.unregister(self.collector)


@dataclass
class Controller:
    """The pieces one operator process shares between its handlers and workers."""

    kube: Kube
    options: OperatorOptions = field(default_factory=OperatorOptions)
    store: Store = field(default_factory=Store)
    queue: WorkQueue[Key] = field(default_factory=WorkQueue)

    def election(self) -> LeaderElection | None:
        """This shard's election: the base Lease's, under the shard's Lease name."""
        base = self.options.leader_election
        if base is None and self.options.shard.count > 1:
            raise ValueError("shards need leader election: each shard elects its acting replica with its own Lease")
        return replace(base, name=self.options.shard.lease_name(base.name)) if base is not None else None

    def gate(self, election: LeaderElection | None) -> ShardGate:
        base = self.options.leader_election
        if base is None or election is None:  # one process without a Lease: stamps nothing, keeps away from
            pools = self.options.inference_pools  # fleets a live shard holds
            return ShardGate(self.kube, self.store, self.queue, self.options.shard, inference_pools=pools)
        return ShardGate(
            self.kube,
            self.store,
            self.queue,
            self.options.shard,
            lease_namespace=election.namespace,
            lease_name=election.name,
            base_lease=base.name,
            identity=election.identity,
            lease_duration=election.lease_duration,
            retry_period=election.retry_period,
            inference_pools=self.options.inference_pools,
        )

    def notifier(self) -> Notifier | None:
        """The notifier, when the options ask for one (`specfleet run --notifications-config`,
        `--namespace-notifications`)."""
        options = self.options
        if not options.notifying:
            return None
        own = Targets((), ())
        if options.notification_targets is not None:
            own = parse_targets(options.notification_targets, "operator", SINKS.keys())
        reader = self._namespace_targets if options.namespace_notifications else None
        allowed = tuple(parse_prefix(url) for url in options.allowed_notification_urls)
        return Notifier(own, reader, allowed, options.notification_policy, warn=self._refused_target)

    def _namespace_targets(self, namespace: str) -> str | None:
        return self.kube.read_optional_secret(namespace, NAMESPACE_SECRET, TARGETS_KEY)

    def _refused_target(self, fleet: Fleet, problem: str) -> None:
        """A Warning event on the fleet whose notification found its namespace's target refused."""
        body = self.store.sdeps.get((fleet.namespace, fleet.name))
        if body is not None:
            self.kube.post_event(body, "Warning", REFUSED_TARGET, problem)

    def reconciler(self, gate: ShardGate, notifier: Notifier | None = None) -> Reconciler:
        options = self.options
        return Reconciler(
            self.kube,
            self.store,
            self.queue,
            resync_seconds=options.resync_seconds,
            default_prometheus_url=options.prometheus_url,
            allowed_prometheus_urls=options.allowed_prometheus_urls,
            pod_url_template=options.pod_url_template,
            template_policy=options.template_policy,
            inference_pools=options.inference_pools,
            threads=ThreadPoolExecutor(options.workers, thread_name_prefix="specfleet-reconcile"),
            writes=ThreadPoolExecutor(write_threads(options.workers), thread_name_prefix="specfleet-write"),
            owns=gate.owns,
            notifier=notifier,
        )

    def collector(self, gate: ShardGate, elected: bool) -> FleetCollector:
        """The fleet metrics: with an election, only the fleets this replica acts on (a fleet waiting for its
        hand-over is still reported by its owner)."""
        sdeps = self.store.sdeps
        if not elected:
            return FleetCollector(lambda: list(sdeps.values()))
        return FleetCollector(lambda: [sdeps[k] for k in list(gate.owned) if k in sdeps])

    def registry(self) -> kopf.OperatorRegistry:
        """A kopf registry with this controller's handlers (explicit, so tests can run several)."""
        election = self.election()
        gate = self.gate(election)
        notifier = self.notifier()
        workers = Workers(self.reconciler(gate, notifier), gate, self.store, self.queue, self.options.workers)
        lifecycle = Lifecycle(
            workers,
            Leadership(self.kube, election) if election is not None else None,
            self.collector(gate, elected=election is not None),
            self.options.metrics_port,
            self.options.shard,
            notifier,
        )
        registry = kopf.OperatorRegistry()
        kopf.on.login(registry=registry)(self.login)
        kopf.on.startup(registry=registry)(lifecycle.configure)
        kopf.on.cleanup(registry=registry)(lifecycle.stop)
        # async handlers: kopf runs them on the event loop, where the store and the queue live
        fleets = FleetWatcher(gate, self.queue, backing_off=lambda key: workers.reconciler.backoff.failures(key) > 0)
        kopf.on.event(GROUP, VERSION, PLURAL, registry=registry, id="speculative_deployment")(fleets.on_event)
        for watch in CHILD_WATCHES:
            if watch.kind == "InferencePool" and not self.options.inference_pools:
                continue
            on_child = ChildWatcher(watch, gate, self.store, self.queue).on_event
            kopf.on.event(
                watch.group,
                watch.version,
                watch.plural,
                labels=watch.labels,
                registry=registry,
                id=f"on_{watch.kind.lower()}",
            )(on_child)
        return registry

    def login(self, **_: Any) -> kopf.ConnectionInfo:
        return kopf.ConnectionInfo(**connection_info(self.kube.api_client))

"""The shard gate of one operator process: which fleets it keeps in memory, stamps and reconciles.

The rules, and why they never let two processes act on a fleet nor leave one without an owner, are in
docs/sharding.md ("The protocol, and why it holds"), the pure decisions in `specfleet.sharding`; this is the
I/O around them: reading other shards' Leases (at most once per retry
period each), writing and removing the stamp with the fleet's resourceVersion, dropping other shards' fleets
from the store, and listing a fleet's children when it becomes this shard's after its children were dropped.
With leader election (the default of `specfleet run`, sharded or not) it stamps; without
(`--leader-election off`), it only keeps away from fleets a live shard still holds (`sharding.decide_unelected`),
and costs no request while no fleet carries a stamp. A fleet it leaves to the live holder of another Lease is
counted in `specfleet_standby_fleets{lease}`, and the first time it meets another operator's Lease (not one of
its own release's shards) it says so at WARNING: two installs on the same fleets are worth a look.
"""

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubernetes.dynamic.exceptions import ConflictError, NotFoundError

from specfleet.api.vocabulary import (
    API_VERSION,
    FIELD_MANAGER,
    INFERENCEPOOL_API_VERSION,
    KIND,
    LABEL_NAME,
    LABEL_PREFLIGHT,
)
from specfleet.controller.kube import Kube
from specfleet.controller.metrics import OWNED, STANDBY
from specfleet.controller.queue import WorkQueue
from specfleet.controller.store import PREFLIGHT_POD, Key, Store, key_of
from specfleet.sharding import (
    OWNER_ANNOTATION,
    RELEASED,
    RELEASED_STAMP,
    LeaseClock,
    LeaseRecord,
    LeaseView,
    Ownership,
    Shard,
    Stamp,
    assign,
    decide,
    decide_unelected,
    defer_new_fleet,
    interested,
    of_release,
)

logger = logging.getLogger("specfleet.shards")

LEASE_API_VERSION = "coordination.k8s.io/v1"
CLAIMED_LOOK_AGAIN_SECONDS = 1.0
"""After a stamp or a refused one: the watch delivers the new version sooner, this is the fallback."""
MANAGED_SELECTOR = f"app.kubernetes.io/managed-by={FIELD_MANAGER}"
CHILD_LISTS = (
    ("Deployment", "apps/v1", "Deployment", LABEL_NAME, MANAGED_SELECTOR),
    ("Service", "v1", "Service", LABEL_NAME, MANAGED_SELECTOR),
    ("InferencePool", INFERENCEPOOL_API_VERSION, "InferencePool", LABEL_NAME, MANAGED_SELECTOR),
    ("Pod", "v1", "Pod", LABEL_NAME, ""),
    ("Job", "batch/v1", "Job", LABEL_PREFLIGHT, ""),
    (PREFLIGHT_POD, "v1", "Pod", LABEL_PREFLIGHT, ""),
)
"""(store kind, apiVersion, kind, the label naming the fleet, more selector): what the watches keep per fleet
(InferencePools only with `--inference-pools` and their CRD served)."""


@dataclass
class ShardGate:
    """`owns` is the reconciler's hook (asked before any write of a pass); `observe` and `keeps_children_of`
    filter the watch events into the store."""

    kube: Kube
    store: Store
    queue: WorkQueue[Key]
    shard: Shard
    lease_namespace: str = ""
    lease_name: str | None = None
    """This shard's Lease (`Shard.lease_name(base)`); None without leader election (then nothing is stamped)."""
    base_lease: str = ""
    """The unsharded Lease, BASE: the owner of a fleet nobody has stamped."""
    identity: str = ""
    lease_duration: float = 15.0
    retry_period: float = 2.0
    clock: Callable[[], float] = time.monotonic
    inference_pools: bool = False
    """`--inference-pools`: a fleet's InferencePools are among the children listed (when their CRD is served)."""
    owned: set[Key] = field(default_factory=set)
    """The fleets this process acted on in its current term (the `specfleet_owned_fleets` gauge)."""
    _term: int = 0
    _foreign: set[Key] = field(default_factory=set)
    """Fleets seen and dropped as another shard's: their children are dropped too (a key each, no object)."""
    _incomplete: set[Key] = field(default_factory=set)
    """Fleets that became this shard's after their children were dropped: listed before the first pass."""
    _reported: dict[Key, str] = field(default_factory=dict)
    _waiting: dict[Key, str] = field(default_factory=dict)
    _standby: dict[Key, str] = field(default_factory=dict)
    """Fleets left to the live holder of another Lease: `namespace/lease` each (`specfleet_standby_fleets`)."""
    _announced: set[tuple[str, str]] = field(default_factory=set)
    """(Lease, holder) of other operators already logged: once each, however often a fleet is looked at again."""
    _reads: dict[tuple[str, str], tuple[float, float, LeaseRecord | None]] = field(default_factory=dict)
    """Each other Lease's last read: when it began, when it returned, what it said."""
    _stamp_seen: dict[Key, tuple[str | None, float]] = field(default_factory=dict)
    """Each kept fleet's stamp and when this process first saw it: a Lease read older than that says nothing
    about the stamp's holder (it may have won the Lease after the read), so it is read again."""
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self._leases = LeaseClock(self.lease_duration)

    @property
    def me(self) -> Stamp:
        return Stamp(self.lease_namespace, self.lease_name or "", self.identity, max(self._term, 1))

    def begin_term(self) -> None:
        """This process won its Lease (again): nothing stamped in an earlier term is acted on unstamped."""
        self._term += 1
        self.end_term()

    def end_term(self) -> None:
        self.owned.clear()
        OWNED.set(0)
        self._standby.clear()
        STANDBY.clear()

    def _assigned(self, key: Key, body: Mapping[str, Any]) -> bool:
        labels = (body.get("metadata") or {}).get("labels") or {}
        assignment = assign(key[0], key[1], labels, self.shard.count)
        if assignment.problem and self._reported.get(key) != assignment.problem:
            logger.warning("%s/%s: %s", *key, assignment.problem)
            self._reported[key] = assignment.problem
        elif not assignment.problem:
            self._reported.pop(key, None)
        return assignment.shard == self.shard.index

    def observe(self, obj: Mapping[str, Any], deleted: bool) -> Key | None:
        """A watch event of a SpeculativeDeployment: keep it when it is this shard's, drop it (and its children)
        when it is another's. Returns its key when it is to be reconciled: kept, or dropped now (the reconciler
        then forgets it); None for another shard's fleet that was not kept anyway."""
        key = key_of(obj)
        stamp = Stamp.parse(((obj.get("metadata") or {}).get("annotations") or {}).get(OWNER_ANNOTATION))
        if deleted or not interested(self._assigned(key, obj), stamp, self.me):
            was_kept = key in self.store.sdeps
            self._forget(key, foreign=not deleted)
            return key if was_kept or deleted else None
        if key in self._foreign:
            self._foreign.discard(key)
            self._incomplete.add(key)
        value = ((obj.get("metadata") or {}).get("annotations") or {}).get(OWNER_ANNOTATION)
        if self._stamp_seen.get(key, ("", 0.0))[0] != value:
            self._stamp_seen[key] = (value, self.clock())
        self.store.put_sdep(obj, deleted=False)
        return key

    def keeps_children_of(self, owner: Key) -> bool:
        return owner not in self._foreign

    def _forget(self, key: Key, foreign: bool) -> None:
        self.store.forget(key)
        self._stamp_seen.pop(key, None)
        self._incomplete.discard(key)
        self._waiting.pop(key, None)
        self._stand_by(key, None)
        if key in self.owned:
            self.owned.discard(key)
            OWNED.set(len(self.owned))
        if foreign:
            self._foreign.add(key)
        else:
            self._foreign.discard(key)
            self._reported.pop(key, None)

    async def owns(self, key: Key) -> bool:
        """May this process act on `key` now? Stamps, releases or waits as `sharding.decide` says; a key it
        must look at again later is queued again here."""
        body = self.store.sdeps.get(key)
        if body is None:
            return False
        meta = body.get("metadata") or {}
        assigned = self._assigned(key, body)
        stamp = Stamp.parse((meta.get("annotations") or {}).get(OWNER_ANNOTATION))
        me = self.me
        lease: LeaseView | None = None
        stamp_lease = (stamp.namespace, stamp.lease) if stamp else (self.lease_namespace, self.base_lease)
        released = stamp == RELEASED_STAMP
        seen_at = self._stamp_seen.get(key, (None, float("-inf")))[1]
        if self.lease_name is None:  # no leader election: never stamps, keeps away from live stamps
            if stamp is not None and not released:
                lease = await asyncio.to_thread(self._judge, *stamp_lease, seen_at)
            decision = decide_unelected(stamp, lease)
        else:
            if assigned and stamp != me and not released and stamp_lease != (me.namespace, me.lease):
                lease = await asyncio.to_thread(self._judge, *stamp_lease, seen_at)
            decision = decide(assigned, stamp, me, lease)
        if decision is Ownership.CLAIM and stamp is None and self.lease_name is not None:
            unstamped_for = self.clock() - seen_at
            if defer_new_fleet(unstamped_for, self._other_operator_in(key[0]), self.lease_duration):
                if self._waiting.get(key) != "new":
                    logger.info(
                        "shard %s: %s/%s is new and another operator holds fleets in its namespace: left to it "
                        "for %.0f s",
                        self._name,
                        *key,
                        self.lease_duration,
                    )
                    self._waiting[key] = "new"
                self.queue.add(key, self.lease_duration - unstamped_for)
                return False
        if decision is not Ownership.WAIT:
            self._stand_by(key, None)
        if decision is not Ownership.ACT and key in self.owned:
            self.owned.discard(key)
            OWNED.set(len(self.owned))
        if decision is Ownership.ACT:
            if key in self._incomplete:
                await self._list_children(key)
            if key not in self.owned:
                self.owned.add(key)
                OWNED.set(len(self.owned))
            return True
        if decision is Ownership.IGNORE:
            self._forget(key, foreign=True)
            return False
        if decision is Ownership.WAIT:
            held = f"held by {lease.holder}" if lease and lease.holder else "absent for less than a lease duration"
            said = f"{stamp_lease[0]}/{stamp_lease[1]} {held}"
            if self._waiting.get(key) != said:
                logger.info("shard %s: %s/%s waits: its owner's Lease %s", self._name, *key, said)
                self._waiting[key] = said
            self._stand_by(key, "/".join(stamp_lease))
            if lease and lease.holder and not of_release(*stamp_lease, self.lease_namespace, self.base_lease):
                self._announce(*stamp_lease, lease.holder)
            self.queue.add(key, self.retry_period)
            return False
        version = str(meta.get("resourceVersion", ""))
        if decision is Ownership.RELEASE:
            value: str | None = RELEASED
        else:
            value = me.render() if self.lease_name is not None else None
        try:
            await asyncio.to_thread(self._stamp, key, value, version)
        except ConflictError:  # someone moved first (another shard, a user's edit): decide again from the new one
            logger.info("shard %s: %s/%s changed while being stamped; looking again", self._name, *key)
            self.queue.add(key, CLAIMED_LOOK_AGAIN_SECONDS)
            return False
        except NotFoundError:
            return False
        self._waiting.pop(key, None)
        if decision is Ownership.CLAIM:
            previous = stamp.render() if stamp else f"unstamped (Lease {self.base_lease})"
            logger.info("shard %s: claimed %s/%s (was %s)", self._name, *key, previous)
            self.queue.add(key, CLAIMED_LOOK_AGAIN_SECONDS)
        else:
            logger.info("shard %s: released %s/%s (assigned to another shard now)", self._name, *key)
            self._forget(key, foreign=True)
        return False

    def _stand_by(self, key: Key, lease: str | None) -> None:
        """Count `key` as left to `lease`'s holder (None: no longer), keeping the gauge per Lease."""
        before = self._standby.get(key)
        if before == lease:
            return
        if lease is None:
            del self._standby[key]
        else:
            self._standby[key] = lease
        for changed in filter(None, (before, lease)):
            count = sum(1 for held in self._standby.values() if held == changed)
            if count:
                STANDBY.labels(changed).set(count)
            else:
                STANDBY.remove(changed)
                logger.info("shard %s: no fleet left to Lease %s any more", self._name, changed)

    def _other_operator_in(self, namespace: str) -> bool:
        """Whether this process leaves some fleet in `namespace` to a live Lease that is not its release's."""
        return any(
            key[0] == namespace and not of_release(*self._split(lease), self.lease_namespace, self.base_lease)
            for key, lease in self._standby.items()
        )

    @staticmethod
    def _split(lease: str) -> tuple[str, str]:
        namespace, _, name = lease.partition("/")
        return namespace, name

    def _announce(self, namespace: str, lease: str, holder: str) -> None:
        if (f"{namespace}/{lease}", holder) in self._announced:
            return
        self._announced.add((f"{namespace}/{lease}", holder))
        logger.warning(
            "another operator holds fleets here: Lease %s/%s held by %s; this process stands by for them "
            "(specfleet_standby_fleets) and takes a fleet over only once that holder stopped",
            namespace,
            lease,
            holder,
        )

    @property
    def _name(self) -> str:
        return f"{self.shard.index}/{self.shard.count}"

    def _stamp(self, key: Key, value: str | None, version: str) -> None:
        """Write (or with None remove) the stamp, only over `version`: a ConflictError if the fleet changed."""
        body = {"metadata": {"resourceVersion": version, "annotations": {OWNER_ANNOTATION: value}}}
        self.kube.merge_patch(API_VERSION, KIND, key[0], key[1], body)

    def _judge(self, namespace: str, name: str, not_before: float = float("-inf")) -> LeaseView:
        """Another process's Lease, read at most once per retry period, but again when the last read began before
        `not_before` (when the stamp being judged was first seen); judged at the time the read returned."""
        with self._lock:
            began, read_at, record = self._reads.get((namespace, name), (float("-inf"), float("-inf"), None))
        if self.clock() - read_at >= self.retry_period or began < not_before:
            began = self.clock()
            lease = self.kube.read(LEASE_API_VERSION, "Lease", namespace, name)
            spec = (lease or {}).get("spec") or {}
            record = (
                None
                if lease is None
                else (spec.get("holderIdentity"), spec.get("renewTime"), spec.get("leaseDurationSeconds"))
            )
            read_at = self.clock()
            with self._lock:
                self._reads[namespace, name] = (began, read_at, record)
        with self._lock:
            return self._leases.judge(namespace, name, record, read_at)

    async def _list_children(self, key: Key) -> None:
        """The children of a fleet whose watch events were dropped while it was another shard's. Only the ones
        the store lacks are put: a watch event that arrived meanwhile is newer than the list."""
        listed = await asyncio.to_thread(self._read_children, key)
        for kind, label, obj in listed:
            name = (obj.get("metadata") or {}).get("name", "")
            if not self.store.has_child(kind, key, name):
                self.store.put_child(kind, obj, deleted=False, label=label)
        self._incomplete.discard(key)

    def _read_children(self, key: Key) -> list[tuple[str, str, dict[str, Any]]]:
        namespace, name = key
        found = []
        for kind, api_version, api_kind, label, more in CHILD_LISTS:
            if api_kind == "InferencePool" and not (self.inference_pools and self.kube.has_kind(api_version, api_kind)):
                continue
            selector = ",".join(filter(None, (f"{label}={name}", more)))
            found += [(kind, label, obj) for obj in self.kube.list_labelled(api_version, api_kind, namespace, selector)]
        return found

"""Which operator process acts on which SpeculativeDeployment when several run: pure decisions, no client.

`specfleet run --shards N --shard I --leader-election NS/BASE` runs shard I of N. Each shard elects one acting
replica with its own coordination.k8s.io Lease, `BASE-shard-I-of-N` (`BASE` itself when N is 1, the Lease an
unsharded operator has always used).

A fleet is *assigned* to a shard by a stable hash of `namespace/name`, or by its `specfleet.io/shard` label; the
annotation `specfleet.io/shard-owner` (`NS/LEASE@IDENTITY#TERM`, the stamp) says which Lease's holder, in which
term, *may* act on it. A process acts on a fleet only while it holds its Lease, the stamp names that Lease, its
identity and its current term, and the fleet is assigned to its shard; anyone else stamps a fleet only when the
stamp's owner cannot be acting. Those rules, and why they leave every fleet exactly one writer (never two, never
none, also beside an unelected process or another install): docs/sharding.md, "The protocol, and why it holds".
"""

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

SHARD_LABEL = "specfleet.io/shard"
"""Pins a fleet to a shard: `"0"` .. `"N-1"`."""
OWNER_ANNOTATION = "specfleet.io/shard-owner"
"""`NS/LEASE@IDENTITY#TERM`: which Lease's holder may act on the fleet (written only by the operator)."""


def stable_hash(text: str) -> int:
    """The first 8 bytes of sha256, big-endian: the same number in every process and Python version."""
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


def hash_shard(namespace: str, name: str, count: int) -> int:
    """The shard a fleet falls in by its `namespace/name` alone."""
    return stable_hash(f"{namespace}/{name}") % count


@dataclass(frozen=True)
class Shard:
    """Shard `index` of `count` (`specfleet run --shards count --shard index`)."""

    index: int = 0
    count: int = 1

    def __post_init__(self) -> None:
        if self.count < 1:
            raise ValueError(f"--shards must be at least 1, got {self.count}")
        if not 0 <= self.index < self.count:
            raise ValueError(f"--shard must be in 0..{self.count - 1} (for --shards {self.count}), got {self.index}")

    def lease_name(self, base: str) -> str:
        """This shard's Lease: `BASE-shard-I-of-N`, or `BASE` itself for one shard (the unsharded Lease)."""
        return base if self.count == 1 else f"{base}-shard-{self.index}-of-{self.count}"


@dataclass(frozen=True)
class Assignment:
    shard: int
    problem: str | None = None
    """A `specfleet.io/shard` label that could not be used (then `shard` is the hash's)."""


def assign(namespace: str, name: str, labels: Mapping[str, str], count: int) -> Assignment:
    """The shard a fleet is assigned to: its label's, when it is a shard number below `count`, else the hash's."""
    by_hash = hash_shard(namespace, name, count)
    pinned = labels.get(SHARD_LABEL)
    if pinned is None:
        return Assignment(by_hash)
    text = str(pinned).strip()
    if text.isdecimal() and int(text) < count:
        return Assignment(int(text))
    return Assignment(
        by_hash,
        f"label {SHARD_LABEL}={pinned!r} names no shard of {count} (0..{count - 1}): assigned by hash to {by_hash}",
    )


@dataclass(frozen=True)
class Stamp:
    """Who may act on a fleet: the holder `identity` of the Lease `namespace/lease`, in its `term`-th time
    holding it (a new term re-stamps, so a stamp is never inherited from an earlier term)."""

    namespace: str
    lease: str
    identity: str
    term: int = 1

    def render(self) -> str:
        return RELEASED if self == RELEASED_STAMP else f"{self.namespace}/{self.lease}@{self.identity}#{self.term}"

    @classmethod
    def parse(cls, value: str | None) -> "Stamp | None":
        """The annotation's value; None when it is absent or not of the form `NS/LEASE@IDENTITY#TERM`."""
        if not value:
            return None
        if value == RELEASED:
            return RELEASED_STAMP
        where, _, held = value.partition("@")
        namespace, _, lease = where.partition("/")
        identity, _, term = held.rpartition("#")
        if not namespace or not lease or "/" in lease or not identity or not term.isdecimal():
            return None
        return cls(namespace, lease, identity, int(term))

    def with_term(self, term: int) -> "Stamp":
        return Stamp(self.namespace, self.lease, self.identity, term)


RELEASED = "released"
"""The annotation's value once a shard's holder gave the fleet up (its label moved it): anyone assigned may
stamp it at once."""
RELEASED_STAMP = Stamp("", "", "", 0)


@dataclass(frozen=True)
class LeaseView:
    """What a process may conclude about a Lease from what it read, over time, on its own clock."""

    live: bool
    """Someone may hold it: renewed in time, or absent for less than a default lease duration."""
    holder: str | None = None
    """The identity holding it, when `live` and known."""


LeaseRecord = tuple[str | None, str | None, int | None]
"""(holderIdentity, renewTime, leaseDurationSeconds) as read; a change of any is a sign of life."""


class LeaseClock:
    """Judges other processes' Leases as client-go does: by how long a record stayed unchanged on this
    process's monotonic clock, never by comparing timestamps other machines wrote.

    Reads may be far apart: a record unchanged between two reads means no renewal in between (a renewal
    always writes a new renewTime), so the first time a record was seen is when the clock starts.
    """

    def __init__(self, default_duration: float) -> None:
        self.default_duration = default_duration
        self._seen: dict[tuple[str, str], tuple[LeaseRecord | None, float]] = {}

    def judge(self, namespace: str, name: str, record: LeaseRecord | None, now: float) -> LeaseView:
        """`record` None: the Lease does not exist."""
        key = (namespace, name)
        seen = self._seen.get(key)
        if seen is None or seen[0] != record:
            self._seen[key] = seen = (record, now)
        unchanged_for = now - seen[1]
        if record is None:  # a live holder re-creates a deleted Lease within a retry period
            return LeaseView(live=unchanged_for < self.default_duration)
        holder, _, duration = record
        if not holder:
            return LeaseView(live=False)  # released
        return LeaseView(live=unchanged_for < (duration or self.default_duration), holder=holder)


class Ownership(StrEnum):
    ACT = "act"
    """Stamped by this process, assigned to its shard: reconcile."""
    CLAIM = "claim"
    """Assigned here and its stamp's owner cannot be acting: stamp it (with the resourceVersion), then act."""
    RELEASE = "release"
    """Stamped with this process's Lease but assigned elsewhere now: mark it `released` (with the
    resourceVersion) and drop it."""
    WAIT = "wait"
    """Assigned here but its stamp's owner may be acting: leave it, look again after a retry period."""
    IGNORE = "ignore"
    """Another shard's: not kept in memory, never written."""


def decide(assigned: bool, stamp: Stamp | None, me: Stamp, lease: LeaseView | None) -> Ownership:
    """What a process holding its Lease does with one fleet.

    `stamp`: the fleet's (None: unstamped). `me`: this process's own stamp, in its current term. `lease`: the
    stamp's Lease as judged (BASE's for an unstamped fleet), or None when that is this process's own Lease,
    which it holds (so whoever stamped with it before has stopped).
    """
    stamped_with_my_lease = stamp is not None and _lease_of(stamp) == _lease_of(me)
    if not assigned:
        return Ownership.RELEASE if stamped_with_my_lease else Ownership.IGNORE
    if stamp == me:
        return Ownership.ACT
    if stamp == RELEASED_STAMP or stamped_with_my_lease or lease is None or not lease.live:
        return Ownership.CLAIM
    owner = stamp.identity if stamp is not None else None
    if owner is None or lease.holder is None or lease.holder == owner:
        return Ownership.WAIT
    return Ownership.CLAIM  # the Lease moved on to another identity: the stamp's has stopped


def decide_unelected(stamp: Stamp | None, lease: LeaseView | None) -> Ownership:
    """What an operator run without leader election (one process, no Lease, so it cannot stamp) does with a
    fleet: act on an unstamped one (no request at all); leave one whose stamp's Lease is live to its holder
    (after a resize down to this process, until the old shard stopped); unstamp one whose holder stopped
    (CLAIM, writing no stamp), then act on it."""
    if stamp is None:
        return Ownership.ACT
    if stamp != RELEASED_STAMP and lease is not None and lease.live:
        return Ownership.WAIT
    return Ownership.CLAIM


def of_release(namespace: str, lease: str, release_namespace: str, base: str) -> bool:
    """Whether the Lease `namespace/lease` is one this operator's release elects with (`BASE`, or a shard's
    `BASE-shard-I-of-N` of any N): a fleet waiting for it is in a hand-over between shards of this release;
    waiting for any other Lease means another operator (another release, a laptop run) acts on the fleet."""
    return namespace == release_namespace and (lease == base or lease.startswith(f"{base}-shard-"))


def defer_new_fleet(unstamped_for: float, other_operator_here: bool, lease_duration: float) -> bool:
    """Whether a process about to stamp a fleet nobody has stamped leaves it for now: while another operator's
    live Lease holds fleets in the fleet's namespace (that operator, which stamps a new fleet at once, most
    likely watches it too), until the fleet has been unstamped for a lease duration on this process's clock."""
    return other_operator_here and unstamped_for < lease_duration


def interested(assigned: bool, stamp: Stamp | None, me: Stamp) -> bool:
    """Whether a process keeps a fleet in its store: assigned to its shard, or stamped with its Lease (to
    release it). Everything else is another shard's, dropped on arrival, so memory follows owned fleets."""
    return assigned or (stamp is not None and _lease_of(stamp) == _lease_of(me))


def _lease_of(stamp: Stamp) -> tuple[str, str]:
    return stamp.namespace, stamp.lease

"""Which operator process acts on which SpeculativeDeployment when several run: pure decisions, no client.

`specfleet run --shards N --shard I --leader-election NS/BASE` runs shard I of N. Each shard elects one acting
replica with its own coordination.k8s.io Lease, `BASE-shard-I-of-N` (`BASE` itself when N is 1, the Lease an
unsharded operator has always used).

**Assignment.** A fleet belongs to shard `stable_hash("namespace/name") % N` (sha256, so every process and
every Python version agrees; never `hash()`, which is salted per process), unless its label
`specfleet.io/shard: "<i>"` pins it to a shard `0 <= i < N`. A pin that is not such a number falls back to the
hash (the shell says so once).

**Ownership.** Assignment says who *should* act; the annotation `specfleet.io/shard-owner` says who *may*. Its
value is `NS/LEASE@IDENTITY#TERM`: the Lease, the replica that stamped the fleet while holding it, and which of
that replica's terms of holding it. A process acts on a fleet only while (a) it holds its Lease (its workers
run only then: `controller.handlers.Leadership`), (b) the annotation names its Lease, its own identity and its
current term, and (c) the fleet is assigned to its shard. A fleet without the annotation counts as stamped
with `NS/BASE` by an unknown identity: an unsharded operator of an older version, holding BASE, acts on it.

Anyone else may stamp a fleet (a merge patch carrying the fleet's resourceVersion, so of two stampers one gets
409 and reads again) only when the stamp's owner cannot be acting:

- the named Lease is held by another identity than the stamp's (the stamper lost it: a holder that cannot renew
  stops its workers after `renew_deadline`, before anyone may take the Lease after `lease_duration`), or
- it has no holder (released on a clean shutdown, after the workers stopped), or
- its record stayed unchanged for its `leaseDurationSeconds` on the reader's own monotonic clock (expired), or
- it stayed absent for a default lease duration (a live holder re-creates a deleted Lease within a retry
  period, and an unsharded operator without a Lease does not stamp), or
- the stamp says `released`: its holder gave the fleet up (below) and no longer acts on it.

For an unstamped fleet "another identity than the stamp's" does not exist: it is free only when BASE is not
held, or when the reader holds BASE itself.

Why two processes never act on one fleet: the one acting is the stamp's identity, in the stamp's term, while
holding the stamp's Lease. A stamper takes the fleet only in the cases above, each of which means that holder
has stopped (short of a pass already in flight when its Lease was lost, as with any leader election). The
identity and term in the stamp are the fence: a replica that wins a Lease, for the first time or again,
inherits no fleet from an earlier term, its own or another's; it stamps each again (a write that changes the
value, so it carries a new resourceVersion) before acting, and that write races any other stamper through the
optimistic lock: exactly one wins. Only a person editing the annotation can take a fleet from a live holder;
the holder's next status write then carries the old resourceVersion and is refused, and its next pass sees the
new stamp.

Why no fleet is dropped: its assigned shard, once it holds its Lease, stamps the fleet as soon as the stamp's
holder is gone (released: at once; dead: after a lease duration), and looks again every retry period while it
waits. On a resize (N to M, old and new Deployments side by side) the old shards keep their stamped fleets
until they stop (releasing their Leases), then the new assignment stamps them. A fleet stamped with the Lease
of a shard it is no longer assigned to (its label moved it) is released by that Lease's holder: the stamp
replaced by `released` (with the resourceVersion) from the fleet's own worker, which then drops the fleet; a
released fleet is acted on by nobody until its assigned shard stamps it, at once.

**Without leader election** (`--leader-election off`, or an operator of a version that did not elect by
default: one unsharded process, no Lease, so no stamp of its own) a process acts on unstamped fleets as before
sharding existed, leaves a fleet whose stamp's Lease is live (a resize down to it, while the old shards still
run), and removes a stamp whose holder stopped before acting on that fleet. The way from such a process to
elected ones is the one step without a fence: they take an unstamped fleet once BASE has been absent for a
lease duration on their clock (or at once when BASE is their own Lease), by which time the old process is
normally gone; it keeps off each fleet as soon as it sees the fleet stamped.

**Other operators.** Two installs of the operator (two releases, or a laptop's `specfleet run` beside the
cluster's) elect with different Leases, and neither knows of the other; the stamp is what keeps them apart. A
fleet stamped by another Lease's live holder is left to it (WAIT), whichever operator that is, and taken only
once that holder stopped, by the same rules as between shards. Leader election is on by default
(`specfleet run` elects with a Lease even when no flag names one), so every operator stamps what it acts on.
A fleet nobody has stamped yet (created while both run) would go to whichever stamps it first; a process that
already leaves fleets in that namespace to another operator leaves a new one too for a lease duration
(`defer_new_fleet`): the operator that was there first stamps it at once, and if nobody does (the other does
not watch it) the fleet is still taken. One writer either way, never none.

**Costs.** Without leader election and with no stamps: no request at all. With it,
one patch per fleet each time a replica wins its Lease, and one read of another shard's Lease per retry
period while a fleet waits for it; none in a steady state.

The stamp is metadata: it bumps no generation and is no command (`specfleet.io/<command>` keys are read by
name), so writing it never reads as a spec change.
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

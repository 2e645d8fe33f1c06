"""Shard ownership (specfleet.sharding): the hash every process agrees on, label pins, the Lease clock, and the
claim decision for every combination of stamp, Lease and assignment."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specfleet.sharding import (
    RELEASED_STAMP,
    SHARD_LABEL,
    LeaseClock,
    LeaseView,
    Ownership,
    Shard,
    Stamp,
    assign,
    decide,
    decide_unelected,
    defer_new_fleet,
    hash_shard,
    interested,
    of_release,
    stable_hash,
)

HASHES = {
    # computed once (sha256 of "namespace/name", first 8 bytes big-endian) and pinned: a change here moves
    # fleets between shards on an upgrade
    ("default", "llama"): (12221468237445408701, [1, 2, 1, 4, 13]),
    ("default", "llama-8b-eagle3"): (831314920986576800, [0, 2, 0, 4, 0]),
    ("team-a", "qwen"): (14735704938149825846, [0, 2, 2, 6, 6]),
    ("team-b", "mistral-7b"): (8875944420681904294, [0, 1, 2, 1, 6]),
    ("prod", "llama-70b-mtp"): (15921597309461282986, [0, 1, 2, 1, 10]),
    ("x", "y"): (13635932409986903089, [1, 1, 1, 3, 1]),
}
COUNTS = (2, 3, 4, 7, 16)
names = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?", fullmatch=True)


@pytest.mark.parametrize(("key", "expected"), HASHES.items())
def test_the_hash_is_the_same_in_every_process_and_version(
    key: tuple[str, str], expected: tuple[int, list[int]]
) -> None:
    number, shards = expected
    assert stable_hash("/".join(key)) == number
    assert [hash_shard(*key, count) for count in COUNTS] == shards


@given(namespace=names, name=names, pin=st.one_of(st.none(), st.integers(-2, 20).map(str), st.text(max_size=3)))
def test_every_fleet_is_assigned_to_exactly_one_shard_for_every_count(
    namespace: str, name: str, pin: str | None
) -> None:
    labels = {} if pin is None else {SHARD_LABEL: pin}
    for count in range(1, 17):
        owners = [i for i in range(count) if assign(namespace, name, labels, count).shard == i]
        assert len(owners) == 1
        pinned = pin is not None and pin.isdecimal() and int(pin) < count
        assert owners[0] == (int(pin) if pinned and pin is not None else hash_shard(namespace, name, count))


@given(namespace=names, name=names, count=st.integers(1, 16), data=st.data())
def test_a_label_pins_a_fleet_to_any_shard_below_the_count(
    namespace: str, name: str, count: int, data: st.DataObject
) -> None:
    pinned = data.draw(st.integers(0, count - 1))
    assert assign(namespace, name, {SHARD_LABEL: str(pinned)}, count).shard == pinned


@pytest.mark.parametrize("value", ["3", "7", "-1", "one", "", "1.0", "²"])
def test_a_pin_that_names_no_shard_falls_back_to_the_hash_and_says_so(value: str) -> None:
    assignment = assign("default", "llama", {SHARD_LABEL: value}, 3)
    assert assignment.shard == hash_shard("default", "llama", 3)
    assert assignment.problem is not None and SHARD_LABEL in assignment.problem and "0..2" in assignment.problem


def test_one_shard_owns_everything_and_keeps_the_unsharded_lease() -> None:
    assert assign("default", "llama", {}, 1).shard == 0
    assert Shard(0, 1).lease_name("specfleet") == "specfleet"
    assert Shard(2, 3).lease_name("specfleet") == "specfleet-shard-2-of-3"


@pytest.mark.parametrize(("index", "count", "flag"), [(0, 0, "--shards"), (3, 3, "--shard"), (-1, 2, "--shard")])
def test_a_shard_outside_its_count_is_refused_naming_the_flag(index: int, count: int, flag: str) -> None:
    with pytest.raises(ValueError, match=flag):
        Shard(index, count)


@given(
    namespace=names,
    lease=names,
    identity=st.from_regex(r"[a-z0-9_.#-]{1,30}", fullmatch=True),
    term=st.integers(1, 10**6),
)
def test_a_stamp_reads_back_as_written(namespace: str, lease: str, identity: str, term: int) -> None:
    stamp = Stamp(namespace, lease, identity, term)
    assert Stamp.parse(stamp.render()) == stamp


def test_released_reads_back_as_released() -> None:
    assert Stamp.parse("released") == RELEASED_STAMP and RELEASED_STAMP.render() == "released"


@pytest.mark.parametrize("value", [None, "", "lease@me#1", "ns/lease", "ns/lease@#1", "ns/a/b@me#1", "ns/lease@me#x"])
def test_a_malformed_stamp_is_no_stamp(value: str | None) -> None:
    assert Stamp.parse(value) is None


def test_the_lease_clock_judges_by_its_own_clock_never_by_written_timestamps() -> None:
    clock = LeaseClock(default_duration=15)
    held = ("a", "2026-12-02T00:00:00.000000Z", 15)
    assert clock.judge("ns", "l", held, 100.0) == LeaseView(live=True, holder="a")
    assert clock.judge("ns", "l", held, 114.9).live
    assert not clock.judge("ns", "l", held, 115.0).live  # unchanged for its duration: expired
    renewed = ("a", "2026-12-02T00:00:15.000000Z", 15)
    assert clock.judge("ns", "l", renewed, 116.0).live  # a renewal starts the clock again
    assert not clock.judge("ns", "l", (None, None, 15), 117.0).live  # released: at once
    assert clock.judge("ns", "gone", None, 200.0).live  # absent: a live holder may be re-creating it
    assert not clock.judge("ns", "gone", None, 215.0).live


ME = Stamp("ops", "specfleet-shard-1-of-2", "me", 2)
MY_EARLIER_TERM = Stamp("ops", "specfleet-shard-1-of-2", "me", 1)
MY_LEASE_OTHER_REPLICA = Stamp("ops", "specfleet-shard-1-of-2", "replica-b", 4)
OTHER = Stamp("ops", "specfleet-shard-0-of-2", "them", 1)
HELD_BY_THEM = LeaseView(live=True, holder="them")
HELD_BY_SUCCESSOR = LeaseView(live=True, holder="successor")
RECENTLY_ABSENT = LeaseView(live=True)
EXPIRED = LeaseView(live=False)
CASES = {
    # (stamp, the stamp's Lease as judged: None = my own Lease) -> (assigned here, assigned elsewhere)
    "absent, BASE held by an unsharded operator": (
        None,
        LeaseView(live=True, holder="old"),
        Ownership.WAIT,
        Ownership.IGNORE,
    ),
    "absent, BASE recently absent": (None, RECENTLY_ABSENT, Ownership.WAIT, Ownership.IGNORE),
    "absent, BASE absent long / expired / released": (None, EXPIRED, Ownership.CLAIM, Ownership.IGNORE),
    "absent, BASE is my own Lease": (None, None, Ownership.CLAIM, Ownership.IGNORE),
    "names me": (ME, None, Ownership.ACT, Ownership.RELEASE),
    "names my earlier term": (MY_EARLIER_TERM, None, Ownership.CLAIM, Ownership.RELEASE),
    "names another replica of my shard": (MY_LEASE_OTHER_REPLICA, None, Ownership.CLAIM, Ownership.RELEASE),
    "names another, held": (OTHER, HELD_BY_THEM, Ownership.WAIT, Ownership.IGNORE),
    "names another, its Lease recently absent": (OTHER, RECENTLY_ABSENT, Ownership.WAIT, Ownership.IGNORE),
    "names another, expired or released": (OTHER, EXPIRED, Ownership.CLAIM, Ownership.IGNORE),
    "names another, its Lease now held by a successor": (OTHER, HELD_BY_SUCCESSOR, Ownership.CLAIM, Ownership.IGNORE),
    "released by its shard (label moved it)": (RELEASED_STAMP, HELD_BY_THEM, Ownership.CLAIM, Ownership.IGNORE),
}


@pytest.mark.parametrize("case", CASES)
def test_the_claim_decision(case: str) -> None:
    stamp, lease, when_assigned, when_not = CASES[case]
    assert decide(True, stamp, ME, lease) is when_assigned
    assert decide(False, stamp, ME, lease) is when_not
    # kept in memory exactly when there is something to do with it
    assert interested(True, stamp, ME)
    assert interested(False, stamp, ME) is (when_not is Ownership.RELEASE)


@given(
    stamps=st.sampled_from([None, ME, MY_EARLIER_TERM, MY_LEASE_OTHER_REPLICA, OTHER]),
    lease=st.sampled_from([HELD_BY_THEM, HELD_BY_SUCCESSOR, RECENTLY_ABSENT, EXPIRED]),
)
def test_only_the_stamps_holder_acts_and_nobody_takes_a_fleet_from_a_live_holder(
    stamps: Stamp | None, lease: LeaseView
) -> None:
    own = stamps is not None and stamps.lease == ME.lease
    decision = decide(True, stamps, ME, None if own else lease)
    assert (decision is Ownership.ACT) == (stamps == ME)
    holder = stamps.identity if stamps is not None and not own else None
    if not own and lease.live and (lease.holder == holder or stamps is None):
        assert decision is Ownership.WAIT


@pytest.mark.parametrize(
    ("stamp", "lease", "expected"),
    [
        (None, None, Ownership.ACT),  # never sharded: acts, as before sharding
        (OTHER, HELD_BY_THEM, Ownership.WAIT),  # a resize down to one process: the old shard still runs
        (OTHER, RECENTLY_ABSENT, Ownership.WAIT),
        (OTHER, EXPIRED, Ownership.CLAIM),  # its holder stopped: unstamp, then act
        (OTHER, HELD_BY_SUCCESSOR, Ownership.WAIT),  # a standby of that shard took over: it will stamp again
        (RELEASED_STAMP, None, Ownership.CLAIM),  # given up by its shard: unstamp, then act
    ],
)
def test_a_process_without_leader_election_keeps_away_from_live_stamps(
    stamp: Stamp | None, lease: LeaseView | None, expected: Ownership
) -> None:
    assert decide_unelected(stamp, lease) is expected


@pytest.mark.parametrize(
    ("namespace", "lease", "mine"),
    [
        ("ops", "sf-specfleet", True),  # the release's unsharded Lease
        ("ops", "sf-specfleet-shard-2-of-3", True),  # one of its shards, of any shard count
        ("ops", "sf-specfleet-canary", False),  # another release whose name starts alike
        ("ops", "other-specfleet", False),  # another release in the same namespace
        ("team-a", "sf-specfleet", False),  # a laptop run electing in the watched namespace
    ],
)
def test_a_lease_is_this_releases_only_when_it_is_its_base_or_a_shard_of_it(
    namespace: str, lease: str, mine: bool
) -> None:
    assert of_release(namespace, lease, "ops", "sf-specfleet") is mine


@pytest.mark.parametrize(
    ("unstamped_for", "other_operator_here", "deferred"),
    [
        (0.0, True, True),  # the operator that was there first gets its chance to stamp it
        (14.9, True, True),
        (15.0, True, False),  # nobody did: taken, so no fleet goes without a writer
        (0.0, False, False),  # nobody else here: stamped at once
    ],
)
def test_a_new_fleet_is_left_to_another_operator_only_where_it_holds_fleets_and_only_for_a_lease_duration(
    unstamped_for: float, other_operator_here: bool, deferred: bool
) -> None:
    assert defer_new_fleet(unstamped_for, other_operator_here, 15.0) is deferred

"""The shard gate's I/O (controller/shards.py) with a recording stand-in for the API: another shard's fleets are
not kept, a stamp is written and removed only over the resourceVersion it was decided from, another shard's
Lease is read at most once per retry period, and a fleet taken over after its children were dropped gets them
listed before its first pass."""

import asyncio
import logging
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic.exceptions import ConflictError
from prometheus_client import REGISTRY

from specfleet.api.vocabulary import LABEL_NAME
from specfleet.controller.handlers import Controller, OperatorOptions
from specfleet.controller.metrics import STANDBY_FLEETS
from specfleet.controller.queue import WorkQueue
from specfleet.controller.shards import ShardGate
from specfleet.controller.store import Key, Store
from specfleet.sharding import OWNER_ANNOTATION, SHARD_LABEL, Shard, Stamp, hash_shard


class FakeKube:
    def __init__(self) -> None:
        self.patches: list[tuple[Key, dict[str, Any]]] = []
        self.leases: dict[str, dict[str, Any]] = {}
        self.reads: list[str] = []
        self.lists: list[tuple[str, str]] = []
        self.children: list[dict[str, Any]] = []
        self.conflict = False
        self.kinds = {"Deployment", "Service", "Pod", "Job"}
        """The kinds the API server serves (no InferencePool CRD)."""

    def merge_patch(self, api_version: str, kind: str, namespace: str, name: str, body: dict[str, Any]) -> None:
        if self.conflict:
            raise ConflictError(ApiException(status=409, reason="Conflict"))
        self.patches.append(((namespace, name), body))

    def read(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        self.reads.append(name)
        return self.leases.get(name)

    def has_kind(self, api_version: str, kind: str) -> bool:
        return kind in self.kinds

    def list_labelled(self, api_version: str, kind: str, namespace: str, selector: str) -> list[dict[str, Any]]:
        self.lists.append((kind, selector))
        return [c for c in self.children if c["kind"] == kind and selector.startswith(LABEL_NAME)]


def names_in(shard: int, count: int, n: int = 3) -> list[str]:
    return [f"fleet-{i}" for i in range(100) if hash_shard("default", f"fleet-{i}", count) == shard][:n]


def fleet(
    name: str, stamp: str | None = None, labels: dict[str, str] | None = None, version: str = "7"
) -> dict[str, Any]:
    meta: dict[str, Any] = {"namespace": "default", "name": name, "resourceVersion": version, "labels": labels or {}}
    if stamp:
        meta["annotations"] = {OWNER_ANNOTATION: stamp}
    return {"metadata": meta, "spec": {}}


def child(kind: str, name: str, owner: str) -> dict[str, Any]:
    return {"kind": kind, "metadata": {"namespace": "default", "name": name, "labels": {LABEL_NAME: owner}}}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def gate(kube: FakeKube, shard: Shard | None = None, clock: Clock | None = None) -> ShardGate:
    shard = shard or Shard(1, 2)
    made = ShardGate(
        kube,  # type: ignore[arg-type]
        Store(),
        WorkQueue(),
        shard,
        lease_namespace="ops",
        lease_name=shard.lease_name("specfleet"),
        base_lease="specfleet",
        identity="me",
        clock=clock or Clock(),
    )
    made.begin_term()
    return made


def test_another_shards_fleet_and_its_children_are_not_kept() -> None:
    mine, theirs = names_in(1, 2, 1)[0], names_in(0, 2, 1)[0]
    shards = gate(FakeKube())
    shards.store.put_child("Deployment", child("Deployment", f"{theirs}-stable", theirs), deleted=False)
    assert shards.observe(fleet(mine), deleted=False) == ("default", mine)
    assert shards.observe(fleet(theirs), deleted=False) is None  # not even queued
    assert list(shards.store.sdeps) == [("default", mine)]
    assert shards.store.children("Deployment", ("default", theirs)) == {}
    assert not shards.keeps_children_of(("default", theirs)) and shards.keeps_children_of(("default", mine))


def test_an_unstamped_fleet_is_stamped_over_its_version_then_acted_on() -> None:
    kube, clock = FakeKube(), Clock()
    shards = gate(kube, clock=clock)
    name = names_in(1, 2, 1)[0]
    shards.observe(fleet(name), deleted=False)
    assert not asyncio.run(shards.owns(("default", name)))  # BASE never seen before: may be re-created
    clock.now += 15
    assert not asyncio.run(shards.owns(("default", name)))  # absent for a lease duration: claimed
    (key, body) = kube.patches[-1]
    assert key == ("default", name) and body["metadata"]["resourceVersion"] == "7"
    assert Stamp.parse(body["metadata"]["annotations"][OWNER_ANNOTATION]) == shards.me
    shards.observe(fleet(name, shards.me.render(), version="8"), deleted=False)
    assert asyncio.run(shards.owns(("default", name)))
    assert shards.owned == {("default", name)}
    assert len(kube.patches) == 1


def test_a_fleet_of_a_held_lease_waits_and_its_lease_is_read_once_per_retry_period() -> None:
    kube, clock = FakeKube(), Clock()
    kube.leases["specfleet-shard-0-of-3"] = {
        "spec": {"holderIdentity": "them", "renewTime": "t1", "leaseDurationSeconds": 15}
    }
    shards = gate(kube, clock=clock)
    names = names_in(1, 2, 2)
    for name in names:
        shards.observe(fleet(name, "ops/specfleet-shard-0-of-3@them#1"), deleted=False)
        assert not asyncio.run(shards.owns(("default", name)))
    assert kube.reads == ["specfleet-shard-0-of-3"] and kube.patches == []
    assert len(shards.queue) == 2  # looked at again after a retry period
    clock.now += 16  # read again, unchanged since 16 s on this clock: expired
    assert not asyncio.run(shards.owns(("default", names[0])))
    assert len(kube.patches) == 1 and kube.reads == ["specfleet-shard-0-of-3"] * 2


def test_a_refused_stamp_writes_nothing_else_and_looks_again() -> None:
    kube = FakeKube()
    kube.conflict = True
    shards = gate(kube, Shard(0, 1))
    shards.observe(fleet("llama"), deleted=False)
    assert not asyncio.run(shards.owns(("default", "llama")))  # BASE is my own Lease: claimed, but refused
    assert kube.reads == [] and shards.owned == set() and len(shards.queue) == 1


def test_a_new_term_stamps_again_before_acting() -> None:
    kube = FakeKube()
    shards = gate(kube, Shard(0, 1))
    shards.observe(fleet("llama", shards.me.render()), deleted=False)
    assert asyncio.run(shards.owns(("default", "llama")))
    shards.end_term()
    shards.begin_term()
    assert not asyncio.run(shards.owns(("default", "llama")))
    assert Stamp.parse(kube.patches[-1][1]["metadata"]["annotations"][OWNER_ANNOTATION]) == shards.me
    assert shards.me.term == 2


def test_a_fleet_pinned_elsewhere_is_released_then_forgotten() -> None:
    kube = FakeKube()
    shards = gate(kube)
    name = names_in(1, 2, 1)[0]
    shards.observe(fleet(name, shards.me.render(), labels={SHARD_LABEL: "0"}), deleted=False)
    assert ("default", name) in shards.store.sdeps  # kept: it carries my stamp, to be released
    relabelled = fleet(name, labels={SHARD_LABEL: "0"}, version="9")  # someone else removed my stamp meanwhile
    assert shards.observe(relabelled, deleted=False) == ("default", name)  # dropped now: queued, to be forgotten
    shards.observe(fleet(name, shards.me.render(), labels={SHARD_LABEL: "0"}), deleted=False)
    assert not asyncio.run(shards.owns(("default", name)))
    assert kube.patches[-1][1]["metadata"] == {"resourceVersion": "7", "annotations": {OWNER_ANNOTATION: "released"}}
    assert ("default", name) not in shards.store.sdeps and not shards.keeps_children_of(("default", name))


def test_a_released_fleet_is_stamped_at_once_by_its_shard_without_reading_any_lease() -> None:
    kube = FakeKube()
    shards = gate(kube)
    name = names_in(1, 2, 1)[0]
    shards.observe(fleet(name, "released"), deleted=False)
    assert not asyncio.run(shards.owns(("default", name)))
    assert (
        kube.reads == [] and Stamp.parse(kube.patches[-1][1]["metadata"]["annotations"][OWNER_ANNOTATION]) == shards.me
    )


def test_a_fleet_pinned_here_after_its_children_were_dropped_gets_them_listed() -> None:
    kube = FakeKube()
    shards = gate(kube)
    name = names_in(0, 2, 1)[0]
    shards.observe(fleet(name), deleted=False)  # another shard's: dropped
    kube.children = [child("Deployment", f"{name}-stable", name)]
    shards.observe(fleet(name, shards.me.render(), labels={SHARD_LABEL: "1"}), deleted=False)
    assert asyncio.run(shards.owns(("default", name)))
    assert list(shards.store.children("Deployment", ("default", name))) == [f"{name}-stable"]
    assert ("Deployment", f"{LABEL_NAME}={name},app.kubernetes.io/managed-by=specfleet") in kube.lists
    assert "InferencePool" not in {kind for kind, _ in kube.lists}  # without --inference-pools: not asked


def test_a_fleets_inferencepools_are_listed_once_their_crd_is_served() -> None:
    kube = FakeKube()
    kube.kinds.add("InferencePool")
    shards = gate(kube)
    shards.inference_pools = True  # specfleet run --inference-pools
    name = names_in(0, 2, 1)[0]
    shards.observe(fleet(name), deleted=False)
    kube.children = [child("InferencePool", f"{name}-stable", name)]
    shards.observe(fleet(name, shards.me.render(), labels={SHARD_LABEL: "1"}), deleted=False)
    assert asyncio.run(shards.owns(("default", name)))
    assert list(shards.store.children("InferencePool", ("default", name))) == [f"{name}-stable"]


def test_a_bad_pin_is_reported_once(caplog: Any) -> None:
    shards = gate(FakeKube())
    name = names_in(1, 2, 1)[0]
    for _ in range(3):
        shards.observe(fleet(name, labels={SHARD_LABEL: "9"}), deleted=False)
    assert [r.getMessage() for r in caplog.records].count(
        f"default/{name}: label {SHARD_LABEL}='9' names no shard of 2 (0..1): assigned by hash to 1"
    ) == 1


def test_without_leader_election_an_unstamped_fleet_costs_no_request_and_a_live_stamp_is_left_alone() -> None:
    kube, clock = FakeKube(), Clock()
    shards = ShardGate(kube, Store(), WorkQueue(), Shard(), clock=clock)  # type: ignore[arg-type]
    shards.observe(fleet("plain"), deleted=False)
    assert asyncio.run(shards.owns(("default", "plain")))
    assert kube.reads == [] and kube.patches == [] and kube.lists == []
    kube.leases["specfleet-shard-0-of-2"] = {
        "spec": {"holderIdentity": "them", "renewTime": "t", "leaseDurationSeconds": 15}
    }
    shards.observe(fleet("held", "ops/specfleet-shard-0-of-2@them#1"), deleted=False)
    assert not asyncio.run(shards.owns(("default", "held")))
    assert kube.patches == []
    kube.leases["specfleet-shard-0-of-2"]["spec"]["holderIdentity"] = None  # released on a clean stop
    clock.now += 2
    assert not asyncio.run(shards.owns(("default", "held")))
    assert kube.patches[-1][1]["metadata"] == {"resourceVersion": "7", "annotations": {OWNER_ANNOTATION: None}}
    shards.observe(fleet("held", version="8"), deleted=False)
    assert asyncio.run(shards.owns(("default", "held")))


def test_a_controller_of_several_shards_without_leader_election_is_refused() -> None:
    controller = Controller(FakeKube(), OperatorOptions(shard=Shard(1, 2)))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="leader election"):
        controller.registry()


def standby(lease: str) -> float | None:
    return REGISTRY.get_sample_value(STANDBY_FLEETS, {"lease": lease})


def test_fleets_of_another_operator_are_left_to_it_counted_by_its_lease_and_said_once(caplog: Any) -> None:
    """Another release's (or a laptop run's) live Lease holds two fleets: this process stands by for both, its gauge
    says how many and whose, the warning comes once however often it looks again; a hand-over between its own
    release's shards is counted but is no other operator. When the other operator stops, the fleets are taken and
    the gauge goes."""
    kube, clock = FakeKube(), Clock()
    live = {"holderIdentity": "them", "renewTime": "t1", "leaseDurationSeconds": 15}
    kube.leases["other-release"] = {"spec": dict(live)}
    kube.leases["specfleet-shard-0-of-2"] = {"spec": dict(live)}
    shards = gate(kube, Shard(0, 1), clock=clock)
    for name in ("a", "b"):
        shards.observe(fleet(name, "ops/other-release@them#1"), deleted=False)
    shards.observe(fleet("c", "ops/specfleet-shard-0-of-2@them#1"), deleted=False)
    for _ in range(3):
        for name in ("a", "b", "c"):
            assert not asyncio.run(shards.owns(("default", name)))
        clock.now += 2
        kube.leases["other-release"]["spec"]["renewTime"] = kube.leases["specfleet-shard-0-of-2"]["spec"][
            "renewTime"
        ] = f"t{clock.now}"
    assert kube.patches == [] and shards.owned == set()
    assert standby("ops/other-release") == 2.0 and standby("ops/specfleet-shard-0-of-2") == 1.0
    said = [r for r in caplog.records if "another operator holds fleets here" in r.getMessage()]
    assert [(r.levelname, r.getMessage().split(";")[0]) for r in said] == [
        ("WARNING", "another operator holds fleets here: Lease ops/other-release held by them")
    ]

    kube.leases["other-release"]["spec"]["holderIdentity"] = None  # it stopped cleanly
    for name in ("a", "b"):
        assert not asyncio.run(shards.owns(("default", name)))  # claimed: stamped with this process's Lease
    assert [Stamp.parse(body["metadata"]["annotations"][OWNER_ANNOTATION]) for _, body in kube.patches] == [
        shards.me
    ] * 2
    assert standby("ops/other-release") is None and standby("ops/specfleet-shard-0-of-2") == 1.0
    shards.end_term()  # a lost Lease: it stands by for nothing it could see any more
    assert standby("ops/specfleet-shard-0-of-2") is None


def test_a_stamp_newer_than_the_last_lease_read_is_judged_from_a_new_read() -> None:
    """A holder that won the Lease after this process last read it, and stamped a fleet at once, is not taken for the
    holder it replaced: the cached read predates the stamp, so the Lease is read again (and the fleet left alone)."""
    kube, clock = FakeKube(), Clock()
    kube.leases["other-release"] = {"spec": {"holderIdentity": "a", "renewTime": "t1", "leaseDurationSeconds": 15}}
    shards = gate(kube, Shard(0, 1), clock=clock)
    shards.observe(fleet("llama", "ops/other-release@a#1"), deleted=False)
    assert not asyncio.run(shards.owns(("default", "llama")))  # a holds it: wait
    clock.now += 14.5
    assert not asyncio.run(shards.owns(("default", "llama")))  # read again: unchanged for 14.5 s, still a's
    clock.now += 1  # b takes the expired Lease over and stamps the fleet before this process reads the Lease again
    kube.leases["other-release"] = {"spec": {"holderIdentity": "b", "renewTime": "t2", "leaseDurationSeconds": 15}}
    shards.observe(fleet("llama", "ops/other-release@b#1", version="8"), deleted=False)
    assert not asyncio.run(shards.owns(("default", "llama")))
    assert kube.patches == [] and kube.reads == ["other-release"] * 3


def test_a_new_fleet_where_another_operator_holds_fleets_is_left_to_it_for_a_lease_duration(caplog: Any) -> None:
    """The operator that was there first stamps a new fleet at once; this one, standing by for that operator's
    fleets in the namespace, leaves the new one for a lease duration (then takes it, should nobody have: the other
    may not watch it). Elsewhere, and where no other operator holds fleets, a new fleet is stamped at once."""
    caplog.set_level(logging.INFO, "specfleet.shards")
    kube, clock = FakeKube(), Clock()
    kube.leases["other-release"] = {"spec": {"holderIdentity": "them", "renewTime": "t1", "leaseDurationSeconds": 15}}
    shards = gate(kube, Shard(0, 1), clock=clock)
    shards.observe(fleet("held", "ops/other-release@them#1"), deleted=False)
    assert not asyncio.run(shards.owns(("default", "held")))
    elsewhere = fleet("elsewhere")
    elsewhere["metadata"]["namespace"] = "team-b"
    for new in (fleet("new"), elsewhere):
        shards.observe(new, deleted=False)
    assert not asyncio.run(shards.owns(("default", "new")))
    assert not asyncio.run(shards.owns(("team-b", "elsewhere")))
    assert [key for key, _ in kube.patches] == [("team-b", "elsewhere")]  # stamped at once: nobody else's namespace
    clock.now += 14
    kube.leases["other-release"]["spec"]["renewTime"] = "t2"
    assert not asyncio.run(shards.owns(("default", "new")))
    clock.now += 1  # nobody stamped it within a lease duration
    assert not asyncio.run(shards.owns(("default", "new")))
    assert [key for key, _ in kube.patches] == [("team-b", "elsewhere"), ("default", "new")]
    said = [r.getMessage() for r in caplog.records if "is new and another operator" in r.getMessage()]
    assert said == [
        "shard 0/1: default/new is new and another operator holds fleets in its namespace: left to it for 15 s"
    ]

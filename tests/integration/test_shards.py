"""Several operator processes on the dev cluster. Two shards (`specfleet run --shards 2 --shard 0|1`, each with leader
election): each reconciles and stamps only the fleets that hash to it; a SIGKILLed shard's fleets are taken over by a
resized operator (`--shards 1`) only once its Lease expired, the live shard's never while it holds its Lease, and at
once when it shuts down cleanly (its Lease released). Two plain `specfleet run` on one namespace, and a third with
another Lease (another release): one writer, the others stand by and say so, and take over once it died.
Assertions are on the stamps, the Leases, status observedGeneration, the operators' logs and metrics."""

import re
import urllib.request
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import kubernetes
import pytest

from specfleet.sharding import OWNER_ANNOTATION, Stamp, hash_shard
from specfleet_workshop.devcluster.cluster import ClusterInfo

from fleetkit import Fleet, Operator, free_port, sdep, wait_for

pytestmark = pytest.mark.integration

BASE = "specfleet-shards"
LEASE_SECONDS = 15.0
"""`LeaderElection.lease_duration`: how long a Lease stays unrenewed before another process may take it."""
SHARD_TIMEOUT = 120.0
LOG_TIME = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]")


def fleet_names(namespace: str, per_shard: int = 3) -> dict[int, list[str]]:
    """Three fleet names for each of two shards, by the hash every process agrees on."""
    names: dict[int, list[str]] = {0: [], 1: []}
    for i in range(100):
        shard = hash_shard(namespace, f"fleet-{i}", 2)
        if len(names[shard]) < per_shard:
            names[shard].append(f"fleet-{i}")
    return names


def shard_operator(cluster: ClusterInfo, namespace: str, log: Path, shards: int, shard: int, *more: str) -> Operator:
    election = ("--shards", str(shards), "--shard", str(shard), "--leader-election", f"{namespace}/{BASE}")
    return Operator(cluster, namespace, log, extra=(*election, *more))


def two_shards_with(
    fleets: list[str],
    cluster: ClusterInfo,
    namespace: str,
    fleet: Fleet,
    operators: list[Operator],
    logs: Path,
    *shard0_args: str,
) -> tuple[Operator, Operator]:
    """Shards 0 and 1 of 2 running (each with leader election), then `fleets` applied: one replica each."""
    shard0 = shard_operator(cluster, namespace, logs / "shard0.log", 2, 0, *shard0_args)
    shard1 = shard_operator(cluster, namespace, logs / "shard1.log", 2, 1)
    operators += [shard0, shard1]
    for running in operators:
        running.start()
    for name in fleets:
        fleet.apply(sdep(name, replicas=1, engine={"tensorParallelSize": 1}))
    return shard0, shard1


@pytest.fixture
def operators(
    dev_cluster: ClusterInfo, crd_installed: None, namespace: str, tmp_path: Path
) -> Iterator[list[Operator]]:
    """Every operator the test starts, stopped afterwards whatever happened."""
    started: list[Operator] = []
    yield started
    for running in started:
        running.stop()


def stamp_of(fleet: Fleet, name: str) -> Stamp | None:
    return Stamp.parse((fleet.get(name)["metadata"].get("annotations") or {}).get(OWNER_ANNOTATION))


def lease(fleet: Fleet, name: str) -> Any:
    """The Lease's spec (holder_identity, renew_time as an aware datetime, ...)."""
    return (
        kubernetes.client.CoordinationV1Api(fleet.custom.api_client).read_namespaced_lease(name, fleet.namespace).spec
    )


def claimed_at(operator: Operator, namespace: str, name: str, what: str = "claimed") -> datetime | None:
    """When the operator's log says it stamped (or `what`) the fleet (its local time, as the operator wrote it)."""
    for line in operator.log.read_text().splitlines():
        if f"{what} {namespace}/{name} " in line and (match := LOG_TIME.match(line)):
            return datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f").astimezone()
    return None


def converged(fleet: Fleet, name: str) -> bool:
    body = fleet.get(name)
    status = body.get("status") or {}
    return status.get("phase") == "Healthy" and status.get("observedGeneration") == body["metadata"]["generation"]


def metric(port: int, series: str) -> float | None:
    """One series' value from the operator's /metrics (`name` or `name{label="value"}`); None when absent."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return next((float(line.split()[-1]) for line in text.splitlines() if line.startswith(f"{series} ")), None)


def owned_fleets(port: int) -> float | None:
    return metric(port, "specfleet_owned_fleets")


def test_two_shards_split_the_fleets_and_hand_them_over_safely(
    dev_cluster: ClusterInfo, namespace: str, fleet: Fleet, operators: list[Operator], tmp_path: Path
) -> None:
    names = fleet_names(namespace)
    metrics = free_port()
    everyone = names[0] + names[1]
    shard0, shard1 = two_shards_with(
        everyone, dev_cluster, namespace, fleet, operators, tmp_path, "--metrics-port", str(metrics)
    )

    # each fleet is reconciled, and stamped by the shard it hashes to; neither shard claims the other's
    for shard, running in ((0, shard0), (1, shard1)):
        for name in names[shard]:
            wait_for(f"{name} Healthy", lambda name=name: converged(fleet, name), SHARD_TIMEOUT)
            stamp = stamp_of(fleet, name)
            assert stamp is not None and stamp.lease == f"{BASE}-shard-{shard}-of-2", stamp
            assert claimed_at(running, namespace, name) is not None
            other = shard1 if running is shard0 else shard0
            assert f"{namespace}/{name} " not in other.log.read_text()  # never kept, so never even looked at
    assert wait_for("shard 0's owned-fleets gauge", lambda: owned_fleets(metrics) == 3.0)
    stamps = {name: stamp_of(fleet, name) for name in names[0] + names[1]}

    # SIGKILL shard 1, and resize to one shard: the new process takes shard 1's fleets only once its Lease expired
    shard1.kill()
    last_renewal = lease(fleet, f"{BASE}-shard-1-of-2").renew_time
    resized = shard_operator(dev_cluster, namespace, tmp_path / "resized.log", 1, 0)
    operators.append(resized)
    resized.start()
    for name in names[1]:
        wait_for(f"{name} taken over", lambda name=name: (stamp_of(fleet, name) or stamps[name]).lease == BASE, 90)
        taken = wait_for(f"{name}'s claim logged", lambda name=name: claimed_at(resized, namespace, name), 30)
        assert (taken - last_renewal).total_seconds() >= LEASE_SECONDS, (taken, last_renewal)
    # ... and never shard 0's, whose Lease it saw held all along (it looked: the log says it waits)
    assert {name: stamp_of(fleet, name) for name in names[0]} == {name: stamps[name] for name in names[0]}
    assert all(f"{namespace}/{name} waits" in resized.log.read_text() for name in names[0])
    assert all(claimed_at(resized, namespace, name) is None for name in names[0])

    # a spec change reaches each fleet through its owner of the moment
    changed = [names[0][0], names[1][0]]
    for name in changed:
        fleet.patch_spec(name, {"rollout": {"steps": [{"weight": 50, "pause": {"duration": "3s"}}]}})
    for name in changed:
        wait_for(f"{name} to observe its new generation", lambda name=name: converged(fleet, name), SHARD_TIMEOUT)
    assert stamp_of(fleet, names[0][0]) == stamps[names[0][0]]

    # shard 0 stops cleanly: it releases its Lease, and the resized process takes its fleets at once
    stopped_at = datetime.now().astimezone()
    shard0.stop()
    assert not lease(fleet, f"{BASE}-shard-0-of-2").holder_identity, "a clean stop releases the Lease"
    for name in names[0]:
        wait_for(f"{name} taken over", lambda name=name: (stamp_of(fleet, name) or stamps[name]).lease == BASE, 60)
        taken = wait_for(f"{name}'s claim logged", lambda name=name: claimed_at(resized, namespace, name), 30)
        assert (taken - stopped_at).total_seconds() < LEASE_SECONDS, (taken, stopped_at)
    fleet.patch_spec(names[0][1], {"rollout": {"steps": [{"weight": 50, "pause": {"duration": "4s"}}]}})
    wait_for(f"{names[0][1]} to observe its new generation", lambda: converged(fleet, names[0][1]), SHARD_TIMEOUT)
    stamp = stamp_of(fleet, names[0][1])
    assert stamp is not None and stamp.lease == BASE
    # a stamp is metadata: the fleets whose spec never changed are still at generation 1, stamped twice, no canary
    for name in (names[0][2], names[1][1], names[1][2]):
        body = fleet.get(name)
        assert body["metadata"]["generation"] == 1 and not body["status"].get("canaryRevision"), body["status"]
        assert [entry["outcome"] for entry in body["status"].get("history") or []] == ["Created"]


def test_back_to_one_process_without_leader_election_keeps_off_live_shards(
    dev_cluster: ClusterInfo, namespace: str, fleet: Fleet, operators: list[Operator], tmp_path: Path
) -> None:
    """One process run with `--leader-election off` (as the chart ran one replica before election became the
    default) after the shards: no Lease of its own. It leaves every fleet to its shard while that shard's Lease is
    live, and unstamps and takes it once the shard stopped (released: at once; SIGKILLed: once the Lease expired)."""
    names = fleet_names(namespace, per_shard=2)
    shard0, shard1 = two_shards_with(names[0] + names[1], dev_cluster, namespace, fleet, operators, tmp_path)
    for name in names[0] + names[1]:
        wait_for(f"{name} Healthy and stamped", lambda name=name: converged(fleet, name) and stamp_of(fleet, name), 120)
    stamps = {name: stamp_of(fleet, name) for name in names[0] + names[1]}

    single = Operator(dev_cluster, namespace, tmp_path / "single.log", extra=("--leader-election", "off"))
    operators.append(single)
    single.start()
    wait_for("the single process to look at every fleet", lambda: all(
        f"{namespace}/{name} waits" in single.log.read_text() for name in names[0] + names[1]
    ))  # fmt: skip
    assert {name: stamp_of(fleet, name) for name in stamps} == stamps

    stopped_at = datetime.now().astimezone()
    shard0.stop()  # releases its Lease: its fleets are unstamped and taken at once
    for name in names[0]:
        wait_for(f"{name} unstamped", lambda name=name: stamp_of(fleet, name) is None, 60)
        taken = wait_for(f"{name}'s claim logged", lambda name=name: claimed_at(single, namespace, name), 30)
        assert (taken - stopped_at).total_seconds() < LEASE_SECONDS
    fleet.patch_spec(names[0][0], {"rollout": {"steps": [{"weight": 50, "pause": {"duration": "3s"}}]}})
    wait_for(f"{names[0][0]} to observe its new generation", lambda: converged(fleet, names[0][0]), SHARD_TIMEOUT)
    assert {name: stamp_of(fleet, name) for name in names[1]} == {name: stamps[name] for name in names[1]}

    shard1.kill()
    last_renewal = lease(fleet, f"{BASE}-shard-1-of-2").renew_time
    for name in names[1]:
        wait_for(f"{name} unstamped", lambda name=name: stamp_of(fleet, name) is None, 90)
        taken = wait_for(f"{name}'s claim logged", lambda name=name: claimed_at(single, namespace, name), 30)
        assert (taken - last_renewal).total_seconds() >= LEASE_SECONDS, (taken, last_renewal)
    fleet.patch_spec(names[1][0], {"rollout": {"steps": [{"weight": 50, "pause": {"duration": "3s"}}]}})
    wait_for(f"{names[1][0]} to observe its new generation", lambda: converged(fleet, names[1][0]), SHARD_TIMEOUT)


def test_a_label_moves_a_fleet_to_the_shard_it_names(
    dev_cluster: ClusterInfo, namespace: str, fleet: Fleet, operators: list[Operator], tmp_path: Path
) -> None:
    """`specfleet.io/shard` pins a fleet: the shard that has it releases it, the one it names stamps it and reconciles
    it with the children it had dropped as another shard's (listed on the way in, not created twice); a label that
    names no shard is ignored and said once."""
    name = fleet_names(namespace, per_shard=1)[0][0]
    shard0, shard1 = two_shards_with([name], dev_cluster, namespace, fleet, operators, tmp_path)
    wait_for(f"{name} Healthy", lambda: converged(fleet, name) and stamp_of(fleet, name), SHARD_TIMEOUT)
    assert (stamp_of(fleet, name) or Stamp("", "", "")).lease == f"{BASE}-shard-0-of-2"
    children = {n: d.metadata.uid for n, d in fleet.deployments().items()}

    fleet.kubectl("label", f"sdep/{name}", "specfleet.io/shard=7")  # no such shard: the hash still decides
    wait_for("the bad pin to be reported", lambda: "names no shard of 2" in shard0.log.read_text())
    fleet.kubectl("label", "--overwrite", f"sdep/{name}", "specfleet.io/shard=1")
    wait_for(
        f"{name} stamped by shard 1", lambda: (stamp_of(fleet, name) or Stamp("", "", "")).lease.endswith("-1-of-2")
    )
    released = wait_for("the release logged", lambda: claimed_at(shard0, namespace, name, "released"), 30)
    taken = wait_for("the claim logged", lambda: claimed_at(shard1, namespace, name), 30)  # logged after the stamp
    # at once, not after an expiry (shard 1 may even log its stamp before shard 0 logs the release it follows)
    assert (taken - released).total_seconds() < LEASE_SECONDS, (released, taken)
    fleet.patch_spec(name, {"rollout": {"steps": [{"weight": 50, "pause": {"duration": "3s"}}]}})
    wait_for(f"{name} to observe its new generation under shard 1", lambda: converged(fleet, name), SHARD_TIMEOUT)
    assert {n: d.metadata.uid for n, d in fleet.deployments().items()} == children
    assert shard0.log.read_text().count("names no shard of 2") == 1


def test_a_second_operator_on_the_same_fleets_stands_by_and_takes_over_when_the_first_dies(
    dev_cluster: ClusterInfo, namespace: str, fleet: Fleet, operators: list[Operator], tmp_path: Path
) -> None:
    """Two `specfleet run --namespace NS` without any election flag (a laptop run beside a running operator) elect one
    writer through the default Lease NS/specfleet; a third run with another Lease (another Helm release) finds the
    fleets stamped by a live operator and stands by for them. Both say so in their logs and metrics. A fleet created
    while the three run goes to the first too. When the writer is SIGKILLed, its fleets are stamped anew by one of the
    others, never before its Lease expired, and reconciled."""
    names = ["fleet-a", "fleet-b"]
    ports = {role: free_port() for role in ("first", "second", "other")}

    def run(role: str, *more: str) -> Operator:
        running = Operator(
            dev_cluster, namespace, tmp_path / f"{role}.log", extra=("--metrics-port", str(ports[role]), *more)
        )
        operators.append(running)
        running.start()
        return running

    first = run("first")
    for name in names:
        fleet.apply(sdep(name, replicas=1, engine={"tensorParallelSize": 1}))
    for name in names:
        wait_for(f"{name} Healthy and stamped", lambda name=name: converged(fleet, name) and stamp_of(fleet, name), 120)
    stamps = {name: stamp_of(fleet, name) for name in names}
    writer = {(s.namespace, s.lease, s.identity) for s in stamps.values() if s}
    assert len(writer) == 1 and next(iter(writer))[:2] == (namespace, "specfleet"), stamps  # the default Lease
    holder = next(iter(writer))[2]

    second, other = run("second"), run("other", "--leader-election", f"{namespace}/another-release")
    # the second competes for the same Lease and stands by entirely; the other holds its own, and leaves the fleets
    wait_for("the second to say who holds the Lease", lambda: f"held by {holder}" in second.log.read_text())
    standby = f'specfleet_standby_fleets{{lease="{namespace}/specfleet"}}'
    wait_for("the other's standby gauge", lambda: metric(ports["other"], standby) == 2.0)
    assert metric(ports["other"], "specfleet_leader") == 1.0 and owned_fleets(ports["other"]) == 0.0
    assert metric(ports["second"], "specfleet_leader") == 0.0
    # a new fleet: the other leaves it to the operator that was there first, which stamps it at once
    names.append("fleet-c")
    fleet.apply(sdep(names[2], replicas=1, engine={"tensorParallelSize": 1}))
    wait_for(f"{names[2]} Healthy and stamped", lambda: converged(fleet, names[2]) and stamp_of(fleet, names[2]), 120)
    stamps[names[2]] = stamp_of(fleet, names[2])
    assert stamps[names[2]] == stamps[names[0]], stamps
    # ... without the other even trying: it sees the new fleet at about the time the first does, and would race it
    assert f"{namespace}/{names[2]} changed while being stamped" not in other.log.read_text()
    assert wait_for("the first's owned-fleets gauge", lambda: owned_fleets(ports["first"]) == 3.0)
    wait_for("the other's standby gauge", lambda: metric(ports["other"], standby) == 3.0)
    fleet.patch_spec(names[0], {"rollout": {"steps": [{"weight": 50, "pause": {"duration": "3s"}}]}})
    wait_for(f"{names[0]} to observe its new generation", lambda: converged(fleet, names[0]), SHARD_TIMEOUT)
    assert {name: stamp_of(fleet, name) for name in names} == stamps  # reconciled by the first, stamped by nobody else
    for standing_by in (second, other):
        assert [name for name in names if claimed_at(standing_by, namespace, name)] == []

    # the writer dies: one of the others stamps each fleet, only once its Lease went unrenewed for a lease duration
    first.kill()
    last_renewal = lease(fleet, "specfleet").renew_time
    for name in names:
        wait_for(f"{name} taken over", lambda name=name: (stamp_of(fleet, name) or stamps[name]).identity != holder, 90)
        taken = wait_for(
            f"{name}'s claim logged",
            lambda name=name: claimed_at(second, namespace, name) or claimed_at(other, namespace, name),
            30,
        )
        assert (taken - last_renewal).total_seconds() >= LEASE_SECONDS, (taken, last_renewal)
    fleet.patch_spec(names[1], {"rollout": {"steps": [{"weight": 50, "pause": {"duration": "3s"}}]}})
    wait_for(f"{names[1]} to observe its new generation", lambda: converged(fleet, names[1]), SHARD_TIMEOUT)
    for name in names:  # one new writer each: neither of the two took a fleet the other had just stamped
        claims = [
            line
            for o in (second, other)
            for line in o.log.read_text().splitlines()
            if f"claimed {namespace}/{name} " in line
        ]
        assert len(claims) == 1, claims
    new_holder = lease(fleet, "specfleet").holder_identity
    assert new_holder not in (None, holder)  # the second took the default Lease over
    wait_for("every fleet owned by exactly one live process", lambda: (
        (owned_fleets(ports["second"]) or 0.0) + (owned_fleets(ports["other"]) or 0.0) == 3.0
    ))  # fmt: skip
    # the other said once that another operator holds these fleets, however often it looked again
    said = f"another operator holds fleets here: Lease {namespace}/specfleet held by {holder};"
    assert other.log.read_text().count(said) == 1

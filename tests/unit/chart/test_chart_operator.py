"""Operator behaviour the chart relies on: Lease leader election (on by default), per-fleet gauges.

The Lease is kept in a fake API (one object, resourceVersion preconditions like the API server's) and
time is a fake clock, so expiry is tested without waiting for it.
"""

import asyncio
import copy
import logging
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic.exceptions import ConflictError

from specfleet.api.status import Phase
from specfleet.controller.handlers import LEASE_API_VERSION, LeaderElection, Leadership, choose_election
from specfleet.controller.metrics import CANARY_WEIGHT, ROLLOUT_PHASE, SPEEDUP, FleetCollector


def _merge(target: dict[str, Any], patch: dict[str, Any]) -> None:
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


class FakeLeaseApi:
    """The three calls Leadership makes, on one Lease, with the API server's optimistic concurrency."""

    def __init__(self) -> None:
        self.lease: dict[str, Any] | None = None
        self.version = 0
        self.down = False

    def _check(self) -> None:
        if self.down:
            raise ApiException(status=503, reason="Service Unavailable")

    def read(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        assert (api_version, kind) == (LEASE_API_VERSION, "Lease")
        self._check()
        return copy.deepcopy(self.lease)

    def create(self, manifest: dict[str, Any]) -> None:
        self._check()
        if self.lease is not None:
            raise ConflictError(ApiException(status=409, reason="AlreadyExists"))
        self.version += 1
        self.lease = copy.deepcopy(manifest)
        self.lease["metadata"]["resourceVersion"] = str(self.version)

    def merge_patch(self, api_version: str, kind: str, namespace: str, name: str, body: dict[str, Any]) -> None:
        self._check()
        assert self.lease is not None
        if body["metadata"]["resourceVersion"] != self.lease["metadata"]["resourceVersion"]:
            raise ConflictError(ApiException(status=409, reason="Conflict"))
        self.version += 1
        _merge(self.lease, {k: v for k, v in body.items() if k != "metadata"})
        self.lease["metadata"]["resourceVersion"] = str(self.version)

    def hold(self, identity: str) -> None:
        """Someone else renews (a new renewTime each time)."""
        assert self.lease is not None
        self.version += 1
        self.lease["spec"] |= {"holderIdentity": identity, "renewTime": f"t{self.version}"}
        self.lease["metadata"]["resourceVersion"] = str(self.version)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def leadership(api: FakeLeaseApi, identity: str, clock: Clock) -> Leadership:
    election = LeaderElection("ops", "sf-specfleet", identity=identity, retry_period=0.001)
    return Leadership(api, election, clock)  # type: ignore[arg-type]


def test_parse_takes_namespace_slash_name() -> None:
    election = LeaderElection.parse("ops/sf-specfleet")
    assert (election.namespace, election.name) == ("ops", "sf-specfleet")
    assert election.identity and election.lease_duration > election.renew_deadline > election.retry_period
    for bad in ("sf-specfleet", "/x", "ops/", "a/b/c"):
        with pytest.raises(ValueError, match="NAMESPACE/NAME"):
            LeaderElection.parse(bad)


@pytest.mark.parametrize(
    ("flag", "namespaces", "pod_namespace", "lease"),
    [
        (None, ["team-b", "team-a"], "ops", ("team-a", "specfleet")),  # the same Lease whatever the flags' order
        (None, [], "ops", ("ops", "specfleet")),  # cluster-wide in a pod: its own namespace
        (None, [], None, ("default", "specfleet")),  # cluster-wide from a laptop
        ("ops/sf-specfleet", ["team-a"], None, ("ops", "sf-specfleet")),
    ],
)
def test_every_run_elects_unless_told_not_to(
    flag: str | None, namespaces: list[str], pod_namespace: str | None, lease: tuple[str, str]
) -> None:
    election = choose_election(flag, namespaces, pod_namespace)
    assert election is not None and (election.namespace, election.name) == lease
    assert choose_election("off", namespaces, pod_namespace) is None


def test_the_first_replica_creates_the_lease_and_the_second_sees_it_held() -> None:
    api, clock = FakeLeaseApi(), Clock()
    first, second = leadership(api, "a", clock), leadership(api, "b", clock)
    assert first.try_hold() == "a"
    assert api.lease is not None and api.lease["spec"]["holderIdentity"] == "a"
    assert api.lease["spec"]["leaseDurationSeconds"] == 15 and api.lease["spec"]["leaseTransitions"] == 0
    assert second.try_hold() == "a"
    clock.now += 14
    assert second.try_hold() == "a", "not expired yet: a's record has not changed for less than 15 s"


def test_the_holder_renews_without_a_transition() -> None:
    api, clock = FakeLeaseApi(), Clock()
    holder = leadership(api, "a", clock)
    holder.try_hold()
    assert api.lease is not None
    acquired = api.lease["spec"]["acquireTime"]
    clock.now += 2
    assert holder.try_hold() == "a"
    assert api.lease["spec"]["acquireTime"] == acquired and api.lease["spec"]["leaseTransitions"] == 0
    assert api.lease["metadata"]["resourceVersion"] == "2"


def test_a_lease_that_stops_changing_is_taken_over_after_its_duration() -> None:
    api, clock = FakeLeaseApi(), Clock()
    leadership(api, "a", clock).try_hold()
    waiting = leadership(api, "b", clock)
    assert waiting.try_hold() == "a"
    clock.now += 10
    api.hold("a")  # a renews: the 15 s count starts again
    assert waiting.try_hold() == "a"
    clock.now += 14.9
    assert waiting.try_hold() == "a"
    clock.now += 0.2
    assert waiting.try_hold() == "b"
    assert api.lease is not None and api.lease["spec"]["leaseTransitions"] == 1


def test_expiry_is_judged_on_the_local_clock_not_on_written_timestamps() -> None:
    api, clock = FakeLeaseApi(), Clock()
    leadership(api, "a", clock).try_hold()
    assert api.lease is not None
    api.lease["spec"]["renewTime"] = "1999-01-01T00:00:00.000000Z"  # a skewed clock wrote this
    assert leadership(api, "b", clock).try_hold() == "a"


def test_a_released_lease_is_taken_at_once() -> None:
    api, clock = FakeLeaseApi(), Clock()
    holder, waiting = leadership(api, "a", clock), leadership(api, "b", clock)
    holder.try_hold()
    assert waiting.try_hold() == "a"
    holder.release()
    assert api.lease is not None and "holderIdentity" not in api.lease["spec"]
    assert waiting.try_hold() == "b"
    holder.release()  # no longer ours: left alone
    assert api.lease["spec"]["holderIdentity"] == "b"


def test_losing_a_race_is_not_holding() -> None:
    api, clock = FakeLeaseApi(), Clock()
    holder = leadership(api, "a", clock)
    holder.try_hold()
    original_read = api.read

    def read_then_someone_renews(*args: str) -> dict[str, Any] | None:
        seen = original_read(*args)
        api.hold("a")  # the object changes between our read and our patch
        return seen

    api.read = read_then_someone_renews  # type: ignore[method-assign]
    assert holder.try_hold() is None


async def _run_until(task_done: asyncio.Event, run: asyncio.Task[None]) -> None:
    try:
        await asyncio.wait_for(task_done.wait(), timeout=5)
    finally:
        run.cancel()
        await asyncio.gather(run, return_exceptions=True)


class Workers:
    """Records start/stop calls of the leadership loop and lets a test wait for each."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.started, self.stopped = asyncio.Event(), asyncio.Event()

    def start(self) -> None:
        self.calls.append("start")
        self.started.set()

    async def stop(self) -> None:
        self.calls.append("stop")
        self.stopped.set()


def test_run_starts_workers_on_winning_and_stops_them_when_renewals_fail() -> None:
    async def scenario() -> list[str]:
        api, clock = FakeLeaseApi(), Clock()
        workers = Workers()
        run = asyncio.create_task(leadership(api, "a", clock).run(workers.start, workers.stop))
        await asyncio.wait_for(workers.started.wait(), timeout=5)
        api.down = True
        await asyncio.sleep(0.05)
        assert not workers.stopped.is_set(), "an API hiccup shorter than the renew deadline keeps the workers"
        clock.now += 10
        await _run_until(workers.stopped, run)
        return workers.calls

    assert asyncio.run(scenario()) == ["start", "stop"]


def test_run_stops_at_once_when_another_replica_holds_the_lease() -> None:
    async def scenario() -> list[str]:
        api, clock = FakeLeaseApi(), Clock()
        workers = Workers()
        run = asyncio.create_task(leadership(api, "a", clock).run(workers.start, workers.stop))
        await asyncio.wait_for(workers.started.wait(), timeout=5)
        api.hold("b")  # e.g. this replica was frozen past its lease and b took over
        await _run_until(workers.stopped, run)
        return workers.calls

    assert asyncio.run(scenario()) == ["start", "stop"]


def test_a_replica_that_finds_the_lease_held_says_who_holds_it_once_per_holder(caplog: Any) -> None:
    caplog.set_level(logging.INFO, "specfleet.handlers")

    async def scenario() -> list[str]:
        api, clock = FakeLeaseApi(), Clock()
        leadership(api, "a", clock).try_hold()
        reads, read = [0], api.read

        def counted(*args: Any) -> Any:
            reads[0] += 1
            return read(*args)

        async def looked(times: int) -> None:
            while reads[0] < times:
                await asyncio.sleep(0.001)

        api.read = counted  # type: ignore[method-assign]
        workers = Workers()
        run = asyncio.create_task(leadership(api, "b", clock).run(workers.start, workers.stop))
        await asyncio.wait_for(looked(20), timeout=5)
        api.hold("c")  # another replica took over meanwhile
        await asyncio.wait_for(looked(40), timeout=5)
        run.cancel()
        await asyncio.gather(run, return_exceptions=True)
        return workers.calls

    assert asyncio.run(scenario()) == []
    said = [r.getMessage().split(":")[0] for r in caplog.records if "stands by" in r.getMessage()]
    assert said == ["lease ops/sf-specfleet held by a", "lease ops/sf-specfleet held by c"]


def test_fleet_gauges_follow_the_store() -> None:
    objects = [
        {"metadata": {"namespace": "ns", "name": "llama"}, "status": {"phase": "Paused", "canaryWeight": 25}},
        {"metadata": {"namespace": "ns", "name": "fresh"}},
    ]
    families = {family.name: family for family in FleetCollector(lambda: objects).collect()}
    phases = {(s.labels["specfleet_io_name"], s.labels["phase"]): s.value for s in families[ROLLOUT_PHASE].samples}
    assert phases[("llama", "Paused")] == 1.0 and phases[("llama", "Healthy")] == 0.0
    assert phases[("fresh", "Pending")] == 1.0
    assert sum(v for (name, _), v in phases.items() if name == "llama") == 1.0
    assert len(phases) == 2 * len(Phase)
    weights = {s.labels["specfleet_io_name"]: s.value for s in families[CANARY_WEIGHT].samples}
    assert weights == {"llama": 25.0, "fresh": 0.0}
    assert all(s.labels["namespace"] == "ns" for s in families[CANARY_WEIGHT].samples)


def test_the_speedup_over_a_holdback_is_exported_with_its_bounds_and_absent_when_unmeasured() -> None:
    measured = {"estimate": 1.4, "lower": 1.3, "upper": 1.5, "time": "2026-12-01T00:00:00Z"}
    objects = [
        {"metadata": {"namespace": "ns", "name": "llama"}, "status": {"holdback": {"speedup": measured}}},
        {"metadata": {"namespace": "ns", "name": "plain"}, "status": {"holdback": {"message": "no holdback runs"}}},
    ]
    families = {family.name: family for family in FleetCollector(lambda: objects).collect()}
    samples = {(s.labels["specfleet_io_name"], s.labels["bound"]): s.value for s in families[SPEEDUP].samples}
    assert samples == {("llama", "estimate"): 1.4, ("llama", "lower"): 1.3, ("llama", "upper"): 1.5}

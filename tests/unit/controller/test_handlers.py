"""The kopf shell's pieces (controller/handlers.py), each on its own: a fleet's watch event queues it now, a
child's a moment later, the workers start and stop with the lease, the lifecycle starts them without one, and the
registry watches every kind in `CHILD_WATCHES`."""

import asyncio
import time
from typing import Any

import kopf
import pytest

from specfleet.api.vocabulary import LABEL_NAME, LABEL_PREFLIGHT
from specfleet.controller import handlers
from specfleet.controller.handlers import (
    CHILD_EVENT_SECONDS,
    CHILD_WATCHES,
    ChildWatcher,
    Controller,
    FleetWatcher,
    Lifecycle,
    OperatorOptions,
    Workers,
)
from specfleet.controller.metrics import LEADER, FleetCollector
from specfleet.controller.queue import WorkQueue
from specfleet.controller.shards import ShardGate
from specfleet.controller.store import PREFLIGHT_POD, Key, Store
from specfleet.sharding import Shard

LLAMA = ("default", "llama")


def fleet_object(name: str = "llama") -> dict[str, Any]:
    return {"metadata": {"namespace": "default", "name": name, "resourceVersion": "1"}, "spec": {}}


def pod(owner: str, label: str = LABEL_NAME) -> dict[str, Any]:
    return {"kind": "Pod", "metadata": {"namespace": "default", "name": f"{owner}-pod", "labels": {label: owner}}}


def one_process() -> tuple[Store, WorkQueue[Key], ShardGate]:
    store, queue = Store(), WorkQueue[Key]()
    return store, queue, ShardGate(None, store, queue, Shard())  # type: ignore[arg-type]  # no Lease: no API call


def due_in(queue: WorkQueue[Key], key: Key) -> float:
    return queue._due[key] - time.monotonic()


def test_a_fleets_watch_event_keeps_it_and_queues_it_now_and_its_deletion_queues_it_to_be_forgotten() -> None:
    store, queue, gate = one_process()
    watcher = FleetWatcher(gate, queue)

    asyncio.run(watcher.on_event({"type": "ADDED", "object": fleet_object()}))
    assert LLAMA in store.sdeps and due_in(queue, LLAMA) <= 0

    asyncio.run(queue.get())
    queue.done(LLAMA)
    asyncio.run(watcher.on_event({"type": "DELETED", "object": fleet_object()}))
    assert LLAMA not in store.sdeps and LLAMA in queue._due


def test_a_childs_watch_event_is_stored_and_wakes_its_known_fleet_a_moment_later() -> None:
    store, queue, gate = one_process()
    store.put_sdep(fleet_object(), deleted=False)
    (pods,) = [w for w in CHILD_WATCHES if w.kind == "Pod"]
    watcher = ChildWatcher(pods, gate, store, queue)

    asyncio.run(watcher.on_event({"type": "ADDED", "object": pod("llama")}))
    asyncio.run(watcher.on_event({"type": "ADDED", "object": pod("unknown")}))

    assert list(store.children("Pod", LLAMA)) == ["llama-pod"]
    assert 0 < due_in(queue, LLAMA) <= CHILD_EVENT_SECONDS
    assert ("default", "unknown") not in queue._due  # no fleet of that name: nothing to look at


def test_a_preflight_pod_names_its_fleet_by_its_own_label() -> None:
    store, queue, gate = one_process()
    store.put_sdep(fleet_object(), deleted=False)
    (preflight,) = [w for w in CHILD_WATCHES if w.kind == PREFLIGHT_POD]

    asyncio.run(ChildWatcher(preflight, gate, store, queue).on_event({"object": pod("llama", LABEL_PREFLIGHT)}))

    assert list(store.children(PREFLIGHT_POD, LLAMA)) == ["llama-pod"] and not store.children("Pod", LLAMA)


class IdleReconciler:
    def __init__(self) -> None:
        self.started = 0

    async def run_worker(self) -> None:
        self.started += 1
        await asyncio.Event().wait()


def test_workers_start_queue_every_kept_fleet_and_stop_cancelled() -> None:
    store, queue, gate = one_process()
    store.put_sdep(fleet_object(), deleted=False)
    reconciler = IdleReconciler()
    workers = Workers(reconciler, gate, store, queue, count=3)  # type: ignore[arg-type]

    async def term() -> tuple[bool, float, bool]:
        workers.start()
        await asyncio.sleep(0)
        leading = (workers.running, LEADER._value.get())
        await workers.stop()
        return leading[0], leading[1], workers.running

    running, leader, after = asyncio.run(term())
    assert running and leader == 1 and reconciler.started == 3 and LLAMA in queue._due
    assert not after and LEADER._value.get() == 0


def test_without_an_election_the_lifecycle_starts_the_workers_and_stops_them_at_cleanup(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(handlers, "INITIAL_SYNC_SECONDS", 0.0)
    store, queue, gate = one_process()
    workers = Workers(IdleReconciler(), gate, store, queue, count=1)  # type: ignore[arg-type]
    lifecycle = Lifecycle(workers, None, FleetCollector(list), None, Shard())

    async def run() -> tuple[bool, bool]:
        await lifecycle.configure(kopf.OperatorSettings())
        await asyncio.wait_for(lifecycle.background[0], 5)
        started = workers.running
        await lifecycle.stop()
        return started, workers.running

    assert asyncio.run(run()) == (True, False)


def test_the_registry_watches_fleets_and_every_child_kind_with_its_own_handler() -> None:
    registry = Controller(None, OperatorOptions(workers=1)).registry()  # type: ignore[arg-type]

    watched = {handler.id for handler in registry._watching.get_all_handlers()}

    assert watched == {"speculative_deployment", *(f"on_{w.kind.lower()}" for w in CHILD_WATCHES)} - {
        "on_inferencepool"
    }
    assert len(CHILD_WATCHES) == 6
    pooled = Controller(None, OperatorOptions(workers=1, inference_pools=True)).registry()  # type: ignore[arg-type]
    assert "on_inferencepool" in {handler.id for handler in pooled._watching.get_all_handlers()}


def test_a_status_only_event_does_not_cut_short_the_backoff_of_a_failing_fleet_but_a_change_does() -> None:
    """A failed pass writes `Synced=False` (and the status decided before the failing write): its own watch event
    must not make the fleet due at once, or the backoff would never wait. A change of spec or command still does."""
    store, queue, gate = one_process()
    failing = {LLAMA}
    watcher = FleetWatcher(gate, queue, backing_off=failing.__contains__)
    asyncio.run(watcher.on_event({"type": "ADDED", "object": {**fleet_object(), "status": {}}}))
    asyncio.run(queue.get())
    queue.done(LLAMA)
    queue.add(LLAMA, 40.0)  # the backoff's wait after the failure

    synced_false = {**fleet_object(), "status": {"conditions": [{"type": "Synced", "status": "False"}]}}
    synced_false["metadata"] = {**synced_false["metadata"], "resourceVersion": "2"}
    asyncio.run(watcher.on_event({"type": "MODIFIED", "object": synced_false}))
    assert due_in(queue, LLAMA) > 30  # still waits out the backoff
    assert store.sdeps[LLAMA]["metadata"]["resourceVersion"] == "2"  # but the store has the new status

    commanded = {**synced_false, "metadata": {**synced_false["metadata"], "annotations": {"specfleet.io/abort": ""}}}
    asyncio.run(watcher.on_event({"type": "MODIFIED", "object": commanded}))
    assert due_in(queue, LLAMA) <= 0  # a command: looked at now

    failing.clear()
    asyncio.run(queue.get())
    queue.done(LLAMA)
    queue.add(LLAMA, 40.0)
    asyncio.run(watcher.on_event({"type": "MODIFIED", "object": {**commanded, "status": {}}}))
    assert due_in(queue, LLAMA) <= 0  # not failing: every event wakes it, as before

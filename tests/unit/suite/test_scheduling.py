"""How the controller hands tests to workers: longest first, and the shortest test left queued behind a long one
(tests/testrun.py `ShortBehindLongScheduling`), driven as xdist's controller drives it."""

from types import SimpleNamespace
from typing import Any

from testrun import LONG_SECONDS, ShortBehindLongScheduling

SECONDS = {
    "demo": 500.0, "chaos": 380.0, "drift": 300.0, "crd": 20.0, "unit-a": 0.2, "unit-b": 0.1,
    "kubeapi-1@kubeapi": 0.02, "kubeapi-2@kubeapi": 0.02, "kubeapi-3@kubeapi": 0.02,
}  # fmt: skip
"""A run's record in the longest-first order (a group weighs its tests' sum): three long integration tests, a short
one, two unit tests and a group of three short unit tests (xdist's ids carry the group after `@`)."""


class Worker:
    """What the scheduler sees of an xdist worker: the tests sent to it, in order."""

    def __init__(self, name: str) -> None:
        self.gateway = SimpleNamespace(id=name)
        self.sent: list[str] = []
        self.shutting_down = False
        self.collection: list[str] = []

    def send_runtest_some(self, indexes: list[int]) -> None:
        self.sent += [self.collection[index] for index in indexes]

    def shutdown(self) -> None:
        self.shutting_down = True


def scheduler_over(workers: list[Worker]) -> ShortBehindLongScheduling:
    config: Any = SimpleNamespace(
        getvalue=lambda name: [f"{len(workers)}*popen"], option=SimpleNamespace(loadscopereorder=True)
    )
    scheduler = ShortBehindLongScheduling(config, expected=lambda nodeid: SECONDS[nodeid])
    for worker in workers:
        worker.collection = list(SECONDS)
        scheduler.add_node(worker)
        scheduler.add_node_collection(worker, worker.collection)
    scheduler.schedule()
    return scheduler


GROUP = [test for test in SECONDS if test.endswith("@kubeapi")]


def finish(scheduler: ShortBehindLongScheduling, worker: Worker, test: str) -> None:
    scheduler.mark_test_complete(worker, worker.collection.index(test))


def test_a_long_test_gets_the_shortest_left_queued_behind_it_and_a_short_one_the_longest() -> None:
    assert SECONDS["drift"] >= LONG_SECONDS > SECONDS["crd"]
    first, second = Worker("gw0"), Worker("gw1")
    scheduler = scheduler_over([first, second])
    # each worker starts one of the two longest (not the group with the most tests, as xdist would), with the
    # shortest tests left queued behind
    assert (first.sent, second.sent) == (["demo", *GROUP], ["chaos", "unit-b"])
    finish(scheduler, second, "chaos")  # now running unit-b, a short test: the longest left goes behind it
    assert second.sent[-1] == "drift"
    finish(scheduler, second, "unit-b")  # now running drift, a long test: the shortest left goes behind it
    assert second.sent[-1] == "unit-a"
    finish(scheduler, second, "unit-a")
    assert second.sent[-1] == "crd"
    assert sorted(first.sent + second.sent) == sorted(SECONDS)  # every test handed out once

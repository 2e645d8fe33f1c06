"""What the suite's conftests share: how the workers of one pytest-xdist run find each other, and how the
controller hands tests out."""

from collections.abc import Callable
from typing import Any

import pytest
from xdist.scheduler import LoadGroupScheduling

RUN_DIR = "SPECFLEET_TEST_RUN_DIR"
"""Environment variable naming a directory shared by the controller and every worker of one run."""
CLUSTER_STARTED = "cluster-started"
"""File in the run directory naming the dev cluster's state directory when this run started the cluster."""

LONG_SECONDS = 60.0
"""A worker running tests expected to take this long gets the shortest test left queued behind them."""


class ShortBehindLongScheduling(LoadGroupScheduling):
    """`--dist loadgroup`, except for which test is queued behind a long one.

    xdist keeps one test queued behind the one each worker runs (a worker needs the next test to finish the
    current one), taken from the front of the longest-first queue: the next-longest test then waited out a
    test of minutes while other workers went idle, and a run's last minutes went to one or two tests. Behind
    a long test goes the shortest test left; behind a short one, the longest.

    The queue is the collection's order (longest first, tests/conftest.py), not xdist's default reordering
    (`loadscopereorder`), which puts the groups with the most tests first: short unit groups started the run,
    and the worker done with its group first took the two longest tests, one queued behind the other."""

    def __init__(self, config: pytest.Config, log: Any = None, *, expected: Callable[[str], float]) -> None:
        config.option.loadscopereorder = False
        super().__init__(config, log)
        self.expected = expected

    def _assign_work_unit(self, node: Any) -> None:
        held = self.assigned_work.get(node, {})
        busy = sum(self.expected(nodeid) for unit in held.values() for nodeid, done in unit.items() if not done)
        if busy >= LONG_SECONDS and len(self.workqueue) > 1:
            self.workqueue.move_to_end(next(reversed(self.workqueue)), last=False)
        super()._assign_work_unit(node)

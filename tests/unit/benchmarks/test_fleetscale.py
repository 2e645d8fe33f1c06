"""fleetscale's creates: every fleet once, and paced when an arrival time is asked for."""

import threading
import time
from typing import Any

import fleetscale

NO_API: Any = None
"""The stub contender never calls the API."""


def contender(calls: dict[str, float]) -> fleetscale.Contender:
    lock = threading.Lock()

    def create(api: Any, namespace: str, name: str) -> None:
        with lock:
            assert name not in calls, f"{name} created twice"
            calls[name] = time.monotonic()

    return fleetscale.Contender("stub", ("g", "v1", "things"), create, lambda api, ns: None, lambda obj: True)


def test_paced_creates_make_every_fleet_once_none_before_its_time() -> None:
    calls: dict[str, float] = {}
    created: dict[str, float] = {}
    start = time.monotonic()
    fleetscale._create_all(contender(calls), NO_API, "ns", 40, created, arrival=2.0)
    assert sorted(calls) == sorted(created) == [f"scale-{i:04d}" for i in range(40)]
    for i in range(40):
        assert calls[f"scale-{i:04d}"] - start >= i * 2.0 / 40 - 0.01


def test_unpaced_creates_make_every_fleet_once() -> None:
    calls: dict[str, float] = {}
    fleetscale._create_all(contender(calls), NO_API, "ns", 40, {}, arrival=0.0)
    assert len(calls) == 40

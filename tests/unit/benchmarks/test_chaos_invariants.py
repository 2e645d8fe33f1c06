"""The chaos benchmark's invariant checker (benchmarks/chaos.py): it passes an ended canary that is in order
and names every way one can be out of order."""

from types import SimpleNamespace
from typing import Any

import pytest

import chaos


def deployment(name: str, track: str, revision: str, replicas: int = 1) -> Any:
    labels = {"specfleet.io/name": "c1", "specfleet.io/track": track, "specfleet.io/revision": revision}
    return SimpleNamespace(metadata=SimpleNamespace(name=name, labels=labels), spec=SimpleNamespace(replicas=replicas))


def service(name: str, track: str | None = "stable") -> Any:
    selector = {"specfleet.io/name": "c1", **({"specfleet.io/track": track} if track else {})}
    return SimpleNamespace(metadata=SimpleNamespace(name=name), spec=SimpleNamespace(selector=selector))


def ended(outcome: str, reason: str = "all steps passed", stable: str = "new") -> dict[str, Any]:
    history = [{"revision": "new", "outcome": outcome, "reason": reason}]
    return {"spec": {"replicas": 1}, "status": {"stableRevision": stable, "history": history}}


IN_ORDER = ([deployment("c1-stable", "stable", "new")], [service("c1")])


def test_a_promoted_good_canary_in_order_passes() -> None:
    canary = chaos.Canary("c1", "good", revision="new")
    assert chaos.check_invariants(canary, ended("Promoted"), *IN_ORDER) == []


@pytest.mark.parametrize(
    ("kind", "obj", "children", "expected"),
    [
        ("bad", ended("Promoted"), IN_ORDER, "outcome Promoted, undisturbed RolledBack"),
        ("good", ended("Promoted", reason="promoted by the user"), IN_ORDER, "promoted without every step passing"),
        ("good", ended("Promoted", stable="old"), IN_ORDER, "not at status.stableRevision"),
        (
            "good",
            ended("Promoted"),
            ([deployment("c1-stable", "stable", "new"), deployment("c1-canary", "canary", "new")], [service("c1")]),
            "Deployments",
        ),
        ("good", ended("Promoted"), ([deployment("c1-stable", "stable", "new", 3)], [service("c1")]), "replicas 3"),
        ("good", ended("Promoted"), ([deployment("c1-stable", "stable", "new")], [service("c1", None)]), "Service"),
        ("good", ended("Promoted"), ([deployment("c1-stable", "stable", "new")], []), "Service"),
        (
            "good",
            ended("Promoted"),
            ([deployment("c1-stable", "stable", "new")], [service("c1"), service("c1-canary", "canary")]),
            "other Services left",
        ),
    ],
)
def test_each_way_out_of_order_is_named(kind: str, obj: dict, children: tuple, expected: str) -> None:
    problems = chaos.check_invariants(chaos.Canary("c1", kind, revision="new"), obj, *children)
    assert any(expected in p for p in problems), problems


def test_an_outcome_recorded_twice_is_named() -> None:
    obj = ended("RolledBack")
    obj["status"]["history"] *= 2
    problems = chaos.check_invariants(chaos.Canary("c1", "bad", revision="new"), obj, *IN_ORDER)
    assert "2 history entries for canary new" in problems


ROUTED_SERVICES = [service("c1"), service("c1-stable")]


def test_a_routed_fleet_in_order_passes_with_its_stable_track_service_and_route() -> None:
    canary = chaos.Canary("c1", "good", routed=True, revision="new")
    route = chaos.route("c1", {"c1-stable": 100})
    assert chaos.check_invariants(canary, ended("Promoted"), IN_ORDER[0], ROUTED_SERVICES, route) == []


@pytest.mark.parametrize(
    ("route", "expected"),
    [
        (chaos.route("c1", {"c1-stable": 0, "c1-canary": 100}), "does not send everything to the stable track"),
        (chaos.route("c1", {"c1-stable": 70, "c1-canary": 30}), "does not send everything to the stable track"),
        (None, "does not send everything to the stable track"),
    ],
)
def test_a_route_left_pointing_at_the_canary_is_named(route: dict | None, expected: str) -> None:
    canary = chaos.Canary("c1", "good", routed=True, revision="new")
    problems = chaos.check_invariants(canary, ended("Promoted"), IN_ORDER[0], ROUTED_SERVICES, route)
    assert any(expected in p for p in problems), problems


def test_an_unrouted_fleet_keeps_no_track_service() -> None:
    problems = chaos.check_invariants(chaos.Canary("c1", "good", revision="new"), ended("Promoted"), IN_ORDER[0],
                                      ROUTED_SERVICES)  # fmt: skip
    assert any("other Services left: ['c1-stable']" in p for p in problems), problems

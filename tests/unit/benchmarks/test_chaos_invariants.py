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


def paused(canary: str = "new", stable: str = "old", history: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A fleet the operator has Paused with its canary live, as the run reads it."""
    return {
        "spec": {"replicas": 1},
        "status": {"phase": "Paused", "stableRevision": stable, "canaryRevision": canary, "history": history or []},
    }


HELD = [deployment("c1-stable", "stable", "old"), deployment("c1-canary", "canary", "new")]
PAUSE_REASON = "Prometheus errors for 10m: Prometheus at http://127.0.0.1:9: connection refused"


def gone(**fields: Any) -> Any:
    return chaos.Canary("c1", "prometheus-gone", revision="new", **{"paused": PAUSE_REASON, **fields})


def test_a_canary_held_by_a_pause_for_prometheus_errors_passes() -> None:
    assert chaos.check_paused(gone(), paused(), HELD) == []


@pytest.mark.parametrize(
    ("canary", "obj", "deployments", "expected"),
    [
        (
            chaos.Canary("c1", "good", revision="new", paused=PAUSE_REASON),
            paused(),
            HELD,
            "paused, undisturbed Promoted",
        ),
        (gone(paused="no conclusive data for 30m: ..."), paused(), HELD, "another reason than Prometheus errors"),
        (
            gone(paused="Prometheus errors for 10m: spec.prometheus.url 'http://127.0.0.1:9' is not admitted: ..."),
            paused(),
            HELD,
            "without asking the gone Prometheus",
        ),
        (gone(), paused(canary="other"), HELD, "the canary in status is other"),
        (gone(), paused(stable="new"), HELD, "promoted"),
        (gone(), paused(history=[{"revision": "new", "outcome": "RolledBack"}]), HELD, "already recorded"),
        (gone(), paused(), HELD[:1], "the canary Deployment is gone"),
        (gone(), paused(), HELD[1:], "the stable Deployment is not at status.stableRevision"),
    ],
)
def test_each_way_a_pause_is_out_of_order_is_named(canary: Any, obj: dict, deployments: list, expected: str) -> None:
    problems = chaos.check_paused(canary, obj, deployments)
    assert any(expected in p for p in problems), problems


def test_the_pause_is_read_from_the_progressing_condition_only_while_paused() -> None:
    condition = {
        "type": "Progressing",
        "reason": "AnalysisFailedPaused",
        "message": PAUSE_REASON + "; promote or abort",
    }
    assert chaos.paused_reason({"phase": "Paused", "conditions": [condition]}) == condition["message"]
    assert chaos.paused_reason({"phase": "Progressing", "conditions": [condition]}) is None


def test_a_pause_for_no_baseline_is_waited_out_not_aborted() -> None:
    condition = {"type": "Progressing", "reason": "NoBaseline", "message": "step 1/1 (50%): no baseline ..."}
    assert chaos.paused_reason({"phase": "Paused", "conditions": [condition]}) is None


def test_a_canary_whose_prometheus_is_gone_must_be_paused_then_aborted_under_the_default_fallbacks() -> None:
    assert chaos.expected("prometheus-gone", "default") == "Aborted"
    aborted = ended("Aborted", reason="aborted by the user", stable="old")
    in_order = ([deployment("c1-stable", "stable", "old")], [service("c1")])
    assert chaos.check_invariants(gone(), aborted, *in_order) == []
    never_paused = chaos.Canary("c1", "prometheus-gone", revision="new")
    assert "never paused" in " ".join(chaos.check_invariants(never_paused, aborted, *in_order))


def test_under_the_tolerant_fallbacks_a_canary_whose_prometheus_is_gone_is_rolled_back_unpaused() -> None:
    assert chaos.expected("prometheus-gone", "tolerant") == "RolledBack"
    canary = chaos.Canary(
        "c1", "prometheus-gone", revision="new", expected=chaos.expected("prometheus-gone", "tolerant")
    )
    rolled_back = ended("RolledBack", reason="Prometheus errors for 5m: ...", stable="old")
    assert (
        chaos.check_invariants(canary, rolled_back, [deployment("c1-stable", "stable", "old")], [service("c1")]) == []
    )


def test_a_canary_paused_that_should_have_ended_on_its_own_is_named_with_the_pause() -> None:
    canary = chaos.Canary("c1", "good", revision="new", paused="no conclusive data for 30m: error rate ...")
    aborted = ended("Aborted", reason="aborted by the user", stable="old")
    problems = chaos.check_invariants(canary, aborted, [deployment("c1-stable", "stable", "old")], [service("c1")])
    assert any("undisturbed Promoted" in p and "paused before: no conclusive data" in p for p in problems), problems


@pytest.mark.parametrize("fallbacks", ["default", "tolerant"])
def test_the_default_fallbacks_leave_the_analysis_to_the_api_servers_defaults(fallbacks: str) -> None:
    analysis = chaos.rollout_of(fallbacks)["analysis"]
    if fallbacks == "default":  # what a user who writes none gets: the CRD's defaults, not a copy of them
        assert "onNoData" not in analysis and "onProviderError" not in analysis
    else:
        assert analysis["onProviderError"] == {"after": "5m", "action": "Rollback"}
    assert chaos.parse_args([]).fallbacks == "default"


def test_faults_come_more_slowly_as_fleets_end_so_the_last_one_is_not_struck_by_all_of_them() -> None:
    assert chaos.fault_gap_factor(7, 7) == 1
    assert chaos.fault_gap_factor(7, 10) == 1  # waves wait their turn: never faster than --fault-every
    assert chaos.fault_gap_factor(7, 1) == 7
    assert chaos.fault_gap_factor(7, 0) == 7
    assert chaos.fault_gap_factor(7, 1, rounds=1) == 1  # a bounded deal: every kind strikes while canaries run


def test_the_end_of_a_fault_is_tried_again_until_it_succeeds_and_reported_when_it_never_does() -> None:
    calls: list[int] = []

    def flaky() -> None:
        calls.append(1)
        if len(calls) < 3:
            raise TimeoutError("timed out")

    errors: list[str] = []
    chaos.undoing(flaky, errors, pause=0)()
    assert len(calls) == 3 and errors == []

    def broken() -> None:
        raise TimeoutError("timed out")

    chaos.undoing(broken, errors, tries=2, pause=0)()
    assert errors and "could not be ended" in errors[0]

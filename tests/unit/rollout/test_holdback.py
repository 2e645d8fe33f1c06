"""Holdback (`rollout.holdback`): the control group's Deployment and traffic, the speed-up measured against it
from simulated pods (what a user has: a drafter's alpha, k and the load), and drift judged against it."""

from dataclasses import replace
from datetime import timedelta
from typing import Any

from specfleet.api.spec import Guardrails, SpeculativeDeploymentSpec, SpeculativeMethod
from specfleet.api.status import ConditionStatus, Phase, Speedup
from specfleet.api.vocabulary import ALWAYS_SERVED, LABEL_TRACK, LABEL_TRAFFIC, Track
from specfleet.judge import TrackEvidence, measurements, speedup
from specfleet.render.manifests import deployment, route_rules, service
from specfleet.render.manifests import revision as revision_of
from specfleet.rollout import FleetLook
from specfleet.rollout.drift import _against_holdback as against_holdback
from specfleet_workshop.sim.oracle import Setup, token_latency

import judge_roc
from rolloutkit import T0, Fleet, healthy_fleet, make_spec, measured, paying
from speckit import sdep

STEPS = [{"weight": 25, "pause": {"duration": "1m"}}, {"weight": 50, "pause": {"duration": "2m"}}]
GUARDS = Guardrails()
WINDOW = 300.0
SLICES = 6


def holdback_fleet(replicas: int = 4, **holdback: Any) -> Fleet:
    return healthy_fleet(replicas=replicas, rollout={"steps": STEPS, "holdback": {"replicas": 1, **holdback}})


def served(serving: dict[str, Any], fleet: Fleet) -> SpeculativeDeploymentSpec:
    return fleet.spec.with_serving(serving)


# -- the control group's Deployment and traffic ---------------------------------------------------------------


def test_the_holdback_serves_stables_config_without_speculation_on_its_share_of_the_replicas() -> None:
    fleet = holdback_fleet()
    decision = fleet.last
    assert (
        decision is not None
        and decision.target(Track.HOLDBACK) is not None
        and decision.target(Track.STABLE) is not None
    )
    assert (decision.target(Track.STABLE).replicas, decision.target(Track.HOLDBACK).replicas) == (3, 1)
    control = served(decision.target(Track.HOLDBACK).serving, fleet)
    assert control.speculative.method is SpeculativeMethod.NONE
    assert control.model == fleet.spec.model and control.engine == fleet.spec.engine
    assert fleet.status.holdback is not None and fleet.status.holdback.summary == "no speculation"
    assert fleet.status.phase is Phase.HEALTHY
    assert (fleet.status.ready_replicas.holdback, fleet.status.replicas) == (1, 4)
    assert "HoldbackStarted" in fleet.events


def test_the_fleet_service_keeps_the_holdback_only_once_every_ready_stable_pod_carries_the_label() -> None:
    fleet = Fleet(make_spec(replicas=4, rollout={"steps": STEPS, "holdback": {"replicas": 1}}))
    first = fleet.step()
    assert first.target(Track.HOLDBACK) is not None and not first.holdback_traffic  # stable's pods are not labelled yet
    assert fleet.converge().holdback_traffic


def test_the_stable_and_holdback_pods_are_labelled_and_selected_while_the_canary_has_no_traffic() -> None:
    fleet = sdep()
    stable = deployment(fleet, Track.STABLE, "r1", 3, always_served=True)["spec"]["template"]["metadata"]["labels"]
    canary = deployment(fleet, Track.CANARY, "r2", 1)["spec"]["template"]["metadata"]["labels"]
    assert stable[LABEL_TRAFFIC] == ALWAYS_SERVED and LABEL_TRAFFIC not in canary
    selector = service(fleet, canary_traffic=False, holdback_traffic=True)["spec"]["selector"]
    assert selector[LABEL_TRAFFIC] == ALWAYS_SERVED and LABEL_TRACK not in selector
    assert service(fleet, canary_traffic=False)["spec"]["selector"][LABEL_TRACK] == "stable"


def test_route_weights_give_the_holdback_its_share_beside_the_canary() -> None:
    fleet = sdep()
    rules = [{"backendRefs": [{"name": f"{fleet.metadata.name}-stable", "port": 8000}]}]
    weights = {
        ref["name"].rsplit("-", 1)[1]: ref["weight"] for ref in route_rules(fleet, rules, 25, 25)[0]["backendRefs"]
    }
    assert weights == {"stable": 50, "canary": 25, "holdback": 25}
    after = route_rules(fleet, rules, 0, 25)[0]["backendRefs"]
    assert {ref["name"].rsplit("-", 1)[1]: ref["weight"] for ref in after} == {"stable": 75, "holdback": 25}


def test_a_canary_shares_out_the_replicas_beside_the_holdback_which_keeps_serving() -> None:
    fleet = holdback_fleet()
    before = fleet.status.holdback
    fleet.change(
        replicas=4, rollout={"steps": STEPS, "holdback": {"replicas": 1}}, speculative={"numSpeculativeTokens": 2}
    )
    fleet.step()
    decision = fleet.converge()
    assert (
        decision.target(Track.CANARY) is not None
        and decision.target(Track.STABLE) is not None
        and decision.target(Track.HOLDBACK) is not None
    )
    assert (
        decision.target(Track.CANARY).replicas,
        decision.target(Track.STABLE).replicas,
        decision.target(Track.HOLDBACK).replicas,
    ) == (1, 2, 1)
    assert fleet.status.holdback is not None and before is not None
    assert fleet.status.holdback.revision == before.revision  # the control group is not part of the canary


def test_with_too_few_replicas_no_holdback_runs_and_status_says_why() -> None:
    fleet = holdback_fleet(replicas=1)
    assert fleet.last is not None and fleet.last.target(Track.HOLDBACK) is None
    assert (
        fleet.status.holdback is not None and "must exceed rollout.holdback.replicas" in fleet.status.holdback.message
    )
    assert fleet.last.target(Track.STABLE) is not None and fleet.last.target(Track.STABLE).replicas == 1


def promote(fleet: Fleet, **change: Any) -> None:
    """Change the spec and let the unguarded canary walk its steps until it is promoted and stable has rolled."""
    fleet.change(**change)
    target = revision_of(fleet.spec)
    for _ in range(12):
        fleet.converge()
        if fleet.status.phase is Phase.HEALTHY and fleet.status.stable_revision == target:
            return
        fleet.wait(130)
    raise AssertionError(f"not promoted: {fleet.status.phase}")


def test_previous_stable_reference_serves_what_stable_served_before_the_last_promotion() -> None:
    fleet = holdback_fleet(reference="PreviousStable")
    assert fleet.status.holdback is not None and fleet.status.holdback.summary == "no speculation"
    first = fleet.spec
    promote(
        fleet,
        replicas=4,
        rollout={"steps": STEPS, "holdback": {"replicas": 1, "reference": "PreviousStable"}},
        speculative={"numSpeculativeTokens": 2},
    )
    assert fleet.last is not None and fleet.last.target(Track.HOLDBACK) is not None
    assert served(fleet.last.target(Track.HOLDBACK).serving, fleet).speculative == first.speculative
    assert fleet.status.holdback is not None and fleet.status.holdback.summary == first.summary()


# -- the speed-up, from simulated pods ------------------------------------------------------------------------


def window_pairs(
    knobs: dict[str, Any], k: int | None, seed: int, count: int
) -> list[tuple[TrackEvidence, TrackEvidence]]:
    """`count` 5-minute windows of 3 stable pods (EAGLE-3 at depth k) and 1 holdback pod (no speculation),
    both with the user's `knobs` (acceptance, load per pod), each window also cut in SLICES slices."""
    stable = [judge_roc.engine("stable", knobs, seed + i, k) for i in range(3)]
    holdback = [judge_roc.engine("holdback", knobs, seed + 10, None)]
    shots = []
    for n in range(count * SLICES + 1):
        for pod in (*stable, *holdback):
            pod.advance_to(30.0 + n * WINDOW / SLICES)
        shots.append([judge_roc.snapshot([p.metrics for p in pods]) for pods in (stable, holdback)])

    def track(n: int, which: int, speculative: bool) -> TrackEvidence:
        first, last = n * SLICES, (n + 1) * SLICES
        whole = judge_roc.evidence(shots[last][which], shots[first][which], WINDOW, speculative)
        parts = [
            judge_roc.evidence(shots[i + 1][which], shots[i][which], WINDOW / SLICES, speculative)
            for i in range(first, last)
        ]
        return replace(whole, token_latency_slices=tuple(p.token_latency_mean for p in parts if p.token_latency_mean))

    return [(track(n, 0, True), track(n, 1, False)) for n in range(count)]


def oracle_speedup(knobs: dict[str, Any], k: int) -> float:
    setup = Setup(knobs={**judge_roc.BASE, **knobs})
    return token_latency(setup.config(0)) / token_latency(setup.config(k))


def test_a_good_drafter_at_low_load_is_surely_faster_by_what_the_oracle_says() -> None:
    knobs = {"acceptance": 0.8, "load": 4.0}
    ((stable, holdback),) = window_pairs(knobs, 4, seed=1, count=1)
    measured_speedup = speedup(stable, holdback, GUARDS, 0.99, T0)
    assert measured_speedup.lower is not None and measured_speedup.estimate is not None
    assert measured_speedup.lower > 1
    assert abs(measured_speedup.estimate / oracle_speedup(knobs, 4) - 1) < 0.1, measured_speedup.message


def test_a_deep_k_of_a_weak_drafter_at_high_load_is_surely_slower() -> None:
    knobs = {"acceptance": 0.3, "load": 20.0}
    assert oracle_speedup(knobs, 8) < 0.5  # what the user has: a config the oracle says hurts at this load
    ((stable, holdback),) = window_pairs(knobs, 8, seed=2, count=1)
    measured_speedup = speedup(stable, holdback, GUARDS, 0.99, T0)
    assert measured_speedup.upper is not None and measured_speedup.upper < 1, measured_speedup.message


def test_the_bounds_of_an_a_a_pair_hold_one_in_nearly_every_window() -> None:
    """No speculation on both tracks: the 99% bounds should exclude 1 in about 1% of windows."""
    knobs = {"load": 4.0}
    pairs = [pair for seed in range(3) for pair in window_pairs(knobs, None, seed=100 + 20 * seed, count=8)]
    wrong = [
        s.message
        for stable, holdback in pairs
        if (s := speedup(stable, holdback, GUARDS, 0.99, T0)).lower is not None and not s.lower <= 1 <= (s.upper or 0)
    ]
    assert len(pairs) == 24 and len(wrong) <= 2, wrong


def test_too_few_requests_measure_nothing_and_say_why() -> None:
    ((stable, holdback),) = window_pairs({"load": 0.05}, 4, seed=3, count=1)
    measured_speedup = speedup(stable, holdback, GUARDS, 0.99, T0)
    assert measured_speedup.estimate is None and "need" in measured_speedup.message


# -- drift against the control group ----------------------------------------------------------------------------

DRIFT_ROLLOUT = {
    "steps": [{"weight": 50, "pause": {"duration": "1m"}}],
    "analysis": {"interval": "1m", "window": "1m"},
    "drift": {"minDwell": "2m", "looks": 2},
    "holdback": {"replicas": 1},
}


def promoted_with_holdback(**drift: Any) -> Fleet:
    rollout = {**DRIFT_ROLLOUT, "drift": {**DRIFT_ROLLOUT["drift"], **drift}}
    fleet = healthy_fleet(replicas=4, rollout=rollout)
    fleet.guarded = True
    fleet.change(replicas=4, rollout=rollout, speculative={"numSpeculativeTokens": 6})
    fleet.step()
    fleet.converge()
    fleet.wait(60)
    ((stable, _),) = window_pairs({"acceptance": 0.5, "load": 8.0}, 6, seed=5, count=1)
    fleet.step(measured(fleet, 0.9).model_copy(update={"canary": measurements(stable)}))
    fleet.converge()
    assert fleet.status.phase is Phase.HEALTHY and fleet.status.stable_revision == revision_of(fleet.spec)
    return fleet


def look(fleet: Fleet, stable: TrackEvidence, holdback: TrackEvidence) -> None:
    fleet.now += timedelta(minutes=1)
    assert fleet.step().fleet_look_due
    assert fleet.status.stable_revision is not None
    seen = FleetLook(fleet.now, fleet.status.stable_revision, measurements(stable), stable, holdback)
    fleet.step_with(fleet_look=seen)


def test_load_past_where_speculation_pays_drifts_against_the_holdback_and_rolls_back_to_it() -> None:
    """Promoted at 8 requests/s per pod, the traffic grows to 35: alpha 0.5 at k=6 then loses to no speculation
    (the oracle says so), which the comparison with promotion cannot judge (4x the load) but the holdback can."""
    heavy = {"acceptance": 0.5, "load": 35.0}
    assert oracle_speedup(heavy, 6) < 1
    fleet = promoted_with_holdback(onDrift="Rollback")
    fleet.now += timedelta(minutes=3)  # past minDwell
    for stable, holdback in window_pairs(heavy, 6, seed=7, count=2):
        look(fleet, stable, holdback)
    assert paying(fleet) is ConditionStatus.FALSE
    assert fleet.status.holdback is not None and fleet.status.holdback.speedup is not None
    assert (fleet.status.holdback.speedup.upper or 2) < 1
    assert "TrafficShifted" in fleet.events and "SpeculationNotPaying" in fleet.events
    assert fleet.status.drift is not None and "against the holdback" in fleet.status.drift.message
    fleet.step()
    assert fleet.status.canary_revision is not None  # canarying back to the holdback's config
    assert fleet.last is not None and fleet.last.target(Track.CANARY) is not None
    assert served(fleet.last.target(Track.CANARY).serving, fleet).speculative.method is SpeculativeMethod.NONE


def test_a_fleet_that_keeps_beating_its_holdback_stays_paying() -> None:
    fleet = promoted_with_holdback()
    fleet.now += timedelta(minutes=3)
    for stable, holdback in window_pairs({"acceptance": 0.5, "load": 8.0}, 6, seed=9, count=2):
        look(fleet, stable, holdback)
    assert paying(fleet) is ConditionStatus.TRUE
    assert fleet.status.holdback is not None and (fleet.status.holdback.speedup.lower or 0) > 1


def test_a_fleet_never_canaried_is_judged_against_its_holdback_alone() -> None:
    """No promotion, so no reference from one: the control group still tells whether speculation pays."""
    rollout = {**DRIFT_ROLLOUT, "drift": {**DRIFT_ROLLOUT["drift"], "minDwell": "1h"}}
    fleet = healthy_fleet(replicas=4, rollout=rollout, speculative={"numSpeculativeTokens": 6})
    fleet.guarded = True
    for stable, holdback in window_pairs({"acceptance": 0.5, "load": 35.0}, 6, seed=11, count=2):
        look(fleet, stable, holdback)
    assert paying(fleet) is ConditionStatus.FALSE
    assert fleet.status.drift is not None and "judged against the holdback alone" in fleet.status.drift.message


def test_kubectl_specfleet_status_shows_the_holdback_and_its_speedup() -> None:
    import io

    from rich.console import Console

    from specfleet.cli.view import render_status

    fleet = promoted_with_holdback()
    fleet.now += timedelta(minutes=3)
    for stable, holdback in window_pairs({"acceptance": 0.5, "load": 8.0}, 6, seed=13, count=1):
        look(fleet, stable, holdback)
    obj = {
        "metadata": {"namespace": "ns", "name": "fleet"},
        "status": fleet.status.model_dump(mode="json", by_alias=True),
    }
    console = Console(file=io.StringIO(), width=200)
    console.print(render_status(obj))
    text = console.file.getvalue()  # type: ignore[attr-defined]
    measured = fleet.status.holdback.speedup if fleet.status.holdback else None
    assert measured is not None and measured.estimate is not None and measured.lower is not None
    assert "(1 ready)  no speculation" in text
    assert f"{measured.estimate:.3f}x ({measured.lower:.3f}-" in text


def test_paying_against_the_holdback_needs_the_bounds_not_the_estimates() -> None:
    """A speed-up of 1.05x whose bounds reach under 1 shows nothing; shown above 1 it is paying only at a load
    whose bounds are shown comparable; surely slower is drift unless stable's pods surely carried more."""

    def verdict(lower: float, upper: float, load: tuple[float, float]) -> bool | None:
        measured = Speedup(
            time=T0, estimate=(lower + upper) / 2, lower=lower, upper=upper, load_lower=load[0], load_upper=load[1]
        )
        return against_holdback(None, (), measured)[0]

    even, unsure, heavier = (0.9, 1.1), (0.7, 1.3), (1.3, 1.6)
    assert verdict(0.98, 1.12, even) is None
    assert verdict(1.01, 1.12, even) is False
    assert verdict(1.01, 1.12, unsure) is None
    assert verdict(0.80, 0.95, even) is True
    assert verdict(0.80, 0.95, unsure) is True
    assert verdict(0.80, 0.95, heavier) is None


def test_the_speedup_says_when_its_load_is_not_shown_comparable() -> None:
    """The holdback's pods measured at 0.8x stable's per-pod load on a few hundred requests: the load ratio's
    bounds reach past the comparable band, and the speed-up says so with them."""
    ((stable, holdback),) = window_pairs({"acceptance": 0.8, "load": 4.0}, 4, seed=13, count=1)
    lighter = replace(holdback, request_rate_per_pod=tuple(r * 0.8 for r in holdback.request_rate_per_pod))
    measured = speedup(stable, lighter, GUARDS, 0.99, T0)
    assert measured.load_lower is not None and measured.load_upper is not None
    assert measured.load_lower < measured.load_ratio < measured.load_upper  # type: ignore[operator]
    assert "not shown comparable" in measured.message

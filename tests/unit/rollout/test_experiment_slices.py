"""Experiments whose candidates are measured side by side, each on its own slice, through the pure state machine."""

from datetime import timedelta
from typing import Any

import pytest

from specfleet.api.status import Analysis, CandidateState, Outcome, Phase, Verdict
from specfleet.api.vocabulary import Command, Track
from specfleet.render.manifests import revision
from specfleet.rollout import ContainerCrash, Decision, TrackObservation

from rolloutkit import EXPERIMENT_ROLLOUT, Fleet, healthy_fleet, measured

REPLICAS = 8
"""The first step's 25% gives each candidate a slice of 2: three slices leave stable 2 of 8."""
WINDOW = timedelta(minutes=1)
"""EXPERIMENT_ROLLOUT's analysis window."""


def slices_fleet(*ks: int, replicas: int = REPLICAS, **spec: Any) -> Fleet:
    """A Healthy guarded fleet at k=4 whose spec now brings candidates k in `ks`."""
    fleet = healthy_fleet(replicas=replicas, rollout=EXPERIMENT_ROLLOUT, **spec)
    fleet.guarded = True
    fleet.change(
        replicas=replicas,
        rollout=EXPERIMENT_ROLLOUT,
        autoTune={"candidates": [{"numSpeculativeTokens": k} for k in ks]},
        **spec,
    )
    return fleet


def up(decision: Decision, *, but: dict[int, TrackObservation] | None = None) -> dict[int, TrackObservation]:
    """Every slice the decision asks for, with all its pods Ready (`but` overrides some)."""
    seen = {i: TrackObservation(t.revision, t.replicas, settled=True) for i, t in decision.candidates}
    return {**seen, **(but or {})}


def slice_analysis(
    fleet: Fleet, index: int, ratio: float, verdict: Verdict = Verdict.PASS, seconds: int = 60
) -> Analysis:
    """An analysis of candidate `index`'s slice: its mean per-token latency `ratio` x stable's."""
    experiment = fleet.status.experiment
    assert experiment is not None
    return measured(fleet, ratio, verdict, seconds, revision=experiment.candidates[index].revision)


def ready_for_a_window(fleet: Fleet) -> dict[int, TrackObservation]:
    """Start the experiment, bring every slice up, and let a whole window pass: the slices are due."""
    seen = up(fleet.step())
    fleet.step_with(candidates=seen)
    fleet.now += WINDOW
    assert fleet.step_with(candidates=seen).candidate_analyses_due
    return seen


def states(fleet: Fleet) -> list[CandidateState]:
    assert fleet.status.experiment is not None
    return [c.state for c in fleet.status.experiment.candidates]


def test_every_candidate_gets_its_own_slice_at_once_and_all_are_measured_over_the_same_window() -> None:
    fleet = slices_fleet(2, 3, 6)
    stable = fleet.status.stable_revision
    decision = fleet.step()
    experiment = fleet.status.experiment
    assert experiment is not None and experiment.side_by_side and "side by side" in experiment.mode
    assert states(fleet) == [CandidateState.MEASURING] * 3
    assert decision.target(Track.CANARY) is None and fleet.status.canary_revision is None
    assert [(i, t.replicas, t.serving["speculative"]["numSpeculativeTokens"]) for i, t in decision.candidates] == [
        (0, 2, 2),
        (1, 2, 3),
        (2, 2, 6),
    ]
    assert [t.revision for _, t in decision.candidates] == [revision(fleet.spec.candidate_spec(i)) for i in range(3)]
    assert (
        decision.target(Track.STABLE) is not None and decision.target(Track.STABLE).replicas == REPLICAS
    )  # nothing Ready to give way to yet

    seen = up(decision)
    decision = fleet.step_with(candidates=seen)
    assert (
        decision.target(Track.STABLE) is not None and decision.target(Track.STABLE).replicas == 2
    )  # stable gives way to Ready slice pods
    assert decision.canary_traffic and fleet.status.phase is Phase.PROGRESSING
    assert fleet.status.ready_replicas.canary == 6
    assert decision.candidate_analyses_due == ()  # a whole window first

    fleet.now += WINDOW
    decision = fleet.step_with(candidates=seen)
    assert decision.candidate_analyses_due == (0, 1, 2)  # all due at once: the same window for each
    analyses = {i: slice_analysis(fleet, i, ratio) for i, ratio in enumerate((0.9, 0.8, 0.95))}
    decision = fleet.step_with(candidates=seen, candidate_analyses=analyses)

    experiment = fleet.status.experiment
    assert experiment is not None and experiment.chosen == 1
    assert states(fleet) == [CandidateState.LOST, CandidateState.CHOSEN, CandidateState.LOST]
    assert [round(c.token_latency_ratio or 0, 3) for c in experiment.candidates] == [0.9, 0.8, 0.95]
    assert decision.candidates == ()  # the slices go; the winner is canaried through every step
    assert fleet.status.canary_revision == experiment.revision and fleet.status.stable_revision == stable
    assert (
        decision.target(Track.CANARY) is not None
        and decision.target(Track.CANARY).serving["speculative"]["numSpeculativeTokens"] == 3
    )
    assert not decision.canary_traffic  # the Service narrows to stable before the slices are deleted


def test_a_slice_that_fails_a_guardrail_goes_at_once_and_the_others_carry_on() -> None:
    fleet = slices_fleet(2, 3, 6)
    seen = ready_for_a_window(fleet)
    bad = {1: slice_analysis(fleet, 1, 1.4, Verdict.FAIL), 0: slice_analysis(fleet, 0, 0.9, Verdict.INCONCLUSIVE)}
    decision = fleet.step_with(candidates=seen, candidate_analyses=bad)
    assert states(fleet) == [CandidateState.MEASURING, CandidateState.FAILED, CandidateState.MEASURING]
    assert [i for i, _ in decision.candidates] == [0, 2]  # its Deployment goes; the others keep theirs
    assert "CandidateFailed" in fleet.events
    assert fleet.status.experiment is not None and "p95" in fleet.status.experiment.candidates[1].reason
    del seen[1]

    fleet.now += WINDOW / 2
    decision = fleet.step_with(candidates=seen)
    assert decision.candidate_analyses_due == (0, 2)
    passed = {0: slice_analysis(fleet, 0, 0.9), 2: slice_analysis(fleet, 2, 0.85)}
    decision = fleet.step_with(candidates=seen, candidate_analyses=passed)
    assert states(fleet) == [CandidateState.LOST, CandidateState.FAILED, CandidateState.CHOSEN]


def test_a_slice_that_passes_first_keeps_measuring_until_every_slice_passes_at_one_look() -> None:
    """A Pass needs evidence, so slices pass at different looks: the first to pass keeps measuring (and serving,
    so per-pod load stays what the others are measured at), and all are measured at the look where all pass."""
    fleet = slices_fleet(2, 3, 6)
    seen = ready_for_a_window(fleet)
    waiting = {i: slice_analysis(fleet, i, 0.95, Verdict.INCONCLUSIVE) for i in (1, 2)}
    decision = fleet.step_with(candidates=seen, candidate_analyses={0: slice_analysis(fleet, 0, 0.9), **waiting})
    assert states(fleet) == [CandidateState.MEASURING] * 3
    assert [i for i, _ in decision.candidates] == [0, 1, 2]
    assert decision.target(Track.STABLE) is not None and decision.target(Track.STABLE).replicas == 2
    fleet.now += timedelta(seconds=60)
    later = {i: slice_analysis(fleet, i, ratio, seconds=120) for i, ratio in ((0, 0.9), (1, 0.95), (2, 0.97))}
    fleet.step_with(candidates=seen, candidate_analyses=later)
    assert fleet.status.experiment is not None
    candidates = fleet.status.experiment.candidates
    assert [c.state for c in candidates].count(CandidateState.MEASURING) == 0
    assert len({c.looked_at for c in candidates}) == 1  # one look, one range for every ratio to stable


def test_half_a_window_of_passing_evidence_measures_nothing() -> None:
    fleet = slices_fleet(2, 3)
    seen = ready_for_a_window(fleet)
    halves = {i: slice_analysis(fleet, i, 0.9, seconds=30) for i in (0, 1)}  # Prometheus had half a window
    fleet.step_with(candidates=seen, candidate_analyses=halves)
    assert states(fleet) == [CandidateState.MEASURING] * 2


def test_a_slice_not_ready_within_the_progress_deadline_fails_alone() -> None:
    fleet = slices_fleet(2, 3)
    decision = fleet.step()
    pending = TrackObservation(
        decision.candidates[1][1].revision, 0, unschedulable="0/7 nodes: Insufficient amd.com/gpu"
    )
    seen = up(decision, but={1: pending})
    fleet.step_with(candidates=seen)
    fleet.now += timedelta(minutes=31)  # the default progressDeadline is 30m
    fleet.step_with(candidates=seen)
    assert states(fleet)[1] is CandidateState.FAILED
    experiment = fleet.status.experiment
    assert experiment is not None and "Insufficient amd.com/gpu" in experiment.candidates[1].reason


def test_an_oom_killed_slice_fails_before_any_analysis() -> None:
    fleet = slices_fleet(2, 3)
    decision = fleet.step()
    target = decision.candidates[0][1]
    oom = ContainerCrash("llama-candidate-0-x", "vllm", 1, oom_killed=True)
    seen = up(decision, but={0: TrackObservation(target.revision, 1, crashes=(oom,))})
    decision = fleet.step_with(candidates=seen)
    assert states(fleet) == [CandidateState.FAILED, CandidateState.MEASURING]
    experiment = fleet.status.experiment
    assert experiment is not None and "OOMKilled" in experiment.candidates[0].reason
    assert [i for i, _ in decision.candidates] == [1]


def test_an_abort_ends_a_side_by_side_experiment_and_holds_its_revision() -> None:
    fleet = slices_fleet(2, 3)
    seen = up(fleet.step())
    fleet.step_with(candidates=seen)
    fleet.commands[Command.ABORT.annotation] = "experiment@1"
    decision = fleet.step_with(candidates=seen)
    assert fleet.status.phase is Phase.ABORTED and decision.candidates == ()
    assert states(fleet) == [CandidateState.FAILED] * 2
    assert fleet.status.rejected_revision == revision(fleet.spec)
    assert fleet.status.history[-1].outcome is Outcome.ABORTED
    assert not decision.canary_traffic


@pytest.mark.parametrize(
    ("change", "observed", "why"),
    [
        ({"replicas": 3}, {}, "would leave stable none"),
        ({}, {"routed": True}, "HTTPRoute"),
        ({}, {"guarded": False}, "no Prometheus"),
    ],
)
def test_candidates_run_one_after_another_when_slices_cannot_and_the_mode_says_why(
    change: dict[str, Any], observed: dict[str, Any], why: str
) -> None:
    fleet = slices_fleet(2, 3, 6, **({"replicas": change["replicas"]} if change else {}))
    fleet.guarded = observed.get("guarded", True)
    decision = fleet.step_with(**{k: v for k, v in observed.items() if k == "routed"})
    experiment = fleet.status.experiment
    assert experiment is not None and not experiment.side_by_side
    assert "one after another" in experiment.mode and why in experiment.mode
    assert decision.candidates == () and fleet.status.canary_revision == experiment.candidates[0].revision


def test_a_new_drafter_among_the_candidates_is_checked_first_so_they_run_one_after_another() -> None:
    fleet = healthy_fleet(replicas=REPLICAS, rollout=EXPERIMENT_ROLLOUT)
    fleet.guarded = True
    drafters = [{"numSpeculativeTokens": 3}, {"model": "other/EAGLE3-drafter", "numSpeculativeTokens": 3}]
    fleet.change(replicas=REPLICAS, rollout=EXPERIMENT_ROLLOUT, autoTune={"candidates": drafters})
    fleet.step()
    experiment = fleet.status.experiment
    assert experiment is not None and not experiment.side_by_side and "preflight" in experiment.mode


def test_a_slice_ready_later_holds_the_first_window_so_every_slice_reads_the_same_one() -> None:
    fleet = slices_fleet(2, 3)
    decision = fleet.step()
    seen = up(decision)
    starting = {1: TrackObservation(seen[1].revision, 0)}
    fleet.step_with(candidates={**seen, **starting})
    fleet.now += timedelta(seconds=20)
    fleet.step_with(candidates=seen)  # slice 1 Ready 20 s after slice 0
    fleet.now += WINDOW - timedelta(seconds=20)
    assert fleet.step_with(candidates=seen).candidate_analyses_due == ()  # slice 0 has a window, slice 1 not yet
    fleet.now += timedelta(seconds=20)
    assert fleet.step_with(candidates=seen).candidate_analyses_due == (0, 1)


def test_slices_without_a_passing_analysis_fail_once_on_no_data_runs_out() -> None:
    fleet = slices_fleet(2, 3)
    seen = ready_for_a_window(fleet)
    unsure = {i: slice_analysis(fleet, i, 0.9, Verdict.INCONCLUSIVE) for i in (0, 1)}
    fleet.step_with(candidates=seen, candidate_analyses=unsure)
    assert states(fleet) == [CandidateState.MEASURING] * 2
    fleet.now += timedelta(minutes=30)  # the default onNoData.after
    decision = fleet.step_with(candidates=seen)
    assert states(fleet) == [CandidateState.FAILED] * 2
    experiment = fleet.status.experiment
    assert experiment is not None and "p95" in experiment.candidates[0].reason  # the last analysis's words
    assert fleet.status.phase is Phase.HEALTHY and decision.candidates == ()  # none measured: stable kept


def test_a_live_canary_is_superseded_and_drains_before_the_slices_count_as_ready() -> None:
    fleet = healthy_fleet(replicas=REPLICAS, rollout=EXPERIMENT_ROLLOUT)
    fleet.guarded = True
    fleet.change(replicas=REPLICAS, rollout=EXPERIMENT_ROLLOUT, speculative={"numSpeculativeTokens": 5})
    fleet.step()
    fleet.converge()
    canary = fleet.status.canary_revision
    assert canary is not None
    fleet.change(
        replicas=REPLICAS,
        rollout=EXPERIMENT_ROLLOUT,
        autoTune={"candidates": [{"numSpeculativeTokens": k} for k in (2, 3)]},
    )
    decision = fleet.step()
    assert fleet.status.canary_revision is None and fleet.status.retiring_revision == canary
    assert fleet.status.history[-1].outcome is Outcome.SUPERSEDED
    assert decision.keep_canary and not decision.canary_traffic  # traffic off the old canary before it goes
    seen = up(decision)
    fleet.step_with(candidates=seen)
    experiment = fleet.status.experiment
    assert experiment is not None and all(c.ready_at is None for c in experiment.candidates)
    fleet.now += timedelta(seconds=10)  # DRAIN: the old canary goes (its status write wakes the next pass)
    assert not fleet.step_with(candidates=seen).keep_canary and fleet.status.retiring_revision is None
    decision = fleet.step_with(candidates=seen)
    experiment = fleet.status.experiment
    assert decision.canary_traffic
    assert experiment is not None and all(c.ready_at == fleet.now for c in experiment.candidates)

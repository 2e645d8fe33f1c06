"""Experiments over `spec.autoTune.candidates` and the preflight gate, through the pure state machine."""

import io
from typing import Any

from rich.console import Console

from specfleet.api.spec import SpeculativeDeploymentSpec
from specfleet.api.status import CandidateState, Outcome, Phase, PreflightStatus, Verdict
from specfleet.api.vocabulary import Command, Track
from specfleet.autotune.candidates import Score, base_spec, choose
from specfleet.cli.view import render_status
from specfleet.render.manifests import revision
from specfleet.rollout import Decision, PreflightObservation, PreflightState

from rolloutkit import EXPERIMENT_ROLLOUT, Fleet, healthy_fleet, make_spec, measured


def experiment_fleet(*ks: int, **auto_tune: Any) -> Fleet:
    """A Healthy guarded fleet at k=4 whose spec now brings candidates k in `ks`."""
    fleet = healthy_fleet(rollout=EXPERIMENT_ROLLOUT)
    fleet.guarded = True
    fleet.change(
        rollout=EXPERIMENT_ROLLOUT, autoTune={"candidates": [{"numSpeculativeTokens": k} for k in ks], **auto_tune}
    )
    return fleet


def measure_live(fleet: Fleet, token_ratio: float, verdict: Verdict = Verdict.PASS) -> Decision:
    """Bring the live candidate's pods up, let its step's pause pass, and give it one analysis."""
    fleet.converge()
    fleet.wait(60)
    return fleet.step(measured(fleet, token_ratio, verdict))


def candidate_revision(fleet: Fleet, index: int) -> str:
    return revision(fleet.spec.candidate_spec(index))


def test_each_candidate_is_measured_in_turn_then_the_best_is_canaried_through_every_step_and_promoted() -> None:
    fleet = experiment_fleet(2, 3, 6)
    stable = fleet.status.stable_revision
    decision = fleet.step()
    experiment = fleet.status.experiment
    assert experiment is not None and experiment.revision == revision(fleet.spec)
    assert [c.state for c in experiment.candidates] == [CandidateState.MEASURING, *[CandidateState.PENDING] * 2]
    assert fleet.status.canary_revision == candidate_revision(fleet, 0)
    assert (
        decision.target(Track.CANARY) is not None
        and decision.target(Track.CANARY).serving["speculative"]["numSpeculativeTokens"] == 2
    )
    assert fleet.status.stable_revision == stable

    for index, ratio in enumerate((0.9, 0.8, 0.95)):
        assert fleet.status.canary_revision == candidate_revision(fleet, index)
        assert fleet.status.phase is Phase.PROGRESSING
        measure_live(fleet, ratio)
        assert fleet.status.current_step in (0, None)  # a candidate never advances past its first step

    experiment = fleet.status.experiment
    assert experiment is not None and experiment.chosen == 1
    assert [c.state for c in experiment.candidates] == [CandidateState.LOST, CandidateState.CHOSEN, CandidateState.LOST]
    assert [round(c.token_latency_ratio or 0, 3) for c in experiment.candidates] == [0.9, 0.8, 0.95]
    assert fleet.status.canary_revision == experiment.revision and fleet.status.current_step == 0
    assert "CandidateChosen" in fleet.events

    decision = fleet.converge()
    assert (
        decision.target(Track.CANARY) is not None
        and decision.target(Track.CANARY).serving["speculative"]["numSpeculativeTokens"] == 3
    )
    fleet.wait(60)
    fleet.step(measured(fleet, 0.8))
    assert fleet.status.current_step == 1
    fleet.converge()
    fleet.wait(60)
    fleet.step(measured(fleet, 0.8))
    assert fleet.status.stable_revision == experiment.revision
    decision = fleet.converge()
    assert fleet.status.phase is Phase.HEALTHY
    assert (
        decision.target(Track.STABLE) is not None
        and decision.target(Track.STABLE).serving["speculative"]["numSpeculativeTokens"] == 3
    )
    assert fleet.status.history[-1].outcome is Outcome.PROMOTED
    assert "k=3" in fleet.status.history[-1].summary

    again = fleet.step()  # serving in place keeps the chosen config, not the spec's base one
    assert (
        again.target(Track.STABLE) is not None
        and again.target(Track.STABLE).serving["speculative"]["numSpeculativeTokens"] == 3
    )


def test_a_candidate_is_measured_over_a_whole_analysis_window_not_its_first_pass() -> None:
    fleet = experiment_fleet(2, 3)
    fleet.step()
    fleet.converge()
    fleet.wait(30)
    fleet.step(measured(fleet, 0.9, seconds=30))  # the step's 1m pause is over only at 60 s anyway
    fleet.wait(30)
    fleet.step(measured(fleet, 0.9, seconds=30))  # a Pass, but on half a window
    experiment = fleet.status.experiment
    assert experiment is not None and experiment.candidates[0].state is CandidateState.MEASURING
    fleet.wait(30)
    fleet.step(measured(fleet, 0.9, seconds=60))
    experiment = fleet.status.experiment
    assert experiment is not None and experiment.candidates[0].state is CandidateState.MEASURED


def test_a_candidate_that_fails_a_guardrail_cannot_win_and_the_next_one_starts() -> None:
    fleet = experiment_fleet(2, 3)
    fleet.step()
    first = fleet.status.canary_revision
    measure_live(fleet, 0.5, Verdict.FAIL)  # fastest, but it broke a guardrail
    experiment = fleet.status.experiment
    assert experiment is not None and experiment.candidates[0].state is CandidateState.FAILED
    assert "guardrail failed" in experiment.candidates[0].reason
    assert fleet.status.canary_revision == candidate_revision(fleet, 1) != first
    assert fleet.status.rejected_revision is None
    measure_live(fleet, 0.9)
    assert fleet.status.experiment is not None and fleet.status.experiment.chosen == 1


def test_nothing_is_promoted_when_no_candidate_beats_stable_by_the_margin() -> None:
    fleet = experiment_fleet(2, 3, minImprovement=0.05)
    fleet.step()
    measure_live(fleet, 0.97)
    decision = measure_live(fleet, 1.02)
    assert fleet.status.phase is Phase.HEALTHY
    assert fleet.status.experiment is not None and fleet.status.experiment.chosen is None
    assert fleet.status.rejected_revision == revision(fleet.spec)
    assert fleet.status.history[-1].outcome is Outcome.KEPT_STABLE
    assert "ExperimentKeptStable" in fleet.events
    fleet.converge()
    decision = fleet.step()
    assert decision.target(Track.CANARY) is None and fleet.status.phase is Phase.HEALTHY
    assert (
        decision.target(Track.STABLE) is not None
        and decision.target(Track.STABLE).serving["speculative"]["numSpeculativeTokens"] == 4
    )


def test_a_candidate_that_is_what_stable_serves_is_not_measured() -> None:
    fleet = experiment_fleet(4, 3)  # the fleet serves k=4
    fleet.step()
    experiment = fleet.status.experiment
    assert experiment is not None and experiment.candidates[0].state is CandidateState.SAME_AS_STABLE
    assert fleet.status.canary_revision == candidate_revision(fleet, 1)


def test_an_abort_ends_the_whole_experiment_and_holds_its_revision() -> None:
    fleet = experiment_fleet(2, 3)
    fleet.step()
    fleet.converge()
    fleet.commands[Command.ABORT.annotation] = "now@1"
    decision = fleet.step()
    assert fleet.status.rejected_revision == revision(fleet.spec)
    assert fleet.status.phase is Phase.ABORTED and not decision.canary_traffic
    experiment = fleet.status.experiment
    assert experiment is not None and experiment.candidates[0].state is CandidateState.FAILED
    assert experiment.candidates[1].state is CandidateState.PENDING


def test_a_new_fleet_with_candidates_serves_its_base_config_first() -> None:
    spec = make_spec(rollout=EXPERIMENT_ROLLOUT, autoTune={"candidates": [{"numSpeculativeTokens": 2}]})
    fleet = Fleet(spec, guarded=True)
    fleet.step()
    assert fleet.status.stable_revision == revision(base_spec(spec))
    fleet.converge()
    assert fleet.status.experiment is not None and fleet.status.canary_revision == candidate_revision(fleet, 0)


def test_new_candidates_start_a_new_experiment() -> None:
    fleet = experiment_fleet(2, 3)
    fleet.step()
    fleet.change(rollout=EXPERIMENT_ROLLOUT, autoTune={"candidates": [{"numSpeculativeTokens": 5}]})
    fleet.step()
    experiment = fleet.status.experiment
    assert experiment is not None and experiment.revision == revision(fleet.spec)
    assert [c.num_speculative_tokens for c in experiment.candidates] == [5]
    assert fleet.status.history[-1].outcome is Outcome.SUPERSEDED


def test_ties_go_to_the_smaller_k_unless_another_completes_clearly_more() -> None:
    assert choose([Score(0, 0.80, 1.0, 5), Score(1, 0.805, 1.0, 3)], 0.02) == 1
    assert choose([Score(0, 0.80, 1.03, 5), Score(1, 0.805, 1.0, 3)], 0.02) == 1  # within the noise of tokens/s
    assert choose([Score(0, 0.80, 1.1, 5), Score(1, 0.805, 1.0, 3)], 0.02) == 0
    assert choose([Score(0, 0.80, 1.0, 5), Score(1, 0.70, 1.0, 8)], 0.02) == 1
    assert choose([Score(0, 0.99, 1.0, 5)], 0.02) is None


# -- preflight ----------------------------------------------------------------------------------------------

NEW_DRAFTER = {"model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B-v2", "revision": "abc123"}


def drafter_canary() -> Fleet:
    fleet = healthy_fleet(rollout=EXPERIMENT_ROLLOUT)
    fleet.guarded = True
    fleet.change(rollout=EXPERIMENT_ROLLOUT, speculative=NEW_DRAFTER)
    return fleet


def test_a_new_drafter_waits_for_its_preflight_without_pods_or_traffic() -> None:
    fleet = drafter_canary()
    decision = fleet.step()
    canary = fleet.status.canary_revision
    assert canary == revision(fleet.spec)
    assert decision.target(Track.CANARY) is None and not decision.canary_traffic
    assert decision.preflight is not None and decision.preflight.revision == canary
    assert decision.preflight.serving["speculative"]["model"] == NEW_DRAFTER["model"]
    assert fleet.status.preflight is not None and fleet.status.preflight.state == "Running"

    passed = PreflightObservation(canary, PreflightState.PASSED, "vocabularies match")
    decision = fleet.step_with(preflights={canary: passed})
    assert decision.target(Track.CANARY) is not None and decision.preflight is None
    assert fleet.status.preflight is not None and fleet.status.preflight.state == "Passed"
    assert "PreflightPassed" in fleet.events
    assert fleet.step().target(Track.CANARY) is not None  # the verdict is kept in status once the Job is gone


def test_a_failed_preflight_aborts_the_canary_before_it_ever_had_a_pod() -> None:
    fleet = drafter_canary()
    fleet.step()
    canary = fleet.status.canary_revision
    assert canary is not None
    failed = PreflightObservation(canary, PreflightState.FAILED, "vocab size 32000 != 128256")
    decision = fleet.step_with(preflights={canary: failed})
    assert decision.target(Track.CANARY) is None and not decision.canary_traffic
    assert fleet.status.phase is Phase.ABORTED and fleet.status.rejected_revision == canary
    assert "vocab size" in fleet.status.history[-1].reason and "PreflightFailed" in fleet.events


def test_a_changed_k_needs_no_preflight() -> None:
    fleet = healthy_fleet(rollout=EXPERIMENT_ROLLOUT)
    fleet.change(rollout=EXPERIMENT_ROLLOUT, speculative={"numSpeculativeTokens": 2})
    decision = fleet.step()
    assert decision.target(Track.CANARY) is not None and decision.preflight is None


def test_candidate_specs_are_what_the_candidates_say() -> None:
    spec = make_spec(autoTune={"candidates": [{"numSpeculativeTokens": 2}, {"method": "ngram"}]})
    assert spec.candidate_spec(0).speculative.model == spec.speculative.model
    assert spec.candidate_spec(0).speculative.num_speculative_tokens == 2
    assert spec.candidate_spec(1).speculative.model is None  # a method is a whole config
    assert isinstance(spec.candidate_spec(1), SpeculativeDeploymentSpec) and spec.candidate_spec(1).auto_tune is None


def test_kubectl_specfleet_status_shows_every_candidate_and_the_preflight() -> None:
    fleet = experiment_fleet(2, 3)
    fleet.step()
    measure_live(fleet, 0.9)
    measure_live(fleet, 0.8, Verdict.FAIL)
    status = fleet.status.model_copy(
        update={"preflight": PreflightStatus(revision="abc", state="Failed", message="vocab size 32000 != 128256")}
    )
    obj = {
        "metadata": {"namespace": "ns", "name": "fleet"},
        "spec": {},
        "status": status.model_dump(mode="json", by_alias=True),
    }
    console = Console(file=io.StringIO(), width=200)
    console.print(render_status(obj))
    text = console.file.getvalue()  # type: ignore[attr-defined]
    rows = {line.split("│")[1].strip(): line for line in text.splitlines() if line.count("│") > 5}
    assert "Chosen" in rows["0"] and "x0.900" in rows["0"] and "k=2" in rows["0"]
    assert "Failed" in rows["1"] and "guardrail failed" in rows["1"]
    assert "Preflight of abc: Failed: vocab size 32000 != 128256" in text

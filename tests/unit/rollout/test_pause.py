"""`spec.paused`: a frozen rollout holds its step, traffic and verdicts; abort still acts; resume starts the step over.
And the first revision in the history, so `undo` can return to where a fleet started."""

from datetime import timedelta

from specfleet.api.status import Outcome, Phase, Verdict
from specfleet.api.vocabulary import Command, Track
from specfleet.render.manifests import revision

from rolloutkit import Fleet, analysis, guarded_canary, healthy_fleet, make_spec

ONE_STEP = {"steps": [{"weight": 25, "pause": {"duration": "1m"}}], "progressDeadline": "10m"}


def paused_canary() -> Fleet:
    """A guarded canary at its first step, serving, then paused by the user."""
    fleet = guarded_canary(**ONE_STEP)
    assert fleet.status.canary_weight > 0
    fleet.change(rollout=ONE_STEP, speculative={"numSpeculativeTokens": 2}, paused=True)
    fleet.step()
    return fleet


def test_a_paused_canary_holds_its_step_and_traffic_and_asks_for_no_analysis() -> None:
    fleet = paused_canary()
    weight, step = fleet.status.canary_weight, fleet.status.current_step
    for _ in range(12):  # an hour, far past the step's pause and the progress deadline
        decision = fleet.wait(300)
        assert not decision.analysis_due
        assert decision.canary_traffic and fleet.status.canary_weight == weight
    assert fleet.status.phase is Phase.PAUSED and fleet.status.current_step == step
    assert fleet.status.paused_at is not None and "Paused" in fleet.events
    progressing = next(c for c in fleet.status.conditions if c.type == "Progressing")
    assert progressing.reason == "RolloutPaused" and "resume" in progressing.message


def test_a_failing_analysis_taken_in_while_paused_does_not_roll_back() -> None:
    fleet = paused_canary()
    fleet.now += timedelta(minutes=5)
    fleet.step(analysis(fleet, Verdict.FAIL, acceptance=0.2))
    assert fleet.status.phase is Phase.PAUSED and fleet.status.failed_analyses == 0
    assert not [h for h in fleet.status.history if h.outcome is Outcome.ROLLED_BACK]


def test_abort_works_while_paused() -> None:
    fleet = paused_canary()
    fleet.commands[Command.ABORT.annotation] = "now"
    decision = fleet.step()
    assert fleet.status.phase is Phase.ABORTED and decision.target(Track.CANARY) is None and not decision.canary_traffic


def test_resume_starts_the_step_over_and_it_then_passes_as_usual() -> None:
    fleet = paused_canary()
    fleet.wait(3600)
    fleet.change(rollout=ONE_STEP, speculative={"numSpeculativeTokens": 2}, paused=False)
    fleet.step()
    assert fleet.status.paused_at is None and "Resumed" in fleet.events
    assert fleet.status.step_ready_at == fleet.now and fleet.status.evidence_since == fleet.now
    fleet.wait(30)
    assert fleet.status.phase is Phase.PROGRESSING, "the step's pause counts again from the resume"
    fleet.wait(31)
    fleet.step(analysis(fleet, Verdict.PASS, acceptance=0.8))
    assert fleet.status.history[-1].outcome is Outcome.PROMOTED


def test_a_change_while_paused_waits_and_starts_on_resume() -> None:
    fleet = healthy_fleet(paused=True)
    fleet.change(paused=True, speculative={"numSpeculativeTokens": 2})
    fleet.wait(600)
    assert fleet.status.canary_revision is None and fleet.status.phase is Phase.PAUSED
    assert revision(fleet.spec) in next(c for c in fleet.status.conditions if c.type == "Progressing").message
    fleet.change(paused=False, speculative={"numSpeculativeTokens": 2})
    fleet.step()
    assert fleet.status.canary_revision == revision(fleet.spec)


def test_pausing_is_no_new_revision() -> None:
    assert revision(make_spec(paused=True)) == revision(make_spec())


def test_the_first_revision_is_in_the_history_with_what_it_served() -> None:
    fleet = Fleet(make_spec())
    fleet.step()
    first = fleet.status.history[0]
    assert first.outcome is Outcome.CREATED and first.revision == revision(fleet.spec)
    assert first.serving == fleet.spec.serving()

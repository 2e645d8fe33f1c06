"""The `RolledOut` condition through whole rollouts: what `kubectl wait --for=condition=RolledOut` (True) and
`--for=condition=RolledOut=False` return on. Unknown while a rollout goes on, so neither returns early."""

from dataclasses import replace

from specfleet.api.status import Condition, ConditionStatus, Verdict
from specfleet.api.vocabulary import Command, ConditionType
from specfleet.render.manifests import revision
from specfleet.rollout import decide

from rolloutkit import EXPERIMENT_ROLLOUT, Fleet, analysis, guarded_canary, healthy_fleet, measured


def rolled_out(fleet: Fleet) -> Condition:
    return next(c for c in fleet.status.conditions if c.type == ConditionType.ROLLED_OUT)


def waits_over(fleet: Fleet, status: ConditionStatus) -> bool:
    """Whether `kubectl wait --for=condition=RolledOut=<status>` returns on the fleet now: the condition has
    that status and was set for the object's current generation."""
    condition = rolled_out(fleet)
    return condition.status == status and (condition.observed_generation or 0) >= fleet.generation


def test_a_promotion_is_unknown_until_stable_serves_the_new_revision_then_true() -> None:
    fleet = healthy_fleet()
    assert rolled_out(fleet).status == ConditionStatus.TRUE and rolled_out(fleet).reason == "RolloutComplete"

    fleet.change(speculative={"numSpeculativeTokens": 3})
    assert not waits_over(fleet, ConditionStatus.TRUE)  # the True of the previous spec is not this spec's
    fleet.step()
    new = revision(fleet.spec)
    seen = {rolled_out(fleet).status}
    fleet.converge()
    for _ in range(6):  # the two steps' pauses, the promotion, stable rolling
        if fleet.status.canary_revision is None:
            break
        seen.add(rolled_out(fleet).status)
        fleet.wait(120)
        fleet.converge()
    assert seen == {ConditionStatus.UNKNOWN}
    assert waits_over(fleet, ConditionStatus.TRUE) and fleet.status.stable_revision == new
    condition = rolled_out(fleet)
    assert condition.reason == "RolloutComplete" and new in condition.message
    assert condition.last_transition_time == fleet.now  # it flipped on this pass


def test_a_rollback_is_false_with_the_evidence() -> None:
    fleet = guarded_canary()
    assert rolled_out(fleet).status == ConditionStatus.UNKNOWN and rolled_out(fleet).reason == "RollingOut"
    fleet.step(analysis(fleet, Verdict.FAIL, acceptance=0.3))
    assert waits_over(fleet, ConditionStatus.FALSE)
    assert rolled_out(fleet).reason == "RolledBack" and "acceptance 0.3 < 0.6" in rolled_out(fleet).message
    fleet.converge()
    fleet.wait(600)  # held on stable: still the failure of this spec
    assert rolled_out(fleet).status == ConditionStatus.FALSE and "acceptance 0.3" in rolled_out(fleet).message


def test_an_abort_is_false_and_a_retry_makes_it_unknown_again() -> None:
    fleet = healthy_fleet()
    fleet.change(speculative={"numSpeculativeTokens": 2})
    fleet.step()
    fleet.converge()
    fleet.commands[Command.ABORT.annotation] = "now"
    fleet.step()
    assert waits_over(fleet, ConditionStatus.FALSE) and rolled_out(fleet).reason == "Aborted"
    fleet.commands[Command.RETRY.annotation] = "1"
    fleet.step()
    assert rolled_out(fleet).status == ConditionStatus.UNKNOWN


def test_a_spec_that_cannot_be_rendered_is_false() -> None:
    fleet = healthy_fleet()
    fleet.generation += 1
    observed = replace(fleet.observe(), desired_revision=None, problems=("spec.x: bad",))
    fleet.status = decide(fleet.spec, fleet.status, observed).status
    assert waits_over(fleet, ConditionStatus.FALSE)
    assert (rolled_out(fleet).reason, rolled_out(fleet).message) == ("InvalidSpec", "spec.x: bad")


def test_an_experiment_that_keeps_stable_is_true() -> None:
    fleet = healthy_fleet(rollout=EXPERIMENT_ROLLOUT)
    fleet.guarded = True
    fleet.change(rollout=EXPERIMENT_ROLLOUT, autoTune={"candidates": [{"numSpeculativeTokens": 2}]})
    fleet.step()
    fleet.converge()
    fleet.wait(60)
    assert rolled_out(fleet).status == ConditionStatus.UNKNOWN
    fleet.step(measured(fleet, 1.05))  # slower than stable: nothing to promote
    assert waits_over(fleet, ConditionStatus.TRUE) and rolled_out(fleet).reason == "ExperimentKeptStable"

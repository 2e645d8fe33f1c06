"""`Ready`, `Reconciling` and `Stalled` through whole rollouts, as kstatus reads them: Ready only once the
current generation is promoted with no live canary, Reconciling while a canary or a move goes on, Stalled when
the rollout will not go on by itself; Reconciling and Stalled never True together, each set for the pass's
generation."""

from dataclasses import replace

from podworld import PodWorld

from specfleet.api.status import ConditionStatus, Verdict
from specfleet.api.vocabulary import Command, ConditionType
from specfleet.rollout import decide
from specfleet.rollout.types import GpuRoom

from rolloutkit import Fleet, analysis, guarded_canary, healthy_fleet, make_spec

TRUE, FALSE = ConditionStatus.TRUE, ConditionStatus.FALSE
GATE = {"steps": [{"weight": 50, "pause": {}}]}


def health(fleet: Fleet) -> dict[str, tuple[ConditionStatus, str]]:
    """Ready, Reconciling and Stalled as (status, reason); each must be of the fleet's generation."""
    found = {c.type: c for c in fleet.status.conditions}
    kinds = (ConditionType.READY, ConditionType.RECONCILING, ConditionType.STALLED)
    assert all(found[kind].observed_generation == fleet.generation for kind in kinds)
    assert not (found[ConditionType.RECONCILING].status == found[ConditionType.STALLED].status == TRUE)
    return {kind.value: (found[kind].status, found[kind].reason) for kind in kinds}


def test_a_healthy_fleet_is_ready_and_neither_reconciling_nor_stalled() -> None:
    fleet = healthy_fleet()
    assert health(fleet) == {
        "Ready": (TRUE, "RolloutComplete"),
        "Reconciling": (FALSE, "RolloutComplete"),
        "Stalled": (FALSE, "NotStalled"),
    }


def test_a_canary_is_reconciling_and_not_ready_until_promoted() -> None:
    fleet = healthy_fleet()
    fleet.change(speculative={"numSpeculativeTokens": 3})
    fleet.step()
    seen = set()
    for _ in range(8):  # the canary's two steps, the promotion, stable rolling
        if fleet.status.canary_revision is None:
            break
        states = health(fleet)
        assert states["Ready"][0] == FALSE and states["Reconciling"][0] == TRUE and states["Stalled"][0] == FALSE
        seen.add(states["Reconciling"][1])
        fleet.converge()
        fleet.wait(120)
    assert {"CanaryStep", "Promoting"} <= seen
    assert health(fleet)["Ready"] == (TRUE, "RolloutComplete")


def test_a_fleet_paused_at_a_gate_is_reconciling_not_stalled() -> None:
    fleet = healthy_fleet(rollout=GATE)
    fleet.change(rollout=GATE, speculative={"numSpeculativeTokens": 2})
    fleet.step()
    fleet.converge()
    fleet.wait(3600)
    assert health(fleet) == {
        "Ready": (FALSE, "RollingOut"),
        "Reconciling": (TRUE, "ManualGate"),
        "Stalled": (FALSE, "NotStalled"),
    }


def test_a_rollback_and_an_abort_are_stalled_and_a_retry_reconciles_again() -> None:
    fleet = guarded_canary()
    fleet.step(analysis(fleet, Verdict.FAIL, acceptance=0.3))
    assert health(fleet) == {
        "Ready": (FALSE, "RolledBack"),
        "Reconciling": (FALSE, "Stalled"),
        "Stalled": (TRUE, "RolledBack"),
    }
    stalled = next(c for c in fleet.status.conditions if c.type == ConditionType.STALLED)
    assert "acceptance 0.3 < 0.6" in stalled.message

    fleet = healthy_fleet()
    fleet.change(speculative={"numSpeculativeTokens": 2})
    fleet.step()
    fleet.converge()
    fleet.commands[Command.ABORT.annotation] = "now"
    fleet.step()
    assert health(fleet)["Stalled"] == (TRUE, "Aborted") and health(fleet)["Ready"][0] == FALSE
    fleet.commands[Command.RETRY.annotation] = "1"
    fleet.step()
    assert health(fleet)["Reconciling"][0] == TRUE and health(fleet)["Stalled"][0] == FALSE


def test_a_spec_that_cannot_be_rendered_is_stalled() -> None:
    fleet = healthy_fleet()
    fleet.generation += 1
    observed = replace(fleet.observe(), desired_revision=None, problems=("spec.x: bad",))
    fleet.status = decide(fleet.spec, fleet.status, observed).status
    assert health(fleet) == {
        "Ready": (FALSE, "InvalidSpec"),
        "Reconciling": (FALSE, "Stalled"),
        "Stalled": (TRUE, "InvalidSpec"),
    }


def test_a_canary_the_nodes_have_no_room_for_is_stalled_until_room_appears() -> None:
    steps = [{"weight": 25, "pause": {"duration": "20s"}}]
    world = PodWorld(Fleet(make_spec(replicas=16, rollout={"steps": steps})), slots=16)
    for _ in range(10):
        world.pass_()
    world.fleet.change(replicas=16, rollout={"steps": steps}, speculative={"numSpeculativeTokens": 2})
    asked = world.fleet.step().capacity_due
    assert asked is not None
    world.fleet.step_with(room=GpuRoom(asked, free=0, fitting=0, nodes=2))
    assert health(world.fleet)["Stalled"] == (TRUE, "InsufficientCapacity")
    assert health(world.fleet)["Reconciling"][0] == FALSE
    world.fleet.step_with(room=GpuRoom(asked, free=4, fitting=4, nodes=2))
    assert health(world.fleet)["Stalled"][0] == FALSE and health(world.fleet)["Reconciling"][0] == TRUE


def test_a_canary_paused_by_its_failure_is_stalled_until_a_human_promotes_it() -> None:
    fleet = guarded_canary(analysis={"failureLimit": 0}, autoRollback=False)
    fleet.step(analysis(fleet, Verdict.FAIL, acceptance=0.3))
    assert health(fleet) == {
        "Ready": (FALSE, "RollingOut"),
        "Reconciling": (FALSE, "Stalled"),
        "Stalled": (TRUE, "AnalysisFailedPaused"),
    }
    fleet.commands[Command.PROMOTE.annotation] = "1"
    fleet.step()
    assert health(fleet)["Stalled"][0] == FALSE and health(fleet)["Reconciling"][0] == TRUE

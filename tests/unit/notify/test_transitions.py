"""Which transitions a pass notifies, derived from the status it read and the status it writes, as the reconciler
derives them: a fleet walked through the state machine, each pass's (old, new) pair handed to `notifications`."""

from datetime import timedelta
from typing import Any

from specfleet.api.status import NOTIFIED_MAX, Condition, ConditionStatus, DriftStatus, Phase, Verdict
from specfleet.api.vocabulary import Command, ConditionType
from specfleet.notify.transitions import Fleet as FleetRef
from specfleet.notify.transitions import Notification, Transition, notifications
from specfleet.rollout import Decision

from rolloutkit import Fleet, analysis, guarded_canary, healthy_fleet

REF = FleetRef("team-a", "llama-eagle3", "8d1c-uid", 2)


class Notified(Fleet):
    """A rolloutkit fleet whose every pass also derives its notifications, as the reconciler does (the status
    written records them, so the next pass reads them back)."""

    def __init__(self, fleet: Fleet) -> None:
        self.__dict__.update(fleet.__dict__)
        self.sent: list[Notification] = []

    def step_with(self, analysis: Any = None, **observed: Any) -> Decision:
        old = self.status
        decision = super().step_with(analysis, **observed)
        ref = FleetRef(REF.namespace, REF.name, REF.uid, self.generation)
        notes, self.status = notifications(ref, self.decided_spec(), old, self.status, self.now)
        self.sent += notes
        return decision

    def transitions(self) -> list[tuple[Transition, int | None]]:
        return [(n.transition, n.step) for n in self.sent]


def canary_of(fleet: Fleet, **rollout: Any) -> Notified:
    """`fleet` with its k changed to 3 under `rollout`, derived from here on."""
    notified = Notified(fleet)
    notified.change(rollout=rollout, speculative={"numSpeculativeTokens": 3})
    return notified


def test_a_canary_walking_two_steps_to_promotion_notifies_each_step_then_the_promotion_with_both_configs() -> None:
    rollout = {"steps": [{"weight": 25, "pause": {"duration": "1m"}}, {"weight": 50, "pause": {"duration": "2m"}}]}
    fleet = canary_of(healthy_fleet(rollout=rollout), **rollout)
    fleet.step()
    fleet.converge()
    fleet.wait(60)
    fleet.converge()
    fleet.wait(120)
    fleet.converge()
    assert fleet.status.phase is Phase.HEALTHY
    assert fleet.transitions() == [
        (Transition.STEP_ADVANCED, 0),
        (Transition.STEP_ADVANCED, 1),
        (Transition.PROMOTED, 1),
    ]
    promoted = fleet.sent[-1]
    assert promoted.canary is not None and "k=3" in promoted.canary.summary
    assert promoted.stable is not None and promoted.stable.revision != promoted.canary.revision
    assert "k=3" not in promoted.stable.summary and promoted.stable.summary
    assert "step 2/2 (50% of traffic)" in fleet.sent[1].message


def test_a_manual_gate_notifies_once_however_often_it_is_looked_at() -> None:
    rollout = {"steps": [{"weight": 50, "pause": {}}]}
    fleet = canary_of(healthy_fleet(rollout=rollout), **rollout)
    fleet.step()
    fleet.converge()
    for _ in range(5):
        fleet.wait(600)
    assert fleet.status.phase is Phase.PAUSED
    assert fleet.transitions() == [(Transition.STEP_ADVANCED, 0), (Transition.GATE_WAITING, 0)]
    assert "promote" in fleet.sent[-1].message
    fleet.commands[Command.PROMOTE.annotation] = "step"
    fleet.step()
    assert fleet.transitions()[-1] == (Transition.PROMOTED, 0)


def test_a_rollback_carries_the_judges_reasons_and_the_canary_it_rolled_back() -> None:
    fleet = Notified(guarded_canary(analysis={"failureLimit": 0}))
    canary = fleet.status.canary_revision
    fleet.step(analysis(fleet, Verdict.FAIL, acceptance=0.30))
    assert fleet.status.phase is Phase.ROLLED_BACK
    (rolled_back,) = fleet.sent
    assert rolled_back.transition is Transition.ROLLED_BACK and rolled_back.step == 0
    assert rolled_back.canary is not None and rolled_back.canary.revision == canary
    assert rolled_back.stable is not None and rolled_back.stable.revision == fleet.status.stable_revision
    assert rolled_back.reasons == ("acceptance 0.3 < 0.6",)
    assert rolled_back.phase is Phase.ROLLED_BACK and rolled_back.weight == 0


def test_an_abort_then_a_retry_is_a_new_run_whose_steps_are_notified_again() -> None:
    rollout = {"steps": [{"weight": 50, "pause": {"duration": "1m"}}]}
    fleet = canary_of(healthy_fleet(rollout=rollout), **rollout)
    fleet.step()
    fleet.converge()
    fleet.commands[Command.ABORT.annotation] = "now"
    fleet.step()
    fleet.converge()
    fleet.wait(60)
    fleet.commands[Command.RETRY.annotation] = "1"
    fleet.step()
    assert fleet.transitions() == [
        (Transition.STEP_ADVANCED, 0),
        (Transition.ABORTED, 0),
        (Transition.STEP_ADVANCED, 0),
    ]
    assert len({n.key for n in fleet.sent}) == 3  # the retried canary's step is its own transition


def test_a_restarted_operator_reading_the_written_status_sends_nothing_again() -> None:
    fleet = Notified(guarded_canary(analysis={"failureLimit": 0}))
    before = fleet.status
    fleet.step(analysis(fleet, Verdict.FAIL, acceptance=0.30))
    written = fleet.status
    assert written.notified and written.notified[-1] == fleet.sent[-1].key
    # the same pass decided again from the status it read (its write was lost, or a second replica): the same
    # transitions, the same keys; from the written status (a restart): nothing
    again, _ = notifications(REF, fleet.spec, before, written.model_copy(update={"notified": []}), fleet.now)
    assert [n.key for n in again] == [n.key for n in fleet.sent]
    assert notifications(REF, fleet.spec, written, written, fleet.now)[0] == []


def _paying(status: str, message: str = "") -> Condition:
    return Condition(
        type=ConditionType.SPECULATION_PAYING, status=ConditionStatus(status), reason="Drift", message=message
    )


def test_drift_is_notified_when_speculation_stops_paying_and_once_per_episode() -> None:
    fleet = healthy_fleet()
    healthy = fleet.status.model_copy(update={"conditions": [*fleet.status.conditions, _paying("True")]})
    said = "acceptance alpha 0.40 vs 0.78 at promotion"
    drifted = healthy.model_copy(
        update={
            "conditions": [*fleet.status.conditions, _paying("False", said)],
            "drift": DriftStatus(message=said),
        }
    )
    notes, written = notifications(REF, fleet.spec, healthy, drifted, fleet.now)
    assert [(n.transition, n.step, n.canary) for n in notes] == [(Transition.DRIFT, None, None)]
    assert said in notes[0].message and notes[0].reasons == (said,)
    recovered = written.model_copy(update={"conditions": healthy.conditions})
    again = recovered.model_copy(update={"conditions": drifted.conditions})
    assert notifications(REF, fleet.spec, recovered, again, fleet.now + timedelta(minutes=5))[0] == []


def test_the_record_of_notified_transitions_is_bounded() -> None:
    fleet = healthy_fleet()
    status = fleet.status
    for generation in range(1, NOTIFIED_MAX + 4):
        ref = FleetRef(REF.namespace, REF.name, REF.uid, generation)
        paused = status.model_copy(update={"phase": Phase.PAUSED})
        notes, status = notifications(
            ref, fleet.spec, status.model_copy(update={"phase": Phase.HEALTHY}), paused, fleet.now
        )
        assert len(notes) == 1
    assert len(status.notified) == NOTIFIED_MAX and status.notified[-1].startswith(f"{REF.uid}/{NOTIFIED_MAX + 3}/")

"""A canary pod replaced mid-step (its node lost): the step keeps its evidence, its pause counts Ready time only.

The user has four replicas and one step at 50% for a minute: two canary pods. Forty seconds into the step one
canary pod's node is lost and its replacement is Ready twenty seconds later. What the step had measured stays
the step's (each pod's series counts on its own, so the lost pod costs its own samples); a new revision, a new
step and a counted failure still start the evidence anew.
"""

from dataclasses import replace
from datetime import timedelta

from specfleet.api.status import Outcome, Phase, Verdict
from specfleet.render.manifests import revision
from specfleet.rollout.types import Watch

from rolloutkit import Fleet, analysis, healthy_fleet

ONE_STEP = {"steps": [{"weight": 50, "pause": {"duration": "1m"}}], "analysis": {"failureLimit": 1}}
TWO_STEPS = {"steps": [{"weight": 50, "pause": {"duration": "1m"}}, {"weight": 75, "pause": {"duration": "1m"}}]}


def canary_of_two_pods(rollout: dict[str, object]) -> Fleet:
    """A guarded fleet of four replicas whose k changed: its canary's two pods Ready at the first step."""
    fleet = healthy_fleet(replicas=4, rollout=rollout)
    fleet.guarded = True
    fleet.change(replicas=4, rollout=rollout, speculative={"numSpeculativeTokens": 2})
    fleet.step()
    fleet.converge()
    assert fleet.canary.ready == 2 and fleet.status.step_ready_at == fleet.now
    return fleet


def lose_a_canary_pod(fleet: Fleet, after: float, gap: float) -> None:
    """`after` seconds on, one canary pod is lost; `gap` seconds later its replacement is Ready."""
    pods = fleet.canary.ready
    fleet.now += timedelta(seconds=after)
    fleet.canary = replace(fleet.canary, ready=pods - 1)
    fleet.step()
    fleet.wait(gap)
    fleet.canary = replace(fleet.canary, ready=pods)
    fleet.step()


def passed(fleet: Fleet, since: float) -> None:
    """A Pass on the evidence of the last `since` seconds."""
    fleet.step(analysis(fleet, Verdict.PASS, acceptance=0.8).model_copy(update={"evidence_seconds": round(since)}))


def test_a_lost_canary_pod_keeps_the_steps_evidence() -> None:
    fleet = canary_of_two_pods(ONE_STEP)
    ready = fleet.now
    fleet.now += timedelta(seconds=40)
    fleet.canary = replace(fleet.canary, ready=1)
    waiting = fleet.step()
    assert fleet.status.evidence_since == ready, "the lost pod costs its own samples, not the step's"
    assert fleet.status.step_ready_at is None and fleet.status.step_ready_seconds == 40
    assert not waiting.analysis_due and fleet.status.phase is Phase.PROGRESSING
    assert waiting.canary_traffic, "the Ready canary pod keeps serving the step's weight meanwhile"
    assert waiting.watch_due, "and the watch goes on looking at it"
    fleet.wait(20)
    fleet.canary = replace(fleet.canary, ready=2)
    back = fleet.step()
    assert fleet.status.evidence_since == ready and fleet.status.step_ready_at == fleet.now
    assert back.analysis_due, "the evidence is already an interval long: the next look is due at once"


def test_the_pause_counts_ready_time_only_and_a_pass_on_evidence_from_before_the_loss_ends_the_step() -> None:
    fleet = canary_of_two_pods(ONE_STEP)
    ready = fleet.now
    lose_a_canary_pod(fleet, after=40, gap=20)
    fleet.now += timedelta(seconds=19)
    passed(fleet, since=(fleet.now - ready).total_seconds())
    assert fleet.status.phase is Phase.PROGRESSING, "59 s Ready of a 1 min pause"
    fleet.now += timedelta(seconds=1)
    passed(fleet, since=(fleet.now - ready).total_seconds())
    assert fleet.status.history[-1].outcome is Outcome.PROMOTED


def test_a_pass_on_evidence_from_before_the_step_does_not_count_after_a_loss() -> None:
    fleet = canary_of_two_pods(TWO_STEPS)
    fleet.wait(60)
    passed(fleet, since=60)
    assert fleet.status.current_step == 1
    fleet.converge()
    second = fleet.status.step_ready_at
    assert second is not None and fleet.status.evidence_since == second
    lose_a_canary_pod(fleet, after=40, gap=20)
    assert fleet.status.evidence_since == second, "the second step's evidence, not the first's"
    fleet.wait(30)
    passed(fleet, since=(fleet.now - second).total_seconds() + 30)  # read from inside the first step
    assert fleet.status.phase is Phase.PROGRESSING and fleet.status.current_step == 1


def test_a_counted_failure_still_restarts_the_evidence_after_a_loss() -> None:
    fleet = canary_of_two_pods(ONE_STEP)
    ready = fleet.now
    lose_a_canary_pod(fleet, after=40, gap=20)
    fleet.wait(5)
    fleet.step(analysis(fleet, Verdict.FAIL, acceptance=0.3))
    assert fleet.status.failed_analyses == 1 and fleet.status.evidence_since == fleet.now
    failed = fleet.now
    fleet.wait(60)
    passed(fleet, since=(fleet.now - ready).total_seconds())  # reads across the failure: not this step's Pass
    assert fleet.status.phase is Phase.PROGRESSING
    passed(fleet, since=(fleet.now - failed).total_seconds())
    assert fleet.status.history[-1].outcome is Outcome.PROMOTED


def test_a_new_revision_during_the_loss_starts_fresh_evidence() -> None:
    fleet = canary_of_two_pods(ONE_STEP)
    fleet.now += timedelta(seconds=40)
    fleet.canary = replace(fleet.canary, ready=1)
    fleet.step()
    fleet.change(replicas=4, rollout=ONE_STEP, speculative={"numSpeculativeTokens": 3})
    fleet.step()
    assert fleet.status.canary_revision == revision(fleet.spec)
    assert fleet.status.evidence_since is None and fleet.status.step_ready_seconds == 0


def test_a_failure_the_watch_finds_while_a_pod_is_replaced_rolls_back() -> None:
    fleet = canary_of_two_pods({**ONE_STEP, "analysis": {"failureLimit": 0}})
    fleet.now += timedelta(seconds=40)
    fleet.canary = replace(fleet.canary, ready=1)
    fleet.step()
    fleet.wait(10)
    assert fleet.status.canary_revision is not None
    found = analysis(fleet, Verdict.FAIL, acceptance=0.3)
    decision = fleet.step_with(watch=Watch(fleet.status.canary_revision, failure=found))
    assert fleet.status.phase is Phase.ROLLED_BACK and not decision.canary_traffic


def test_a_step_that_never_served_is_not_watched_while_its_pods_start() -> None:
    fleet = healthy_fleet(replicas=4, rollout=ONE_STEP)
    fleet.guarded = True
    fleet.change(replicas=4, rollout=ONE_STEP, speculative={"numSpeculativeTokens": 2})
    starting = fleet.step()
    assert not starting.canary_traffic and not starting.watch_due

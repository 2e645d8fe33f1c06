"""A rollout never acts on stale or partial evidence. One regression test per defect, in the
words of the defined behaviour (README "Concepts" and "Operating notes")."""

from dataclasses import replace
from datetime import timedelta
from typing import Any

from specfleet.api.status import Analysis, Outcome, Phase, Verdict
from specfleet.api.vocabulary import Command, Track
from specfleet.render.manifests import revision
from specfleet.rollout import DRAIN, Decision, TrackObservation, decide

from rolloutkit import Fleet, analysis, guarded_canary, healthy_fleet

PROMOTE, ABORT, RETRY = Command.PROMOTE.annotation, Command.ABORT.annotation, Command.RETRY.annotation


def canary(fleet: Fleet, **patch: Any) -> None:
    """Change the speculative config (a new revision) and let the canary's first step become Ready."""
    fleet.change(**{"speculative": {"numSpeculativeTokens": 2}, **patch})
    fleet.step()
    fleet.converge()


def asked(decision: Decision) -> int:
    return (decision.target(Track.STABLE).replicas if decision.target(Track.STABLE) else 0) + (
        decision.target(Track.CANARY).replicas if decision.target(Track.CANARY) else 0
    )


# 1. stale commands


def test_a_promote_given_while_no_canary_is_live_is_dropped_with_an_event_not_kept_for_the_next() -> None:
    gate = {"rollout": {"steps": [{"weight": 50, "pause": {}}]}}
    fleet = healthy_fleet(**gate)
    fleet.commands[PROMOTE] = "full"
    decision = fleet.step()
    assert PROMOTE in decision.done_commands and "CommandIgnored" in fleet.events
    assert PROMOTE not in fleet.commands
    canary(fleet, **gate)
    fleet.wait(3600)
    assert fleet.status.phase is Phase.PAUSED and fleet.status.stable_revision != revision(fleet.spec)


def test_an_abort_given_while_no_canary_is_live_does_not_kill_the_next_canary() -> None:
    fleet = healthy_fleet()
    fleet.commands[ABORT] = "user"
    fleet.change(speculative={"numSpeculativeTokens": 2})  # both seen in one pass (the operator was down)
    decision = fleet.step()
    assert ABORT in decision.done_commands and "CommandIgnored" in fleet.events
    assert fleet.status.canary_revision == revision(fleet.spec) and fleet.status.phase is Phase.PROGRESSING
    fleet.converge()
    assert fleet.status.canary_revision == revision(fleet.spec)


def test_a_command_bound_to_another_canary_is_dropped() -> None:
    fleet = healthy_fleet(rollout={"steps": [{"weight": 50, "pause": {}}]})
    canary(fleet, rollout={"steps": [{"weight": 50, "pause": {}}]})
    fleet.commands[PROMOTE] = "full revision=0123456789 2026-11-29T12:00:00+00:00"
    decision = fleet.step()
    assert PROMOTE in decision.done_commands and "CommandIgnored" in fleet.events
    assert fleet.status.stable_revision != revision(fleet.spec) and fleet.status.phase is Phase.PAUSED
    live = fleet.status.canary_revision
    fleet.commands[PROMOTE] = f"full revision={live} 2026-11-29T12:01:00+00:00"
    fleet.step()
    assert fleet.status.stable_revision == live


def test_a_promote_waits_for_its_canary_to_be_ready_but_dies_with_it() -> None:
    fleet = healthy_fleet(rollout={"progressDeadline": "5m"})
    fleet.change(rollout={"progressDeadline": "5m"}, speculative={"numSpeculativeTokens": 2})
    fleet.step()
    fleet.commands[PROMOTE] = "full"
    assert PROMOTE not in fleet.step().done_commands  # deferred: acted on once the canary is Ready
    fleet.wait(300)
    assert fleet.status.phase is Phase.ABORTED and PROMOTE in fleet.last.done_commands  # type: ignore[union-attr]
    assert "CommandIgnored" in fleet.events


def test_retry_without_a_rejected_revision_is_dropped_with_an_event() -> None:
    fleet = healthy_fleet()
    fleet.commands[RETRY] = "user"
    assert RETRY in fleet.step().done_commands and "CommandIgnored" in fleet.events


# 2. steps shortened mid-canary


def test_shortening_the_steps_mid_canary_restarts_at_the_new_last_step() -> None:
    three = {"steps": [{"weight": 10, "pause": {}}, {"weight": 25, "pause": {}}, {"weight": 50, "pause": {}}]}
    fleet = healthy_fleet(replicas=4, rollout=three)
    canary(fleet, replicas=4, rollout=three)
    for _ in range(2):
        fleet.commands[PROMOTE] = "step"
        fleet.step()
        fleet.converge()
    assert fleet.status.current_step == 2
    one = {"steps": [{"weight": 25, "pause": {}}]}
    fleet.change(replicas=4, speculative={"numSpeculativeTokens": 2}, rollout=one)
    decision = fleet.step()
    assert fleet.status.current_step == 0 and "StepsChanged" in fleet.events
    assert decision.target(Track.CANARY) is not None and decision.target(Track.CANARY).replicas == 1
    fleet.converge()
    fleet.wait(600)
    assert fleet.status.phase is Phase.PAUSED  # the new last step's gate, not a promotion


# 4. rollback and stable readiness


def test_a_rollback_keeps_traffic_on_the_canary_while_stable_has_no_ready_pod() -> None:
    fleet = guarded_canary()
    fleet.stable = TrackObservation(fleet.status.stable_revision, 0)
    fleet.wait(60)
    decision = fleet.step(analysis(fleet, Verdict.FAIL))
    assert fleet.status.phase is Phase.ROLLED_BACK
    assert decision.canary_traffic and decision.keep_canary  # users are not sent to nothing
    fleet.wait(60)
    assert fleet.last is not None and fleet.last.canary_traffic
    fleet.stable = TrackObservation(fleet.status.stable_revision, 1)
    assert not fleet.step().canary_traffic


def test_a_rollback_switches_traffic_then_deletes_the_canary_after_the_drain() -> None:
    fleet = guarded_canary()
    fleet.wait(60)
    decision = fleet.step(analysis(fleet, Verdict.FAIL))
    assert not decision.canary_traffic and decision.keep_canary  # same pass: traffic only
    assert decision.target(Track.STABLE) is not None and decision.target(Track.STABLE).replicas == 2
    assert fleet.wait(DRAIN.total_seconds() - 1).keep_canary
    assert not fleet.wait(1).keep_canary
    assert [h.outcome for h in fleet.status.history] == [Outcome.CREATED, Outcome.ROLLED_BACK]


def test_promotion_complete_drains_before_deleting_the_canary() -> None:
    fleet = healthy_fleet(rollout={"steps": [{"weight": 50, "pause": {}}]})
    canary(fleet, rollout={"steps": [{"weight": 50, "pause": {}}]})
    fleet.commands[PROMOTE] = "step"
    fleet.step()
    decision = fleet.converge()  # stable rolled: PromotionComplete
    assert "PromotionComplete" in fleet.events and decision.keep_canary and not decision.canary_traffic
    last = fleet.wait(DRAIN.total_seconds())
    assert last.target(Track.CANARY) is None and not last.keep_canary and fleet.status.phase is Phase.HEALTHY


# 8. separate timers for onNoData and onProviderError


def test_provider_errors_do_not_run_the_no_data_timer() -> None:
    fleet = guarded_canary(
        steps=[{"weight": 25, "pause": {"duration": "1h"}}],
        analysis={"onNoData": {"after": "10m"}, "onProviderError": {"after": "30m", "action": "Pause"}},
    )
    for _ in range(11):
        fleet.wait(60)
        fleet.step(analysis(fleet, Verdict.ERROR))
    fleet.wait(60)
    fleet.step(analysis(fleet, Verdict.INCONCLUSIVE))
    assert fleet.status.phase is Phase.PROGRESSING and fleet.status.canary_revision is not None
    for _ in range(9):
        fleet.wait(60)
        fleet.step(analysis(fleet, Verdict.INCONCLUSIVE))
    assert fleet.status.phase is Phase.PROGRESSING
    fleet.wait(60)
    fleet.step(analysis(fleet, Verdict.INCONCLUSIVE))
    assert fleet.status.phase is Phase.ROLLED_BACK  # 10 minutes of Inconclusive, not 21 of anything


# 9. readiness flaps


def test_a_flapping_canary_does_not_restart_the_progress_deadline_forever() -> None:
    fleet = healthy_fleet(rollout={"progressDeadline": "10m", "steps": [{"weight": 50, "pause": {}}]})
    fleet.change(
        rollout={"progressDeadline": "10m", "steps": [{"weight": 50, "pause": {}}]},
        speculative={"numSpeculativeTokens": 2},
    )
    fleet.step()
    rev = revision(fleet.spec)
    for _ in range(12):  # 3 minutes not Ready, 1 minute Ready, again and again
        fleet.canary = TrackObservation(rev, 0)
        fleet.wait(180)
        if fleet.status.phase is Phase.ABORTED:
            break
        fleet.canary = TrackObservation(rev, 1)
        fleet.wait(60)
    assert fleet.status.phase is Phase.ABORTED
    assert "ProgressDeadlineExceeded" in fleet.status.history[-1].reason
    assert fleet.now - fleet.status.history[-1].time < timedelta(hours=1)


def test_a_canary_ready_for_hours_that_crashes_gets_the_rest_of_its_deadline() -> None:
    fleet = healthy_fleet(rollout={"progressDeadline": "10m", "steps": [{"weight": 50, "pause": {}}]})
    canary(fleet, rollout={"progressDeadline": "10m", "steps": [{"weight": 50, "pause": {}}]})
    fleet.wait(3 * 3600)
    fleet.canary = TrackObservation(revision(fleet.spec), 0)
    fleet.wait(60)
    assert fleet.status.phase is Phase.PROGRESSING
    fleet.wait(600)
    assert fleet.status.phase is Phase.ABORTED


# 6. no baseline


def test_a_fix_for_a_broken_stable_is_never_rolled_back_on_no_data_alone() -> None:
    fleet = guarded_canary(analysis={"onNoData": {"after": "5m", "action": "Rollback"}})
    fleet.stable = TrackObservation(fleet.status.stable_revision, 0)  # stable crash-loops: nothing to compare
    for _ in range(30):
        fleet.wait(60)
        fleet.step(analysis(fleet, Verdict.INCONCLUSIVE))
    assert fleet.status.phase is Phase.PAUSED and fleet.status.canary_revision is not None
    progressing = next(c for c in fleet.status.conditions if c.type == "Progressing")
    assert progressing.reason == "NoBaseline"
    fleet.step(analysis(fleet, Verdict.FAIL))  # the canary's absolute guardrails still count
    assert fleet.status.phase is Phase.ROLLED_BACK


def test_a_pause_for_no_baseline_lifts_by_itself_once_stable_is_ready_again() -> None:
    fleet = guarded_canary()
    ready_stable = fleet.stable
    fleet.stable = TrackObservation(fleet.status.stable_revision, 0)  # its node lost: no Ready pod for a while
    for _ in range(5):
        fleet.wait(60)
        fleet.step(analysis(fleet, Verdict.INCONCLUSIVE))
    assert fleet.status.phase is Phase.PAUSED
    candidate = fleet.status.canary_revision
    fleet.stable = ready_stable
    fleet.wait(60)
    fleet.step(analysis(fleet, Verdict.PASS))
    fleet.converge()
    assert fleet.status.stable_revision == candidate and fleet.status.phase is Phase.HEALTHY


def test_a_full_weight_httproute_step_has_no_baseline() -> None:
    fleet = guarded_canary(steps=[{"weight": 100, "pause": {}}], analysis={"onNoData": {"after": "5m"}})
    unrouted = fleet.status
    for _ in range(10):
        fleet.now += timedelta(minutes=1)
        verdict = analysis(fleet, Verdict.INCONCLUSIVE)
        unrouted = decide(fleet.spec, unrouted, fleet.observe(verdict)).status
        fleet.status = decide(fleet.spec, fleet.status, replace(fleet.observe(verdict), routed=True)).status
    assert unrouted.phase is Phase.ROLLED_BACK  # the Service split keeps a stable pod: no data is no data
    assert fleet.status.phase is Phase.PAUSED and fleet.status.canary_revision is not None


# 7. a step without a pause needs evidence from its own weight


def test_no_analysis_is_due_the_instant_a_step_becomes_ready() -> None:
    steps = [{"weight": 25}, {"weight": 50}]
    fleet = guarded_canary(steps=steps, analysis={"interval": "1m"})
    fleet.wait(60)
    fleet.step(analysis(fleet, Verdict.PASS))
    assert fleet.status.current_step == 1 and fleet.status.step_ready_at is None
    fleet.wait(300)  # the last analysis is long past, the new step's pods take 5 minutes
    decision = fleet.converge()
    assert fleet.status.step_ready_at == fleet.now
    assert not decision.analysis_due
    instant = Analysis(time=fleet.now, revision=fleet.status.canary_revision, step=1, verdict=Verdict.PASS)
    fleet.step(instant.model_copy(update={"evidence_seconds": 0}))
    assert fleet.status.current_step == 1 and fleet.status.stable_revision != revision(fleet.spec)
    assert fleet.wait(60).analysis_due


def test_a_pass_whose_evidence_reaches_back_before_the_step_does_not_end_it() -> None:
    fleet = guarded_canary(steps=[{"weight": 25}], analysis={"interval": "1m", "window": "5m"})
    fleet.wait(60)
    old = analysis(fleet, Verdict.PASS).model_copy(update={"evidence_seconds": 300})
    fleet.step(old)
    assert fleet.status.stable_revision != revision(fleet.spec)
    fleet.wait(60)
    fleet.step(analysis(fleet, Verdict.PASS).model_copy(update={"evidence_seconds": 120}))
    assert fleet.status.stable_revision == revision(fleet.spec)


# 3. capacity at step transitions


def test_a_step_transition_keeps_the_canary_serving_and_asks_only_for_the_new_pods() -> None:
    steps = {"steps": [{"weight": 25, "pause": {}}, {"weight": 50, "pause": {}}]}
    fleet = healthy_fleet(replicas=4, rollout=steps)
    canary(fleet, replicas=4, rollout=steps)
    assert (
        fleet.last is not None
        and fleet.last.target(Track.STABLE) is not None
        and fleet.last.target(Track.STABLE).replicas == 3
    )
    fleet.commands[PROMOTE] = "step"
    decision = fleet.step()
    assert fleet.status.current_step == 1
    assert decision.canary_traffic  # its Ready pod keeps serving while the second one loads
    assert decision.target(Track.STABLE) is not None and decision.target(Track.STABLE).replicas == 3
    assert asked(decision) == 5
    decision = fleet.converge()
    assert (
        decision.target(Track.STABLE) is not None
        and decision.target(Track.STABLE).replicas == 2
        and asked(decision) == 4
    )


def test_a_canary_paused_after_a_failure_loses_its_traffic_and_stable_covers_it() -> None:
    fleet = guarded_canary(autoRollback=False)
    fleet.wait(60)
    decision = fleet.step(analysis(fleet, Verdict.FAIL))
    assert fleet.status.phase is Phase.PAUSED and decision.target(Track.CANARY) is not None
    assert (
        not decision.canary_traffic
        and decision.target(Track.STABLE) is not None
        and decision.target(Track.STABLE).replicas == 2
    )


# Also: unguarded promotions say so; Promoting has a deadline


def test_an_unguarded_promotion_is_recorded_as_unguarded() -> None:
    fleet = healthy_fleet()
    canary(fleet)
    fleet.wait(60)
    fleet.converge()
    fleet.wait(120)
    assert fleet.status.history[-1].outcome is Outcome.PROMOTED
    assert "unguarded" in fleet.status.history[-1].reason


def test_a_promotion_that_never_settles_is_reported_after_the_progress_deadline() -> None:
    fleet = healthy_fleet(rollout={"progressDeadline": "10m", "steps": [{"weight": 50, "pause": {}}]})
    canary(fleet, rollout={"progressDeadline": "10m", "steps": [{"weight": 50, "pause": {}}]})
    fleet.commands[PROMOTE] = "step"
    fleet.step()
    fleet.wait(601)
    progressing = next(c for c in fleet.status.conditions if c.type == "Progressing")
    assert progressing.status == "False" and progressing.reason == "ProgressDeadlineExceeded"
    assert fleet.status.phase is Phase.DEGRADED
    fleet.converge()
    assert fleet.status.phase is Phase.HEALTHY

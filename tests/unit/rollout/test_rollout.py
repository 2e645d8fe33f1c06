"""The rollout state machine, driven through whole rollouts with a fake clock and fake observations."""

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from specfleet.api.status import (
    Outcome,
    Phase,
    Verdict,
)
from specfleet.api.vocabulary import Command, Track
from specfleet.render.manifests import revision
from specfleet.rollout import ContainerCrash, Decision, TrackObservation, decide

from rolloutkit import Fleet, analysis, guarded_canary, healthy_fleet, make_spec


def test_create_serves_the_first_revision_without_a_canary() -> None:
    fleet = Fleet(make_spec())
    decision = fleet.step()
    assert fleet.status.phase is Phase.PENDING
    assert decision.target(Track.CANARY) is None
    assert decision.target(Track.STABLE) is not None and decision.target(Track.STABLE).replicas == 2
    fleet.converge()
    assert fleet.status.phase is Phase.HEALTHY
    assert fleet.status.stable_revision == revision(fleet.spec)
    assert fleet.status.ready_replicas.stable == 2
    assert "Created" in fleet.events


def test_replicas_change_in_place_without_a_canary() -> None:
    fleet = healthy_fleet()
    before = fleet.status.stable_revision
    fleet.change(replicas=5)
    decision = fleet.step()
    assert (
        decision.target(Track.CANARY) is None
        and decision.target(Track.STABLE) is not None
        and decision.target(Track.STABLE).replicas == 5
    )
    assert fleet.status.stable_revision == before


def test_speculative_change_walks_the_steps_and_promotes() -> None:
    fleet = healthy_fleet()
    old = fleet.status.stable_revision
    fleet.change(speculative={"numSpeculativeTokens": 3})
    new = revision(fleet.spec)
    decision = fleet.step()
    assert fleet.status.canary_revision == new and fleet.status.current_step == 0
    assert decision.target(Track.CANARY) is not None and decision.target(Track.CANARY).replicas == 1
    assert (
        decision.target(Track.STABLE) is not None
        and decision.target(Track.STABLE).revision == old
        and decision.target(Track.STABLE).replicas == 2
    )
    assert not decision.canary_traffic  # nothing Ready yet

    decision = fleet.converge()  # canary Ready: the step's weight takes effect, stable gives way
    assert decision.canary_traffic and fleet.status.step_ready_at == fleet.now
    assert decision.target(Track.STABLE) is not None and decision.target(Track.STABLE).replicas == 1
    assert decision.requeue_after == timedelta(minutes=1)
    assert fleet.wait(30).status.current_step == 0  # pause not over

    fleet.wait(30)
    assert fleet.status.current_step == 1 and "StepAdvanced" in fleet.events
    fleet.converge()
    fleet.wait(120)
    assert fleet.status.stable_revision == new and "Promoted" in fleet.events
    assert fleet.status.phase is Phase.PROGRESSING
    assert fleet.last is not None and fleet.last.target(Track.CANARY) is not None  # canary stays while stable rolls

    fleet.converge()
    assert fleet.status.phase is Phase.HEALTHY and fleet.status.canary_revision is None
    assert [h.outcome for h in fleet.status.history] == [Outcome.CREATED, Outcome.PROMOTED]
    assert "PromotionComplete" in fleet.events


def test_ready_capacity_never_drops_below_the_requested_replicas() -> None:
    fleet = healthy_fleet(replicas=4)
    fleet.change(replicas=4, speculative={"numSpeculativeTokens": 3})

    def ready_once_applied(decision: Decision) -> int:
        """Pods Ready right after the decision is applied: scale-downs are instant, scale-ups are not."""
        stable = min(fleet.stable.ready, decision.target(Track.STABLE).replicas) if decision.target(Track.STABLE) else 0
        canary = min(fleet.canary.ready, decision.target(Track.CANARY).replicas) if decision.target(Track.CANARY) else 0
        return stable + canary

    for _ in range(8):
        assert ready_once_applied(fleet.step()) >= 4
        assert ready_once_applied(fleet.converge()) >= 4
        fleet.now += timedelta(minutes=2)
    assert fleet.status.phase is Phase.HEALTHY
    assert fleet.status.stable_revision == revision(fleet.spec)


def test_manual_gate_pauses_until_promote() -> None:
    fleet = healthy_fleet(rollout={"steps": [{"weight": 50, "pause": {}}]})
    fleet.change(rollout={"steps": [{"weight": 50, "pause": {}}]}, speculative={"numSpeculativeTokens": 2})
    fleet.step()
    fleet.converge()
    fleet.wait(3600)
    assert fleet.status.phase is Phase.PAUSED
    fleet.commands[Command.PROMOTE.annotation] = "step"
    decision = fleet.step()
    assert "Promoted" in fleet.events
    assert decision.done_commands == (Command.PROMOTE.annotation,)


def test_a_command_is_acted_on_once_even_if_its_annotation_removal_is_lost() -> None:
    fleet = healthy_fleet(rollout={"steps": [{"weight": 10, "pause": {}}, {"weight": 50, "pause": {}}]})
    fleet.change(
        rollout={"steps": [{"weight": 10, "pause": {}}, {"weight": 50, "pause": {}}]},
        speculative={"numSpeculativeTokens": 2},
    )
    fleet.step()
    fleet.converge()
    fleet.commands[Command.PROMOTE.annotation] = "step"
    decision = decide(fleet.spec, fleet.status, fleet.observe())
    assert decision.status.current_step == 1
    # the operator dies before removing the annotation; the next run sees it again
    again = decide(fleet.spec, decision.status, fleet.observe())
    assert again.status.current_step == 1 and again.done_commands == (Command.PROMOTE.annotation,)


def test_promote_full_skips_the_remaining_steps() -> None:
    fleet = healthy_fleet()
    fleet.change(speculative={"numSpeculativeTokens": 2})
    fleet.step()
    fleet.converge()
    fleet.commands[Command.PROMOTE.annotation] = "full"
    fleet.step()
    assert fleet.status.stable_revision == revision(fleet.spec)


def test_abort_sends_traffic_to_stable_and_holds_until_retry() -> None:
    fleet = healthy_fleet()
    fleet.change(speculative={"numSpeculativeTokens": 2})
    fleet.step()
    fleet.converge()
    fleet.commands[Command.ABORT.annotation] = "now"
    decision = fleet.step()
    assert decision.target(Track.CANARY) is None and not decision.canary_traffic
    assert decision.target(Track.STABLE) is not None and decision.target(Track.STABLE).replicas == 2
    assert fleet.status.phase is Phase.ABORTED and fleet.status.rejected_revision == revision(fleet.spec)
    assert fleet.status.history[-1].outcome is Outcome.ABORTED

    fleet.converge()
    fleet.wait(600)
    assert fleet.status.phase is Phase.ABORTED and fleet.status.canary_revision is None  # not tried again

    fleet.commands[Command.RETRY.annotation] = "1"
    fleet.step()
    assert fleet.status.canary_revision == revision(fleet.spec) and fleet.status.rejected_revision is None


def test_a_change_during_a_canary_replaces_it_from_step_one() -> None:
    fleet = healthy_fleet()
    fleet.change(speculative={"numSpeculativeTokens": 2})
    fleet.step()
    fleet.converge()
    fleet.wait(60)
    assert fleet.status.current_step == 1
    first = fleet.status.canary_revision
    fleet.change(speculative={"numSpeculativeTokens": 3})
    fleet.step()
    assert fleet.status.canary_revision == revision(fleet.spec) != first
    assert fleet.status.current_step == 0 and fleet.status.last_analysis is None
    assert fleet.status.history[-1].outcome is Outcome.SUPERSEDED


def test_reverting_the_spec_during_a_canary_removes_it() -> None:
    fleet = healthy_fleet()
    fleet.change(speculative={"numSpeculativeTokens": 2})
    fleet.step()
    fleet.change()
    decision = fleet.step()
    assert decision.target(Track.CANARY) is None and fleet.status.canary_revision is None
    assert fleet.status.history[-1].outcome is Outcome.SUPERSEDED


def test_a_canary_that_never_gets_ready_is_aborted_at_the_deadline() -> None:
    fleet = healthy_fleet(rollout={"progressDeadline": "10m"})
    fleet.change(rollout={"progressDeadline": "10m"}, speculative={"numSpeculativeTokens": 2})
    decision = fleet.step()
    assert decision.requeue_after == timedelta(minutes=10)
    fleet.canary = TrackObservation(revision(fleet.spec), 0, unschedulable="0/7 nodes: Insufficient amd.com/gpu")
    fleet.wait(599)
    assert fleet.status.phase is Phase.PROGRESSING
    fleet.wait(1)
    assert fleet.status.phase is Phase.ABORTED
    reason = fleet.status.history[-1].reason
    assert "ProgressDeadlineExceeded" in reason and "Insufficient amd.com/gpu" in reason


def test_a_canary_that_crashes_after_being_ready_gets_a_fresh_deadline_not_a_promotion() -> None:
    fleet = healthy_fleet(rollout={"progressDeadline": "5m"})
    fleet.change(rollout={"progressDeadline": "5m"}, speculative={"numSpeculativeTokens": 2})
    fleet.step()
    fleet.converge()
    fleet.canary = replace(fleet.canary, ready=0)
    fleet.wait(60)
    assert fleet.status.step_ready_at is None and fleet.status.current_step == 0
    fleet.wait(300)
    assert fleet.status.phase is Phase.ABORTED


def test_invalid_spec_holds_children_and_says_why_once() -> None:
    fleet = healthy_fleet()
    decision = decide(
        fleet.spec, fleet.status, replace(fleet.observe(), desired_revision=None, problems=("spec.x: bad",))
    )
    assert decision.hold_children and decision.status.phase is Phase.DEGRADED
    assert [e.reason for e in decision.events] == ["InvalidSpec"]
    again = decide(
        fleet.spec, decision.status, replace(fleet.observe(), desired_revision=None, problems=("spec.x: bad",))
    )
    assert again.events == () and again.status == decision.status


def test_guarded_step_needs_a_passing_analysis_not_only_the_pause() -> None:
    fleet = guarded_canary()
    assert fleet.last is not None and not fleet.last.analysis_due  # the first look waits for an interval of evidence
    assert fleet.status.evidence_since == fleet.status.step_ready_at == fleet.now
    fleet.wait(120)
    assert fleet.last.analysis_due
    assert fleet.status.phase is Phase.PROGRESSING and fleet.status.current_step == 0
    fleet.step(analysis(fleet, Verdict.PASS))
    assert fleet.status.stable_revision == revision(fleet.spec)


def test_looks_are_counted_per_revision_and_errors_are_not_looks() -> None:
    fleet = guarded_canary(steps=[{"weight": 25, "pause": {"duration": "1h"}}])
    fleet.wait(60)
    fleet.step(analysis(fleet, Verdict.INCONCLUSIVE))
    fleet.wait(60)
    fleet.step(analysis(fleet, Verdict.ERROR))
    fleet.wait(60)
    fleet.step(analysis(fleet, Verdict.PASS))
    assert fleet.status.analyses == 2
    fleet.change(speculative={"numSpeculativeTokens": 4})
    fleet.step()
    assert fleet.status.analyses == 0 and fleet.status.evidence_since is None


def test_each_counted_failure_restarts_the_evidence() -> None:
    fleet = guarded_canary(analysis={"failureLimit": 1})
    fleet.wait(60)
    fleet.step(analysis(fleet, Verdict.FAIL))
    assert fleet.status.failed_analyses == 1 and fleet.status.evidence_since == fleet.now


def test_failed_analyses_beyond_the_limit_roll_back_with_the_evidence() -> None:
    fleet = guarded_canary(analysis={"failureLimit": 1})
    fleet.step(analysis(fleet, Verdict.FAIL, acceptance=0.31))
    assert fleet.status.phase is Phase.PROGRESSING and fleet.status.failed_analyses == 1
    decision = fleet.step(analysis(fleet, Verdict.FAIL, acceptance=0.30))
    assert (
        fleet.status.phase is Phase.ROLLED_BACK
        and decision.target(Track.CANARY) is None
        and not decision.canary_traffic
    )
    last = fleet.status.history[-1]
    assert last.outcome is Outcome.ROLLED_BACK and last.acceptance_rate == pytest.approx(0.30)
    assert "acceptance 0.3 < 0.6" in last.reason


def test_without_auto_rollback_a_failure_pauses_for_a_human() -> None:
    fleet = guarded_canary(analysis={"failureLimit": 0}, autoRollback=False)
    decision = fleet.step(analysis(fleet, Verdict.FAIL))
    assert fleet.status.phase is Phase.PAUSED and decision.target(Track.CANARY) is not None
    fleet.wait(600)
    assert fleet.status.phase is Phase.PAUSED and fleet.status.canary_revision is not None


def crashing(fleet: Fleet, restarts: int, oom: bool = False, ready: bool = True) -> None:
    """The canary's pod `p0` reports its container `vllm` restarted (and OOM-killed), Ready or not."""
    crash = ContainerCrash("llama-canary-p0", "vllm", restarts, oom)
    fleet.canary = replace(fleet.canary, crashes=(crash,), ready=fleet.canary.ready if ready else 0)


def canary_at_step_one(**rollout: Any) -> Fleet:
    fleet = healthy_fleet(rollout=rollout) if rollout else healthy_fleet()
    fleet.change(speculative={"numSpeculativeTokens": 2}, **({"rollout": rollout} if rollout else {}))
    fleet.step()
    fleet.converge()
    assert fleet.status.phase is Phase.PROGRESSING and fleet.last is not None and fleet.last.canary_traffic
    return fleet


@pytest.mark.parametrize("ready", [True, False])
def test_an_oom_killed_canary_container_rolls_back_at_once_without_prometheus(ready: bool) -> None:
    fleet = canary_at_step_one()  # unguarded: the evidence is the pod's status, not Prometheus
    crashing(fleet, restarts=1, oom=True, ready=ready)
    decision = fleet.step()
    assert (
        fleet.status.phase is Phase.ROLLED_BACK
        and decision.target(Track.CANARY) is None
        and not decision.canary_traffic
    )
    reason = fleet.status.history[-1].reason
    assert "canary pod llama-canary-p0 container vllm was OOMKilled (restart 1)" in reason
    assert "stable pods: 0 restarts" in reason and "RolledBack" in fleet.events


def test_canary_restarts_over_the_limit_roll_back() -> None:
    fleet = canary_at_step_one()
    crashing(fleet, restarts=1)  # the default maxCanaryRestarts forgives one
    fleet.step()
    assert fleet.status.phase is Phase.PROGRESSING
    crashing(fleet, restarts=2)
    fleet.step()
    assert fleet.status.phase is Phase.ROLLED_BACK
    assert "canary containers restarted 2 times, over maxCanaryRestarts 1" in fleet.status.history[-1].reason


def test_max_canary_restarts_zero_fails_at_the_first_restart() -> None:
    fleet = canary_at_step_one(guardrails={"maxCanaryRestarts": 0})
    crashing(fleet, restarts=1)
    fleet.step()
    assert fleet.status.phase is Phase.ROLLED_BACK


def test_stable_restarts_alone_do_not_fail_the_canary() -> None:
    fleet = canary_at_step_one()
    crashes = (ContainerCrash("llama-stable-p0", "vllm", 7, oom_killed=True),)
    fleet.stable = replace(fleet.stable, crashes=crashes)
    fleet.wait(60)
    assert fleet.status.current_step == 1
    fleet.converge()
    fleet.stable = replace(fleet.stable, crashes=crashes)  # converging made new Deployments' observations
    fleet.wait(120)
    assert fleet.status.stable_revision == revision(fleet.spec) and "RolledBack" not in fleet.events


def test_crashes_of_another_revisions_pods_are_not_the_canarys() -> None:
    fleet = canary_at_step_one()
    fleet.canary = replace(fleet.canary, revision="older", crashes=(ContainerCrash("old-p0", "vllm", 3, True),))
    fleet.step()
    assert fleet.status.phase is Phase.PROGRESSING


def test_without_auto_rollback_a_crash_pauses_and_a_promote_accepts_the_crashes_so_far() -> None:
    fleet = canary_at_step_one(autoRollback=False)
    crashing(fleet, restarts=1, oom=True)
    decision = fleet.step()
    assert (
        fleet.status.phase is Phase.PAUSED and decision.target(Track.CANARY) is not None and not decision.canary_traffic
    )
    assert "OOMKilled" in next(c.message for c in fleet.status.conditions if c.type == "Progressing")
    paused, events = fleet.status, len(fleet.events)
    fleet.wait(600)  # held for a human: no new events, no other move, the canary still off traffic
    assert fleet.status.phase is Phase.PAUSED and len(fleet.events) == events and fleet.last is not None
    assert not fleet.last.canary_traffic and fleet.status.canary_revision == paused.canary_revision
    fleet.commands[Command.PROMOTE.annotation] = "step"
    fleet.step()
    assert fleet.status.canary_restarts_accepted == 1 and fleet.status.current_step == 1
    assert fleet.status.phase is Phase.PROGRESSING
    crashing(fleet, restarts=3)  # two more than accepted: over the limit of 1 again
    fleet.step()
    assert fleet.status.phase is Phase.PAUSED


@pytest.mark.parametrize(
    ("verdict", "policy", "phase"),
    [
        (Verdict.INCONCLUSIVE, {"onNoData": {"after": "5m", "action": "Rollback"}}, Phase.ROLLED_BACK),
        (Verdict.ERROR, {"onProviderError": {"after": "5m", "action": "Pause"}}, Phase.PAUSED),
    ],
)
def test_no_verdict_holds_then_follows_the_policy(verdict: Verdict, policy: dict[str, Any], phase: Phase) -> None:
    fleet = guarded_canary(analysis=policy)
    fleet.wait(120)
    fleet.step(analysis(fleet, verdict))
    assert fleet.status.stable_revision != revision(fleet.spec)  # never promoted without a verdict
    assert fleet.status.phase is Phase.PROGRESSING
    fleet.now += timedelta(minutes=5)
    fleet.step(analysis(fleet, verdict))
    assert fleet.status.phase is phase


def test_an_unguarded_canary_says_so() -> None:
    fleet = healthy_fleet()
    guarded = next(c for c in fleet.status.conditions if c.type == "Guarded")
    assert guarded.status == "False" and "unguarded" in guarded.message


@pytest.mark.parametrize("moment", ["healthy", "canary-waiting", "canary-ready", "paused", "aborted"])
def test_deciding_again_on_the_same_world_changes_nothing(moment: str) -> None:
    """Restart safety and zero writes at rest: `decide` is a fixed point once it has been applied."""
    steps = [{"weight": 50, "pause": {}}] if moment == "paused" else None
    fleet = healthy_fleet(**({"rollout": {"steps": steps}} if steps else {}))
    if moment != "healthy":
        fleet.change(speculative={"numSpeculativeTokens": 2}, **({"rollout": {"steps": steps}} if steps else {}))
        fleet.step()
    if moment in ("canary-ready", "paused", "aborted"):
        fleet.converge()
    if moment == "aborted":
        fleet.commands[Command.ABORT.annotation] = "x"
        fleet.step()
        fleet.converge()
    fleet.step()
    before = fleet.status
    again = fleet.step()
    assert again.status == before and again.events == ()


def test_history_describes_only_the_config_it_knows() -> None:
    fleet = healthy_fleet()
    fleet.change(speculative={"numSpeculativeTokens": 2})
    fleet.step()
    fleet.change(speculative={"numSpeculativeTokens": 3})
    fleet.step()
    superseded = fleet.status.history[-1]
    assert superseded.outcome is Outcome.SUPERSEDED and superseded.summary == ""
    fleet.commands[Command.ABORT.annotation] = "x"
    fleet.converge()
    fleet.step()
    assert fleet.status.history[-1].summary == "eagle3 k=3 yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"

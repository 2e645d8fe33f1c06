"""The state machine and the watch: asked for at every pass of a Ready, judged canary; a failure it found is a
failed analysis (the canary loses its traffic at once past failureLimit); a watch that found nothing changes
nothing."""

from specfleet.api.status import Phase, Verdict
from specfleet.api.vocabulary import Track
from specfleet.rollout import decide
from specfleet.rollout.types import Watch

from rolloutkit import analysis, guarded_canary, healthy_fleet


def test_a_ready_judged_canary_asks_for_a_watch_at_every_pass() -> None:
    fleet = guarded_canary()
    assert fleet.last is not None and fleet.last.watch_due and not fleet.last.analysis_due
    assert fleet.wait(3).watch_due  # well inside the analysis interval


def test_no_watch_without_a_live_judged_canary() -> None:
    assert not healthy_fleet().last.watch_due  # type: ignore[union-attr]


def test_a_failure_found_by_a_watch_rolls_back_without_waiting_for_the_analysis() -> None:
    fleet = guarded_canary()
    fleet.wait(12)
    found = analysis(fleet, Verdict.FAIL, acceptance=0.3).model_copy(
        update={"reasons": ["over the last 10 s: acceptance alpha 0.30: upper bound < 0.60"]}
    )
    assert fleet.status.canary_revision is not None
    decision = fleet.step_with(watch=Watch(fleet.status.canary_revision, failure=found))
    assert fleet.status.phase is Phase.ROLLED_BACK and not decision.canary_traffic
    assert decision.target(Track.CANARY) is None
    assert fleet.status.last_analysis == found and "over the last 10 s" in fleet.status.history[-1].reason
    assert "AnalysisFailed" in fleet.events


def test_a_failure_found_by_a_watch_counts_once_under_a_failure_limit() -> None:
    fleet = guarded_canary(analysis={"failureLimit": 1})
    fleet.wait(12)
    assert fleet.status.canary_revision is not None
    found = analysis(fleet, Verdict.FAIL)
    fleet.step_with(watch=Watch(fleet.status.canary_revision, failure=found))
    assert fleet.status.phase is Phase.PROGRESSING and fleet.status.failed_analyses == 1
    assert fleet.status.evidence_since == fleet.now  # the next failure stands on later evidence


def test_a_watch_that_found_nothing_decides_nothing() -> None:
    fleet = guarded_canary()
    fleet.wait(12)
    assert fleet.status.canary_revision is not None
    quiet = Watch(fleet.status.canary_revision, next_at=fleet.now)
    before = fleet.status
    with_watch = decide(fleet.decided_spec(), before, fleet.observe(watch=quiet))
    without = decide(fleet.decided_spec(), before, fleet.observe())
    assert with_watch.status == without.status and with_watch.canary_traffic == without.canary_traffic
    assert not with_watch.watch_due and without.watch_due


def test_a_failure_for_another_revision_is_not_taken() -> None:
    fleet = guarded_canary()
    fleet.wait(12)
    stale = analysis(fleet, Verdict.FAIL)
    fleet.step_with(watch=Watch("another", failure=stale.model_copy(update={"revision": "another"})))
    assert fleet.status.phase is Phase.PROGRESSING and fleet.status.failed_analyses == 0

"""A canary is judged unless its spec says `rollout.unguarded`; one that cannot be judged holds, never promotes.

Whether a Prometheus is configured is a fact about the operator (a flag, a chart value) that can change under
a live canary: a restart without it, a values file emptied. It decides how the canary is judged (Error
verdicts, `onProviderError`), never whether: that is the spec's choice, fixed in status when the canary
starts. The shell answers every analysis it cannot make with an Error verdict (see the reconciler's tests);
`shell_pass` plays that part here.
"""

from datetime import timedelta

from specfleet.api.status import Analysis, Outcome, Phase, Verdict
from specfleet.rollout import Decision
from specfleet.rollout.types import NO_PROMETHEUS

from rolloutkit import Fleet, analysis, guarded_canary, healthy_fleet, make_spec


def shell_pass(fleet: Fleet, prometheus: bool) -> Decision:
    """One reconcile: decide, and when an analysis is due and no Prometheus can be asked, decide again with
    the Error verdict the shell gives."""
    decision = fleet.step_with(prometheus=prometheus)
    if decision.analysis_due and not prometheus:
        assert fleet.status.canary_revision is not None
        error = Analysis(
            time=fleet.now,
            revision=fleet.status.canary_revision,
            step=fleet.status.current_step or 0,
            verdict=Verdict.ERROR,
            reasons=[NO_PROMETHEUS],
        )
        decision = fleet.step_with(error, prometheus=prometheus)
    return decision


def promoted(fleet: Fleet) -> bool:
    return any(entry.outcome is Outcome.PROMOTED for entry in fleet.status.history)


def run_for(fleet: Fleet, minutes: int, prometheus: bool) -> None:
    for _ in range(minutes):
        fleet.now += timedelta(minutes=1)
        shell_pass(fleet, prometheus)


def test_a_judged_canary_whose_prometheus_goes_away_holds_and_is_never_promoted() -> None:
    fleet = guarded_canary()  # one 1-minute step
    fleet.wait(30)
    fleet.step(analysis(fleet, Verdict.INCONCLUSIVE))  # judged so far, nothing shown yet
    run_for(fleet, 120, prometheus=False)  # the operator restarted without its Prometheus URL
    assert not promoted(fleet)
    assert fleet.status.canary_revision is not None and fleet.status.current_step == 0
    assert fleet.status.last_analysis is not None and fleet.status.last_analysis.reasons == [NO_PROMETHEUS]
    # onProviderError (default: Pause after 10m) acted; the canary keeps its traffic: nothing is against it
    assert fleet.status.phase is Phase.PAUSED
    assert fleet.last is not None and fleet.last.canary_traffic
    guarded = next(c for c in fleet.status.conditions if c.type == "Guarded")
    assert guarded.status == "False" and guarded.reason == "NoPrometheus" and "never promoted" in guarded.message


def test_a_canary_holds_when_no_prometheus_was_ever_configured() -> None:
    fleet = healthy_fleet(rollout={"steps": [{"weight": 25, "pause": {"duration": "1m"}}]})
    fleet.guarded = True  # the spec as written: judged
    fleet.change(
        rollout={"steps": [{"weight": 25, "pause": {"duration": "1m"}}]}, speculative={"numSpeculativeTokens": 2}
    )
    shell_pass(fleet, prometheus=False)
    fleet.converge()
    run_for(fleet, 60, prometheus=False)
    assert not promoted(fleet) and fleet.status.canary_revision is not None


def test_a_rollback_on_provider_error_is_the_specs_to_ask_for() -> None:
    fleet = guarded_canary(analysis={"onProviderError": {"after": "5m", "action": "Rollback"}})
    run_for(fleet, 10, prometheus=False)
    assert fleet.status.history[-1].outcome is Outcome.ROLLED_BACK and not promoted(fleet)


def test_a_canary_started_judged_stays_judged_when_the_spec_turns_unguarded() -> None:
    fleet = guarded_canary()
    assert not fleet.status.canary_unguarded
    unguarded = fleet.spec.rollout.model_copy(update={"unguarded": True})
    fleet.spec = fleet.spec.model_copy(update={"rollout": unguarded})  # same revision: the canary goes on
    run_for(fleet, 30, prometheus=False)
    assert not promoted(fleet) and fleet.status.canary_revision is not None


def test_an_unguarded_spec_canaries_on_pauses_alone_and_says_so_in_status_and_history() -> None:
    steps = [{"weight": 25, "pause": {"duration": "1m"}}]
    fleet = healthy_fleet(rollout={"steps": steps, "unguarded": True})
    fleet.guarded = True  # whether a Prometheus is configured does not matter to an unguarded canary
    fleet.spec = make_spec(rollout={"steps": steps, "unguarded": True}, speculative={"numSpeculativeTokens": 2})
    fleet.generation += 1
    fleet.step()
    assert fleet.status.canary_unguarded
    fleet.converge()
    fleet.wait(90)
    assert fleet.status.history[-1].outcome is Outcome.PROMOTED and "unguarded" in fleet.status.history[-1].reason
    guarded = next(c for c in fleet.status.conditions if c.type == "Guarded")
    assert guarded.status == "False" and guarded.reason == "Unguarded"

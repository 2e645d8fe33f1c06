"""The load-aware depth in the state machine: load points while Healthy, the proposal, and `autoTune.apply`.

Step times come from the simulator's model (`autotunekit.Engine`): the user has an EAGLE-3
drafter of acceptance 0.8 on an MI325X; the points are what the fleet would measure at each batch size.
"""

from datetime import timedelta
from typing import Any

from specfleet.api.status import AutoTuneStatus, LoadPointStatus, Measurements, Phase
from specfleet.api.vocabulary import Track
from specfleet.hardware import MI325X
from specfleet.render.manifests import revision
from specfleet.rollout import Decision, FleetLook
from specfleet_workshop.sim import model

from autotunekit import Engine
from rolloutkit import T0, Fleet, healthy_fleet, measured

ENGINE = Engine(MI325X, alpha=0.8, draft_cost=model.SEQUENTIAL_DRAFTERS_COST["eagle3"])
STEPS = {"steps": [{"weight": 50, "pause": {"duration": "1m"}}], "analysis": {"interval": "1m", "window": "1m"}}
SERVED_K = 4  # what bad_specs.BASE serves


def measured_at(batch: int, k: int = SERVED_K) -> Measurements:
    return Measurements(
        step_latency_mean_seconds=ENGINE.step(k, batch),
        batch_size_mean=float(batch),
        requests=500.0,
        acceptance_per_position=list(ENGINE.per_position(k)),
    )


def tuning_fleet(**auto_tune: Any) -> Fleet:
    """A Healthy guarded fleet with `autoTune`, holding the points an experiment over k left at batch 8."""
    fleet = healthy_fleet(rollout=STEPS, autoTune=auto_tune)
    fleet.guarded = True
    drafter = "eagle3 yuhuili/EAGLE3-LLaMA3.1-Instruct-8B main"
    points = [
        LoadPointStatus(k=k, batch=batch, step_seconds=ENGINE.step(k, batch), samples=500, time=T0)
        for k in (1, 2, 4, 6)
        for batch in (4, 16)
    ]
    tuned = AutoTuneStatus(drafter=drafter, points=points, acceptance_per_position=list(ENGINE.per_position(6)))
    fleet.status = fleet.status.model_copy(update={"auto_tune": tuned})
    return fleet


def look(fleet: Fleet, batch: int) -> Decision:
    """The next look at the stable track, one window later, at this batch size."""
    fleet.now += timedelta(minutes=1)
    decision = fleet.step()
    assert decision.fleet_look_due
    assert fleet.status.stable_revision is not None
    seen = FleetLook(time=fleet.now, revision=fleet.status.stable_revision, stable=measured_at(batch))
    return fleet.step_with(fleet_look=seen)


def top_depth(fleet: Fleet) -> int:
    proposal = fleet.status.auto_tune.proposal if fleet.status.auto_tune else None
    assert proposal is not None and proposal.schedule, proposal
    return proposal.schedule[-1].num_tokens


def test_a_healthy_fleet_with_auto_tune_is_looked_at_every_window_and_gains_points() -> None:
    fleet = tuning_fleet()
    decision = fleet.step()
    assert decision.fleet_look_due  # the first look is due at once
    before = len(fleet.status.auto_tune.points) if fleet.status.auto_tune else 0
    look(fleet, 8)
    assert fleet.status.auto_tune is not None and len(fleet.status.auto_tune.points) == before + 1
    assert fleet.status.auto_tune.last_look == fleet.now
    fleet.now += timedelta(seconds=30)
    assert not fleet.step().fleet_look_due  # the next one a window after


def test_without_auto_tune_nothing_is_measured_while_healthy() -> None:
    fleet = healthy_fleet(rollout=STEPS)
    fleet.guarded = True
    assert not fleet.step().fleet_look_due and fleet.status.auto_tune is None


def test_load_past_the_knee_proposes_a_lower_depth_for_large_batches_but_does_not_apply_it() -> None:
    fleet = tuning_fleet()
    look(fleet, 16)
    for batch in (96, 192):
        look(fleet, batch)
    assert top_depth(fleet) < SERVED_K
    proposal = fleet.status.auto_tune.proposal if fleet.status.auto_tune else None
    assert proposal is not None and proposal.schedule is not None and proposal.schedule[0].start == 1
    assert proposal.predictions and "ScheduleProposed" in fleet.events
    assert fleet.status.auto_tune is not None and fleet.status.auto_tune.tuned is None
    assert fleet.step().target(Track.CANARY) is None and fleet.status.phase is Phase.HEALTHY


def test_apply_canaries_the_schedule_then_serves_it_without_another_canary() -> None:
    fleet = tuning_fleet(apply=True)
    for batch in (16, 96, 192):
        look(fleet, batch)
    tuned = fleet.status.auto_tune.tuned if fleet.status.auto_tune else None
    assert tuned is not None and "ScheduleApplied" in fleet.events
    decision = fleet.step()
    assert fleet.status.canary_revision == tuned.revision != revision(fleet.spec)
    assert decision.target(Track.CANARY) is not None
    rows = decision.target(Track.CANARY).serving["speculative"]["numSpeculativeTokensPerBatchSize"]
    assert rows[-1]["numTokens"] < SERVED_K
    fleet.converge()
    fleet.wait(60)
    fleet.step(measured(fleet, 0.95))  # a passing analysis: the one step is over, promoted
    assert fleet.status.stable_revision == tuned.revision
    fleet.converge()
    assert fleet.status.phase is Phase.HEALTHY and fleet.status.canary_revision is None
    decision = fleet.step()
    assert decision.target(Track.CANARY) is None and decision.target(Track.STABLE) is not None
    assert decision.target(Track.STABLE).serving["speculative"]["numSpeculativeTokensPerBatchSize"] == rows

    fleet.change(rollout=STEPS, autoTune={"apply": False})  # turning it off canaries the untuned config
    fleet.step()
    assert fleet.status.canary_revision == revision(fleet.spec)


def promote_change(fleet: Fleet, **patch: Any) -> None:
    fleet.change(rollout=STEPS, autoTune={}, **patch)
    fleet.step()
    fleet.converge()
    fleet.wait(60)
    fleet.step(measured(fleet, 0.95))
    fleet.converge()
    assert fleet.status.stable_revision == revision(fleet.spec) and fleet.status.phase is Phase.HEALTHY


def test_another_drafter_starts_the_points_anew() -> None:
    fleet = tuning_fleet()
    promote_change(fleet, speculative={"numSpeculativeTokens": 2})
    look(fleet, 8)  # same drafter, another k: the points stay
    assert fleet.status.auto_tune is not None and len(fleet.status.auto_tune.points) == 9
    promote_change(fleet, speculative={"method": "ngram", "model": None, "revision": None})
    look(fleet, 8)
    assert fleet.status.auto_tune is not None and fleet.status.auto_tune.drafter.startswith("ngram")
    assert len(fleet.status.auto_tune.points) == 1


def test_a_look_keeps_the_prompts_its_steps_prefilled_and_the_traffic_mix() -> None:
    """Prompts are computed in the same passes as the drafts: the point records them, and the proposal's
    predictions take the traffic's prefilled tokens per output token from the latest look."""
    fleet = tuning_fleet()
    fleet.now += timedelta(minutes=1)
    assert fleet.step().fleet_look_due and fleet.status.stable_revision is not None
    busy = measured_at(96).model_copy(update={"prefill_tokens_per_step": 140.0, "prefill_tokens_per_output_token": 0.5})
    fleet.step_with(fleet_look=FleetLook(time=fleet.now, revision=fleet.status.stable_revision, stable=busy))
    tuned = fleet.status.auto_tune
    assert tuned is not None and tuned.points[-1].prefill_tokens == 140.0
    assert tuned.prefill_tokens_per_output_token == 0.5

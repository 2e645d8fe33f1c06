"""The status fields `kubectl get sdep` prints (step, ready/desired, config, p95 in ms) follow the rollout."""

from dataclasses import replace

from specfleet.api.spec import SpeculativeSpec
from specfleet.api.status import Measurements, Verdict
from specfleet.rollout import decide
from specfleet.rollout.columns import short_config

from rolloutkit import EXPERIMENT_ROLLOUT, Fleet, analysis, guarded_canary, healthy_fleet

EAGLE3_K4 = "eagle3 k=4"
"""bad_specs.BASE's speculative config, as the Config column says it."""


def columns(fleet: Fleet) -> tuple[str, str, str]:
    return fleet.status.step_progress, fleet.status.ready_summary, fleet.status.config


def test_a_healthy_fleet_shows_its_ready_pods_and_config_and_no_step() -> None:
    fleet = healthy_fleet(replicas=3)
    assert columns(fleet) == ("", "3/3", EAGLE3_K4)
    assert fleet.status.canary_token_latency_p95_ms is None


def test_a_canary_shows_its_step_the_pods_on_top_and_both_configs_until_promoted() -> None:
    fleet = healthy_fleet()
    fleet.change(speculative={"numSpeculativeTokens": 2})
    fleet.step()
    assert columns(fleet) == ("1/2", "2/2", "eagle3 k=4 -> eagle3 k=2")  # the canary's pod is not Ready yet
    fleet.converge()
    assert columns(fleet) == ("1/2", "3/2", "eagle3 k=4 -> eagle3 k=2")  # its pod on top of the 2 replicas
    fleet.wait(60)
    assert fleet.status.step_progress == "2/2"
    fleet.converge()
    fleet.wait(120)  # the last pause is over: promoted, stable rolls to k=2
    assert fleet.status.stable_revision == fleet.status.canary_revision
    assert fleet.status.step_progress == "" and fleet.status.config == "eagle3 k=2"
    fleet.converge()
    assert fleet.status.canary_revision is None and fleet.status.step_progress == ""
    assert fleet.status.config == "eagle3 k=2"


def test_the_canarys_p95_per_token_latency_is_shown_in_milliseconds() -> None:
    fleet = guarded_canary()
    fleet.wait(60)
    judged = analysis(fleet, Verdict.INCONCLUSIVE)
    fleet.step(judged.model_copy(update={"canary": Measurements(token_latency_p95_seconds=0.012345)}))
    assert fleet.status.last_analysis is not None and fleet.status.canary_revision is not None
    assert fleet.status.canary_token_latency_p95_ms == 12.35
    assert fleet.status.config == "eagle3 k=4 -> eagle3 k=2"


def test_an_invalid_spec_still_shows_the_fleet_as_it_is() -> None:
    fleet = healthy_fleet(replicas=3)
    invalid = replace(fleet.observe(), desired_revision=None, problems=("spec.x: bad",))
    status = decide(fleet.spec, fleet.status, invalid).status
    assert (status.step_progress, status.ready_summary, status.config) == ("", "3/3", EAGLE3_K4)


def test_an_experiment_side_by_side_shows_how_many_candidates_beside_stable() -> None:
    fleet = healthy_fleet(replicas=8, rollout=EXPERIMENT_ROLLOUT)
    fleet.guarded = True
    fleet.change(
        replicas=8,
        rollout=EXPERIMENT_ROLLOUT,
        autoTune={"candidates": [{"numSpeculativeTokens": 2}, {"numSpeculativeTokens": 6}]},
    )
    fleet.step()
    assert fleet.status.experiment is not None and fleet.status.experiment.side_by_side
    assert columns(fleet) == ("", "8/8", "eagle3 k=4 vs 2 candidates")


def test_the_short_config_names_the_method_and_the_depth_of_each_batch_range() -> None:
    schedule = [{"start": 9, "end": 64, "numTokens": 2}, {"start": 1, "end": 8, "numTokens": 4}]
    with_schedule = {"method": "eagle3", "model": "d", "numSpeculativeTokensPerBatchSize": schedule}
    assert short_config(SpeculativeSpec.model_validate(with_schedule)) == "eagle3 k=4/2"
    assert short_config(SpeculativeSpec.model_validate({"method": "ngram"})) == "ngram k=5"
    assert short_config(SpeculativeSpec.model_validate({"method": "none"})) == "no speculation"

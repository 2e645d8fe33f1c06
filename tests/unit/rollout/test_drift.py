"""Drift after promotion: the pure comparison (on simulated vLLM engines) and the state machine around it."""

from dataclasses import replace
from datetime import timedelta
from typing import Any

from specfleet.api.spec import DriftSpec, Guardrails
from specfleet.api.status import ConditionStatus, DriftReference, Phase
from specfleet.api.vocabulary import Track
from specfleet.judge import TrackEvidence, drift, measurements
from specfleet.render.manifests import revision
from specfleet.rollout import FleetLook

import judge_roc
from judgekit import track
from rolloutkit import T0, Fleet, healthy_fleet, measured, paying

SETTINGS = DriftSpec()
GUARDS = Guardrails()
WINDOW = 60.0


def windows(
    knobs: dict[str, Any], seed: int, count: int, start: float = 30.0, width: float = WINDOW
) -> list[TrackEvidence]:
    """`count` windows of `width` seconds of evidence from 3 simulated stable pods (EAGLE-3, k=4) with these
    knobs."""
    pods = [judge_roc.engine("stable", {**judge_roc.BASE, "load": 4.0, **knobs}, seed + i) for i in range(3)]
    shots = []
    for n in range(count + 1):
        for pod in pods:
            pod.advance_to(start + n * width)
        shots.append(judge_roc.snapshot([p.metrics for p in pods]))
    return [judge_roc.evidence(shots[n + 1], shots[n], width, True) for n in range(count)]


def reference_of(evidence: TrackEvidence) -> DriftReference:
    m = measurements(evidence)
    return DriftReference(
        revision="r1",
        time=T0,
        acceptance_alpha=m.acceptance_alpha,
        token_latency_p95_seconds=m.token_latency_p95_seconds,
        requests_per_pod_per_second=m.requests_per_pod_per_second,
        prompt_tokens_per_request=m.prompt_tokens_per_request,
        output_tokens_per_request=m.output_tokens_per_request,
    )


def test_an_unchanged_fleet_with_noise_never_drifts_for_the_looks_in_a_row_over_30_simulated_minutes() -> None:
    looks = windows({"noise": 0.05}, seed=1, count=31)
    reference = reference_of(looks[0])  # what it measured as a canary
    checks = [drift(SETTINGS, reference, e, GUARDS, 0.99) for e in looks[1:]]
    verdicts = [c.drifted for c in checks]
    run = longest = 0
    for verdict in verdicts:
        run = run + 1 if verdict else 0
        longest = max(longest, run)
    assert longest < SETTINGS.looks, verdicts
    assert verdicts.count(False) > len(verdicts) // 2  # and it is mostly judged, not left undecided
    assert all(c.profile is not None and c.profile.shifted == [] for c in checks)  # the same length mix


def test_a_drafter_whose_acceptance_falls_drifts_every_look() -> None:
    reference = reference_of(windows({}, seed=2, count=1)[0])
    for evidence in windows({"acceptance": 0.5}, seed=3, count=3, start=600):
        check = drift(SETTINGS, reference, evidence, GUARDS, 0.99)
        assert check.drifted, check.reasons
        assert any("acceptance alpha" in r and "below the drop limit" in r for r in check.reasons)


def test_slower_steps_at_the_same_load_drift_on_latency() -> None:
    reference = reference_of(track(seed=4, alpha=0.8, requests=1500, token_ms=5.0))
    check = drift(SETTINGS, reference, track(seed=5, alpha=0.8, requests=1500, token_ms=7.5), GUARDS, 0.99)
    assert check.drifted and any("per-token p95" in r for r in check.reasons)


def test_at_twice_the_load_latency_is_not_compared_and_the_shift_is_reported() -> None:
    reference = reference_of(track(seed=6, alpha=0.8, requests=1500, token_ms=5.0))
    busy = track(seed=7, alpha=0.8, requests=1500, token_ms=7.5, rate_per_pod=8.0)
    check = drift(SETTINGS, reference, busy, GUARDS, 0.99)
    assert check.drifted is None and check.load_ratio is not None and check.load_ratio > 1.9 and check.load_shifted
    assert any("not comparable" in r for r in check.reasons)


def test_the_same_load_read_over_one_scrape_interval_is_never_a_load_shift() -> None:
    """The first look after a roll holds a scrape or two of the new pods' samples (each counted from its first). A
    rate of a few dozen requests strays 0.75x or 1.3x from promotion's by chance alone: no traffic shift (CI
    named one, 0.75x, on the first look after a promotion)."""
    reference = reference_of(windows({}, seed=2, count=1)[0])
    checks = [drift(SETTINGS, reference, e, GUARDS, 0.99) for e in windows({}, seed=3, count=60, start=600, width=5)]
    ratios = [c.load_ratio for c in checks if c.load_ratio is not None]
    assert min(ratios) < 0.8 or max(ratios) > 1.25, ratios  # point estimates that leave the band
    assert not any(c.load_shifted for c in checks), ratios


def test_a_longer_output_mix_is_a_traffic_shift_and_latency_is_not_compared() -> None:
    reference = reference_of(windows({}, seed=2, count=1)[0])  # 256 output tokens per request on average
    for evidence in windows({"output_tokens": 768}, seed=3, count=3, start=600):
        check = drift(SETTINGS, reference, evidence, GUARDS, 0.99)
        assert check.profile is not None and check.profile.shifted == ["output"], check
        assert check.drifted is None and not any("per-token p95" in r for r in check.reasons), check.reasons
        assert any("output tokens per request" in r and "not comparable" in r for r in check.reasons)
        assert any("acceptance alpha" in r for r in check.reasons)  # acceptance is still judged


def test_a_longer_prompt_mix_slows_every_token_and_is_not_taken_for_drift() -> None:
    """Four times longer prompts put more prefill into the decoding steps: the p95 rises past the ceiling
    with an unchanged config. Without the length mix at promotion that reads as drift; with it, it is a shift."""
    reference = reference_of(windows({}, seed=2, count=1)[0])
    blind = reference.model_copy(update={"prompt_tokens_per_request": None, "output_tokens_per_request": None})
    looks = windows({"prompt_tokens": 2048}, seed=3, count=3, start=600)
    assert any(drift(SETTINGS, blind, e, GUARDS, 0.99).drifted for e in looks)
    for evidence in looks:
        check = drift(SETTINGS, reference, evidence, GUARDS, 0.99)
        assert check.drifted is None and check.profile is not None and check.profile.shifted == ["prompt"], check


def test_a_mix_within_the_band_is_recorded_and_latency_is_judged() -> None:
    reference = reference_of(windows({}, seed=2, count=1)[0])
    for evidence in windows({"output_tokens": 320}, seed=3, count=3, start=600):  # 1.25x the output tokens
        check = drift(SETTINGS, reference, evidence, GUARDS, 0.99)
        assert check.profile is not None and check.profile.shifted == [], check
        assert check.profile.output_tokens_ratio is not None and check.profile.output_tokens_ratio > 1.1
        assert check.drifted is False and any("per-token p95" in r for r in check.reasons), check.reasons


def test_too_few_requests_give_no_mix() -> None:
    reference = reference_of(REFERENCE_EVIDENCE)
    few = mixed(track(seed=8, alpha=0.8, requests=GUARDS.min_requests - 1), prompt=512, output=768)
    assert drift(SETTINGS, reference, few, GUARDS, 0.99).profile is None


# -- the state machine --------------------------------------------------------------------------------------

ROLLOUT = {
    "steps": [{"weight": 50, "pause": {"duration": "1m"}}],
    "analysis": {"interval": "1m", "window": "1m"},
    "drift": {"minDwell": "2m", "looks": 2},
}


def promoted_fleet(**drift_settings: Any) -> Fleet:
    """A guarded fleet whose k=2 canary (alpha 0.8 measured) was promoted over the base k=4."""
    rollout = {**ROLLOUT, "drift": {**ROLLOUT["drift"], **drift_settings}}
    fleet = healthy_fleet(rollout=rollout)
    fleet.guarded = True
    fleet.change(rollout=rollout, speculative={"numSpeculativeTokens": 2})
    fleet.step()
    fleet.converge()
    fleet.wait(60)
    analysis = measured(fleet, 0.9).model_copy(update={"canary": measurements(REFERENCE_EVIDENCE)})
    fleet.step(analysis)
    fleet.converge()
    assert fleet.status.phase is Phase.HEALTHY and fleet.status.stable_revision == revision(fleet.spec)
    return fleet


def mixed(evidence: TrackEvidence, *, prompt: float, output: float) -> TrackEvidence:
    """The evidence with these prompt and output tokens per finished request in vLLM's token counters."""
    return replace(evidence, prompt_tokens=prompt * evidence.requests, generation_tokens=output * evidence.requests)


REFERENCE_EVIDENCE = mixed(track(seed=20, alpha=0.8, requests=1500), prompt=512, output=256)


def look(fleet: Fleet, evidence: TrackEvidence) -> None:
    fleet.now += timedelta(minutes=1)
    assert fleet.step().fleet_look_due
    assert fleet.status.stable_revision is not None
    seen = FleetLook(fleet.now, fleet.status.stable_revision, measurements(evidence), evidence)
    fleet.step_with(fleet_look=seen)


def test_promotion_records_the_reference_and_looks_wait_for_the_dwell() -> None:
    fleet = promoted_fleet()
    assert fleet.status.drift is not None and fleet.status.drift.reference is not None
    assert fleet.status.drift.reference.acceptance_alpha == measurements(REFERENCE_EVIDENCE).acceptance_alpha
    look(fleet, track(seed=21, alpha=0.4, requests=1500))
    assert fleet.status.drift is not None and "minDwell" in fleet.status.drift.message
    assert paying(fleet) is None


def test_drift_for_the_looks_in_a_row_sets_the_condition_and_recovery_clears_it() -> None:
    fleet = promoted_fleet()
    fleet.now += timedelta(minutes=2)
    look(fleet, track(seed=22, alpha=0.4, requests=1500))
    assert paying(fleet) is None  # one look is not enough
    look(fleet, track(seed=23, alpha=0.4, requests=1500))
    assert paying(fleet) is ConditionStatus.FALSE and "SpeculationNotPaying" in fleet.events
    assert fleet.step().target(Track.CANARY) is None  # onDrift: Alert only
    look(fleet, track(seed=24, alpha=0.8, requests=1500))
    look(fleet, track(seed=25, alpha=0.8, requests=1500))
    assert paying(fleet) is ConditionStatus.TRUE and "SpeculationPayingAgain" in fleet.events


def test_on_drift_rollback_canaries_the_previous_config_and_serves_it_while_the_spec_stays() -> None:
    fleet = promoted_fleet(onDrift="Rollback")
    drifted = fleet.status.stable_revision
    fleet.now += timedelta(minutes=2)
    for seed in (30, 31):
        look(fleet, track(seed=seed, alpha=0.4, requests=1500))
    assert "DriftRollback" in fleet.events
    decision = fleet.step()
    canary = fleet.status.canary_revision
    assert canary is not None and canary != drifted
    assert (
        decision.target(Track.CANARY) is not None
        and decision.target(Track.CANARY).serving["speculative"]["numSpeculativeTokens"] == 4
    )
    fleet.converge()
    fleet.wait(60)
    fleet.step(measured(fleet, 1.0))
    fleet.converge()
    assert fleet.status.stable_revision == canary and fleet.status.phase is Phase.HEALTHY
    assert fleet.step().target(Track.CANARY) is None  # the spec still says k=2, but the reverted config is served


def traffic_shifts(fleet: Fleet, evidence: TrackEvidence) -> list[str]:
    """One look; the messages of the TrafficShifted events it emitted."""
    look(fleet, evidence)
    assert fleet.last is not None
    return [e.message for e in fleet.last.events if e.reason == "TrafficShifted"]


def test_a_shift_of_the_output_mix_is_recorded_and_named_once_per_shift() -> None:
    fleet = promoted_fleet()
    fleet.now += timedelta(minutes=2)
    longer = [traffic_shifts(fleet, mixed(track(seed=s, alpha=0.8), prompt=512, output=768)) for s in (40, 41, 42)]
    assert len(longer[0]) == 1 and "output tokens per request 768 (3.00x" in longer[0][0], longer
    assert longer[1:] == [[], []]  # the same shift is not named again
    drift_status = fleet.status.drift
    assert drift_status is not None and drift_status.profile is not None
    assert drift_status.profile.shifted == ["output"] and drift_status.profile.output_tokens_ratio == 3.0
    assert drift_status.profile.prompt_tokens_ratio == 1.0
    assert "not comparable" in drift_status.message and "per-token p95" not in drift_status.message
    assert paying(fleet) is None  # a shifted mix with alpha as promoted counts for neither
    assert traffic_shifts(fleet, track(seed=43, alpha=0.8, requests=50)) == []  # too few: the last mix stays
    assert fleet.status.drift is not None and fleet.status.drift.profile == drift_status.profile
    assert traffic_shifts(fleet, mixed(track(seed=44, alpha=0.8), prompt=512, output=260)) == []  # back
    assert fleet.status.drift is not None and fleet.status.drift.profile is not None
    assert fleet.status.drift.profile.shifted == []
    again = traffic_shifts(fleet, mixed(track(seed=45, alpha=0.8), prompt=1024, output=768))
    assert len(again) == 1 and "prompt tokens per request 1024" in again[0] and "output tokens" in again[0]


def test_a_load_shift_is_named_once_and_a_rate_over_few_requests_is_no_shift() -> None:
    fleet = promoted_fleet()
    fleet.now += timedelta(minutes=2)
    few = mixed(track(seed=60, alpha=0.8, requests=120, rate_per_pod=3.0), prompt=512, output=256)
    assert traffic_shifts(fleet, few) == []  # 0.75x on 120 requests: maybe the same load
    assert fleet.status.drift is not None and fleet.status.drift.load_ratio == 0.75
    assert not fleet.status.drift.load_shifted and "not comparable" in fleet.status.drift.message
    halved = [mixed(track(seed=s, alpha=0.8, rate_per_pod=2.0), prompt=512, output=256) for s in (61, 62)]
    shifts = [traffic_shifts(fleet, evidence) for evidence in halved]
    assert len(shifts[0]) == 1 and "per-pod load is 0.50x" in shifts[0][0] and shifts[1] == [], shifts
    assert fleet.status.drift is not None and fleet.status.drift.load_shifted


def test_a_mix_within_the_band_emits_nothing_and_latency_is_judged() -> None:
    fleet = promoted_fleet()
    fleet.now += timedelta(minutes=2)
    for seed in (50, 51):
        assert traffic_shifts(fleet, mixed(track(seed=seed, alpha=0.8), prompt=600, output=320)) == []
    assert fleet.status.drift is not None and fleet.status.drift.profile is not None
    assert fleet.status.drift.profile.shifted == [] and "per-token p95" in fleet.status.drift.message
    assert paying(fleet) is ConditionStatus.TRUE

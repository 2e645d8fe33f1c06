"""Builders for driving the pure rollout state machine: a fake fleet with a fake clock, and the analyses it is fed."""

from datetime import UTC, datetime, timedelta
from typing import Any

from specfleet.api.spec import SpeculativeDeploymentSpec
from specfleet.api.status import Analysis, ConditionStatus, Measurements, Phase, SpeculativeDeploymentStatus, Verdict
from specfleet.api.vocabulary import ConditionType, Track
from specfleet.render.manifests import revision
from specfleet.rollout import Decision, Observation, TrackObservation, decide

from bad_specs import BASE, merged

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
"""The fake clock's start."""
EXPERIMENT_ROLLOUT = {
    "steps": [{"weight": 25, "pause": {"duration": "1m"}}, {"weight": 50, "pause": {"duration": "1m"}}],
    "analysis": {"interval": "30s", "window": "1m"},
}
"""`spec.rollout` of the experiments' fleets: two one-minute steps, one-minute analysis windows."""
STABLE_TOKEN_SECONDS = 0.010
"""Stable's mean per-token latency in `measured` analyses."""


def make_spec(**patch: Any) -> SpeculativeDeploymentSpec:
    """A spec: bad_specs.BASE with two steps (25% for 1m, 50% for 2m), then `patch` over `spec`."""
    rollout = {"steps": [{"weight": 25, "pause": {"duration": "1m"}}, {"weight": 50, "pause": {"duration": "2m"}}]}
    return SpeculativeDeploymentSpec.model_validate(merged(BASE, {"spec": {"rollout": rollout, **patch}})["spec"])


class Fleet:
    """A fake world: Deployments become Ready when told, the clock moves when told."""

    def __init__(self, spec: SpeculativeDeploymentSpec, guarded: bool = False) -> None:
        self.spec = spec
        self.status = SpeculativeDeploymentStatus()
        self.now = T0
        self.generation = 1
        self.commands: dict[str, str] = {}
        self.guarded = guarded
        self.stable = TrackObservation()
        self.canary = TrackObservation()
        self.holdback = TrackObservation()
        self.events: list[str] = []
        self.last: Decision | None = None

    def observe(self, analysis: Analysis | None = None, **more: Any) -> Observation:
        """What the shell would observe of this world now."""
        return Observation(
            **{
                "now": self.now,
                "generation": self.generation,
                "desired_revision": revision(self.spec),
                "tracks": {Track.STABLE: self.stable, Track.CANARY: self.canary, Track.HOLDBACK: self.holdback},
                "commands": dict(self.commands),
                "analysis": analysis,
                "prometheus": self.guarded,
                **more,
            }
        )

    def decided_spec(self) -> SpeculativeDeploymentSpec:
        """The spec as the operator sees it: an unguarded fleet (no Prometheus) is one whose author said so."""
        if self.guarded:
            return self.spec
        return self.spec.model_copy(update={"rollout": self.spec.rollout.model_copy(update={"unguarded": True})})

    def step(self, analysis: Analysis | None = None) -> Decision:
        """One pass of the state machine over what is observed now."""
        return self.step_with(analysis)

    def step_with(self, analysis: Analysis | None = None, **observed: Any) -> Decision:
        """One pass, with more observed than the tracks (e.g. `preflights`)."""
        decision = decide(self.decided_spec(), self.status, self.observe(analysis, **observed))
        self.status = decision.status
        self.events += [e.reason for e in decision.events]
        for done in decision.done_commands:
            self.commands.pop(done, None)
        self.last = decision
        return decision

    def converge(self) -> Decision:
        """Let the Deployments reach what the decision asked for, then decide again."""
        decision = self.last or self.step()
        if decision.target(Track.STABLE):
            always = decision.target(Track.HOLDBACK) is not None  # stable's pods carry the always-served label then
            self.stable = TrackObservation(
                decision.target(Track.STABLE).revision,
                decision.target(Track.STABLE).replicas,
                settled=True,
                always_served=always,
            )
        self.holdback = (
            TrackObservation(
                decision.target(Track.HOLDBACK).revision,
                decision.target(Track.HOLDBACK).replicas,
                settled=True,
                always_served=True,
            )
            if decision.target(Track.HOLDBACK)
            else TrackObservation()
        )
        self.canary = (
            TrackObservation(
                decision.target(Track.CANARY).revision, decision.target(Track.CANARY).replicas, settled=True
            )
            if decision.target(Track.CANARY)
            else TrackObservation()
        )
        return self.step()

    def change(self, **patch: Any) -> None:
        """A user edits the spec: `make_spec(**patch)`, a new generation."""
        self.spec = make_spec(**patch)
        self.generation += 1

    def wait(self, seconds: float) -> Decision:
        """Move the clock on, then decide."""
        self.now += timedelta(seconds=seconds)
        return self.step()


def healthy_fleet(**patch: Any) -> Fleet:
    """A Fleet of `make_spec(**patch)` created and converged: Healthy, no canary."""
    fleet = Fleet(make_spec(**patch))
    fleet.step()
    fleet.converge()
    assert fleet.status.phase is Phase.HEALTHY
    return fleet


def guarded_canary(**rollout: Any) -> Fleet:
    """A guarded Healthy fleet whose k changed: its canary Ready at the first step (25%, 1m, then `rollout`)."""
    settings = {"steps": [{"weight": 25, "pause": {"duration": "1m"}}], **rollout}
    fleet = healthy_fleet(rollout=settings)
    fleet.guarded = True
    fleet.change(rollout=settings, speculative={"numSpeculativeTokens": 2})
    fleet.step()
    fleet.converge()
    return fleet


def analysis(fleet: Fleet, verdict: Verdict, acceptance: float = 0.7) -> Analysis:
    """An analysis of the fleet's canary at its current step with this verdict and acceptance rate."""
    assert fleet.status.canary_revision is not None
    return Analysis(
        time=fleet.now,
        revision=fleet.status.canary_revision,
        step=fleet.status.current_step or 0,
        verdict=verdict,
        reasons=[] if verdict is Verdict.PASS else [f"acceptance {acceptance} < 0.6"],
        canary=Measurements(acceptance_rate=acceptance),
    )


def measured(
    fleet: Fleet, token_ratio: float, verdict: Verdict = Verdict.PASS, seconds: int = 60, revision: str | None = None
) -> Analysis:
    """An analysis of the live canary (or of the slice at `revision`) over `seconds` whose mean per-token
    latency is `token_ratio` x stable's."""
    measured_revision = revision or fleet.status.canary_revision
    assert measured_revision is not None
    return Analysis(
        time=fleet.now,
        revision=measured_revision,
        step=fleet.status.current_step or 0,
        verdict=verdict,
        reasons=[] if verdict is Verdict.PASS else ["p95 per-token latency +40%"],
        evidence_seconds=seconds,
        canary=Measurements(
            token_latency_mean_seconds=STABLE_TOKEN_SECONDS * token_ratio, generation_tokens_per_pod_per_second=100.0
        ),
        stable=Measurements(
            token_latency_mean_seconds=STABLE_TOKEN_SECONDS, generation_tokens_per_pod_per_second=100.0
        ),
    )


def paying(fleet: Fleet) -> ConditionStatus | None:
    """The fleet's SpeculationPaying condition, if it has one."""
    return next((c.status for c in fleet.status.conditions if c.type == ConditionType.SPECULATION_PAYING), None)

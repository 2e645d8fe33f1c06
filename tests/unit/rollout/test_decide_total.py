"""For every rollout the CRD's schema admits, `decide` drives a canary to its end without raising.

`spec.rollout` is drawn from the committed CRD (`schema_strategies`, biased to the bounds), kept when the
models admit it; a config change then starts a canary whose pods come Ready, and the analyses hypothesis
draws (every verdict, any evidence length) arrive at drawn times, with or without a Prometheus (without one,
Error verdicts, as the shell gives). Every pass returns a Decision whose status survives a JSON round trip,
as the shell writes it, and without a Prometheus no canary is promoted unless the spec says `unguarded`.
"""

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from specfleet.api.spec import SpeculativeDeploymentSpec
from specfleet.api.status import Analysis, Outcome, SpeculativeDeploymentStatus, Verdict
from specfleet.api.vocabulary import Track
from specfleet.render.manifests import revision
from specfleet.rollout import Observation, TrackObservation, decide
from specfleet.rollout.types import NO_PROMETHEUS

from bad_specs import BASE, merged
from repokit import ROOT
from schema_strategies import from_schema

CRD = yaml.safe_load((ROOT / "crds" / "specfleet.io_speculativedeployments.yaml").read_text())
ROLLOUT = CRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["rollout"]
T0 = datetime(2026, 12, 3, 12, tzinfo=UTC)


def admitted(rollout: dict[str, Any], k: int) -> SpeculativeDeploymentSpec:
    patch = {"replicas": 2, "speculative": {"numSpeculativeTokens": k}, "rollout": rollout}
    try:
        return SpeculativeDeploymentSpec.model_validate(merged(BASE, {"spec": patch})["spec"])
    except ValidationError:
        assume(False)
        raise


def track(rev: str | None, pods: int) -> TrackObservation:
    return TrackObservation(rev, pods, settled=True, replicas=pods, serving=pods, placed=pods)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    rollout=from_schema(ROLLOUT),
    prometheus=st.booleans(),
    looks=st.lists(
        st.tuples(st.sampled_from(list(Verdict)), st.integers(0, 10**7), st.integers(0, 10**6)), min_size=1, max_size=8
    ),
)
def test_every_admitted_rollout_is_decided_to_the_end(
    rollout: dict[str, Any], prometheus: bool, looks: list[tuple[Verdict, int, int]]
) -> None:
    first, second = admitted(rollout, k=4), admitted(rollout, k=3)
    status = decide(
        first, SpeculativeDeploymentStatus(), Observation(T0, 1, revision(first), prometheus=prometheus)
    ).status
    now = T0
    for verdict, seconds_later, evidence_seconds in looks:
        now += timedelta(seconds=seconds_later)
        canary = status.canary_revision
        analysis = None
        if canary is not None:  # without a Prometheus the shell answers every due analysis with an Error
            analysis = Analysis(
                time=now,
                revision=canary,
                step=status.current_step or 0,
                look=status.analyses + 1,
                verdict=verdict if prometheus else Verdict.ERROR,
                reasons=[] if prometheus else [NO_PROMETHEUS],
                evidence_seconds=evidence_seconds,
            )
        observed = Observation(
            now,
            2,
            revision(second),
            tracks={
                Track.STABLE: track(status.stable_revision, 2),
                Track.CANARY: track(canary, 2) if canary else TrackObservation(),
            },
            analysis=analysis,
            prometheus=prometheus,
        )
        decision = decide(second, status, observed)
        status = SpeculativeDeploymentStatus.model_validate(json.loads(decision.status.model_dump_json()))
        if not prometheus and not second.rollout.unguarded:  # fail closed: never promoted unjudged
            assert all(entry.outcome is not Outcome.PROMOTED for entry in status.history), status.history

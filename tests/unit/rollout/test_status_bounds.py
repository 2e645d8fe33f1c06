"""A long-lived object's status stays bounded: 10,000 rollouts on one object, each ending in history."""

import json
from datetime import UTC, datetime, timedelta

import pytest

from specfleet.api.resource import SpeculativeDeployment
from specfleet.api.status import HistoryEntry, Outcome, SpeculativeDeploymentStatus
from specfleet.api.vocabulary import Command, Track
from specfleet.rollout import Observation, TrackObservation, decide
from specfleet.rollout.state import Pass, kept_serving

from bad_specs import BASE, merged

START = datetime(2026, 11, 29, 12, tzinfo=UTC)
ROLLOUTS = 10_000
STATUS_BUDGET = 256 * 1024
"""Bytes of status JSON: well under etcd's 1.5 MiB per object, with the spec beside it."""


def size(status: SpeculativeDeploymentStatus) -> int:
    return len(json.dumps(status.model_dump(mode="json", by_alias=True, exclude_none=True)))


LARGEST_ENV = [{"name": f"V{i}", "value": "x" * 4096} for i in range(64)]
"""The most environment the schema admits: 64 variables of 4 KiB, in the serving part of the spec."""


ETCD_REQUEST_BYTES = 1536 * 1024
"""etcd's default request limit: the whole object (spec, status, metadata) must fit in it."""
ANNOTATIONS_BYTES = 256 * 1024
"""The API server's limit on an object's annotations, the rest of what an object can hold besides spec and status."""


@pytest.mark.parametrize(
    ("env", "rollouts"), [([], ROLLOUTS), (LARGEST_ENV, 200)], ids=["small-spec", "largest-env"]
)  # fmt: skip
def test_ten_thousand_aborted_canaries_leave_a_status_of_bounded_size(env: list[dict[str, str]], rollouts: int) -> None:
    """Each rollout: a new revision becomes a canary, its pod is Ready, a user aborts it with a long reason.
    With the largest environment every history entry kept a copy of it (12.9 MiB of status at 50 entries, which
    etcd refuses); now only the configs undo can return to, within a budget, beside stable's own."""
    fleet = {"spec": {"rollout": {"historyLimit": 50}, "engine": {"env": env}}}
    spec = SpeculativeDeployment.from_mapping(merged(BASE, fleet)).spec
    status, now, sizes = SpeculativeDeploymentStatus(), START, []
    ready = TrackObservation(revision="r00000", ready=spec.replicas, settled=True)
    status = decide(
        spec, status, Observation(now=now, generation=1, desired_revision="r00000", tracks={Track.STABLE: ready})
    ).status
    for n in range(1, rollouts + 1):
        rev = f"r{n:05d}"  # revisions of one length, as real ones are
        canary = TrackObservation(revision=rev, ready=spec.replicas)
        abort = {Command.ABORT.annotation: f"{'x' * 2000} revision={rev}"}
        for commands in ({}, abort):
            now += timedelta(seconds=30)
            obs = Observation(
                now=now,
                generation=n,
                desired_revision=rev,
                tracks={Track.STABLE: ready, Track.CANARY: canary},
                commands=commands,
            )
            status = decide(spec, status, obs).status
        assert status.history[-1].revision == rev and status.history[-1].outcome == "Aborted"
        if n % 10 == 0:
            sizes.append(size(status))
    assert len(status.history) == 50
    spec_bytes = len(json.dumps(spec.model_dump(mode="json", by_alias=True, exclude_none=True)))
    assert max(sizes) + spec_bytes + ANNOTATIONS_BYTES < ETCD_REQUEST_BYTES, (max(sizes), spec_bytes)
    assert env or max(sizes) < STATUS_BUDGET, max(sizes)
    generations = len(status.conditions) + 1  # each condition's observedGeneration, and the status's
    assert max(sizes[10:]) <= max(sizes[:10]) + 2 * generations  # history full (50): only they gain digits (3 -> 5)


def entry(n: int, outcome: Outcome, serving_bytes: int) -> HistoryEntry:
    serving = {"engine": {"env": [{"name": "V", "value": "x" * serving_bytes}]}}
    return HistoryEntry(revision=f"r{n}", outcome=outcome, time=START, serving=serving)


def test_the_history_keeps_the_newest_serving_snapshots_within_its_budget() -> None:
    """Undo needs the configs that served as stable; the newest first, the oldest dropped past the budget."""
    history = [entry(n, Outcome.PROMOTED, 100 * 1024) for n in range(5)]
    kept = kept_serving(history)
    assert [e.serving is not None for e in kept] == [False, False, False, True, True]
    assert [e.revision for e in kept] == [e.revision for e in history]  # only snapshots go, never entries
    alone = kept_serving([entry(0, Outcome.PROMOTED, 400 * 1024)])
    assert alone[0].serving is not None  # the newest is kept whatever its size: undo to the last stable


def test_a_rolled_back_canary_keeps_no_serving_snapshot() -> None:
    spec = SpeculativeDeployment.from_mapping(BASE).spec
    status = SpeculativeDeploymentStatus(stable_revision="r0", canary_revision="r1")
    obs = Observation(now=START, generation=1, desired_revision="r1")
    p = Pass(spec=spec, obs=obs, status=status)
    assert p.recording(Outcome.ROLLED_BACK, "r1", "guardrail failed").status.history[-1].serving is None
    assert p.recording(Outcome.PROMOTED, "r1", "all steps passed").status.history[-1].serving is not None

"""A long-lived object's status stays bounded: 10,000 rollouts on one object, each ending in history."""

import json
from datetime import UTC, datetime, timedelta

from specfleet.api.resource import SpeculativeDeployment
from specfleet.api.status import SpeculativeDeploymentStatus
from specfleet.api.vocabulary import Command
from specfleet.rollout import Observation, TrackObservation, decide

from bad_specs import BASE, merged

START = datetime(2026, 11, 29, 12, tzinfo=UTC)
ROLLOUTS = 10_000
STATUS_BUDGET = 256 * 1024
"""Bytes of status JSON: well under etcd's 1.5 MiB per object, with the spec beside it."""


def size(status: SpeculativeDeploymentStatus) -> int:
    return len(json.dumps(status.model_dump(mode="json", by_alias=True, exclude_none=True)))


def test_ten_thousand_aborted_canaries_leave_a_status_of_bounded_size() -> None:
    """Each rollout: a new revision becomes a canary, its pod is Ready, a user aborts it with a long reason."""
    spec = SpeculativeDeployment.from_mapping(merged(BASE, {"spec": {"rollout": {"historyLimit": 50}}})).spec
    status, now, sizes = SpeculativeDeploymentStatus(), START, []
    ready = TrackObservation(revision="r00000", ready=spec.replicas, settled=True)
    status = decide(spec, status, Observation(now=now, generation=1, desired_revision="r00000", stable=ready)).status
    for n in range(1, ROLLOUTS + 1):
        rev = f"r{n:05d}"  # revisions of one length, as real ones are
        canary = TrackObservation(revision=rev, ready=spec.replicas)
        abort = {Command.ABORT.annotation: f"{'x' * 2000} revision={rev}"}
        for commands in ({}, abort):
            now += timedelta(seconds=30)
            obs = Observation(
                now=now, generation=n, desired_revision=rev, stable=ready, canary=canary, commands=commands
            )
            status = decide(spec, status, obs).status
        assert status.history[-1].revision == rev and status.history[-1].outcome == "Aborted"
        if n % 10 == 0:
            sizes.append(size(status))
    assert len(status.history) == 50
    assert max(sizes) < STATUS_BUDGET, max(sizes)
    assert max(sizes[10:]) <= max(sizes[:10]) + 16  # once history is full (50) only counters gain digits

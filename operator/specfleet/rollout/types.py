"""What the state machine is given (an observation) and what it returns (a decision)."""

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from specfleet.api.status import (
    Analysis,
    Condition,
    ConditionStatus,
    Measurements,
    SpeculativeDeploymentStatus,
)
from specfleet.api.vocabulary import ConditionType, Track
from specfleet.judge import TrackEvidence

DRAIN = timedelta(seconds=10)
"""Time between taking traffic off a canary and deleting its pods (endpoints and routes catch up)."""


@dataclass(frozen=True)
class ContainerCrash:
    """A container of a pod that restarted or was OOM-killed, as its pod's status reports it."""

    pod: str
    container: str
    restarts: int = 0
    """The kubelet's restartCount: restarts since the pod was created."""
    oom_killed: bool = False
    """Its current or last termination was `OOMKilled` (the kernel's OOM killer, or a memory limit)."""


@dataclass(frozen=True)
class TrackObservation:
    """One track's Deployment as the API server reports it (all zero when there is none)."""

    revision: str | None = None
    ready: int = 0
    settled: bool = False
    """The Deployment controller has rolled every replica to the current template."""
    unschedulable: str = ""
    """The scheduler's message for a Pending pod of this track, e.g. `Insufficient amd.com/gpu`."""
    replicas: int = 0
    """What the Deployment asks for (spec.replicas)."""
    serving: int = 0
    """Ready pods of any revision (a Deployment rolling to a new template has both)."""
    placed: int = 0
    """Pods on a node and not being deleted: they hold their GPUs."""
    terminating: int = 0
    """Deleted pods still on a node: their GPUs are not free until they are gone."""
    always_served: bool = False
    """Every Ready pod of the track carries the always-served label (so a Service selecting it keeps them)."""
    crashes: tuple[ContainerCrash, ...] = ()
    """Containers of the track's pods at `revision` that restarted or were OOM-killed. Pods of a revision
    are created for it, so for a canary these are the crashes since it started."""

    @property
    def restarts(self) -> int:
        """Container restarts over the track's pods at `revision`."""
        return sum(c.restarts for c in self.crashes)

    @property
    def oom_kills(self) -> tuple[ContainerCrash, ...]:
        """Containers whose current or last termination was an OOM kill."""
        return tuple(c for c in self.crashes if c.oom_killed)


NO_DEPLOYMENT = TrackObservation()
"""A track with no Deployment."""


@dataclass(frozen=True)
class GpuRequest:
    """GPUs a track is about to ask for: `pods` pods of `per_pod` GPUs each, of an extended resource, on the
    nodes the fleet's pods may use (`products`: the accepted product names; empty accepts any)."""

    pods: int
    per_pod: int
    resource: str
    products: tuple[str, ...] = ()

    @property
    def gpus(self) -> int:
        return self.pods * self.per_pod

    @property
    def where(self) -> str:
        return f"{' or '.join(self.products)} nodes" if self.products else "the nodes the fleet may use"


@dataclass(frozen=True)
class GpuRoom:
    """What the nodes a fleet's pods may use have free for a request (computed by `specfleet.capacity`)."""

    request: GpuRequest
    free: int
    """GPUs of the resource free on those nodes: allocatable minus what the pods on them request."""
    fitting: int
    """Pods of `per_pod` GPUs that fit, node by node (a pod's GPUs are on one node)."""
    nodes: int
    """Nodes that match: Ready, schedulable, the product accepted, their taints tolerated."""

    @property
    def fits(self) -> bool:
        """Whether the requested pods fit. A room that fits changes no decision (only a room too small is
        said), so the shell does not decide again with it."""
        return self.fitting >= self.request.pods

    def describe(self) -> str:
        """E.g. `needs 4 amd.com/gpu on AMD_Instinct_MI300X_OAM nodes, 0 free`."""
        request = self.request
        needs = f"needs {request.gpus} {request.resource} on {request.where}"
        return f"{needs}, {self.free} free" if self.nodes else f"{needs}, and none is Ready, schedulable and tolerated"


NO_PROMETHEUS_REASON = "NoPrometheus"
NO_PROMETHEUS = (
    "no Prometheus is configured (the operator's --prometheus-url, chart value operator.prometheusUrl, or "
    "spec.prometheus.url): a canary waits at its first step, analysis.onProviderError applies, and it is never "
    "promoted unjudged; spec.rollout.unguarded: true canaries on pauses alone"
)
"""Why a judged canary cannot be judged: the Guarded condition's message, and its analyses' Error reason."""


@dataclass(frozen=True)
class Watch:
    """The fail-only check of the live canary at a new scrape (`judge.watch`), as the shell ran it. A decision
    takes in only a failure; the shell looks again at `next_at` (a watch that found nothing changes no
    decision, so it is not decided again)."""

    revision: str
    next_at: datetime | None = None
    """When the canary's next scrape is due in Prometheus (its newest sample plus the scrape interval, and a
    moment to store it): the next watch. None when the operator cannot ask Prometheus."""
    failure: Analysis | None = None
    """A Fail verdict when a guardrail surely failed over a trailing range ending at that scrape; else None
    (a watch neither passes nor holds a canary)."""


@dataclass(frozen=True)
class Observation:
    """Everything the decision needs from outside, gathered by the shell."""

    now: datetime
    generation: int
    desired_revision: str | None
    """The revision the spec renders to; None when it cannot be rendered (see `problems`)."""
    problems: tuple[str, ...] = ()
    tracks: Mapping[Track, TrackObservation] = field(default_factory=dict)
    """Each single track's Deployment (`SINGLE_TRACKS`); a track without one may be left out (see `track`)."""
    commands: Mapping[str, str] = field(default_factory=dict)
    """Command annotations present on the object (`specfleet.io/promote` -> value)."""
    analysis: Analysis | None = None
    """A fresh analysis of the live canary (set by the shell when one was due and ran)."""
    watch: Watch | None = None
    """The live canary's watch (set by the shell when one was due and ran)."""
    prometheus: bool = True
    """Whether a Prometheus is configured for the fleet (its spec's or the operator's). Without one a judged
    canary's analyses are Error verdicts (see `Pass.judged`), and nothing is measured after promotion."""
    routed: bool = False
    """Whether traffic is split by an HTTPRoute's weights (so a 100% step leaves stable without traffic)."""
    fleet_look: "FleetLook | None" = None
    """A fresh measurement of the stable track while Healthy (set by the shell when one was due)."""
    preflights: Mapping[str, "PreflightObservation"] = field(default_factory=dict)
    """The fleet's preflight Jobs, by the revision they check."""
    candidates: Mapping[int, TrackObservation] = field(default_factory=dict)
    """The side-by-side candidates' Deployments, by candidate index."""
    candidate_analyses: Mapping[int, Analysis] = field(default_factory=dict)
    """Fresh analyses of side-by-side candidates (set by the shell for those that were due)."""
    room: GpuRoom | None = None
    """What the nodes have free for the pods the canary is about to ask for (set by the shell when the
    decision asked, `Decision.capacity_due`; None when it did not, or the operator may not read nodes)."""

    def track(self, track: Track) -> TrackObservation:
        """What a track's Deployment shows: all zero when there is none."""
        return self.tracks.get(track, NO_DEPLOYMENT)


@dataclass(frozen=True)
class TrackTarget:
    """What one track's Deployment should be."""

    revision: str
    serving: dict[str, Any]
    replicas: int


@dataclass(frozen=True)
class Event:
    type: str
    reason: str
    message: str


@dataclass(frozen=True)
class Decision:
    status: SpeculativeDeploymentStatus
    targets: Mapping[Track, TrackTarget]
    """What each single track's Deployment should be; a track left out has none (the shell removes it), unless
    `hold_children` leaves every child as it is (then stable is left out too)."""
    canary_traffic: bool
    """Whether the Service (or route) sends traffic to the canary; False comes before removing it."""
    events: tuple[Event, ...] = ()
    requeue_after: timedelta | None = None
    """When to look again even if nothing changes (a pause ends, a deadline or an analysis is due)."""
    done_commands: tuple[str, ...] = ()
    """Command annotations that were acted on and can be removed."""
    analysis_due: bool = False
    """Whether the canary should be measured before the next decision."""
    watch_due: bool = False
    """Whether the canary's newest scrape should be checked for failures (`Watch`) before the next decision."""
    fleet_look_due: bool = False
    """Whether the stable track should be measured (while Healthy) before the next decision."""
    hold_children: bool = False
    """Leave every child as it is (the spec cannot be rendered, so nothing new is known)."""
    route_weights: Mapping[Track, int] = field(default_factory=dict)
    """HTTPRoute weights (percent) of the tracks beside stable, which takes the rest: the canary's is the current
    step's weight while it takes traffic, the holdback's its share (`rollout.holdback`). A track left out: 0."""
    canary_mirror: int = 0
    """Percent of stable's requests the HTTPRoute copies to the canary (a shadow step's `mirror`); 0: none."""
    preflight: TrackTarget | None = None
    """A preflight Job should exist for this revision and serving config (replicas unused); the shell
    deletes the fleet's preflight Jobs for any other revision."""
    holdback_traffic: bool = False
    """The fleet Service keeps the holdback's pods while the canary has no traffic (they and stable's carry
    the always-served label); False selects stable alone then."""
    candidates: tuple[tuple[int, TrackTarget], ...] = ()
    """The side-by-side candidates' Deployments (index, target); any other candidate Deployment goes."""
    candidate_analyses_due: tuple[int, ...] = ()
    """Side-by-side candidates to measure before the next decision."""
    keep_canary: bool = False
    """With `canary` None: leave the canary Deployment (and its Service) as they are, a retiring canary
    draining; it is deleted by a later decision."""
    retiring_replicas: int | None = None
    """With `keep_canary`: the replicas the retiring canary's Deployment keeps while its pods move back to
    stable (`rollout.maxSurge` set); None leaves them as they are."""
    capacity_due: GpuRequest | None = None
    """Pods the canary is about to ask for: the shell checks the nodes' free GPUs and decides again when they
    do not fit."""

    def target(self, track: Track) -> TrackTarget | None:
        """The track's wanted Deployment, or None for none."""
        return self.targets.get(track)

    def route_weight(self, track: Track) -> int:
        """The track's HTTPRoute weight (percent) beside stable."""
        return self.route_weights.get(track, 0)


def set_condition(
    conditions: list[Condition],
    kind: ConditionType,
    status: ConditionStatus,
    reason: str,
    message: str,
    now: datetime,
    generation: int,
) -> list[Condition]:
    """Conditions with `kind` set; lastTransitionTime moves only when the status flips."""
    previous = next((c for c in conditions if c.type == kind), None)
    since = previous.last_transition_time if previous and previous.status == status else now
    updated = Condition(
        type=kind.value,
        status=status,
        reason=reason,
        message=message,
        last_transition_time=since,
        observed_generation=generation,
    )
    return (
        [c for c in conditions if c.type != kind] + [updated]
        if previous is None
        else [updated if c.type == kind else c for c in conditions]
    )


def live_canary(status: SpeculativeDeploymentStatus) -> str | None:
    """The canary revision under judgement: set, and not already promoted (stable rolling to it)."""
    canary = status.canary_revision
    return canary if canary is not None and canary != status.stable_revision else None


class PreflightState(StrEnum):
    """Where a preflight Job is: running (or not yet started), or finished with its verdict."""

    RUNNING = "Running"
    PASSED = "Passed"
    FAILED = "Failed"


@dataclass(frozen=True)
class PreflightObservation:
    """A preflight Job of this fleet, as the API server reports it."""

    revision: str
    """The canary revision it checks (its `specfleet.io/revision` label)."""
    state: PreflightState
    message: str = ""
    """The check's own words (the pod's termination message), or the Job's condition message."""


@dataclass(frozen=True)
class FleetLook:
    """The stable track (and the holdback) measured over the last window while Healthy, or why not."""

    time: datetime
    revision: str
    stable: Measurements | None = None
    evidence: TrackEvidence | None = None
    """The counts behind `stable`, for the drift comparison's bounds."""
    holdback: TrackEvidence | None = None
    """The holdback's counts over the same window (with `rollout.holdback`)."""
    error: str | None = None

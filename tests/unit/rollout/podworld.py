"""A pod-level fake of what the state machine drives: Deployments, their ReplicaSet controller, a scheduler
on a pool of GPU slots, pods that take a tick to start and a tick to terminate (holding their GPUs).

Coarser than Kubernetes, but with the parts a move between tracks depends on: a pod is Pending while the
pool has no free slot (a terminating pod's slot is not free), a scale-down deletes pods that do not serve
first, and a Deployment whose template changed replaces its pods within its own rollingUpdate.
"""

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from specfleet.api.vocabulary import Track
from specfleet.rollout import Decision, TrackObservation

from rolloutkit import Fleet

UNSCHEDULABLE = "0/2 nodes are available: 2 Insufficient amd.com/gpu."


@dataclass
class Pod:
    track: Track
    revision: str
    state: str = "Pending"
    """Pending (no slot), Starting (placed, loading), Ready, Terminating (deleted, still holding its slot)."""

    @property
    def active(self) -> bool:
        return self.state != "Terminating"


@dataclass
class Deployment:
    revision: str
    replicas: int
    surge: int
    unavailable: int


@dataclass
class PodWorld:
    """The fake cluster under one Fleet: `tick()` lets the controllers and kubelets take one step."""

    fleet: Fleet
    slots: int
    """GPU slots (pods' worth of GPUs) in the pool: a full pool has exactly what the fleet may hold."""
    deployments: dict[Track, Deployment] = field(default_factory=dict)
    pods: list[Pod] = field(default_factory=list)
    canary_traffic: bool = False
    thief: int = 0
    """Slots another workload takes as soon as they are free (a batch job's Pending pods)."""

    def apply(self, decision: Decision) -> None:
        """What the reconciler writes: each track's Deployment replicas and template, deletions."""
        strategy = decision_strategy(self.fleet)
        for track in (Track.STABLE, Track.CANARY):
            target = decision.target(track)
            if target is not None:
                self.deployments[track] = Deployment(target.revision, target.replicas, *strategy)
        if decision.target(Track.CANARY) is None:
            if decision.keep_canary and Track.CANARY in self.deployments:
                if decision.retiring_replicas is not None:
                    self.deployments[Track.CANARY].replicas = decision.retiring_replicas
            elif Track.CANARY in self.deployments:
                del self.deployments[Track.CANARY]
        self.canary_traffic = decision.canary_traffic

    def tick(self) -> None:
        self.pods = [p for p in self.pods if p.state != "Terminating"]  # gone: their slots are free
        for pod in self.pods:
            if pod.state == "Starting":
                pod.state = "Ready"
        for track in (Track.STABLE, Track.CANARY):
            self._reconcile_replica_sets(track)
        held = sum(1 for p in self.pods if p.state != "Pending")
        free = self.slots - held - self.thief
        if free > 0 and self.thief_waiting:
            self.thief += min(free, self.thief_waiting)
            self.thief_waiting -= min(free, self.thief_waiting)
            free = self.slots - held - self.thief
        for pod in self.pods:
            if pod.state == "Pending" and free > 0:
                pod.state, free = "Starting", free - 1
        self.fleet.now += timedelta(seconds=10)

    thief_waiting: int = 0

    def _reconcile_replica_sets(self, track: Track) -> None:
        wanted = self.deployments.get(track)
        mine = [p for p in self.pods if p.track is track and p.active]
        if wanted is None:
            for pod in mine:
                pod.state = "Terminating"
            return
        old = [p for p in mine if p.revision != wanted.revision]
        new = [p for p in mine if p.revision == wanted.revision]
        if old:  # a rolling update within the Deployment's own strategy
            total = len(old) + len(new)
            ready = sum(1 for p in mine if p.state == "Ready")
            for _ in range(max(0, min(wanted.replicas - len(new), wanted.replicas + wanted.surge - total))):
                self.pods.append(Pod(track, wanted.revision))
                new.append(self.pods[-1])
            removable = max(0, ready - (wanted.replicas - wanted.unavailable))
            for pod in sorted(old, key=_deletion_order):
                if pod.state != "Ready" or removable > 0:
                    removable -= pod.state == "Ready"
                    pod.state = "Terminating"
                if len([p for p in mine if p.active]) <= wanted.replicas:
                    break
            return
        surplus = len(new) - wanted.replicas
        for pod in sorted(new, key=_deletion_order)[: max(0, surplus)]:
            pod.state = "Terminating"
        for _ in range(-surplus):
            self.pods.append(Pod(track, wanted.revision))

    def observe(self, track: Track) -> TrackObservation:
        wanted = self.deployments.get(track)
        mine = [p for p in self.pods if p.track is track]
        active = [p for p in mine if p.active]
        pending = any(p.state == "Pending" for p in active)
        terminating = sum(1 for p in mine if not p.active)
        placed = sum(1 for p in active if p.state != "Pending")
        if wanted is None:
            return TrackObservation(
                unschedulable=UNSCHEDULABLE if pending else "", placed=placed, terminating=terminating
            )
        current = [p for p in active if p.revision == wanted.revision]
        ready = sum(1 for p in current if p.state == "Ready")
        return TrackObservation(
            revision=wanted.revision,
            ready=ready,
            settled=len(current) == len(active) == wanted.replicas == ready,
            unschedulable=UNSCHEDULABLE if pending else "",
            replicas=wanted.replicas,
            serving=sum(1 for p in active if p.state == "Ready"),
            placed=placed,
            terminating=terminating,
        )

    def sync(self) -> None:
        """The fleet observes the world."""
        self.fleet.stable = self.observe(Track.STABLE)
        self.fleet.canary = self.observe(Track.CANARY)

    def serving(self) -> int:
        """Ready pods the fleet Service sends traffic to."""
        tracks = (Track.STABLE, Track.CANARY) if self.canary_traffic else (Track.STABLE,)
        return sum(1 for p in self.pods if p.track in tracks and p.state == "Ready")

    def held(self) -> int:
        """Pods that hold a slot or ask for one."""
        return sum(1 for p in self.pods)

    def pass_(self, **observed: Any) -> Decision:
        """Observe, decide, apply, then let the world move one tick."""
        self.sync()
        decision = self.fleet.step_with(**observed)
        self.apply(decision)
        self.tick()
        return decision


def _deletion_order(pod: Pod) -> int:
    """The ReplicaSet controller deletes unplaced pods first, then those not Ready, then Ready ones."""
    return {"Pending": 0, "Starting": 1, "Ready": 2}[pod.state]


def decision_strategy(fleet: Fleet) -> tuple[int, int]:
    """The rollingUpdate the rendered Deployments carry (`render.manifests.rolling_update`)."""
    limits = fleet.spec.move_limits()
    return limits if limits is not None else (1, 0)

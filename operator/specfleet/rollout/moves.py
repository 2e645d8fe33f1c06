"""How pods move between stable and canary within `rollout.maxSurge` and `rollout.maxUnavailable`.

With `maxSurge` unset a step adds its canary pods on top of `replicas` (see `decide._canary_target`). With
it set, every move is bounded the way a Deployment's rolling update is, across the two tracks:

- pods asked for (both Deployments' replicas, plus deleted pods that still hold their GPUs while they
  terminate) never exceed `replicas + maxSurge`: a pod is only asked for once there is room for it;
- Ready pods that take traffic never fall below `replicas - maxUnavailable`: a pod is only given up while
  the rest cover that floor (pods that serve nothing go first; the ReplicaSet controller deletes pods
  that are not Ready first).

A move has a giver and a taker: during a step stable gives way to the canary's share; when the canary
ends (rollback, abort, the end of a promotion) the canary gives its pods back to stable. The taker grows
into the room there is; when there is none, the giver gives up pods to make it, but not while a taker
pod is Pending with the scheduler's "no room" (another pod took the GPUs the giver released: giving up
more would only lose capacity).
"""

from dataclasses import dataclass

from specfleet.api.spec import SpeculativeDeploymentSpec


@dataclass(frozen=True)
class Budget:
    """`rollout.maxSurge` and `rollout.maxUnavailable` as pods of the fleet's replicas."""

    surge: int
    unavailable: int

    def floor(self, total: int) -> int:
        """The Ready pods taking traffic a fleet of `total` replicas keeps while pods move."""
        return total - self.unavailable


def budget(spec: SpeculativeDeploymentSpec) -> Budget | None:
    """The fleet's move budget; None when `maxSurge` is unset (a step's canary pods go on top)."""
    limits = spec.move_limits()
    return Budget(*limits) if limits is not None else None


@dataclass(frozen=True)
class TrackPods:
    """One track as a move needs it."""

    replicas: int
    """What its Deployment asks for (spec.replicas; 0 without a Deployment)."""
    serving: int
    """Its Ready pods that take traffic (any revision; deleted pods are never Ready)."""
    terminating: int = 0
    """Deleted pods still on a node: their GPUs are not free until they are gone."""
    stuck: bool = False
    """A pod is Pending because no node has room for it."""


@dataclass(frozen=True)
class Move:
    """The replicas each track's Deployment gets this pass."""

    giver: int
    taker: int


def move(total: int, goal: int, limits: Budget, giver: TrackPods, taker: TrackPods) -> Move:
    """One pass of moving from `giver` towards `taker` holding `goal` pods and `giver` the other `total - goal`.

    Level-triggered: it reads only what the tracks have now, so repeating it on the same observation
    asks for the same replicas, and an operator restarted mid-move continues it.
    """
    share = total - goal
    taker_replicas = min(taker.replicas, goal)  # fewer replicas wanted: the surplus goes at once
    giver_replicas = min(giver.replicas, total)
    held = giver.replicas + taker.replicas + giver.terminating + taker.terminating
    room = max(0, total + limits.surge - held)
    if giver_replicas < share:  # replicas went up: the giver grows back to its share first
        grown = min(share - giver_replicas, room)
        giver_replicas, room = giver_replicas + grown, room - grown
    grown = min(goal - taker_replicas, room)
    taker_replicas += grown
    # The giver gives way to taker pods that serve (back to `total` pods once they do), and makes room for
    # taker pods that have none (not while one is stuck, nor before the GPUs given up earlier are free) ...
    wanted = max(share, total - min(taker.serving, goal))
    short = goal - taker_replicas
    if short > 0 and not taker.stuck and giver.terminating + taker.terminating == 0:
        wanted = min(wanted, giver_replicas - short)
    # ... while the pods that serve stay at or above the floor (pods that serve nothing go first)
    keep_serving = min(giver.serving, max(0, limits.floor(total) - taker.serving))
    giver_replicas = min(giver_replicas, max(wanted, share, keep_serving))
    return Move(giver=giver_replicas, taker=taker_replicas)

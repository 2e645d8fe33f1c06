"""The rollout state machine: (spec, status, what was observed, now) -> next status and desired tracks.

Pure and total: every transition of a SpeculativeDeployment is decided here, top to bottom, and all
the state it needs is in the status it is given (so a restarted operator continues where it was).
The shell (`specfleet.controller`) observes, calls `decide`, and applies the result.

Transitions:

    no stable yet ---------------------------------------------> stable := desired       (Pending -> Healthy)
    desired == stable, no canary ------------------------------> scale / fix in place   (Healthy | Progressing)
    desired == stable, canary of another revision -------------> drop the canary        (Superseded)
    desired == rejected revision ------------------------------> hold on stable         (Aborted | RolledBack)
    desired != stable, canary of another revision or none -----> start a canary         (Progressing)
    canary live: abort, or not Ready by the progress deadline -> traffic to stable, then remove the canary (Aborted)
    canary live: an OOM kill, or restarts over the limit -------> roll back, or pause if autoRollback is off
    canary live: a failed analysis over the failure limit -----> roll back, or pause if autoRollback is off
    canary live: too long without a verdict -------------------> the onNoData / onProviderError action
    canary live, no baseline (stable 0 Ready, or a 100% route) -> judge, but wait for a human (Paused)
    canary Ready: manual gate without promote -----------------> wait                   (Paused)
    canary Ready: pause elapsed and analyses passed, or promote -> next step, or promote after the last
    promoting: stable rolled to the new revision --------------> retire the canary      (Healthy)
    retiring canary: traffic off once stable has a Ready pod, Deployment deleted DRAIN later
    canary with a drafter stable does not serve -> preflight Job first; no pods until it passes, abort if it fails
    desired has autoTune candidates --------------------------> an experiment (`experiment.py`): each candidate
        a canary of its own revision for the first step, measured; then the best one canaried under desired
        through every step, or none beats stable by minImprovement: stable kept (Healthy, revision held)

Commands (`specfleet.io/promote|abort|retry`) are bound to the canary they were given for: to the
revision named in them (`revision=<rev>`, as the CLI writes), else to the canary live when the operator
first sees them. One that cannot apply (no canary live, another canary, nothing to retry) is acknowledged
and dropped with a `CommandIgnored` event, so it never acts on a later canary.
"""

from specfleet.rollout.decide import decide
from specfleet.rollout.types import (
    DRAIN,
    ContainerCrash,
    Decision,
    Event,
    FleetLook,
    Observation,
    PreflightObservation,
    PreflightState,
    TrackObservation,
    TrackTarget,
    live_canary,
    set_condition,
)

__all__ = [
    "DRAIN",
    "ContainerCrash",
    "Decision",
    "Event",
    "FleetLook",
    "Observation",
    "PreflightObservation",
    "PreflightState",
    "TrackObservation",
    "TrackTarget",
    "decide",
    "live_canary",
    "set_condition",
]

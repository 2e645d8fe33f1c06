"""Which notable transitions one pass made: a pure function of the status it read and the status it writes.

Each transition has a key (`fleet uid/generation/transition/step/run`), recorded in `status.notified` by the same
status write that makes the transition: a restarted operator reads it back and never sends it again, and the same
transition derived twice (a gate waited at, left, and waited at again) is sent once. A notification is offered to
the notifier only after that write succeeded, so a refused write notifies nothing.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from pydantic import JsonValue

from specfleet.api.spec import SpeculativeDeploymentSpec, SpeculativeSpec
from specfleet.api.status import (
    NOTIFIED_MAX,
    HistoryEntry,
    Outcome,
    Phase,
    SpeculativeDeploymentStatus,
    StatusChanges,
)
from specfleet.api.vocabulary import ConditionType
from specfleet.rollout.columns import short_config
from specfleet.rollout.types import live_canary

MAX_REASONS = 8
"""The judge's reasons a notification carries (the status keeps more; `kubectl specfleet status` shows them)."""


class Transition(StrEnum):
    """What a notification tells of; its value is the CloudEvent type's last part and a target's filter word."""

    STEP_ADVANCED = "StepAdvanced"
    """A canary started its first step or moved on to the next one."""
    GATE_WAITING = "GateWaiting"
    """The rollout waits for `kubectl specfleet promote` or `abort` (phase Paused)."""
    PROMOTED = "Promoted"
    ROLLED_BACK = "RolledBack"
    ABORTED = "Aborted"
    DRIFT = "Drift"
    """The serving revision no longer measures as it did at promotion (`SpeculationPaying` turned False)."""


@dataclass(frozen=True)
class Fleet:
    """The SpeculativeDeployment a notification is about."""

    namespace: str
    name: str
    uid: str
    generation: int


@dataclass(frozen=True)
class Config:
    """One track's config: its revision and its speculative config in a few words (`eagle3 k=4`)."""

    revision: str
    summary: str


@dataclass(frozen=True)
class Notification:
    transition: Transition
    fleet: Fleet
    time: datetime
    phase: Phase
    step: int | None
    """The rollout step (0-based) it happened at; None for a transition no step belongs to (drift)."""
    steps: int
    weight: int
    """The canary's share of traffic as the pass left it, percent (a step's weight is reached as its pods are
    Ready: the message names the step's own)."""
    stable: Config | None
    canary: Config | None
    message: str
    """The transition in one sentence, with its cause."""
    reasons: tuple[str, ...]
    """The judge's reasons at its last analysis of the canary concerned (or drift's), as status holds them."""
    run: str
    """Which canary run (or drift episode) it belongs to: a retried canary at the same generation is a new run."""

    @property
    def key(self) -> str:
        """`uid/generation/transition/step/run`: one notification per key, ever."""
        step = "-" if self.step is None else str(self.step)
        return f"{self.fleet.uid}/{self.fleet.generation}/{self.transition.value}/{step}/{self.run}"


def notifications(
    fleet: Fleet,
    spec: SpeculativeDeploymentSpec,
    old: SpeculativeDeploymentStatus,
    new: SpeculativeDeploymentStatus,
    now: datetime,
) -> tuple[list[Notification], SpeculativeDeploymentStatus]:
    """The transitions from `old` to `new` not yet notified, and `new` recording them in `notified`."""
    derived = [n for n in transitions(fleet, spec, old, new, now) if n.key not in old.notified]
    unique = list({n.key: n for n in derived}.values())
    if not unique:
        return [], new
    notified = [*old.notified, *(n.key for n in unique)][-NOTIFIED_MAX:]
    return unique, new.model_copy(update=StatusChanges(notified=notified))


def transitions(
    fleet: Fleet,
    spec: SpeculativeDeploymentSpec,
    old: SpeculativeDeploymentStatus,
    new: SpeculativeDeploymentStatus,
    now: datetime,
) -> list[Notification]:
    """Every notable transition from `old` to `new`, in the order a reader wants them: how canaries ended first
    (one pass can end one canary and start the next), then a step, a gate, drift."""
    ended = (_ended(fleet, spec, old, new, entry) for entry in _new_entries(old, new))
    found = [n for n in ended if n is not None]
    about = _About(fleet, spec, new, now)
    canary, step = live_canary(new), new.current_step
    run = new.canary_started_at.isoformat() if new.canary_started_at is not None else ""
    moved_on = canary != live_canary(old) or old.current_step is None or (step or 0) > old.current_step
    if canary is not None and step is not None and moved_on:
        steps = spec.rollout.steps
        weight = f" ({steps[step].weight}% of traffic)" if step < len(steps) else ""
        message = f"canary {canary} at step {step + 1}/{len(steps)}{weight}"
        found.append(about(Transition.STEP_ADVANCED, message, canary, (), step, run))
    if new.phase is Phase.PAUSED and (old.phase is not Phase.PAUSED or old.current_step != step):
        reason, said, _ = _condition(new, ConditionType.PROGRESSING)
        message = f"waiting for `kubectl specfleet promote` or `abort`: {said or reason}"
        found.append(about(Transition.GATE_WAITING, message, canary, _reasons(new, canary), step, run))
    paying = _condition(new, ConditionType.SPECULATION_PAYING)
    if paying[2] == "False" != _condition(old, ConditionType.SPECULATION_PAYING)[2]:
        drift = new.drift
        episode = drift.reference.time.isoformat() if drift is not None and drift.reference is not None else ""
        message = f"the serving revision drifted: {paying[1] or paying[0]}"
        reasons = (drift.message,) if drift is not None and drift.message else ()
        found.append(about(Transition.DRIFT, message, None, reasons, None, episode))
    return found


def _new_entries(old: SpeculativeDeploymentStatus, new: SpeculativeDeploymentStatus) -> list[HistoryEntry]:
    """History entries the pass added (the oldest may have been dropped to make room, so compared by content)."""
    seen = {(e.revision, e.outcome, e.time) for e in old.history}
    return [e for e in new.history if (e.revision, e.outcome, e.time) not in seen]


ENDINGS = {
    Outcome.PROMOTED: Transition.PROMOTED,
    Outcome.ROLLED_BACK: Transition.ROLLED_BACK,
    Outcome.ABORTED: Transition.ABORTED,
}


def _ended(
    fleet: Fleet,
    spec: SpeculativeDeploymentSpec,
    old: SpeculativeDeploymentStatus,
    new: SpeculativeDeploymentStatus,
    entry: HistoryEntry,
) -> Notification | None:
    transition = ENDINGS.get(entry.outcome)
    if transition is None:
        return None
    stable_revision = old.stable_revision if transition is Transition.PROMOTED else new.stable_revision
    stable_serving = old.stable_serving if transition is Transition.PROMOTED else new.stable_serving
    stable = Config(stable_revision, _summary(stable_serving)) if stable_revision else None
    canary = Config(entry.revision, entry.summary)
    message = f"canary {entry.revision} {_said[transition]}: {entry.reason}"
    run = old.canary_started_at.isoformat() if old.canary_started_at is not None else ""
    return Notification(
        transition=transition,
        fleet=fleet,
        time=entry.time,
        phase=new.phase,
        step=old.current_step,
        steps=len(spec.rollout.steps),
        weight=new.canary_weight,
        stable=stable,
        canary=canary,
        message=message,
        reasons=_reasons(new, entry.revision),
        run=run,
    )


_said = {Transition.PROMOTED: "promoted", Transition.ROLLED_BACK: "rolled back", Transition.ABORTED: "aborted"}


@dataclass(frozen=True)
class _About:
    """Notifications about the fleet as the new status leaves it."""

    fleet: Fleet
    spec: SpeculativeDeploymentSpec
    new: SpeculativeDeploymentStatus
    now: datetime

    def __call__(
        self,
        transition: Transition,
        message: str,
        canary: str | None,
        reasons: tuple[str, ...],
        step: int | None,
        run: str,
    ) -> Notification:
        new = self.new
        stable = Config(new.stable_revision, _summary(new.stable_serving)) if new.stable_revision else None
        return Notification(
            transition=transition,
            fleet=self.fleet,
            time=self.now,
            phase=new.phase,
            step=step,
            steps=len(self.spec.rollout.steps),
            weight=new.canary_weight,
            stable=stable,
            canary=Config(canary, _canary_summary(new)) if canary is not None else None,
            message=message,
            reasons=reasons,
            run=run,
        )


def _reasons(status: SpeculativeDeploymentStatus, revision: str | None) -> tuple[str, ...]:
    last = status.last_analysis
    if last is None or revision is None or last.revision != revision:
        return ()
    return tuple(last.reasons[:MAX_REASONS])


def _condition(status: SpeculativeDeploymentStatus, kind: ConditionType) -> tuple[str, str, str]:
    """A condition's reason, message and status ('' when it is not set)."""
    for condition in status.conditions:
        if condition.type == kind:
            return condition.reason, condition.message, condition.status.value
    return "", "", ""


def _summary(serving: Mapping[str, JsonValue] | None) -> str:
    speculative = (serving or {}).get("speculative")
    return short_config(SpeculativeSpec.model_validate(speculative)) if isinstance(speculative, dict) else ""


def _canary_summary(status: SpeculativeDeploymentStatus) -> str:
    """The live canary's config as `status.config` shows it after the arrow (`eagle3 k=4 -> eagle3 k=3`)."""
    return status.config.rpartition(" -> ")[2] if " -> " in status.config else ""
